"""Building a round's claim graphs from documents with the model roles (DESIGN §1): sample
responses, decompose sources into claims, judge sources against claims.

Pure: tables and role objects in, tables out; the flows do the reading and committing.
A source entails the claims decomposed from it by construction (no judge call is spent on
that); every other (source, claim) pair of a document is left to the judge, which batches one
call per source over its most similar candidate claims.

A document is built whole or not at all: when any of its model items failed or was stopped by
the spend cap, none of its rows is returned (its later stages are not even asked for) and the
items are listed in :attr:`BuildResult.failures`; the document stays unbuilt, so the next build
redoes it, answered from the call cache except for exactly the items that were missing.
Every request is made from canonically ordered inputs, so a redone document asks the same
prompts and hits the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from grace_core.claims import claim_id
from grace_core.documents import content_id
from grace_core.errors import GraceError
from grace_core.fan_out import run_all
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
FAILURE_COLUMNS = {"doc_id": pl.Utf8, "role": pl.Utf8, "outcome": pl.Utf8, "error": pl.Utf8}
UNPROCESSABLE = "unprocessable"
"""The failure outcome of a document whose own content broke a build stage (an exception that is
not a model failure): it alone is left unbuilt, named with the error, and tried again next round."""


@dataclass(frozen=True)
class BuildResult:
    """New rows of one build: ``responses`` (sources of kind response), ``claims`` (one row per
    decomposition), ``edges`` (judge results and decomposition edges), ``corruptions``
    (the offline responder's recorded hallucinations: the corrupted sentence and its original)
    and ``failures`` (one row per model item that ``failed`` or was ``capped``: doc_id, role,
    outcome, error). The rows cover only documents without failures."""

    responses: pl.DataFrame
    claims: pl.DataFrame
    edges: pl.DataFrame
    corruptions: pl.DataFrame
    failures: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=FAILURE_COLUMNS))

    @property
    def incomplete(self) -> list[str]:
        """Documents left unbuilt because some model item of theirs failed or was capped, sorted."""
        return sorted(set(self.failures["doc_id"].to_list()))

    @property
    def failed(self) -> pl.DataFrame:
        """The failures that are model errors (not the spend cap, not an unprocessable document)."""
        return self.failures.filter(~pl.col("outcome").is_in(["capped", UNPROCESSABLE]))

    @property
    def unprocessable(self) -> pl.DataFrame:
        """The documents whose own content broke a stage (:data:`UNPROCESSABLE`)."""
        return self.failures.filter(pl.col("outcome") == UNPROCESSABLE)

    @property
    def capped(self) -> pl.DataFrame:
        """The items the spend cap stopped."""
        return self.failures.filter(pl.col("outcome") == "capped")


def _failure(doc_id: str, role: str, outcome: str, error: str | None) -> dict:
    return {"doc_id": doc_id, "role": role, "outcome": outcome, "error": error}


def _without(frame: pl.DataFrame, doc_ids: list[str]) -> pl.DataFrame:
    return frame.filter(~pl.col("doc_id").is_in(doc_ids)) if doc_ids else frame


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
    """(responses, corruptions) of :func:`sample_responses_with_failures`."""
    responses, corruptions, _ = sample_responses_with_failures(
        docs, passages, questions, roles, round_id=round_id, context_passages=context_passages, model=model
    )
    return responses, corruptions


def sample_responses_with_failures(
    docs: pl.DataFrame, passages: pl.DataFrame, questions: pl.DataFrame, roles: ModelRoles, *, round_id: int,
    context_passages: int, model: str,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Responder samples for every question of every document (a default prompt when a document
    has none), each answered from the ``context_passages`` document passages (priors or not)
    most similar to the question.

    ``docs``: ``doc_id, title``; ``passages``: ``doc_id, source_id, ord, text``; ``questions``:
    ``doc_id, question_id, question``. Returns (responses, corruptions, failures): a sample
    whose call failed or was capped is a failure row, not a response.
    """
    reqs, keys = [], []
    for doc_id, title in docs.select("doc_id", "title").iter_rows():
        doc_passages = passages.filter(pl.col("doc_id") == doc_id).sort("ord")
        qs = questions.filter(pl.col("doc_id") == doc_id)
        items = list(qs.select("question_id", "question").iter_rows()) or [("default", default_question(title))]
        texts = doc_passages["text"].to_list()
        if not texts:
            continue
        emb = roles.embedder.embed([*texts, *(q for _, q in items)])  # one encode: its batches are served together
        p_emb, q_emb = emb[: len(texts)], emb[len(texts):]
        for (qid, q), qe in zip(items, q_emb):
            ctx = "\n\n".join(texts[i] for i in pick_context(qe, p_emb, context_passages))
            reqs.append(RespondRequest(q, ctx))
            keys.append((doc_id, qid))
    rows, bad, failures = [], [], []
    for (doc_id, qid), samples in zip(keys, roles.responder.respond(reqs)):
        for s in samples:
            if s.outcome in ("failed", "capped"):
                failures.append(_failure(doc_id, "responder", s.outcome, s.error))
                continue
            if s.outcome != "ok" or not s.text.strip():
                continue
            sid = RESPONSE_PREFIX + content_id(doc_id, qid, str(round_id), str(s.sample))
            rows.append({"doc_id": doc_id, "source_id": sid, "source_kind": "response", "round": round_id,
                         "name": f"{qid}#{s.sample}", "ord": s.sample, "text": s.text, "model": model})
            bad.extend({"doc_id": doc_id, "source_id": sid, "corrupted": c.corrupted, "original": c.original, "kind": c.kind}
                       for c in s.corruptions)
    return pl.DataFrame(rows, schema=RESPONSE_COLUMNS), pl.DataFrame(bad, schema=TRUTH_COLUMNS), pl.DataFrame(failures, schema=FAILURE_COLUMNS)


def decompose_sources(sources: pl.DataFrame, roles: ModelRoles, *, round_id: int) -> pl.DataFrame:
    """Claims of each source (``doc_id, source_id, source_kind, text``): one row per decomposed
    claim, with its id from :func:`grace_core.claims.claim_id`; a claim repeated within one
    source is kept once. Sources whose decomposition did not succeed give no rows (see
    :func:`decompose_sources_with_failures`)."""
    return decompose_sources_with_failures(sources, roles, round_id=round_id)[0]


def decompose_sources_with_failures(sources: pl.DataFrame, roles: ModelRoles, *, round_id: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`decompose_sources` and the failure rows of the sources whose decomposition failed
    or was capped."""
    texts = sources["text"].to_list()
    rows, failures = [], []
    for src, dec in zip(sources.select("doc_id", "source_id", "source_kind").iter_rows(), roles.decomposer.decompose(texts)):
        if dec.outcome in ("failed", "capped"):
            failures.append(_failure(src[0], "decomposer", dec.outcome, dec.error))
        if dec.outcome != "ok":
            continue
        seen = set()
        for i, text in enumerate(dec.claims):
            cid = claim_id(src[0], text)
            if cid in seen:
                continue
            seen.add(cid)
            rows.append({"doc_id": src[0], "claim_id": cid, "round": round_id, "source_id": src[1], "source_kind": src[2], "ord": i, "text": text})
    return pl.DataFrame(rows, schema=CLAIM_COLUMNS), pl.DataFrame(failures, schema=FAILURE_COLUMNS)


def judge_pairs(pairs: pl.DataFrame, roles: ModelRoles, *, round_id: int) -> pl.DataFrame:
    """Judge candidate pairs ``doc_id, source_id, source_kind, source_text, claim_id, claim_text``:
    one judge request per source listing its candidate claims. Returns the ``entails`` and
    ``contradicts`` edges (neutral, skipped, failed and capped judgements make none; see
    :func:`judge_pairs_with_failures`)."""
    return judge_pairs_with_failures(pairs, roles, round_id=round_id)[0]


def judge_pairs_with_failures(pairs: pl.DataFrame, roles: ModelRoles, *, round_id: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`judge_pairs` and one failure row per source whose judge call failed or was capped.

    A source's candidate claims are listed in claim-id order whatever the order of ``pairs``
    (joins and ``unique`` do not keep order), so the same source and claims always make the
    same prompt and a redone build is answered from the call cache."""
    if pairs.height == 0:
        return pl.DataFrame(schema=EDGE_COLUMNS), pl.DataFrame(schema=FAILURE_COLUMNS)
    groups = (
        pairs.unique(["doc_id", "source_id", "claim_id"], keep="first", maintain_order=True)
        .sort("doc_id", "source_id", "claim_id")
        .group_by("doc_id", "source_id", "source_kind", "source_text", maintain_order=True)
        .agg("claim_id", "claim_text")
    )
    sources = list(groups.iter_rows(named=True))
    reqs = [JudgeRequest(g["source_text"], tuple(g["claim_text"])) for g in sources]
    rows, failures = [], []
    for g, judgements in zip(sources, roles.judge.judge(reqs)):
        bad = next((j for j in judgements if j.outcome in ("failed", "capped")), None)
        if bad is not None:
            failures.append(_failure(g["doc_id"], "judge", bad.outcome, bad.error))
        for cid, j in zip(g["claim_id"], judgements):
            if j.outcome == "ok" and j.label in ("entails", "contradicts"):
                rows.append({"doc_id": g["doc_id"], "source_id": g["source_id"], "source_kind": g["source_kind"],
                             "claim_id": cid, "label": j.label, "round": round_id})
    return pl.DataFrame(rows, schema=EDGE_COLUMNS), pl.DataFrame(failures, schema=FAILURE_COLUMNS)


def build_documents(
    docs: pl.DataFrame, passages: pl.DataFrame, questions: pl.DataFrame, roles: ModelRoles, *, round_id: int,
    context_passages: int, model: str,
) -> BuildResult:
    """Build the claim graphs of new documents: responses, claims of priors and responses, and
    edges (decomposition edges plus the judge's verdict on every other source × claim pair).

    ``passages``: the documents' text units (``doc_id, source_id, source_kind, ord, text``):
    all are responder context; those of kind ``prior`` are also graph sources.

    Each document goes through the stages on its own (:func:`build_document`), up to
    :attr:`~grace_core.models.factory.ModelRoles.documents_at_once` of them at a time: a
    document is decomposed as soon as its own responses are back and judged as soon as its own
    claims are, while the other documents' calls and embeddings go on; no stage waits for the
    slowest call of every document. The rows come in document order, the same whatever the
    timing. The first model error (a model that refuses every request, the spend cap: a
    :class:`~grace_core.errors.GraceError`) stops the documents not yet started and is raised once
    the started ones end; any other exception of one document (its own content broke a stage) is
    that document's :data:`UNPROCESSABLE` failure: it is left unbuilt and the others are built."""
    doc_ids = docs["doc_id"].to_list()
    if not doc_ids:
        return BuildResult(pl.DataFrame(schema=RESPONSE_COLUMNS), pl.DataFrame(schema=CLAIM_COLUMNS), pl.DataFrame(schema=EDGE_COLUMNS),
                           pl.DataFrame(schema=TRUTH_COLUMNS))

    def one(doc_id: str) -> BuildResult:
        mine = pl.col("doc_id") == doc_id
        try:
            return build_document(docs.filter(mine), passages.filter(mine), questions.filter(mine), roles, round_id=round_id,
                                  context_passages=context_passages, model=model)
        except GraceError:
            raise  # a model that refuses every request, the spend cap: the batch stops
        except Exception as exc:  # noqa: BLE001 - this document's own content broke a stage: it alone stays unbuilt, named
            reason = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
            return BuildResult(pl.DataFrame(schema=RESPONSE_COLUMNS), pl.DataFrame(schema=CLAIM_COLUMNS), pl.DataFrame(schema=EDGE_COLUMNS),
                               pl.DataFrame(schema=TRUTH_COLUMNS), pl.DataFrame([_failure(doc_id, "build", UNPROCESSABLE, reason)], schema=FAILURE_COLUMNS))

    parts = _each(one, doc_ids, roles.documents_at_once)
    return BuildResult(*(pl.concat([getattr(p, name) for p in parts]) for name in ("responses", "claims", "edges", "corruptions", "failures")))


def _each(fn: Callable[[str], BuildResult], doc_ids: list[str], at_once: int) -> list[BuildResult]:
    """``[fn(d) for d in doc_ids]``, ``at_once`` documents at a time (:func:`grace_core.fan_out.run_all`)."""
    if at_once <= 1 or len(doc_ids) <= 1:
        return [fn(d) for d in doc_ids]
    with ThreadPoolExecutor(max_workers=min(at_once, len(doc_ids)), thread_name_prefix="grace-build") as pool:
        return run_all(pool, fn, doc_ids)


def build_document(
    docs: pl.DataFrame, passages: pl.DataFrame, questions: pl.DataFrame, roles: ModelRoles, *, round_id: int,
    context_passages: int, model: str,
) -> BuildResult:
    """:func:`build_documents` one stage after the other over all of ``docs`` at once (each
    stage waits for every call of the one before): what it runs for each document.

    A document with a failed or capped model item is dropped from the later stages and from
    the result; its items are in ``failures``.

    The judge is told of the sources as soon as they are known (:meth:`Judge.prepare`: the
    priors first, the responses once back), so that its embeddings are made while the calls
    are out rather than after the last claim is back."""
    roles.judge.prepare(passages.filter(pl.col("source_kind") == "prior")["text"].to_list())
    responses, corruptions, failures = sample_responses_with_failures(
        docs, passages, questions, roles, round_id=round_id, context_passages=context_passages, model=model
    )
    roles.judge.prepare(responses["text"].to_list())
    dropped = sorted(set(failures["doc_id"].to_list()))
    sources = _without(pl.concat([
        passages.filter(pl.col("source_kind") == "prior").select("doc_id", "source_id", "source_kind", "text"),
        responses.select("doc_id", "source_id", "source_kind", "text"),
    ]), dropped)
    claims, more = decompose_sources_with_failures(sources, roles, round_id=round_id)
    failures = pl.concat([failures, more])
    dropped = sorted(set(failures["doc_id"].to_list()))
    sources, claims = _without(sources, dropped), _without(claims, dropped)
    own = claims.select("doc_id", "source_id", "source_kind", "claim_id", pl.lit("entails").alias("label"), pl.lit(round_id, pl.Int32).alias("round"))
    unique = claims.unique(["doc_id", "claim_id"], keep="first", maintain_order=True).select("doc_id", "claim_id", pl.col("text").alias("claim_text"))
    pairs = (
        sources.rename({"text": "source_text"})
        .join(unique, on="doc_id")
        .join(own.select("doc_id", "source_id", "claim_id"), on=["doc_id", "source_id", "claim_id"], how="anti")
    )
    judged, more = judge_pairs_with_failures(pairs, roles, round_id=round_id)
    failures = pl.concat([failures, more])
    dropped = sorted(set(failures["doc_id"].to_list()))
    edges = pl.concat([own, judged]).unique(["doc_id", "source_id", "claim_id", "label"], keep="first", maintain_order=True)
    return BuildResult(_without(responses, dropped), _without(claims, dropped), _without(edges, dropped),
                       _without(corruptions, dropped), failures)
