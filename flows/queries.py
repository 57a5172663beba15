"""User questions in the lake (:mod:`grace_core.queries`): the knowledge ``grace ask`` answers
from and its stored embeddings (:mod:`grace_core.stored_embeddings`), recording unanswered
questions, sampling responses to open questions in a round's build (``question_responses``),
and asking them again after the round's dispatch (``recheck_queries``)."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import polars as pl
import pyarrow.dataset as ds

from flows.settings import GraceSettings
from grace_core.ask import AskResult, ask, candidate_passages
from grace_core.documents import content_id
from grace_core.models.factory import ModelRoles, embedder_identity
from grace_core.models.roles import Embedder
from grace_core.retrieval import Retrieval
from grace_core.queries import best_score, grow_with_responses, is_unanswered, not_sampled, open_queries, query_id
from grace_core.stored_embeddings import embeddings_of
from storage.lake import Lake

QUERY_SCHEMA = {
    "query_id": pl.Utf8, "round": pl.Int32, "doc_id": pl.Utf8, "question": pl.Utf8, "origin": pl.Utf8, "answerable": pl.Boolean,
    "best_score": pl.Float64, "asked_at": pl.Datetime("us", "UTC"),
}


def lake_candidates(lake: Lake, doc: str | None) -> pl.DataFrame:
    """The candidate passages of :func:`grace_core.ask.candidate_passages` from the lake: the
    priors and verified claims, their entailed claims' closeness and the grounded claims (of
    ``doc`` only, when given)."""
    where = ds.field("doc_id") == doc if doc else None
    priors = lake.read("sources", columns=["doc_id", "source_id", "source_kind", "text"], filter=where).filter(
        pl.col("source_kind").is_in(["prior", "verified"])
    )
    entails = lake.read("edges", columns=["doc_id", "source_id", "source_kind", "claim_id", "label"], filter=where).filter(
        (pl.col("label") == "entails") & pl.col("source_kind").is_in(["prior", "verified"])
    ).select("doc_id", "source_id", "claim_id").unique()
    keep = pl.col("doc_id") == doc if doc else pl.lit(True)
    scores = lake.query("SELECT doc_id, claim_id, status, closeness_norm FROM claim_status").filter(keep)
    claims = lake.query("SELECT doc_id, claim_id, text FROM claim_texts").filter(keep)
    return candidate_passages(priors.drop("source_kind"), entails, scores, claims)


def candidate_embeddings(lake: Lake, candidates: pl.DataFrame, embedder: Embedder, identity: str,
                         doc: str | None) -> tuple[np.ndarray, pl.DataFrame]:
    """:func:`grace_core.stored_embeddings.embeddings_of` of ``candidates`` (of ``doc`` only,
    when given) against the lake's ``embeddings`` of the embedder ``identity``
    (:func:`~grace_core.models.factory.embedder_identity`), read by key when ``doc`` is given:
    the vectors, and the rows of the texts it had to embed (for :func:`store_embeddings`)."""
    stored = lake.read("embeddings", columns=["doc_id", "text_hash", "vector"], filter=ds.field("embedder") == identity,
                       doc_ids=[doc] if doc else None)
    return embeddings_of(candidates, stored, embedder, identity)


def store_embeddings(lake: Lake, rows: pl.DataFrame) -> None:
    """Commit ``rows`` (:data:`grace_core.stored_embeddings.STORED_COLUMNS`) to the ``embeddings``
    table, once: the unit of work is named by the vectors' keys, and a key stored before (another
    asking embedded the same text meanwhile) is not stored again."""
    if rows.height:
        keys = sorted(rows.select("doc_id", "text_hash", "embedder").iter_rows())
        lake.commit(f"embeddings/{content_id(*(part for key in keys for part in key))}", {"embeddings": rows})


def latest_round(lake: Lake) -> int:
    """The last scored round of the lake (0 before any)."""
    return int(lake.read("scores", columns=["round"])["round"].max() or 0)


def record_unanswered(lake: Lake, settings: GraceSettings, asked: list[tuple[str, AskResult]], doc: str | None,
                      now: datetime) -> list[str | None]:
    """Record each question of ``asked`` (question, result) the knowledge base could not answer
    (:func:`grace_core.queries.is_unanswered`) as an open question, under ``doc`` or else the
    document of its best passage, in one commit (a question asked again in the same round is
    kept once). Returns, per question, its id, or None when answered (or when there is no
    document to ask)."""
    round_id, rows, ids = None, [], []
    for question, result in asked:
        doc_id = doc or (result.context["doc_id"][0] if result.context.height else None)
        if not is_unanswered(result, settings.ask_min_score) or doc_id is None:
            ids.append(None)
            continue
        round_id = latest_round(lake) if round_id is None else round_id
        qid = query_id(question, doc_id)
        ids.append(qid)
        rows.append({"query_id": qid, "round": round_id, "doc_id": doc_id, "question": question, "origin": "ask",
                     "answerable": False, "best_score": best_score(result), "asked_at": now})
    if rows:
        table = pl.DataFrame(rows, schema=QUERY_SCHEMA).unique("query_id", keep="first", maintain_order=True)
        unique = sorted(table["query_id"])
        name = unique[0] if len(unique) == 1 else content_id(*unique)
        lake.commit(f"ask/{name}/round={round_id}", {"queries": table})
    return ids


def question_responses(settings: GraceSettings, round_id: int, now: datetime) -> int:
    """Responses to the open questions no response was sampled for yet, one set per question
    for its document (as for its own questions: the responder reads the document's passages
    nearest the question), decomposed and judged into the document's graph; committed once.
    Returns the questions sampled."""
    from flows.runtime import open_lake, roles_with_cache
    from flows.tasks import commit_once
    from grace_core.build import sample_responses_with_failures
    from grace_core.edges import SOURCE_KINDS
    from grace_core.errors import ModelCallsFailed
    from grace_core.models.failures import describe_failures

    lake = open_lake(settings)

    def work():
        asked = open_queries(lake.read("queries"))
        responses = lake.read("sources", columns=["doc_id", "name", "source_kind"], doc_ids=asked["doc_id"].unique().to_list())
        todo = not_sampled(asked, responses.filter(pl.col("source_kind") == "response"))
        if todo.height == 0:
            return {}, 0, 0
        in_docs = todo["doc_id"].unique().to_list()
        docs = lake.read("documents", columns=["doc_id", "title"], doc_ids=in_docs)
        passages = lake.read("sources", rounds=[0], columns=["doc_id", "source_id", "source_kind", "ord", "text"], doc_ids=in_docs)
        roles, cache = roles_with_cache(settings, lake, round_id)
        model = settings.responder_model if settings.backend == "litellm" else "offline"
        questions = todo.select("doc_id", pl.col("query_id").alias("question_id"), "question")
        new, _, failures = sample_responses_with_failures(docs, passages, questions, roles, round_id=round_id,
                                                          context_passages=settings.context_passages, model=model)
        if failures.height:
            raise ModelCallsFailed(f"round {round_id}: questions: {describe_failures(failures.select('role', 'outcome', 'error').iter_rows())}")
        graph = lake.read("sources", columns=["doc_id", "source_id", "source_kind", "text"], doc_ids=in_docs).filter(
            pl.col("source_kind").is_in(list(SOURCE_KINDS))).unique(["doc_id", "source_id"])
        known = lake.read("claims", columns=["doc_id", "claim_id", "text"], doc_ids=in_docs)
        claims, edges = grow_with_responses(new.select("doc_id", "source_id", "source_kind", "text"), graph, known, roles, round_id=round_id)
        return {"sources": new, "claims": claims, "edges": edges, "llm_calls": cache.pending()}, todo["doc_id"].n_unique(), todo.height

    return commit_once(lake, f"questions/round={round_id}", round_id=round_id, stage="questions", work=work) or 0


def ask_again(lake: Lake, settings: GraceSettings, roles: ModelRoles, rows: pl.DataFrame, round_id: int,
              now: datetime) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:data:`QUERY_SCHEMA` rows (origin ``recheck``) of asking each question of ``rows``
    (``query_id, doc_id, question``) again against its document's knowledge now, with the
    settings ``grace ask`` uses and its stored embeddings; and the embeddings it had to make
    (:func:`candidate_embeddings`), to store with them."""
    out, made, identity = [], [], embedder_identity(settings)
    for (doc_id,), questions in rows.group_by("doc_id", maintain_order=True):
        candidates = lake_candidates(lake, doc_id)
        vectors, fresh = candidate_embeddings(lake, candidates, roles.embedder, identity, doc_id)
        made.append(fresh)
        for qid, question in questions.select("query_id", "question").iter_rows():
            result = ask(question, candidates, roles, retrieval=Retrieval.of(settings), embeddings=vectors)
            out.append({"query_id": qid, "round": round_id, "doc_id": doc_id, "question": question, "origin": "recheck",
                        "answerable": not is_unanswered(result, settings.ask_min_score), "best_score": best_score(result), "asked_at": now})
    return pl.DataFrame(out, schema=QUERY_SCHEMA), pl.concat(made) if made else pl.DataFrame()


