"""Claim status (DESIGN §3): grounded, boundary or refuted."""

from __future__ import annotations

import numpy as np

GROUNDED, BOUNDARY, REFUTED = "grounded", "boundary", "refuted"
TIE_TOLERANCE = 1e-9
STATUSES = (GROUNDED, BOUNDARY, REFUTED)


def claim_status(
    closeness: np.ndarray,
    in_prior: np.ndarray,
    contradicted: np.ndarray,
    rejected: np.ndarray,
    delta_refute: float,
    response_contradicted: np.ndarray | None = None,
) -> np.ndarray:
    r"""Status of each claim of **one** document.

    First rule that holds:

    - **refuted** if reviewers rejected it, or a prior contradicts it and none entails it, or it
      has no anchor/agree edge (i.e. no prior entails it: both edge types need c ∈ C_P), at
      least one sampled response contradicts it (``response_contradicted``) and
      :math:`CC(c) < \delta_{refute} \cdot \operatorname{median}_x CC(x)` over the document's
      claims — relative to the median, so a document of uniformly decent claims refutes none.
      A claim nothing contradicts is never refuted by closeness: however far from the priors,
      it is the frontier reviewers are for (DESIGN §3). ``response_contradicted`` None means
      no response contradicts any claim;
    - **grounded** if a prior entails it (:math:`c \in C_P`) and none contradicts it;
    - **boundary** otherwise: novel claims and contested ones (entailed and contradicted).

    A claim exactly at the threshold is not refuted: the comparison allows a relative
    tolerance of ``TIE_TOLERANCE`` so that float summation order cannot decide a tie.

    Returns an array of the strings ``grounded | boundary | refuted``.
    """
    cc = np.asarray(closeness, dtype=float)
    median = float(np.median(cc)) if len(cc) else 0.0
    disputed = np.zeros(len(cc), bool) if response_contradicted is None else np.asarray(response_contradicted, bool)
    far = ~np.asarray(in_prior, bool) & disputed & (cc < delta_refute * median * (1.0 - TIE_TOLERANCE))
    refuted = np.asarray(rejected, bool) | (np.asarray(contradicted, bool) & ~np.asarray(in_prior, bool)) | far
    grounded = ~refuted & np.asarray(in_prior, bool) & ~np.asarray(contradicted, bool)
    return np.where(refuted, REFUTED, np.where(grounded, GROUNDED, BOUNDARY))
