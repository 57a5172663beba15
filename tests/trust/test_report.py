"""``grace report``: the figures (Wilson interval, precision per round, frontier, reviewers,
costs, claims waiting) on a small lake written table by table, the page and its plots, and the
page rendered in headless Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from grace_core.intervals import wilson_interval
from grace_core.report_figures import precision_by_round, waiting_claims
from storage.lake import Lake
from tests.grace_cli import run_grace
from tests.trust.conftest import T0, VOTES, cid
from tests.ui.desk import CHROMIUM, CHROMIUM_ARGS, STABLE_SCREENS, VIEWPORT

PLOTS = ("coverage.png", "frontier.png", "precision.png", "reviewers.png", "reliability.png", "budget.png", "costs.png")


def test_wilson_interval_matches_the_closed_form_and_stays_inside_0_1() -> None:
    low, high = wilson_interval(2, 3)
    assert low == pytest.approx(0.20766, abs=1e-5) and high == pytest.approx(0.93851, abs=1e-5)
    low, high = wilson_interval(0, 10)  # p̂ = 0: [0, z²/(n + z²)], not the empty Wald interval
    assert low == 0.0 and high == pytest.approx(3.8415 / 13.8415, abs=1e-4)
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0) and wilson_interval(10, 10)[0] == pytest.approx(1 - 3.8415 / 13.8415, abs=1e-4)
    assert wilson_interval(0, 0) is None
    wide, narrow = wilson_interval(8, 10), wilson_interval(800, 1000)
    assert wide[0] < narrow[0] < 0.8 < narrow[1] < wide[1]


def test_precision_by_round_counts_decided_votes_and_cumulates() -> None:
    metrics = pl.DataFrame({"round": [1, 2, 3], "n_confirmed": [3, 0, 1], "n_rejected": [1, 0, 1]})
    p = precision_by_round(metrics)
    assert p["n_decided"].to_list() == [4, 0, 2] and p["share"].to_list() == [0.75, None, 0.5]
    assert p["cum_decided"].to_list() == [4, 4, 6] and p["cum_share"][2] == pytest.approx(4 / 6)
    assert (p["cum_low"][2], p["cum_high"][2]) == pytest.approx(wilson_interval(4, 6))


def test_waiting_claims_leave_out_decided_claims_and_name_the_reviewers() -> None:
    status = pl.DataFrame({
        "doc_id": ["d"] * 4, "claim_id": ["a", "b", "c", "g"], "status": ["boundary", "boundary", "boundary", "grounded"],
        "priority": [0.9, 0.5, 0.7, None], "confidence": [0.1] * 4, "decision": ["reject", None, "abstain", None],
    })
    queue = pl.DataFrame({"doc_id": ["d", "d"], "claim_id": ["b", "b"], "reviewer": ["bob", "alice"]})
    w = waiting_claims(status, queue, 5)
    assert w["claim_id"].to_list() == ["c", "b"] and w["reviewers"].to_list() == ["", "alice, bob"]


def test_report_command_writes_the_page_and_its_plots(small_lake: Lake, tmp_path: Path, monkeypatch, capsys) -> None:
    out = tmp_path / "report"
    code, stdout, stderr = run_grace(monkeypatch, capsys, "report", "--lake", small_lake.uri, "--out", str(out), "--top", "4")
    assert code == 0, stderr
    assert f"{out / 'index.html'} (7 plots)" in stdout
    for name in PLOTS:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    page = (out / "index.html").read_text(encoding="utf-8")
    assert len(re.findall(r'<img id="\w+" alt="[^"]+" src="data:image/png;base64,', page)) == len(PLOTS)
    assert 'src="http' not in page and "<link" not in page and "<script" not in page  # self-contained
    for heading in ("PCR and KF over rounds", "Frontier by document", "Precision", "Reviewers", "Review budget", "Costs",
                    "Top Boundary claims waiting"):
        assert f"<h2>{heading}</h2>" in page
    # precision: round 1 decided 3 claims (paper-b's split vote is an abstain), 2 confirmed → 66.7% [20.8%, 93.9%]
    assert "<td>66.7%</td><td>20.8%</td><td>93.9%</td>" in page
    assert "18 model calls, 3,960 tokens, $0.0360." in page
    # the reviewers' Dawid–Skene reliability the round stored, with the votes it rests on
    reviewers = page.split("<h2>Reviewers</h2>")[1].split("<h2>")[0]
    assert '<th title="reliability">reliability</th><th title="reliability_overlap">votes it rests on</th>' in reviewers
    assert "Reviewer reliability" in reviewers  # 2 rounds × 3 roles × calls of 120, 220, 320 tokens and $0.001–0.003
    waiting = page.split("<h2>Top Boundary claims waiting</h2>")[1]
    assert cid("paper-b", 6) in waiting and "<td>alice</td>" in waiting  # deferred, unanswered
    assert cid("paper-b", 5) in waiting  # the split vote was an abstain: still waiting
    assert cid("paper-c", 6) not in waiting and cid("paper-a", 3) not in waiting  # rejected, confirmed
    assert "says something &lt;checkable&gt; &amp; specific." in waiting and "<checkable>" not in page


def test_report_shows_what_each_rounds_budget_bought(small_lake: Lake, tmp_path: Path, monkeypatch, capsys) -> None:
    """The budget curve of a real lake: per round the budget and what the dispatch spent, what
    the rule blocked, the reviewers' seconds and the Boundary claims their verdicts resolved."""
    from flows.lake_report import read_report_data
    from grace_core.report_figures import review_budget_by_round

    budget = read_report_data(small_lake, top=4).budget
    first = budget.filter(pl.col("round") == 1).row(0, named=True)
    assert {k: first[k] for k in ("budget", "spent", "candidates", "n_deferred", "blocked_by_cost", "over_budget")} == {
        "budget": 3.0, "spent": 1.0, "candidates": 9, "n_deferred": 5, "blocked_by_cost": 3, "over_budget": 1}
    alice = sum(1 for votes in VOTES.values() if "alice" in votes)
    assert first["expert_seconds"] == 20.0 * alice  # alice's timed verdicts; the verifier's are untimed
    assert first["n_resolved"] == 3 and first["seconds_per_resolved"] == pytest.approx(20.0 * alice / 3)
    assert first["kf_change"] is None
    later = budget.filter(pl.col("round") == 2).row(0, named=True)
    assert later["budget"] is None and later["n_resolved"] == 0 and later["seconds_per_resolved"] is None  # no dispatch recorded
    assert review_budget_by_round(pl.DataFrame(), pl.DataFrame(), pl.DataFrame()).height == 0
    out = tmp_path / "report"
    assert run_grace(monkeypatch, capsys, "report", "--lake", small_lake.uri, "--out", str(out))[0] == 0
    section = (out / "index.html").read_text(encoding="utf-8").split("<h2>Review budget</h2>")[1].split("<h2>")[0]
    assert '<img id="budget"' in section and '<th title="blocked_by_cost">blocked by cost</th>' in section


