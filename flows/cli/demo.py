"""``grace demo``: the main job on the embedded default — expansion rounds over three bundled
QASPER papers with a temporary Prefect server, a local lake, the configured models (offline by
default) and the verifier as reviewer. A round whose model calls failed ends the command with
one line and exit code 2; a killed demo leaves no server behind (:mod:`flows.prefect_server`).
The terminal shows one line per stage of each round (:func:`flows.run_logs.terminal_logs`),
the metrics, and the next commands to try in the form that runs here (:func:`grace_command`)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

from flows.cli import app
from flows.settings import GraceSettings
from grace_core.errors import LakeError

if TYPE_CHECKING:
    from storage.lake import Lake

SAMPLE = "qasper_demo.jsonl"
DEMO_PRIORS = ["Abstract", "Introduction"]  # the paper's round-0 priors; the other sections are passages
ROUND_FLOW = "expansion_round"  # the flow whose own log lines are a round's progress on the terminal
VERBOSE_HELP = "Also print Prefect's own log lines (flow and task runs, the server) on stderr; the Prefect UI shows them either way."


@contextmanager
def progress(console: Console, what: str, verbose: bool) -> Iterator[None]:
    """A spinner saying ``what`` runs while the block runs (none with ``verbose``: Prefect's
    log lines then write to the terminal themselves)."""
    with nullcontext() if verbose else console.status(what):
        yield


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


def documents_built(lake: Lake) -> tuple[int, int]:
    """(documents in the lake, documents with claims, i.e. built in some round)."""
    docs = lake.read("documents", columns=["doc_id"])
    built = lake.read("claims", columns=["doc_id"]).unique()
    return docs.height, docs.join(built, on="doc_id", how="semi").height


def round_line(lake: Lake, settings: GraceSettings, round_id: int, built_before: int) -> str:
    """``round N done``: the documents this run built (``built_before``: those with claims when
    it started), how many of the lake's have claims, and those left unbuilt and why (the spend cap)."""
    total, built = documents_built(lake)
    new = built - built_before
    line = f"round {round_id} done: {new} document{'' if new == 1 else 's'} built this run, {built} of {total} built in all"
    left = total - built
    if not left:
        return line
    spent = lake.read("llm_calls", rounds=[round_id], columns=["cost_usd"])["cost_usd"].sum() or 0.0
    cap = "" if settings.spend_cap_usd is None else f"; spend cap ${settings.spend_cap_usd:.4f} reached (${spent:.4f} spent)"
    return f"{line}; {left} left for the next round{cap}"


def grace_command() -> str:
    """How the user's shell runs ``grace``: ``grace`` when that name on the PATH is this program
    (an activated .venv), else ``GRACE_COMMAND`` (``./dev demo`` sets ``./dev grace``), else
    this program's own path."""
    me = Path(sys.argv[0])
    on_path = shutil.which("grace")
    if on_path and me.is_file() and Path(on_path).resolve() == me.resolve():
        return "grace"
    if os.environ.get("GRACE_COMMAND"):
        return os.environ["GRACE_COMMAND"]
    return str(me.resolve()) if me.name == "grace" and me.is_file() else "grace"


def writable_lake(settings: GraceSettings) -> None:
    """The demo's lake (a local folder), checked before any server starts: a folder that can be
    created and written (or an existing lake whose tables are all there), else :class:`LakeError`
    in one line."""
    from storage.lake import Lake

    target = Lake.open(settings)  # a path that is a file is refused here
    folder = Path(target.uri)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LakeError(f"lake {folder}: cannot be created ({exc.strerror or exc})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise LakeError(f"lake {folder}: this user cannot write to it")
    target.state()  # a lake that lost a table is refused here


@app.command()
def demo(
    lake: Path = typer.Option(Path("grace-demo-lake"), "--lake", help="Where the demo's lake goes (a folder)."),
    rounds: int = typer.Option(2, min=1, help="Expansion rounds to run."),
    budget: Optional[float] = typer.Option(None, help="Review budget per round (default: GRACE_BUDGET or 3.0)."),
    hallucination_rate: float = typer.Option(0.2, min=0.0, max=1.0, help="Share of offline response sentences corrupted."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP),
) -> None:
    """Run the main job on the embedded default: ingest three bundled QASPER papers (priors:
    Abstract + Introduction) and run expansion rounds — sample, decompose, judge, score, defer
    under the budget, verify, promote, cascade — then print the metrics per round. Each stage of
    a round is one line saying what it did in this run; Prefect's own log lines show with
    --verbose, and in the Prefect UI either way."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.expansion import expansion_round
    from flows.ingest import ingest_batch
    from flows.params import IngestParams, RoundParams
    from flows.prefect_server import prefect_api
    from flows.run_logs import terminal_logs
    from storage.lake import Lake

    console = Console(width=max(150, Console().width))
    lake_dir = str(lake.expanduser().resolve())
    common = dict(lake=lake_dir, budget=budget, hallucination_rate=hallucination_rate, prior_sections=DEMO_PRIORS)
    sample = str(files("flows.samples").joinpath(SAMPLE))
    settings = RoundParams(**common).settings()
    writable_lake(settings)
    console.print(f"[bold]GRACE demo[/bold]: lake {lake_dir}, {models_line(settings)}, verifier as reviewer")
    with terminal_logs(lambda line: console.print(f"  {line}", markup=False, highlight=False), flow=ROUND_FLOW, verbose=verbose), \
            prefect_api() as (api_url, temporary):
        console.print(f"• Prefect: temporary server at {api_url} (stopped when the demo ends)" if temporary else f"• Prefect API {api_url}")
        with progress(console, "ingesting 3 QASPER dev papers…", verbose):
            console.print("• " + ingest_batch(IngestParams(batch=sample, **common)))
        for r in range(1, rounds + 1):
            built_before = documents_built(Lake.open(settings))[1]
            with progress(console, f"round {r}: verdicts → build → score → dispatch…", verbose):
                expansion_round(RoundParams(round_id=r, **common))
            console.print("• " + round_line(Lake.open(settings), settings, r, built_before))
    rows = Lake.open(settings).query("SELECT * FROM round_metrics ORDER BY round").to_dicts()
    console.print(metrics_table(rows))
    command = grace_command()
    console.print("\nNext, query the lake with SQL:")
    for q in (
        "SELECT status, count(*) AS claims FROM claim_status GROUP BY status",
        "SELECT s.doc_id, s.status, round(s.confidence, 2) AS confidence, t.text FROM claim_status s JOIN claim_texts t USING (doc_id, claim_id) WHERE s.status = 'boundary' ORDER BY s.priority DESC LIMIT 10",
        "SELECT d.round, d.claim_id, v.verdict, v.note FROM deferrals d JOIN verdicts v USING (doc_id, claim_id, round) ORDER BY d.round, d.rank",
    ):
        console.print(f'  {command} sql --lake {lake_dir} "{q}"', soft_wrap=True)
