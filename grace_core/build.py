"""Building a round's claim graphs from documents with the model roles (DESIGN §1): sample
responses, decompose sources into claims, judge sources against claims.

Pure: tables and role objects in, tables out; the flows do the reading and committing.
A source entails the claims decomposed from it by construction (no judge call is spent on
that); every other (source, claim) pair of a document is left to the judge, which batches one
call per source over its most similar candidate claims.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from grace_core.claims import claim_id
from grace_core.documents import content_id
from grace_core.models.factory import ModelRoles
from grace_core.models.roles import JudgeRequest, RespondRequest

RESPONSE_PREFIX = "r:"
CLAIM_COLUMNS = {"doc_id": pl.Utf8, "claim_id": pl.Utf8, "round": pl.Int32, "source_id": pl.Utf8, "source_kind": pl.Utf8, "ord": pl.Int32, "text": pl.Utf8}
EDGE_COLUMNS = {"doc_id": pl.Utf8, "source_id": pl.Utf8, "source_kind": pl.Utf8, "claim_id": pl.Utf8, "label": pl.Utf8, "round": pl.Int32}
RESPONSE_COLUMNS = {
    "doc_id": pl.Utf8, "source_id": pl.Utf8, "source_kind": pl.Utf8, "round": pl.Int32, "name": pl.Utf8,
    "ord": pl.Int32, "text": pl.Utf8, "model": pl.Utf8,
}
TRUTH_COLUMNS = {"doc_id": pl.Utf8, "source_id": pl.Utf8, "corrupted": pl.Utf8, "original": pl.Utf8, "kind": pl.Utf8}


@dataclass(frozen=True)
class BuildResult:
    """New rows of one build: ``responses`` (sources of kind response), ``claims`` (one row per
    decomposition), ``edges`` (judge results and decomposition edges) and ``corruptions``
    (the offline responder's recorded hallucinations: the corrupted sentence and its original)."""

    responses: pl.DataFrame
    claims: pl.DataFrame
    edges: pl.DataFrame
    corruptions: pl.DataFrame


def default_question(title: str) -> str:
    """The prompt used for a document that came without questions."""
    return f"What are the main facts and findings of '{title}'?"


def pick_context(question_emb: np.ndarray, passage_emb: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` passages most similar to the question (cosine; ties by position),
    returned in document order."""
    sims = passage_emb @ question_emb
    top = np.argsort(-sims, kind="stable")[:k]
    return np.sort(top)


def sample_responses(
    docs: pl.DataFrame, passages: pl.DataFrame, questions: pl.DataFrame, roles: ModelRoles, *, round_id: int,
    context_passages: int, model: str,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Responder samples for every question of every document (a default prompt when a document
    has none), each answered from the ``context_passages`` document passages (priors or not)
    most similar to the question.

    ``docs``: ``doc_id, title``; ``passages``: ``doc_id, source_id, ord, text``; ``questions``:
    ``doc_id, question_id, question``. Returns (responses, corruptions).
    """
    reqs, keys = [], []
    for doc_id, title in docs.select("doc_id", "title").iter_rows():
        doc_passages = passages.filter(pl.col("doc_id") == doc_id).sort("ord")
        qs = questions.filter(pl.col("doc_id") == doc_id)
        items = list(qs.select("question_id", "question").iter_rows()) or [("default", default_question(title))]
        texts = doc_passages["text"].to_list()
        if not texts:
            continue
        p_emb = roles.embedder.embed(texts)
        q_emb = roles.embedder.embed([q for _, q in items])
        for (qid, q), qe in zip(items, q_emb):
            ctx = "\n\n".join(texts[i] for i in pick_context(qe, p_emb, context_passages))
            reqs.append(RespondRequest(q, ctx))
            keys.append((doc_id, qid))
    rows, bad = [], []
    for (doc_id, qid), samples in zip(keys, roles.responder.respond(reqs)):
        for s in samples:
            if s.outcome != "ok" or not s.text.strip():
                continue
            sid = RESPONSE_PREFIX + content_id(doc_id, qid, str(round_id), str(s.sample))
            rows.append({"doc_id": doc_id, "source_id": sid, "source_kind": "response", "round": round_id,
                         "name": f"{qid}#{s.sample}", "ord": s.sample, "text": s.text, "model": model})
            bad.extend({"doc_id": doc_id, "source_id": sid, "corrupted": c.corrupted, "original": c.original, "kind": c.kind}
                       for c in s.corruptions)
    return pl.DataFrame(rows, schema=RESPONSE_COLUMNS), pl.DataFrame(bad, schema=TRUTH_COLUMNS)


def decompose_sources(sources: pl.DataFrame, roles: ModelRoles, *, round_id: int) -> pl.DataFrame:
    """Claims of each source (``doc_id, source_id, source_kind, text``): one row per decomposed
    claim, with its id from :func:`grace_core.claims.claim_id`; a claim repeated within one
    source is kept once."""
    texts = sources["text"].to_list()
    rows = []
    for src, dec in zip(sources.select("doc_id", "source_id", "source_kind").iter_rows(), roles.decomposer.decompose(texts)):
        if dec.outcome != "ok":
            continue
        seen = set()
        for i, text in enumerate(dec.claims):
            cid = claim_id(src[0], text)
            if cid in seen:
                continue
            seen.add(cid)
            rows.append({"doc_id": src[0], "claim_id": cid, "round": round_id, "source_id": src[1], "source_kind": src[2], "ord": i, "text": text})
    return pl.DataFrame(rows, schema=CLAIM_COLUMNS)


def judge_pairs(pairs: pl.DataFrame, roles: ModelRoles, *, round_id: int) -> pl.DataFrame:
    """Judge candidate pairs ``doc_id, source_id, source_kind, source_text, claim_id, claim_text``:
    one judge request per source listing its candidate claims. Returns the ``entails`` and
    ``contradicts`` edges (neutral, skipped, failed and capped judgements make none)."""
    if pairs.height == 0:
        return pl.DataFrame(schema=EDGE_COLUMNS)
    groups = pairs.group_by("doc_id", "source_id", "source_kind", "source_text", maintain_order=True).agg("claim_id", "claim_text")
    reqs = [JudgeRequest(r["source_text"], tuple(r["claim_text"])) for r in groups.iter_rows(named=True)]
    rows = []
    for g, judgements in zip(groups.iter_rows(named=True), roles.judge.judge(reqs)):
        for cid, j in zip(g["claim_id"], judgements):
            if j.outcome == "ok" and j.label in ("entails", "contradicts"):
                rows.append({"doc_id": g["doc_id"], "source_id": g["source_id"], "source_kind": g["source_kind"],
                             "claim_id": cid, "label": j.label, "round": round_id})
    return pl.DataFrame(rows, schema=EDGE_COLUMNS)


def build_documents(
    docs: pl.DataFrame, passages: pl.DataFrame, questions: pl.DataFrame, roles: ModelRoles, *, round_id: int,
    context_passages: int, model: str,
) -> BuildResult:
    """Build the claim graphs of new documents: responses, claims of priors and responses, and
    edges (decomposition edges plus the judge's verdict on every other source × claim pair).

    ``passages``: the documents' text units (``doc_id, source_id, source_kind, ord, text``):
    all are responder context; those of kind ``prior`` are also graph sources."""
    responses, corruptions = sample_responses(
        docs, passages, questions, roles, round_id=round_id, context_passages=context_passages, model=model
    )
    sources = pl.concat([
        passages.filter(pl.col("source_kind") == "prior").select("doc_id", "source_id", "source_kind", "text"),
        responses.select("doc_id", "source_id", "source_kind", "text"),
    ])
    claims = decompose_sources(sources, roles, round_id=round_id)
    own = claims.select("doc_id", "source_id", "source_kind", "claim_id", pl.lit("entails").alias("label"), pl.lit(round_id, pl.Int32).alias("round"))
    unique = claims.unique(["doc_id", "claim_id"], keep="first").select("doc_id", "claim_id", pl.col("text").alias("claim_text"))
    pairs = (
        sources.rename({"text": "source_text"})
        .join(unique, on="doc_id")
        .join(own.select("doc_id", "source_id", "claim_id"), on=["doc_id", "source_id", "claim_id"], how="anti")
    )
    judged = judge_pairs(pairs, roles, round_id=round_id)
    edges = pl.concat([own, judged]).unique(["doc_id", "source_id", "claim_id", "label"], keep="first", maintain_order=True)
    return BuildResult(responses, claims, edges, corruptions)
