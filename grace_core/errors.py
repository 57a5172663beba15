"""Named domain errors. The CLI turns any :class:`GraceError` into one line and exit code 2."""


class GraceError(Exception):
    """Base class of every error GRACE reports to a user as one clear line."""


class InvalidSettings(GraceError):
    """A setting has a value the formulas cannot use (e.g. weights out of order)."""


class InvalidEdgeTable(GraceError):
    """An edge table is missing a column, has nulls or unknown values, or mixes ids."""


class InvalidVerdicts(GraceError):
    """A verdict table has unknown values or misses required columns."""
