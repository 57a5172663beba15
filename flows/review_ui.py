"""``review_packet``: one review packet in the Prefect UI. The run takes the reviewer's next
``packet_size`` pending claims and pauses with a form: the description shows each claim's
text, the passage it was decomposed from, its nearest prior, its status and confidence; the
form has a confirm / reject / abstain choice and an optional note per claim. Resuming the run
with the form filled in (the UI's "Resume" button, or ``resume_flow_run(id, run_input={...})``)
records the verdicts (channel ``ui``); a claim left empty stays pending.
"""

from __future__ import annotations

import json
from time import monotonic
from typing import Annotated, Literal, Optional

import polars as pl
import pydantic
from prefect import flow, get_run_logger
from prefect.context import FlowRunContext
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from pydantic import AfterValidator, Field

from flows.params import RunOptions
from flows.runtime import open_lake, roles_with_cache, timestamp
from flows.verdicts import pending_for, record_verdicts, review_context
from grace_core.identifiers import ID_PATTERN, pydantic_id
from grace_core.verdict_files import VerdictRow

Choice = Literal["confirm", "reject", "abstain"]
PASSAGE_CHARS = 600


class PacketParams(RunOptions):
    """Which reviewer's packet to show."""

    reviewer: Annotated[str, AfterValidator(pydantic_id)] = Field(
        ..., pattern=ID_PATTERN, description="Reviewer whose pending claims make the packet (a safe id: letters, digits, . _ : @ + -).")
    packet_size: Optional[int] = Field(None, ge=1, description="Claims in the packet; GRACE_PACKET_SIZE (default 10) when empty.")
    poll_seconds: int = Field(10, ge=1, description="Seconds between two checks whether the run was resumed.")


def _clip(text: str | None, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join((text or "—").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def packet_markdown(context: pl.DataFrame) -> str:
    """The packet as markdown, one section per claim (shown above the form)."""
    parts = [(f"## Review packet: {context.height} claim{'s' if context.height != 1 else ''}\n"
             "Answer each claim with **confirm**, **reject** or **abstain** (leave it empty to keep it pending).")]
    for i, r in enumerate(context.iter_rows(named=True), start=1):
        confidence = "—" if r["confidence"] is None else f"{r['confidence']:.2f}"
        parts.append(
            f"### Claim {i}\n> {_clip(r['claim'], 1000)}\n\n"
            f"- **status** {r['status'] or '—'} · **confidence** {confidence} · round {r['round']} · due {r['deadline'] or '—'}"
            f"{' (overdue)' if r['overdue'] else ''}\n"
            f"- **source passage** ({r['source'] or '—'}): {_clip(r['source_passage'], PASSAGE_CHARS)}\n"
            f"- **nearest prior**: {_clip(r['nearest_prior'], PASSAGE_CHARS)}\n"
            f"- document `{r['doc_id']}` · claim `{r['claim_id']}`"
        )
    return "\n\n".join(parts)


def packet_form(context: pl.DataFrame) -> type[RunInput]:
    """The :class:`~prefect.input.RunInput` form of one packet: ``claim_<i>`` (confirm, reject,
    abstain, or empty) and ``note_<i>`` per claim i = 1…n, with the context as description."""
    fields: dict[str, tuple] = {}
    for i, text in enumerate(context["claim"].to_list(), start=1):
        fields[f"claim_{i}"] = (Optional[Choice], Field(None, title=f"Claim {i}", description=_clip(text, 300)))
        fields[f"note_{i}"] = (str, Field("", title=f"Note on claim {i} (optional)"))
    form = pydantic.create_model("ReviewPacket", __base__=RunInput, **fields)
    return form.with_initial_data(description=packet_markdown(context))


def answered_rows(answer: RunInput, context: pl.DataFrame, reviewer: str, source: str, seconds: float) -> list[VerdictRow]:
    """The verdicts of a submitted form: one row per claim given a choice, each with an equal
    share of the ``seconds`` the packet was open."""
    values = answer.model_dump()
    chosen = [i for i in range(1, context.height + 1) if values[f"claim_{i}"] is not None]
    share = seconds / len(chosen) if chosen else 0.0
    rows = []
    for i in chosen:
        r = context.row(i - 1, named=True)
        rows.append(VerdictRow(
            file=source, line=i, claim_id=r["claim_id"], reviewer=reviewer, verdict=values[f"claim_{i}"], doc_id=r["doc_id"],
            round=r["round"], seconds_spent=share, note=values[f"note_{i}"].strip() or None,
            raw=json.dumps({"claim": i, "verdict": values[f"claim_{i}"], "note": values[f"note_{i}"]}),
        ))
    return rows


@flow(name="review_packet", log_prints=True)
def review_packet(params: PacketParams) -> dict:
    """Show the reviewer's next packet as a form, wait for it (up to the review deadline), and
    record the verdicts given."""
    settings = params.settings()
    logger = get_run_logger()
    lake = open_lake(settings)
    pending = pending_for(lake, params.reviewer, timestamp(None)).head(params.packet_size or settings.packet_size)
    if pending.height == 0:
        logger.info("no claims waiting for %s", params.reviewer)
        return {"claims": 0, "recorded": 0}
    roles, _ = roles_with_cache(settings, lake, int(pending["round"].max()))
    context = review_context(lake, roles, pending)
    run_id = FlowRunContext.get().flow_run.id
    started = monotonic()
    answer = pause_flow_run(
        wait_for_input=packet_form(context), timeout=int(settings.deadline_hours * 3600), poll_interval=params.poll_seconds,
    )
    source = f"ui:{run_id}"
    rows = answered_rows(answer, context, params.reviewer, source, monotonic() - started)
    report = record_verdicts(lake, f"review/ui/{run_id}", source, rows, [], "ui", timestamp(None),
                             unanswered=context.height - len(rows))
    logger.info(report.summary())
    for bad in report.bad:
        logger.warning(str(bad))
    return {"claims": context.height, "recorded": report.recorded, "bad": [str(b) for b in report.bad]}
