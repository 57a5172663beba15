"""Named domain errors. The CLI turns any :class:`GraceError` into one line and exit code 2."""


def first_line(exc: BaseException) -> str:
    """The line of ``exc`` that says what went wrong, for a one-line error: its first, or, when
    the message is a Python traceback passed on by another engine (DuckDB reading an S3 lake
    through Python's filesystem), the error's own line at its end (such as a data file that is
    not there), not "Traceback (most recent call last):"."""
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    if lines[0].startswith("Traceback (most recent call last)"):
        return next((line for line in reversed(lines) if line and not line[0].isspace()), lines[0])
    return lines[0]


class GraceError(Exception):
    """Base class of every error GRACE reports to a user as one clear line."""


class InvalidSettings(GraceError):
    """A setting has a value the formulas cannot use (e.g. weights out of order)."""


class InvalidEdgeTable(GraceError):
    """An edge table is missing a column, has nulls or unknown values, or mixes ids."""


class InvalidVerdicts(GraceError):
    """A verdict table has unknown values or misses required columns."""


class RoundOutOfOrder(GraceError):
    """A round asked for would skip rounds: each document's latest scores are those of its highest
    round, so a round run after a higher one would be shadowed by older scores."""


class LakeError(GraceError):
    """The lake cannot be reached, read or written (bad root, missing bucket, unreadable files,
    a table written with another schema version)."""


class InvalidTable(GraceError):
    """Rows handed to the lake do not fit the table's declared schema (names table, row and field)."""


class InvalidBatch(GraceError):
    """A document batch is not valid (names file, line and field); nothing of it is stored."""


class InvalidLine(InvalidBatch):
    """One line of a document batch cannot be used: ``line`` (1-based), ``field`` (or None for
    the whole line) and ``reason``; the message names the file too."""

    def __init__(self, message: str, *, line: int, field: str | None, reason: str) -> None:
        super().__init__(message)
        self.line, self.field, self.reason = line, field, reason


class ReadOnlyQuery(GraceError):
    """``grace sql`` was given a statement that could write, attach or change settings."""


class QueryFailed(GraceError):
    """A read-only SQL query could not be parsed or run."""


class ModelError(GraceError):
    """A model backend failed in a way that stops the whole batch (not one item)."""


class ModelUnavailable(ModelError):
    """The model endpoint refuses every request: bad key, unknown model, no permission, or the
    packaged offline model cannot be found."""


class SpendCapReached(ModelError):
    """The round's USD spend cap is used up: no new model calls start until the next round."""


class UnknownModelPrice(ModelError):
    """A spend cap is set but litellm has no price for the model and no per-token cost is configured."""


class MalformedReply(ModelError):
    """A model reply is not the JSON the role asked for (retried, then recorded as a failed item)."""


class EmbeddingFailed(ModelError):
    """An embedding API call kept failing; nothing can be scored without vectors."""


class ModelCallsFailed(ModelError):
    """Model calls of a run failed for good (after the client's retries) or were stopped by the
    spend cap: the work that needed them was not committed (it is redone, answered from the call
    cache except for the missing items, by the next run) and the run ends Failed."""


class InvalidIdentifier(GraceError):
    """An id from outside (document, question or claim id, reviewer name) is not in the safe
    character set of :mod:`grace_core.identifiers`."""


class UnprovenReviewer(GraceError):
    """Votes whose reviewer is not proven: an unknown, revoked or wrong key, a verdict file that is
    unsigned, forged or changed after signing, or rows of another reviewer than the one proven.
    The whole unit is refused and nothing is stored; the message never holds a key."""


class ReviewerRegistryRefused(GraceError):
    """A change of the reviewer registry that cannot be made: adding a name that is registered
    already or reserved (the verifier), revoking a name that is not registered."""


class VerdictFilesRefused(InvalidVerdicts):
    """Files of the review inbox were refused whole (quarantined with their reason) while the
    others were recorded: a run of the ``ingest-verdicts`` deployment ends Failed naming them."""
