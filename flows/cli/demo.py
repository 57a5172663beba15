"""``grace demo``: the main job on the embedded default — expansion rounds over three bundled
QASPER papers with a temporary Prefect server, a local lake, the configured models (offline by
default) and the verifier as reviewer. A round whose model calls failed ends the command with
one line and exit code 2; a killed demo leaves no server behind (:mod:`flows.prefect_server`)."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

from flows.cli import app
from flows.settings import GraceSettings

if TYPE_CHECKING:
    from storage.lake import Lake

SAMPLE = "qasper_demo.jsonl"
DEMO_PRIORS = ["Abstract", "Introduction"]  # the paper's round-0 priors; the other sections are passages


def metrics_table(rows: list[dict]) -> Table:
    table = Table(title="GRACE metrics per round")
    cols = [("round", "round"), ("docs", "n_documents"), ("claims", "n_claims"), ("grounded", "n_grounded"),
            ("boundary", "n_boundary"), ("refuted", "n_refuted"), ("PCR", "pcr"), ("KF", "kf"), ("deferred", "n_deferred"),
            ("confirmed", "n_confirmed"), ("rejected", "n_rejected"), ("pending", "n_pending"), ("yield", "yield"),
            ("cascade", "cascade")]
    for title, _ in cols:
        table.add_column(title, justify="right")
    for r in rows:
        cells = []
        for _, key in cols:
            v = r.get(key)
            if v is None:
                cells.append("—")
            elif key in ("pcr", "yield"):
                cells.append(f"{100 * v:.1f}%")
            elif isinstance(v, float):
                cells.append(f"{v:.2f}")
            else:
                cells.append(str(v))
        table.add_row(*cells)
    return table


def models_line(settings: GraceSettings) -> str:
    """What really answers each role: ``offline models``, or the litellm model of each role."""
    if settings.backend == "offline":
        return "offline models"
    roles = {"responder": settings.responder_model, "decomposer": settings.decomposer_model, "judge": settings.judge_model,
             "verifier": settings.verifier_model, "answerer": settings.answerer_model, "embedder": settings.embedder_model}
    return "litellm models (" + ", ".join(f"{role} {model}" for role, model in roles.items()) + ")"


def round_line(lake: Lake, settings: GraceSettings, round_id: int) -> str:
    """``round N done``, with the documents the round left unbuilt and why (the spend cap)."""
    docs = lake.read("documents", columns=["doc_id"])
    built = lake.read("claims", columns=["doc_id"]).unique()
    left = docs.join(built, on="doc_id", how="anti").height
    if not left:
        return f"round {round_id} done: {docs.height} documents built"
    spent = lake.read("llm_calls", rounds=[round_id], columns=["cost_usd"])["cost_usd"].sum() or 0.0
    cap = "" if settings.spend_cap_usd is None else f"; spend cap ${settings.spend_cap_usd:.4f} reached (${spent:.4f} spent)"
    return f"round {round_id} done: {docs.height - left} of {docs.height} documents built, {left} skipped and left for the next round{cap}"


@app.command()
def demo(
    lake: Path = typer.Option(Path("grace-demo-lake"), "--lake", help="Where the demo's lake goes (a folder)."),
    rounds: int = typer.Option(2, min=1, help="Expansion rounds to run."),
    budget: Optional[float] = typer.Option(None, help="Review budget per round (default: GRACE_BUDGET or 3.0)."),
    hallucination_rate: float = typer.Option(0.2, min=0.0, max=1.0, help="Share of offline response sentences corrupted."),
) -> None:
    """Run the main job on the embedded default: ingest three bundled QASPER papers (priors:
    Abstract + Introduction) and run expansion rounds — sample, decompose, judge, score, defer
    under the budget, verify, promote, cascade — then print the metrics per round."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.expansion import expansion_round
    from flows.ingest import ingest_batch
    from flows.params import IngestParams, RoundParams
    from flows.prefect_server import console_without_tracebacks, prefect_api
    from storage.lake import Lake

    console = Console(width=max(150, Console().width))
    lake_dir = str(lake.expanduser().resolve())
    common = dict(lake=lake_dir, budget=budget, hallucination_rate=hallucination_rate, prior_sections=DEMO_PRIORS)
    sample = str(files("flows.samples").joinpath(SAMPLE))
    settings = RoundParams(**common).settings()
    console.print(f"[bold]GRACE demo[/bold]: lake {lake_dir}, {models_line(settings)}, verifier as reviewer")
    console_without_tracebacks()
    with prefect_api() as (api_url, temporary):
        console.print(f"• Prefect: temporary server at {api_url} (stopped when the demo ends)" if temporary else f"• Prefect API {api_url}")
        with console.status("ingesting 3 QASPER dev papers…"):
            console.print("• " + ingest_batch(IngestParams(batch=sample, **common)))
        for r in range(1, rounds + 1):
            with console.status(f"round {r}: verdicts → build → score → dispatch…"):
                expansion_round(RoundParams(round_id=r, **common))
            console.print("• " + round_line(Lake.open(settings), settings, r))
    rows = Lake.open(settings).query("SELECT * FROM round_metrics ORDER BY round").to_dicts()
    console.print(metrics_table(rows))
    console.print("\nNext, query the lake with SQL:")
    for q in (
        "SELECT status, count(*) AS claims FROM claim_status GROUP BY status",
        "SELECT s.doc_id, s.status, round(s.confidence, 2) AS confidence, t.text FROM claim_status s JOIN claim_texts t USING (doc_id, claim_id) WHERE s.status = 'boundary' ORDER BY s.priority DESC LIMIT 10",
        "SELECT d.round, d.claim_id, v.verdict, v.note FROM deferrals d JOIN verdicts v USING (doc_id, claim_id, round) ORDER BY d.round, d.rank",
    ):
        console.print(f'  grace sql --lake {lake_dir} "{q}"', soft_wrap=True)
