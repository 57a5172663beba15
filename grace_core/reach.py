"""Cascade reach: how many Boundary claims a confirmation would ground (selection, DESIGN §4–§5).

A confirmed claim becomes a verified prior and the cascade grounds every Boundary claim of its
document that it entails. Betweenness in ``G_boundary`` favours the claim most responses
share — often the shortest wording of a fact, whose confirmation entails nothing else — so the
selection also credits a candidate for the Boundary claims whose wording it contains: the
same fact said with less (a clause, the sentence without a modifier, one half of a merged
sentence). Containment is read from the words alone (content-word stems, stopwords and
negations left out), so it costs no model call and is the same whatever the judge; the judge
still decides the cascade itself.
"""

from __future__ import annotations

import polars as pl

from grace_core.models.lexicon import content_stems

MIN_CONTENT_WORDS = 2
"""A contained claim needs at least this many content words (a one-word "claim" is contained in
almost anything)."""


def cascade_reach(candidates: pl.DataFrame, boundary: pl.DataFrame) -> pl.DataFrame:
    r"""``candidates`` (``doc_id, claim_id, text``, …) with ``reach``:

    .. math:: R(c) = \bigl|\{\, b \in C_{boundary}(D) \setminus \{c\} :
              W(b) \subseteq W(c),\ |W(b)| \ge 2 \,\}\bigr|

    where :math:`W(x)` is the set of content-word stems of claim x's text and
    :math:`C_{boundary}(D)` the Boundary claims of c's document (``boundary``: ``doc_id,
    claim_id, text``). A claim worded exactly as another (same stems) counts it. 0 for a
    document with one Boundary claim.
    """
    words = {
        doc_id: [(cid, content_stems(text)) for cid, text in rows.select("claim_id", "text").iter_rows()]
        for (doc_id,), rows in boundary.group_by("doc_id", maintain_order=True)
    }
    reach = []
    for doc_id, cid, text in candidates.select("doc_id", "claim_id", "text").iter_rows():
        mine = content_stems(text)
        reach.append(sum(1 for other, w in words.get(doc_id, []) if other != cid and len(w) >= MIN_CONTENT_WORDS and w <= mine))
    return candidates.with_columns(reach=pl.Series(reach, dtype=pl.Int64))


def selection_priority(lambda_r: float) -> pl.Expr:
    r"""The priority a deferral is chosen by, from ``priority`` (DESIGN §4's Pri) and ``reach``:

    .. math:: Pri_{sel}(c) = Pri(c) + \lambda_r\, \hat{R}(c), \qquad
              \hat{R}(c) = R(c) / \max_{D} R

    with the maximum over the document's candidates (:math:`\hat{R}` = 0 when it is 0, so a
    document where no candidate contains another is ranked by Pri alone).
    """
    top = pl.col("reach").max().over("doc_id")
    return pl.col("priority") + lambda_r * pl.when(top > 0).then(pl.col("reach") / top).otherwise(0.0)
