"""The offline decomposer: pysbd sentences split into clauses, fragments dropped
(see :func:`grace_core.models.segment.claim_units`)."""

from __future__ import annotations

from collections.abc import Sequence

from grace_core.models.roles import Decomposition
from grace_core.models.segment import claim_units


class OfflineDecomposer:
    """A :class:`~grace_core.models.roles.Decomposer` without a model (deterministic)."""

    def decompose(self, texts: Sequence[str]) -> list[Decomposition]:
        """The claims of each text."""
        return [Decomposition(claim_units(t)) for t in texts]
