"""Who reviews what (DESIGN §4–§5): the reviewer pool, assignment of deferred claims with
overlap, the open assignments and their deadlines, and the expected review seconds t(c) that
enter a claim's review cost.

The pool is the human reviewers of the settings plus, when ``use_verifier`` is on, the
automatic verifier (named ``verifier``). Each deferred claim goes to ``overlap`` members of the
pool (all of them when the pool is smaller). Pure functions on polars tables; nothing here
reads the lake.
"""

from __future__ import annotations

from datetime import datetime
from collections.abc import Sequence

import polars as pl

from grace_core.errors import InvalidSettings
from grace_core.settings_groups import VERIFIER






def _require(pool: Sequence[str]) -> None:
    """Refuse an empty reviewer pool: deferred claims would never be answered."""
    if not pool:
        raise InvalidSettings("no reviewers: list human reviewers (GRACE_REVIEWERS) or use the verifier (GRACE_USE_VERIFIER=true)")


def assign_reviewers(
    chosen: pl.DataFrame, pool: Sequence[str], overlap: int, round_id: int, answered: pl.DataFrame | None = None,
    lapsed: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Assign each selected claim (``chosen``, rows in selection order with ``doc_id, claim_id``)
    to ``min(overlap, len(pool))`` reviewers of ``pool``: one row per claim and reviewer, in
    the order of ``chosen``, with a ``reviewer`` column added.

    Deterministic rotation (:func:`rotation_slots`): the claim at position i goes to the pool
    slots ``s, s + d, s + 2d, …`` (mod n) with ``s = (i + (round_id − 1)·k) mod n`` and a stride
    ``d`` that changes from round to round, so the load is even, the first claims do not go
    to the same person every round, and every pair of reviewers shares claims within n − 1
    consecutive rounds (reliability needs overlap between everyone).

    Reassignment (DESIGN §5): a claim back in the pool goes first to the reviewers who have
    neither voted on it nor let an assignment of it lapse, then to those who voted on it
    (``answered``: ``doc_id, claim_id, reviewer``, e.g. a claim that returned to the pool after a
    tie), and last to those who let it lapse (``lapsed``, :func:`lapsed_reviewers`: they were
    assigned it and did not answer by the deadline); each group in rotation order. So a claim
    whose reviewer did not answer goes to another reviewer whenever the pool has one. Raises
    :class:`InvalidSettings` for an empty pool.
    """
    _require(pool)
    n, k = len(pool), min(overlap, len(pool))
    tier: dict[tuple[str, str], dict[str, int]] = {}  # 1: voted on the claim, 2: let it lapse (0: neither)
    for frame, level in ((answered, 1), (lapsed, 2)):
        if frame is not None:
            for doc, claim, reviewer in frame.select("doc_id", "claim_id", "reviewer").iter_rows():
                tier.setdefault((doc, claim), {})[reviewer] = level
    index, names = [], []
    for i, key in enumerate(chosen.select("doc_id", "claim_id").iter_rows()):
        rotation = [pool[j] for j in rotation_slots(n, round_id, i, k)]
        levels = tier.get(key, {})
        ordered = sorted(rotation, key=lambda r: levels.get(r, 0))  # stable: rotation order within a group
        index += [i] * k
        names += ordered[:k]
    picks = pl.DataFrame({"_i": index, "reviewer": names}, schema={"_i": pl.UInt32, "reviewer": pl.Utf8})
    return chosen.with_row_index("_i").join(picks, on="_i", how="inner", maintain_order="right").drop("_i")


def lapsed_reviewers(deferrals: pl.DataFrame, verdicts: pl.DataFrame) -> pl.DataFrame:
    """``doc_id, claim_id, reviewer`` of the reviewers who let an assignment lapse: assigned the
    claim in some round (``deferrals``: ``doc_id, claim_id, round, reviewer``) without answering
    it in that round, and with no vote on the claim at all (``verdicts``: ``doc_id, claim_id,
    round, reviewer``; a reviewer who answered the claim in some round counts as having voted).
    Read at a dispatch for the claims back in the pool, whose assignments are all answered,
    overdue or closed: :func:`assign_reviewers` gives them to these reviewers last."""
    keys = ["doc_id", "claim_id", "reviewer"]
    return (
        deferrals.select(*keys, "round")
        .join(verdicts.select(*keys, "round"), on=[*keys, "round"], how="anti")
        .join(verdicts.select(keys), on=keys, how="anti")
        .select(keys).unique().sort(keys)
    )


def rotation_slots(n: int, round_id: int, i: int, k: int) -> list[int]:
    """The order in which the claim at position ``i`` of round ``round_id`` takes the n pool
    slots (its first ``k`` are its reviewers): ``s, s + d, s + 2d, …`` mod n from
    ``s = (i + (round_id − 1)·k) mod n`` (the top claim moves on by k slots a round) with stride ``d = 1 + (round_id − 1) mod (n − 1)``, each slot
    once (a slot met again, when d and n share a factor, is replaced by the next free one after
    it). Over rounds 1…n − 1 the stride takes every value 1…n − 1, and a pair of slots a, b
    shares a claim in the round whose stride is b − a or a − b (mod n) as soon as that round
    has a claim starting at a or b; with n or more claims a round, every pair meets within
    n − 1 rounds."""
    if n <= 1:
        return list(range(n))
    start, stride = (i + (round_id - 1) * k) % n, 1 + (round_id - 1) % (n - 1)
    order: list[int] = []
    taken = set()
    slot = start
    for _ in range(n):
        while slot in taken:
            slot = (slot + 1) % n
        order.append(slot)
        taken.add(slot)
        slot = (slot + stride) % n
    return order


def mean_review_seconds(verdicts: pl.DataFrame, humans: Sequence[str], default: float, most: float = 86_400) -> float:
    """Mean ``seconds_spent`` per verdict of the human reviewers ``humans`` so far
    (``verdicts``: ``reviewer, seconds_spent``); ``default`` when they have no timed verdict.
    Times over ``most`` seconds (24 h, the bound every channel now keeps) are left out: a value
    stored before that bound (1e308) would otherwise set the mean and every review cost."""
    spent = verdicts.filter(
        pl.col("reviewer").is_in(list(humans)) & pl.col("seconds_spent").is_not_null() & (pl.col("seconds_spent") <= most)
    )["seconds_spent"]
    return float(spent.mean()) if len(spent) else float(default)


def expected_review_seconds(pool: Sequence[str], overlap: int, mean_seconds: float) -> float:
    """t(c) of DESIGN §4: the human seconds one deferred claim is expected to take, i.e.
    ``mean_seconds`` per human verdict times the expected number of human reviewers per claim
    (k·h/n for k = min(overlap, n) reviewers per claim drawn from a pool of n with h humans).
    0 for a pool of only the automatic verifier. Raises :class:`InvalidSettings` for an empty pool."""
    _require(pool)
    n = len(pool)
    humans = sum(1 for r in pool if r != VERIFIER)
    return mean_seconds * min(overlap, n) * humans / n


def open_assignments(deferrals: pl.DataFrame, verdicts: pl.DataFrame, now: datetime) -> pl.DataFrame:
    """The assignments still waiting for an answer: the deferral rows of each claim's latest
    deferral round whose reviewer has not answered that claim in that round, with ``overdue``
    (its deadline is set and not after ``now``).

    ``deferrals``: ``doc_id, claim_id, round, reviewer, deadline, …``; ``verdicts``: ``doc_id,
    claim_id, round, reviewer``. A claim deferred again in a later round (it returned to the
    pool) closes the assignments of its earlier rounds.
    """
    keys = ["doc_id", "claim_id", "round", "reviewer"]
    latest = deferrals.group_by("doc_id", "claim_id").agg(pl.col("round").max())
    return (
        deferrals.join(latest, on=["doc_id", "claim_id", "round"], how="semi")
        .join(verdicts.select(keys).unique(), on=keys, how="anti")
        .with_columns(overdue=pl.col("deadline").is_not_null() & (pl.col("deadline") <= now))
    )


def overdue_by_rounds(open_rows: pl.DataFrame, round_id: int, deadline_rounds: int | None) -> pl.DataFrame:
    """``open_rows`` (:func:`open_assignments`) as seen at the dispatch of round ``round_id`` with
    a deadline of ``deadline_rounds`` rounds as well as the hours one: an assignment of round r
    is also ``overdue`` once

        round_id − r ≥ deadline_rounds

    so whichever deadline comes first returns its claim to the pool. ``None``: hours only."""
    if deadline_rounds is None:
        return open_rows
    return open_rows.with_columns(overdue=pl.col("overdue") | (round_id - pl.col("round") >= deadline_rounds))


def busy_claims(open_rows: pl.DataFrame) -> pl.DataFrame:
    """Claims (``doc_id, claim_id``) with an open assignment that is not overdue: they stay out
    of the pool until answered or past their deadline."""
    return open_rows.filter(~pl.col("overdue")).select("doc_id", "claim_id").unique()
