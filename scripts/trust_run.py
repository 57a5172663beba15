"""Offline measurement of audited precision and reviewer reliability (issue 18), in memory.

    .venv/bin/python scripts/trust_run.py "$GRACE_DATA_DIR/qasper/qasper_dev.jsonl" --papers 20 --rounds 3

The file is any JSONL of QASPER lines: the full QASPER dev file where the machine has it
(``GRACE_DATA_DIR``, see docs/development.md), or the bundled ``flows/samples/qasper_demo.jsonl``.

Each QASPER paper runs the expansion protocol of ``grace eval expansion`` (round-0 priors
Abstract + Introduction, then held-out sections as responder context; the offline responder
records its hallucinations). Every round the deferrals (budget) and an audit sample of Grounded
and Refuted response claims (:func:`grace_core.audit.audit_claims`) go to three reviewers: the
offline verifier and two simulated people who answer from the recorded truth, ``careful``
right with probability 0.95 and ``noisy`` with 0.6. Their votes are settled like any votes.

Printed: per round and cumulative, the audited Grounded precision and Refuted-false share with
95% Wilson intervals against the true shares of the pools (from the recorded hallucinations);
each reviewer's Dawid–Skene accuracy against their accuracy on the truth; the accuracy of plain
and reliability-weighted decisions on the reviewed claims.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import polars as pl

from grace_core.settings_groups import VERIFIER
from grace_core.audit import audit_claims
from grace_core.settings_groups import AuditConfig
from grace_core.build import build_documents, sample_responses
from grace_core.decisions import decide
from grace_core.documents import parse_batch
from grace_core.edges import EDGE_COLUMNS
from grace_core.evaluation.expansion import PaperGraph, _sources, expansion_papers, grow, hallucinated_claims, split_paper, usable_questions
from grace_core.intervals import wilson_interval
from grace_core.models.config import ModelConfig
from grace_core.models.factory import build_roles
from grace_core.params import ScoringParams
from grace_core.reliability import estimate_reliability, vote_weights
from grace_core.review import verify_claims
from grace_core.round import defer, settle

PEOPLE = {"careful": 0.95, "noisy": 0.6}
KEYS = ["doc_id", "claim_id"]
NO_CLAIMS = pl.DataFrame(schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8})


def run_paper(batch, doc_id: str, roles, params: ScoringParams, audit: AuditConfig, *, rounds: int, budget: float, rng: random.Random):
    split = split_paper(batch, doc_id, rounds)
    asked = usable_questions(batch, doc_id).select("doc_id", "question_id", "question")
    docs = pl.DataFrame({"doc_id": [doc_id], "title": [split.title]})
    built = build_documents(docs, split.priors, asked, roles, round_id=0, context_passages=3, model="eval")
    corruptions = [built.corruptions]
    graph = PaperGraph(sources=pl.concat([_sources(split.priors), _sources(built.responses)]), claims=built.claims,
                       edges=built.edges.select(EDGE_COLUMNS), judged=pl.DataFrame(schema={"doc_id": pl.Utf8, "source_id": pl.Utf8, "claim_id": pl.Utf8}))
    graph.settle_all()
    graph.absorb(settle(graph.state(), params, lambda: roles, quorum=1, round_id=0))
    document = pl.DataFrame({"doc_id": [doc_id], "text": [split.full_text]})
    records = []
    for r in range(1, rounds + 1):
        responses, bad = sample_responses(docs, split.batches[r - 1], asked, roles, round_id=r, context_passages=3, model="eval")
        corruptions.append(bad)
        grow(graph, responses.select("doc_id", "source_id", "source_kind", "text"), roles, r)
        opening = settle(graph.state(), params, lambda: roles, quorum=1, round_id=r)
        graph.absorb(opening)
        state = graph.state()
        false = set(hallucinated_claims(pl.concat(corruptions), roles).select(KEYS).iter_rows())
        response_claims = graph.response_claims()
        chosen = defer(opening.scores, opening.decisions, NO_CLAIMS, state, roles, params, budget=budget, review_seconds=0.0)
        audited_before = pl.DataFrame([(x["doc_id"], x["claim_id"]) for x in records if x["kind"] == "audit"], schema=NO_CLAIMS.schema, orient="row")
        audits = audit_claims(opening.scores, opening.decisions, NO_CLAIMS, audited_before.select(KEYS), response_claims, state, roles,
                              params, audit, round_id=r, review_seconds=0.0)
        items = pl.concat([chosen.select(*KEYS, "text").with_columns(kind=pl.lit("deferral"), status=pl.lit("boundary")),
                           audits.select(*KEYS, "text", pl.lit("audit").alias("kind"), "status")])
        verifier = verify_claims(items.select(*KEYS, "text"), document, roles).select(*KEYS, "verdict").with_columns(reviewer=pl.lit(VERIFIER))
        people = []
        for d, c in items.select(KEYS).iter_rows():
            true = (d, c) not in false
            for name, accuracy in PEOPLE.items():
                says_true = true if rng.random() < accuracy else not true
                people.append({"doc_id": d, "claim_id": c, "verdict": "confirm" if says_true else "reject", "reviewer": name})
        votes = pl.concat([verifier.select(*KEYS, "reviewer", "verdict"),
                           pl.DataFrame(people, schema={"doc_id": pl.Utf8, "claim_id": pl.Utf8, "verdict": pl.Utf8, "reviewer": pl.Utf8})
                           .select(*KEYS, "reviewer", "verdict")], how="vertical_relaxed").with_columns(round=pl.lit(r, pl.Int32))
        graph.votes = pl.concat([graph.votes, votes.select(graph.votes.columns)], how="vertical_relaxed")
        closing = settle(graph.state(), params, lambda: roles, quorum=1, round_id=r)
        graph.absorb(closing)
        decided = {(d, c): x for d, c, x in closing.decisions.select(*KEYS, "decision").iter_rows()}
        pools = opening.scores.join(response_claims, on=KEYS, how="semi")
        for status in ("grounded", "refuted"):
            pool = [k for k in pools.filter(pl.col("status") == status).select(KEYS).iter_rows()]
            records.append({"kind": "pool", "round": r, "status": status, "n": len(pool), "n_true": sum(k not in false for k in pool)})
        for d, c, kind, status in items.select(*KEYS, "kind", "status").iter_rows():
            records.append({"kind": kind, "round": r, "doc_id": d, "claim_id": c, "status": status, "true": (d, c) not in false,
                            "decision": decided.get((d, c))})
    return records, graph.votes


def share(k: int, n: int) -> str:
    if not n:
        return "—"
    low, high = wilson_interval(k, n)
    return f"{100 * k / n:.1f}% [{100 * low:.1f}, {100 * high:.1f}] (n={n})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--papers", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=3.0)
    ap.add_argument("--audit-grounded", type=int, default=4)
    ap.add_argument("--audit-refuted", type=int, default=2)
    ap.add_argument("--hallucination-rate", type=float, default=0.2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    batch = parse_batch(args.data.read_bytes(), str(args.data), skip_invalid=True)
    roles = build_roles(ModelConfig(backend="offline", hallucination_rate=args.hallucination_rate))
    roles.start_round(0)
    params = ScoringParams()
    audit = AuditConfig(audit_grounded=args.audit_grounded, audit_refuted=args.audit_refuted, audit_budget=10.0)
    rng = random.Random(18)
    records, votes = [], []
    for doc_id in expansion_papers(batch)[: args.papers]:
        rec, v = run_paper(batch, doc_id, roles, params, audit, rounds=args.rounds, budget=args.budget, rng=rng)
        records += rec
        votes.append(v)
    votes_df = pl.concat(votes, how="vertical_relaxed")
    rows = pl.DataFrame(records, infer_schema_length=None)
    out: dict = {"papers": args.papers, "rounds": args.rounds, "per_round": []}
    print(f"{args.papers} papers, {args.rounds} rounds; audits per paper and round: {args.audit_grounded} Grounded, {args.audit_refuted} Refuted")
    for r in range(1, args.rounds + 1):
        line = {"round": r}
        for status, hit in (("grounded", "confirm"), ("refuted", "reject")):
            for scope, sel in (("round", pl.col("round") == r), ("cumulative", pl.col("round") <= r)):
                a = rows.filter((pl.col("kind") == "audit") & (pl.col("status") == status) & sel & pl.col("decision").is_in(["confirm", "reject"]))
                k, n = int((a["decision"] == hit).sum()), a.height
                pool = rows.filter((pl.col("kind") == "pool") & (pl.col("status") == status) & sel)
                n_pool, n_true = int(pool["n"].sum()), int(pool["n_true"].sum())
                truth = None if not n_pool else n_true / n_pool if status == "grounded" else (n_pool - n_true) / n_pool
                line[f"{status}_{scope}"] = {"k": k, "n": n, "estimate": k / n if n else None,
                                             "wilson": wilson_interval(k, n), "truth": truth, "pool": n_pool}
                shown = "—" if truth is None else f"{100 * truth:.1f}%"
                print(f"round {r} {scope:10s} {status:8s}: audited {'precision' if status == 'grounded' else 'really false'} "
                      f"{share(k, n)}; truth over the pool of {n_pool}: {shown}")
        out["per_round"].append(line)
    reviewed = rows.filter(pl.col("kind").is_in(["audit", "deferral"])).unique(KEYS)
    truth = dict(zip(reviewed.select(KEYS).iter_rows(), reviewed["true"]))
    latest = votes_df.unique([*KEYS, "reviewer"], keep="last")
    est = estimate_reliability(votes_df)
    print("reviewer   DS accuracy   accuracy on the truth   votes")
    out["reviewers"] = {}
    for reviewer, n_overlap, acc in est.iter_rows():
        mine = latest.filter((pl.col("reviewer") == reviewer) & pl.col("verdict").is_in(["confirm", "reject"]))
        right = sum((v == "confirm") == truth.get((d, c), True) for d, c, v in mine.select(*KEYS, "verdict").iter_rows())
        real = right / mine.height if mine.height else None
        out["reviewers"][reviewer] = {"ds_accuracy": acc, "true_accuracy": real, "votes": mine.height}
        print(f"{reviewer:10s} {acc:.3f}         {real:.3f}                   {mine.height}")
    weights = vote_weights(est)
    for name, dec in (("plain majority", decide(votes_df)), ("reliability-weighted", decide(votes_df, weights=weights))):
        d = dec.filter(pl.col("decision").is_in(["confirm", "reject"]))
        right = sum((x == "confirm") == truth.get((a, b), True) for a, b, x in d.select(*KEYS, "decision").iter_rows())
        out[name] = {"right": right, "decided": d.height, "claims": dec.height}
        print(f"{name}: {right}/{d.height} decided claims right ({100 * right / max(d.height, 1):.1f}%), {dec.height - d.height} undecided")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
