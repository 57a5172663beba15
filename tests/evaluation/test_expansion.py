"""`grace eval expansion`: the paper's expansion protocol on a slice of the real QASPER dev
data, its outputs in the folder and the lake, and the pieces it is made of."""

from __future__ import annotations

import json
import random
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import grace_core.evaluation.expansion as expansion_module
import grace_core.review as review_module
from flows.settings import build_settings
from grace_core.claims import claim_id
from grace_core.documents import parse_batch
from grace_core.evaluation.expansion import (
    hallucinated_claims,
    run_paper,
    split_paper,
    summarise,
)
from grace_core.evaluation.records import expansion_records
from grace_core.models.corruption import corrupt
from grace_core.models.factory import build_roles
from storage.config import LakeConfig
from storage.lake import Lake
from tests.evaluation.cli_errors import assert_refused

ROUND_KEYS = {"round", "qa_accuracy", "pcr", "kf", "yield", "cascade", "grounding_precision"}


def qasper_lines(qasper_sample: Path, n: int) -> bytes:
    return b"\n".join(qasper_sample.read_bytes().split(b"\n")[:n])


def invoke(*args: str):
    from flows.cli import _register, app

    _register()
    return CliRunner().invoke(app, ["eval", "expansion", *args])


@pytest.fixture(scope="module")
def two_papers(qasper_sample: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """One CLI run on the first two dev papers, two rounds: (out folder, lake, CLI args)."""
    base = tmp_path_factory.mktemp("expansion")
    args = ["--data", str(qasper_sample), "--papers", "2", "--rounds", "2",
            "--out", str(base / "out"), "--lake", str(base / "lake")]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    return base / "out", base / "lake", args


@pytest.mark.slow
def test_metrics_json_has_the_issue_schema(two_papers, qasper_sample: Path) -> None:
    out, _, _ = two_papers
    m = json.loads((out / "metrics.json").read_text())
    assert {"n_papers", "n_questions", "rounds", "baselines"} <= set(m)
    papers = [json.loads(line) for line in qasper_lines(qasper_sample, 2).splitlines()]
    assert m["n_papers"] == 2 and 0 < m["n_questions"] <= sum(len(p["questions"]) for p in papers)
    assert [r["round"] for r in m["rounds"]] == [0, 1, 2]
    for r in m["rounds"]:
        assert ROUND_KEYS <= set(r)
        for key in ("qa_accuracy", "pcr", "grounding_precision"):
            assert 0.0 <= r[key] <= 1.0
        assert r["kf"] >= 0
        assert r["grounded"] + r["boundary"] + r["refuted"] == r["claims"]
    assert m["rounds"][0]["yield"] is None and m["rounds"][0]["cascade"] is None and m["rounds"][0]["deferred"] == 0
    assert all(r["yield"] is None or 0 <= r["yield"] <= 1 for r in m["rounds"][1:])
    # every round adds the claims of the next batch of held-out sections
    assert m["rounds"][0]["claims"] < m["rounds"][1]["claims"] < m["rounds"][2]["claims"]
    assert set(m["baselines"]) == {"abstract_only", "full_paper"}
    # the offline responder hallucinated (rate 0.2): some response claims are known to be false
    truth = m["confusion_truth"]
    assert sum(row["hallucinated"] for row in truth.values()) > 0
    report = (out / "report.md").read_text()
    assert "| 2 |" in report and "Against the verifier" in report and "Against the recorded hallucinations" in report
    for png in ("expansion_rounds.png", "confusion.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


@pytest.mark.slow
def test_figures_are_in_the_lake_once(two_papers) -> None:
    out, lake_dir, args = two_papers
    m = json.loads((out / "metrics.json").read_text())
    lake = Lake.open(LakeConfig(lake=str(lake_dir)))
    sql = "SELECT round, metric, value FROM evaluations WHERE command = 'expansion' AND name = 'round'"
    got = {(r, k): v for r, k, v in lake.query(sql).iter_rows()}
    for r in m["rounds"]:
        assert got[(r["round"], "pcr")] == pytest.approx(r["pcr"])
        assert got[(r["round"], "kf")] == pytest.approx(r["kf"])
    before = lake.query("SELECT count(*) AS n FROM evaluations")["n"][0]
    res = invoke(*args)  # the same data and settings again: nothing new in the lake
    assert res.exit_code == 0, res.output
    assert "already recorded" in res.output
    assert lake.query("SELECT count(*) AS n FROM evaluations")["n"][0] == before
    assert json.loads((out / "metrics.json").read_text())["rounds"] == m["rounds"]  # deterministic


@pytest.mark.slow
def test_two_worker_processes_give_the_same_figures(two_papers, tmp_path: Path) -> None:
    out, _, args = two_papers
    args = [*args[:-4], "--out", str(tmp_path / "out"), "--lake", str(tmp_path / "lake"), "--workers", "2"]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    one, two = (json.loads((d / "metrics.json").read_text()) for d in (out, tmp_path / "out"))
    assert two == one


def test_records_hold_every_figure() -> None:
    matrix = {"grounded": {"confirm": 4, "reject": 1, "abstain": 0}}
    metrics = {
        "n_papers": 1, "n_questions": 2, "hallucinations_kept_out": 0.5, "spend_cap_reached": False,
        "rounds": [{"round": 0, "qa_accuracy": 0.5, "pcr": 0.25, "kf": 3.0, "yield": None, "cascade": None, "grounding_precision": 1.0}],
        "baselines": {"abstract_only": 0.0, "full_paper": 0.5},
        "confusion_verifier": matrix, "confusion_truth": None,
        "all_response_claims": {"confusion_verifier": matrix, "confusion_truth": None, "hallucinations_kept_out": 0.25},
    }
    rows = expansion_records(metrics)
    assert rows.filter(pl.col("name") == "round").height == 6
    assert rows.filter((pl.col("metric") == "yield"))["value"].to_list() == [None]
    for name in ("confusion_verifier", "all_response_claims/confusion_verifier"):
        assert rows.filter(pl.col("name") == name).sort("metric")["metric"].to_list() == [
            "grounded/abstain", "grounded/confirm", "grounded/reject"]
    assert rows.filter(pl.col("metric") == "full_paper")["value"].to_list() == [0.5]
    assert rows.filter(pl.col("metric") == "spend_cap_reached")["value"].to_list() == [0.0]
    assert sorted(rows.filter(pl.col("metric") == "hallucinations_kept_out")["value"].to_list()) == [0.25, 0.5]


def test_split_paper_reveals_every_held_out_section_once(qasper_sample: Path) -> None:
    batch = parse_batch(qasper_lines(qasper_sample, 3), "dev")
    for doc_id in batch.documents["doc_id"]:
        sections = batch.priors.filter(pl.col("doc_id") == doc_id).sort("ord")
        split = split_paper(batch, doc_id, 3)
        names = dict(zip(sections["source_id"], sections["name"], strict=True))
        assert sorted(names[s] for s in split.priors["source_id"]) == ["Abstract", "Introduction"]
        held = [s for b in split.batches for s in b["source_id"].to_list()]
        assert len(held) == len(set(held)) == sections.height - 2
        assert held == [s for s in sections["source_id"] if names[s] not in ("Abstract", "Introduction")]  # document order
        sizes = [b.height for b in split.batches]
        assert max(sizes) - min(sizes) <= 1
        assert split.full_text.count("\n\n") >= sections.height and split.abstract.startswith(split.title)


def test_a_paper_without_introduction_takes_its_first_section_after_the_abstract() -> None:
    line = {"id": "p1", "title": "T", "abstract": "We study things in depth here.", "questions": [], "sections": [
        {"name": "Background", "paragraphs": ["Background text is here."]},
        {"name": "Method", "paragraphs": ["Method text is here."]},
        {"name": "Results", "paragraphs": ["Results text is here."]},
    ]}
    batch = parse_batch(json.dumps(line).encode(), "one")
    split = split_paper(batch, batch.documents["doc_id"][0], 3)
    assert split.priors["text"].to_list() == ["We study things in depth here.", "Background text is here."]
    assert [b["text"].to_list() for b in split.batches] == [["Method text is here."], ["Results text is here."], []]


def test_hallucinated_claims_are_those_only_the_corrupted_sentence_has() -> None:
    roles = build_roles(build_settings())
    original = "The model reaches 91.2 F1 on the test set, while the baseline stays at 85.0 F1 on the same data."
    corrupted = None
    for seed in range(50):
        c = corrupt(original, 0, random.Random(seed), ("BERT", "ELMo"))
        if c is not None and c.kind == "number":
            corrupted = c
            break
    assert corrupted is not None
    table = pl.DataFrame({"doc_id": ["d"], "source_id": ["r:1"], "corrupted": [corrupted.corrupted], "original": [original], "kind": ["number"]})
    false = set(hallucinated_claims(table, roles)["claim_id"])
    bad = roles.decomposer.decompose([corrupted.corrupted])[0].claims
    good = roles.decomposer.decompose([original])[0].claims
    assert len(bad) == len(good) == 2  # the sentence splits at ", while"
    changed = [c for c in bad if corrupted.after in c]
    # exactly the clause holding the changed number is false; the other clause is still true
    assert false == {claim_id("d", c) for c in changed} and len(false) == 1
    assert not false & {claim_id("d", c) for c in good}


@pytest.mark.slow
def test_no_hallucinations_and_no_budget(qasper_sample: Path) -> None:
    """Rate 0: every response claim is true (precision 1 when anything is grounded); budget 0:
    nothing is deferred, so nothing is confirmed, rejected or cascaded."""
    settings = build_settings(hallucination_rate=0.0)
    roles = build_roles(settings)
    batch = parse_batch(qasper_lines(qasper_sample, 1), "dev")
    doc_id = batch.documents["doc_id"][0]
    run = run_paper(batch, doc_id, roles, settings, rounds=2, budget=0.0)
    assert run.truth is not None and run.truth["is_true"].all()
    assert all(d.height == 0 for d in run.decisions)
    m = summarise([run], 2)
    assert all(r["grounding_precision"] in (None, 1.0) for r in m["rounds"])
    assert all(r["deferred"] == 0 and r["yield"] is None and r["cascade"] == 0 for r in m["rounds"][1:])
    assert m["confusion_truth"] is not None and all(row["hallucinated"] == 0 for row in m["confusion_truth"].values())


@pytest.mark.e2e
@pytest.mark.parametrize("args, message", [
    (["--data", "/nonexistent/qasper.jsonl"], "cannot read"),
    (["--data", "{quality}"], "expected qasper documents, found quality"),
    (["--data", "{qasper}", "--backend", "gpt"], "unknown backend 'gpt'"),
])
def test_bad_input_is_one_line_exit_2(qasper_sample: Path, quality_sample: Path, tmp_path: Path, args: list[str],
                                      message: str) -> None:
    args = [a.replace("{quality}", str(quality_sample)).replace("{qasper}", str(qasper_sample)) for a in args]
    assert_refused(["expansion", *args, "--papers", "1"], message, tmp_path)


@pytest.mark.slow
def test_review_promotes_cascades_and_never_judges_a_pair_twice(qasper_sample: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a generous budget, on real papers: claims confirmed in a round are Grounded by its
    end (the verifier's votes are settled within the round) and rejected ones Refuted, decided claims
    are never deferred again, cascaded claims had no confirm decision of their own, and the
    judge never sees a (source, claim) pair twice."""
    seen: list[tuple[str, str, str]] = []
    real = expansion_module.judge_pairs

    def recording(pairs: pl.DataFrame, roles, *, round_id: int) -> pl.DataFrame:
        seen.extend(pairs.select("doc_id", "source_id", "claim_id").iter_rows())
        return real(pairs, roles, round_id=round_id)

    real_with_failures = review_module.judge_pairs_with_failures

    def recording_with_failures(pairs: pl.DataFrame, roles, *, round_id: int):
        seen.extend(pairs.select("doc_id", "source_id", "claim_id").iter_rows())
        return real_with_failures(pairs, roles, round_id=round_id)

    monkeypatch.setattr(expansion_module, "judge_pairs", recording)
    monkeypatch.setattr(review_module, "judge_pairs_with_failures", recording_with_failures)
    settings = build_settings(hallucination_rate=0.2)
    roles = build_roles(settings)
    batch = parse_batch(qasper_lines(qasper_sample, 3), "dev")
    decided_any = {"confirm": 0, "reject": 0}
    for doc_id in batch.documents["doc_id"]:
        run = run_paper(batch, doc_id, roles, settings, rounds=3, budget=100.0, consolidation_rounds=1)
        assert len(run.scores) == 5
        done: set[str] = set()
        confirmed: set[str] = set()
        for k in range(1, 5):
            status = dict(zip(run.scores[k]["claim_id"], run.scores[k]["status"], strict=True))
            decisions = run.decisions[k]
            assert not set(decisions["claim_id"]) & done, "a decided claim was deferred again"
            rejected = set()
            for cid, decision in decisions.select("claim_id", "decision").iter_rows():
                if decision in decided_any:
                    decided_any[decision] += 1
                    done.add(cid)
                if decision == "confirm":
                    confirmed.add(cid)
                if decision == "reject":
                    rejected.add(cid)
            assert all(status[c] == "grounded" for c in confirmed), "a confirmed claim is not Grounded by the end of its round"
            assert all(status[c] == "refuted" for c in rejected), "a rejected claim is not Refuted by the end of its round"
            cascaded = set(run.cascaded[k]["claim_id"])
            assert not cascaded & confirmed
            assert all(status[c] == "grounded" for c in cascaded)
        assert run.final_verdicts is not None and set(run.final_verdicts["claim_id"]) <= set(run.truth["claim_id"])
    assert decided_any["confirm"] > 0 and decided_any["reject"] > 0
    assert len(seen) == len(set(seen)) > 0


@pytest.mark.slow
def test_short_papers_run_every_round(qasper_sample: Path) -> None:
    """A paper with no abstract, and one with fewer held-out sections than rounds: late rounds
    add nothing and the protocol still reports every round."""
    paper = json.loads(qasper_lines(qasper_sample, 1).splitlines()[0])
    short = {**paper, "id": "short", "sections": paper["sections"][:2]}  # Introduction + one held-out section
    bare = {**paper, "id": "bare", "abstract": ""}
    batch = parse_batch("\n".join(json.dumps(p) for p in (short, bare)).encode(), "synthetic")
    settings = build_settings(hallucination_rate=0.2)
    roles = build_roles(settings)
    split = split_paper(batch, "short", 3)
    assert [b.height for b in split.batches] == [1, 0, 0]
    assert split_paper(batch, "bare", 3).abstract == paper["title"]
    runs = [run_paper(batch, d, roles, settings, rounds=3, budget=3.0) for d in ("short", "bare")]
    short_run = runs[0]
    assert short_run.scores[2].height == short_run.scores[3].height  # nothing revealed in rounds 2 and 3
    m = summarise(runs, 3)
    assert [r["round"] for r in m["rounds"]] == [0, 1, 2, 3] and m["n_papers"] == 2