def recheck_queries(settings: GraceSettings, round_id: int, now: datetime) -> dict[str, int]:
    """Ask every question still open (asked before this round) again against the knowledge of
    the round; commit the answers once. Returns the questions ``rechecked`` and ``answered``."""
    from flows.runtime import open_lake, roles_with_cache
    from flows.tasks import commit_once

    lake = open_lake(settings)

    def work():
        queries = lake.read("queries")
        todo = open_queries(queries.filter(pl.col("round") < round_id))
        roles, cache = roles_with_cache(settings, lake, round_id)
        rows, embeddings = ask_again(lake, settings, roles, todo, round_id, now)
        stored = {"embeddings": embeddings} if embeddings.height else {}
        return {"queries": rows, **stored, "llm_calls": cache.pending()}, rows["doc_id"].n_unique(), {
            "rechecked": rows.height, "answered": int(rows["answerable"].sum())}

    return commit_once(lake, f"recheck/round={round_id}", round_id=round_id, stage="recheck", work=work) or {}


_TASKS = {"question_responses": question_responses, "recheck_queries": recheck_queries}
"""The Prefect tasks of this module, undecorated: :func:`__getattr__` makes each a task
(``retry_delay_seconds=10``) when first imported, so ``grace ask`` (which needs only
:func:`lake_candidates` and :func:`record_unanswered`) never imports Prefect."""
del question_responses, recheck_queries


def __getattr__(name: str):
    if name in _TASKS:
        from flows.tasks import grace_task

        task = grace_task(retry_delay_seconds=10)(_TASKS[name])
        globals()[name] = task
        return task
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