def test_report_shows_the_audited_precision(small_lake: Lake, tmp_path: Path, monkeypatch, capsys) -> None:
    audits = pl.DataFrame({
        "doc_id": ["paper-a", "paper-c"], "claim_id": [cid("paper-a", 3), cid("paper-c", 6)], "round": [1, 1],
        "status": ["grounded", "refuted"], "created_at": [T0, T0],
    }).with_columns(pl.col("round").cast(pl.Int32))
    small_lake.commit("audit/round=1", {"audits": audits})  # paper-a's claim 3 was confirmed, paper-c's claim 6 rejected
    code, _, stderr = run_grace(monkeypatch, capsys, "report", "--lake", small_lake.uri, "--out", str(tmp_path / "r"))
    assert code == 0, stderr
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    audited = page.split("<h2>Precision</h2>")[1].split("<h2>")[0]
    # round 1: one Grounded claim audited and confirmed (100%, Wilson [20.7%, 100%]), one Refuted audited and really false
    assert "<tr><td>1</td><td>1</td><td>100.0%</td><td>20.7%</td><td>100.0%</td><td>1</td><td>100.0%</td><td>20.7%</td><td>100.0%</td></tr>" in audited
    assert '<th title="n_audited_grounded">audited grounded</th><th title="grounded_precision">grounded precision</th>' in audited


