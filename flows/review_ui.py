"""``review_packet``: one review packet in the Prefect UI. The run takes the reviewer's next
``packet_size`` pending claims and pauses with a form: the description shows each claim's
text, the passage it was decomposed from, its nearest prior, its status and confidence; the
form has, per claim, a verdict select (confirm / reject / abstain / leave pending, the last one
preselected) and a note. Resuming the run with the form filled in (the UI's "Resume" button, or
``resume_flow_run(id, run_input={...})``) records the verdicts (channel ``ui``); a claim left
pending stays pending.

The form's fields are plain JSON schema types (an ``enum`` with a default, a string), which
Prefect's default UI and its V2 UI both render. What JSON schema cannot say (a note needs a
verdict) is checked when the form is loaded; a form that fails that check does not fail the run
(PrefectHQ/prefect#12279): the run pauses again with the reason above the same form, the
reviewer's answers filled in.
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
from pydantic import AfterValidator, Field, ValidationError, model_validator

from flows.params import ModelOptions, override
from flows.runtime import open_lake, roles_with_cache, timestamp
from flows.verdicts import pending_for, record_verdicts, review_context
from grace_core.identifiers import ID_PATTERN, pydantic_id
from grace_core.verdict_files import VerdictRow

PENDING = "leave pending"
Choice = Literal["confirm", "reject", "abstain", "leave pending"]
PASSAGE_CHARS = 600


class _Packet(pydantic.BaseModel):
    reviewer: Annotated[str, AfterValidator(pydantic_id)] = Field(
        ..., pattern=ID_PATTERN, description="Reviewer whose pending claims make the packet (a safe id: letters, digits, . _ : @ + -).")
    packet_size: Optional[int] = override("Claims in the packet; GRACE_PACKET_SIZE (default 10) when empty.", ge=1)
    poll_seconds: int = Field(10, ge=1, description="Seconds between two checks whether the run was resumed.")


class PacketParams(ModelOptions, _Packet):
    """Which reviewer's packet to show."""


def _clip(text: str | None, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join((text or "—").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def packet_markdown(context: pl.DataFrame, problem: str | None = None) -> str:
    """The packet as markdown, one section per claim (shown above the form); ``problem``, the
    reason the last answer was refused, first."""
    parts = [f"**Not recorded, please correct:** {problem}"] if problem else []
    parts.append(f"## Review packet: {context.height} claim{'s' if context.height != 1 else ''}\n"
                 "Answer each claim with **confirm**, **reject** or **abstain**; **leave pending** keeps it for later. "
                 "A note goes with a verdict.")
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


class _PacketAnswer(RunInput):
    """A submitted packet: ``claim_<i>`` and ``note_<i>`` per claim; a note needs a verdict."""

    @model_validator(mode="after")
    def _notes_have_verdicts(self) -> _PacketAnswer:
        values = self.model_dump()
        lonely = [k.removeprefix("note_") for k, v in values.items() if k.startswith("note_") and v.strip()
                  and values.get(f"claim_{k.removeprefix('note_')}") == PENDING]
        if lonely:
            raise ValueError(f"claim {', '.join(lonely)}: a note was written but the verdict is still '{PENDING}'; "
                             "pick confirm, reject or abstain, or clear the note")
        return self


def packet_form(context: pl.DataFrame, problem: str | None = None, answers: dict | None = None) -> type[RunInput]:
    """The :class:`~prefect.input.RunInput` form of one packet: ``claim_<i>`` (a select of
    confirm, reject, abstain, leave pending; the last preselected) and ``note_<i>`` per claim
    i = 1…n, with the context (and ``problem``) as description and ``answers`` filled in."""
    fields: dict[str, tuple] = {}
    for i, text in enumerate(context["claim"].to_list(), start=1):
        fields[f"claim_{i}"] = (Choice, Field(PENDING, title=f"Claim {i}", description=_clip(text, 300)))
        fields[f"note_{i}"] = (str, Field("", title=f"Note on claim {i}"))
    form = pydantic.create_model("ReviewPacket", __base__=_PacketAnswer, **fields)
    return form.with_initial_data(description=packet_markdown(context, problem), **(answers or {}))


def refusal(exc: ValidationError) -> str:
    """Why a submitted form was refused, in one line."""
    return "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())


def answered_rows(answer: RunInput, context: pl.DataFrame, reviewer: str, source: str, seconds: float) -> list[VerdictRow]:
    """The verdicts of a submitted form: one row per claim given a verdict, each with an equal
    share of the ``seconds`` the packet was open."""
    values = answer.model_dump()
    chosen = [i for i in range(1, context.height + 1) if values[f"claim_{i}"] != PENDING]
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


def wait_for_answer(context: pl.DataFrame, timeout_s: int, poll_seconds: int) -> RunInput:
    """Pause until the form is submitted; an answer that fails the form's checks pauses the run
    again, the reason above the form and the answers kept."""
    logger = get_run_logger()
    problem, answers = None, None
    while True:
        form = packet_form(context, problem, answers)
        try:
            return pause_flow_run(wait_for_input=form, timeout=timeout_s, poll_interval=poll_seconds)
        except ValidationError as exc:
            problem = refusal(exc)
            logger.warning("review form refused, paused again: %s", problem)
            submitted = exc.errors()[0].get("input")
            answers = {k: v for k, v in submitted.items() if k.startswith(("claim_", "note_"))} if isinstance(submitted, dict) else None


@flow(name="review_packet", log_prints=True)
def review_packet(params: PacketParams) -> dict:
    """Show the reviewer's next packet as a form, wait for it (up to the review deadline), and
    record the verdicts given."""
    settings = params.settings()
    logger = get_run_logger()
    lake = open_lake(settings)
    pending = pending_for(lake, params.reviewer, timestamp(None)).head(settings.packet_size)
    if pending.height == 0:
        logger.info("no claims waiting for %s", params.reviewer)
        return {"claims": 0, "recorded": 0}
    roles, _ = roles_with_cache(settings, lake, int(pending["round"].max()))
    context = review_context(lake, roles, pending)
    run_id = FlowRunContext.get().flow_run.id
    started = monotonic()
    answer = wait_for_answer(context, int(settings.deadline_hours * 3600), params.poll_seconds)
    source = f"ui:{run_id}"
    rows = answered_rows(answer, context, params.reviewer, source, monotonic() - started)
    report = record_verdicts(lake, f"review/ui/{run_id}", source, rows, [], "ui", timestamp(None),
                             unanswered=context.height - len(rows))
    logger.info(report.summary())
    for bad in report.bad:
        logger.warning(str(bad))
    return {"claims": context.height, "recorded": report.recorded, "bad": [str(b) for b in report.bad]}
