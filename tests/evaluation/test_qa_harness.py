"""`grace eval qa` end to end on a small slice of the real dev data, and its bad-input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grace_core.evaluation.qa_harness import CONDITIONS
from tests.evaluation.cli_errors import assert_refused

KEYS = {"name", "accuracy", "answerability", "answer_f1", "evidence_f1"}


def run_eval(*args: str):
    from flows.cli import _register, app

    _register()
    return CliRunner().invoke(app, ["eval", "qa", *args])


def check_outputs(out: Path, dataset: str) -> dict:
    metrics = json.loads((out / "metrics.json").read_text())
    extra = {"abstention", "abstention_curve", "grace_minus_rag"} if dataset == "qasper" else set()
    assert set(metrics) == {"dataset", "n_questions", "conditions", "skipped", "retrieval"} | extra
    assert metrics["skipped"] == []
    assert metrics["dataset"] == dataset and metrics["n_questions"] > 0
    assert [c["name"] for c in metrics["conditions"]] == list(CONDITIONS)
    for c in metrics["conditions"]:
        assert set(c) == KEYS
        assert 0.0 <= c["accuracy"] <= 1.0 and 0.0 <= c["answerability"] <= 1.0
        if dataset == "qasper":
            assert 0.0 <= c["answer_f1"] <= 1.0 and 0.0 <= c["evidence_f1"] <= 1.0
        else:
            assert c["answer_f1"] is None and c["evidence_f1"] is None
    report = (out / "report.md").read_text()
    for name in CONDITIONS:
        assert f"| {name} |" in report
    png = (out / "qa_metrics.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    return metrics


@pytest.mark.slow
@pytest.mark.e2e
def test_qasper_two_papers(qasper_sample: Path, tmp_path: Path) -> None:
    data = qasper_sample
    res = run_eval("--dataset", "qasper", "--data", str(data), "--limit", "2", "--out", str(tmp_path), "--lake", str(tmp_path / "lake"))
    assert res.exit_code == 0, res.output
    metrics = check_outputs(tmp_path, "qasper")
    # the same figures are in the lake, one row per condition and figure
    from storage.config import LakeConfig
    from storage.lake import Lake

    rows = Lake.open(LakeConfig(lake=str(tmp_path / "lake"))).query(
        "SELECT name, metric, value FROM evaluations WHERE command = 'qa' AND dataset = 'qasper'")
    got = {(n, m): v for n, m, v in rows.iter_rows()}
    for c in metrics["conditions"]:
        assert got[(c["name"], "accuracy")] == pytest.approx(c["accuracy"])
        assert got[(c["name"], "evidence_f1")] == pytest.approx(c["evidence_f1"])
    assert got[("run", "n_questions")] == metrics["n_questions"]
    papers = [json.loads(line) for line in data.read_text().splitlines()[:2]]
    assert metrics["n_questions"] == sum(len(p["questions"]) for p in papers)
    # the full paper holds every answer sentence: the answerer attempts at least as often as from the abstract
    by = {c["name"]: c for c in metrics["conditions"]}
    assert by["Zero-shot + Full"]["answerability"] >= by["Zero-shot + Part"]["answerability"]
    assert any(c["answer_f1"] > 0 for c in metrics["conditions"])


@pytest.mark.slow
@pytest.mark.e2e
def test_quality_one_article(quality_sample: Path, tmp_path: Path) -> None:
    data = quality_sample
    res = run_eval("--dataset", "quality", "--data", str(data), "--limit", "1", "--out", str(tmp_path), "--lake", str(tmp_path / "lake"))
    assert res.exit_code == 0, res.output
    metrics = check_outputs(tmp_path, "quality")
    first = json.loads(data.read_text().splitlines()[0])
    assert metrics["n_questions"] == len(first["questions"])
    # exact match per question: accuracy is a multiple of 1/n
    n = metrics["n_questions"]
    for c in metrics["conditions"]:
        assert abs(c["accuracy"] * n - round(c["accuracy"] * n)) < 1e-9


@pytest.mark.e2e
@pytest.mark.parametrize("args, message", [
    (["--dataset", "qasper", "--data", "/nonexistent/qasper.jsonl"], "cannot read"),
    (["--dataset", "squad", "--data", "{qasper}"], "unknown dataset 'squad'"),
    (["--dataset", "quality", "--data", "{qasper}"], "expected quality documents, found qasper"),
])
def test_bad_input_is_one_line_exit_2(qasper_sample: Path, tmp_path: Path, args: list[str], message: str) -> None:
    args = [a.replace("{qasper}", str(qasper_sample)) for a in args]
    assert_refused(["qa", *args, "--limit", "1"], message, tmp_path)


def test_answer_paragraph_is_the_one_holding_the_answer() -> None:
    from grace_core.evaluation.qa_harness import answer_paragraph, paragraphs

    pars = paragraphs("We use BERT.\n\n  The corpus has 10k tweets in English.  \n\nResults improve by 3 points.")
    assert pars == ["We use BERT.", "The corpus has 10k tweets in English.", "Results improve by 3 points."]
    assert answer_paragraph("The corpus has 10k tweets in English.", pars) == [pars[1]]
    assert answer_paragraph("3 points improvement", pars) == [pars[2]]
    assert answer_paragraph("zebra", pars) == []