def test_report_of_a_missing_lake_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    code, stdout, stderr = run_grace(monkeypatch, capsys, "report", "--lake", str(tmp_path / "none"), "--out", str(tmp_path / "r"))
    assert code == 2 and stderr.startswith("grace: error: no lake at") and stderr.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_report_reads_plainly(small_lake: Lake, tmp_path: Path, monkeypatch, capsys) -> None:
    """Readable headers (the column's own name as tooltip), the metrics in two tables that fit,
    the legend of PCR, KF, yield and cascade, whole-number ticks for counts, points on their
    round's tick."""
    from flows.lake_report import plot_precision, plot_reviewers, read_report_data
    from grace_core.report_figures import column_label

    code, _, stderr = run_grace(monkeypatch, capsys, "report", "--lake", small_lake.uri, "--out", str(tmp_path / "r"))
    assert code == 0, stderr
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "<th>n_" not in page and ">yield_decided<" not in page
    assert '<th title="n_documents">documents</th>' in page and '<th title="yield_decided">yield of decided</th>' in page
    assert "PCR: share of the claims of sampled responses that are Grounded" in page and "Cascade: claims per document" in page
    assert column_label("cum_audited_refuted") == "audited refuted (cumulative)"

    captured = {}
    monkeypatch.setattr("flows.lake_report.png_bytes", lambda fig: captured.setdefault("fig", fig) and b"png")
    data = read_report_data(small_lake, top=4)
    plot_reviewers(data.reviewers)
    ticks = captured.pop("fig").axes[0].get_yticks()
    assert all(t == int(t) for t in ticks), ticks  # verdicts are counted whole
    plot_precision(data.precision, data.metrics)
    points = [x for line in captured.pop("fig").axes[0].lines for x in line.get_xdata()]
    assert points and all(x == int(x) for x in points), points  # each point on its round's tick


def test_a_lake_without_model_calls_says_so_in_a_line(small_lake: Lake, tmp_path: Path, monkeypatch, capsys) -> None:
    from flows.lake_report import plot_costs, report_files

    assert plot_costs(pl.DataFrame(schema={"round": pl.Int64, "role": pl.Utf8, "tokens": pl.Int64})) is None
    monkeypatch.setattr("flows.lake_report.costs_by_round", lambda calls: calls.head(0).select("round", "role").with_columns(
        calls=pl.lit(0), failed=pl.lit(0), tokens=pl.lit(0), cost_usd=pl.lit(0.0)))
    files = report_files(small_lake, top=4, generated=T0)
    assert "costs.png" not in files and len(files) == len(PLOTS)  # index.html and the five plots with something to draw
    page = files["index.html"].decode()
    costs = page.split("<h2>Costs</h2>")[1].split("<h2>")[0]
    assert "No model calls recorded (offline models make none)." in costs and "<img" not in costs and "<table" not in costs


@pytest.mark.e2e
def test_report_renders_in_headless_chromium_with_its_plots(small_lake: Lake, tmp_path: Path, monkeypatch, capsys) -> None:
    from playwright.sync_api import sync_playwright

    out = tmp_path / "report"
    code, _, stderr = run_grace(monkeypatch, capsys, "report", "--lake", small_lake.uri, "--out", str(out))
    assert code == 0, stderr
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto((out / "index.html").as_uri())
            page.wait_for_load_state("load")
            images = page.eval_on_selector_all("img", "els => els.map(e => [e.id, e.complete, e.naturalWidth, e.naturalHeight])")
            assert sorted(i[0] for i in images) == sorted(n.removesuffix(".png") for n in PLOTS)
            assert all(complete and w > 100 and h > 100 for _, complete, w, h in images), images
            assert page.title().startswith("GRACE report")
            assert page.locator("h2", has_text="Top Boundary claims waiting").is_visible()
            # the page never scrolls sideways: a table wider than the page scrolls in its own box
            assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
            boxes = page.eval_on_selector_all(".wide", "els => els.map(e => [e.clientWidth, e.scrollWidth, getComputedStyle(e).overflowX])")
            width = page.evaluate("document.body.clientWidth")
            assert all(client <= width and overflow == "auto" for client, _, overflow in boxes), boxes
            metrics = page.eval_on_selector_all("h2 ~ .wide", "els => els.slice(0, 2).map(e => e.scrollWidth <= e.clientWidth)")
            assert metrics == [True, True]  # the round metrics, in two tables, fit
            shot = out / "screenshot.png"
            page.screenshot(path=str(shot), full_page=True)
            STABLE_SCREENS.mkdir(exist_ok=True)
            (STABLE_SCREENS / "r01-report-1366.png").write_bytes(shot.read_bytes())
        finally:
            browser.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
