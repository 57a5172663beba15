"""`grace eval qa` and `grace eval expansion` on files with every shape of the official QASPER
and QuALITY releases plus lines no reader can use: the run completes, and what it left out is
in metrics.json, report.md and on stderr, one entry per line or document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.real_shapes import UNUSABLE, jsonl, qasper_lines, quality_lines

pytestmark = pytest.mark.slow  # offline models on a dozen documents: ~1 min per run on an idle machine

INVALID_JSON = "not valid JSON (Expecting value at column 1)"


def invoke(*args: str):
    from flows.cli import _register, app

    _register()
    return CliRunner().invoke(app, ["eval", *args])


def outputs(out: Path) -> tuple[dict, str]:
    return json.loads((out / "metrics.json").read_text()), (out / "report.md").read_text()


def test_qa_on_every_qasper_shape(tmp_path: Path) -> None:
    data = tmp_path / "qasper_test.jsonl"
    data.write_bytes(jsonl([*qasper_lines(), UNUSABLE[0][0]]))
    res = invoke("qa", "--dataset", "qasper", "--data", str(data), "--out", str(tmp_path / "out"), "--lake", str(tmp_path / "lake"))
    assert res.exit_code == 0, res.output
    metrics, report = outputs(tmp_path / "out")
    assert metrics["n_questions"] == 5  # q1a, q1b (unanswerable), q2a, q3a (null lists), q6a (nested answer)
    assert metrics["skipped"] == [
        {"line": 4, "doc_id": "2101.00004", "reason": "no questions"},
        {"line": 5, "doc_id": "2101.00005", "reason": "no question has a reference answer"},
        {"line": 7, "doc_id": None, "reason": INVALID_JSON},
    ]
    assert "## Skipped (3)" in report and f"| 7 | — | {INVALID_JSON} |" in report and "skipped: 3" in report
    assert f"grace: skipped {data}: line 7: {INVALID_JSON}" in res.output
    assert "(3 lines or documents skipped)" in res.output


def test_qa_on_every_quality_shape(tmp_path: Path) -> None:
    data = tmp_path / "quality_test.jsonl"
    data.write_bytes(jsonl([UNUSABLE[1][0], *quality_lines()]))
    res = invoke("qa", "--dataset", "quality", "--data", str(data), "--out", str(tmp_path / "out"), "--lake", str(tmp_path / "lake"))
    assert res.exit_code == 0, res.output
    metrics, report = outputs(tmp_path / "out")
    assert metrics["n_questions"] == 4  # rl_1 and rl_2 (one article, two lines), lv_1 (gold_label only), rr_1
    assert [(s["line"], s["doc_id"], s["reason"]) for s in metrics["skipped"]] == [
        (1, "u2", "field 'title': missing"),
        (5, "90004", "no question has options and a gold answer (gold_index or gold_label)"),
        (7, "90006", "no questions"),
    ]
    for c in metrics["conditions"]:  # exact match per question
        assert abs(c["accuracy"] * 4 - round(c["accuracy"] * 4)) < 1e-9
    assert "## Skipped (3)" in report


def test_expansion_on_every_qasper_shape(tmp_path: Path) -> None:
    data = tmp_path / "qasper_test.jsonl"
    data.write_bytes(jsonl([UNUSABLE[2][0], *qasper_lines()]))
    res = invoke("expansion", "--data", str(data), "--rounds", "1", "--out", str(tmp_path / "out"), "--lake", str(tmp_path / "lake"))
    assert res.exit_code == 0, res.output
    metrics, report = outputs(tmp_path / "out")
    assert metrics["n_papers"] == 4 and [r["round"] for r in metrics["rounds"]] == [0, 1]
    assert [(s["line"], s["reason"]) for s in metrics["skipped"]] == [
        (1, "field 'id': id contains '/' (allowed: ASCII letters, digits and . _ : @ + -)"),
        (5, "no questions"), (6, "no question has a reference answer")]
    assert "## Skipped (3)" in report
