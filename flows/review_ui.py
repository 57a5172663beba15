"""``review_packet``: one review packet in the Prefect UI. The run takes the reviewer's next
``packet_size`` pending claims and pauses with a form: the description shows each claim's
text, the passage it was decomposed from, its nearest prior, its status and confidence; the
form has, per claim, a verdict select (confirm / reject / abstain / leave pending, the last one
preselected) and a note, and below them the reviewer's key (``grace reviewer add NAME``).
Resuming the run with the form filled in (the UI's "Resume" button, or
``resume_flow_run(id, run_input={...})``) records the verdicts (channel ``ui``) as the
reviewer's once the key proves who answered (:func:`flows.reviewers.prove`); a claim left
pending stays pending. Anyone who reaches the Prefect API can start a packet for any reviewer
and resume it: the key, not the run's ``reviewer`` parameter, says who voted.

The key never stays on the server: Prefect keeps a submitted form as the run's input
(``paused-<pause key>-response``), so each one is deleted as soon as the run has read it,
refused or not; the key is in no parameter, description, log line or artifact.

The form's fields are plain JSON schema types (an ``enum`` with a default, a string), which
both of Prefect's UIs (V1 and V2) render; the key is a ``SecretStr`` (``format: password``),
which the V2 UI draws as a password field and the V1 UI, having none, as a plain text box. What
JSON schema cannot say (a note needs a verdict, the key must be the reviewer's) is checked once
the submitted form is read; a form that fails those checks does not fail the run
(PrefectHQ/prefect#12279): the run pauses again with the reason above the same form, the
reviewer's answers filled in (never the key).
"""

from __future__ import annotations

import json
from itertools import count
from time import monotonic
from typing import Annotated, Literal, Optional

import polars as pl
import pydantic
from prefect import flow, get_run_logger
from prefect.context import FlowRunContext
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput, keyset_from_paused_state
from prefect.input.actions import delete_flow_run_input
from prefect.states import Paused
from pydantic import AfterValidator, Field, SecretStr, ValidationError, model_validator

from flows.params import ModelOptions, override
from flows.reviewers import prove
from flows.runtime import open_lake, roles_with_cache, timestamp
from flows.verdicts import pending_for, record_verdicts, review_context
from grace_core.errors import UnprovenReviewer
from grace_core.identifiers import ID_PATTERN, pydantic_id
from grace_core.verdict_files import VerdictRow
from storage.lake import Lake

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
                 "A note goes with a verdict. Your reviewer key (from `grace reviewer add`) goes last: it proves the "
                 "answers are yours, and it is checked, never stored.")
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
    """A submitted packet: ``claim_<i>`` and ``note_<i>`` per claim, and the reviewer's ``key``;
    a note needs a verdict."""

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
    i = 1…n, then the required ``key`` (a password field, never prefilled), with the context
    (and ``problem``) as description and ``answers`` filled in."""
    answers = answers or {}
    fields: dict[str, tuple] = {}
    for i, text in enumerate(context["claim"].to_list(), start=1):
        fields[f"claim_{i}"] = (Choice, Field(answers.get(f"claim_{i}", PENDING), title=f"Claim {i}", description=_clip(text, 300)))
        fields[f"note_{i}"] = (str, Field(answers.get(f"note_{i}", ""), title=f"Note on claim {i}"))
    fields["key"] = (SecretStr, Field(..., title="Reviewer key", description="The key `grace reviewer add` printed for you."))
    form = pydantic.create_model("ReviewPacket", __base__=_PacketAnswer, **fields)
    return form.with_initial_data(description=packet_markdown(context, problem))  # answers as defaults: with_initial_data would drop titles


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


def _kept(submitted: object) -> dict | None:
    """The answers of a submitted form that a new form shows again: verdicts and notes, never the key."""
    return {k: v for k, v in submitted.items() if k.startswith(("claim_", "note_"))} if isinstance(submitted, dict) else None


def forget_answer(pause_key: str) -> None:
    """Delete the form submitted to the pause ``pause_key`` of this run from the Prefect server:
    it holds the reviewer's key, and Prefect would keep it as the run's input for good."""
    delete_flow_run_input(keyset_from_paused_state(Paused(pause_key=pause_key))["response"])


def wait_for_answer(lake: Lake, reviewer: str, context: pl.DataFrame, timeout_s: int, poll_seconds: int) -> RunInput:
    """Pause until the form is submitted with a key that proves ``reviewer``; an answer that
    fails the form's checks or whose key does not prove ``reviewer`` (wrong, revoked, or a
    reviewer without a key) pauses the run again, the reason above the form and the answers
    kept, the key left empty. Every submitted form is deleted from the server once read."""
    logger = get_run_logger()
    problem, answers = None, None
    for pause in count(1):
        pause_key = f"review-{pause}"
        try:
            answer = pause_flow_run(wait_for_input=packet_form(context, problem, answers), timeout=timeout_s,
                                    poll_interval=poll_seconds, key=pause_key)
        except ValidationError as exc:
            forget_answer(pause_key)
            problem, answers = refusal(exc), _kept(exc.errors()[0].get("input"))
        else:
            forget_answer(pause_key)
            try:
                key_id = prove(lake, reviewer, answer.key.get_secret_value())
            except UnprovenReviewer as exc:
                problem, answers = str(exc), _kept(answer.model_dump())
            else:
                logger.info("answers of %s proven by key %s", reviewer, key_id)
                return answer
        logger.warning("review form refused, paused again: %s", problem)


@flow(name="review_packet", log_prints=True)
def review_packet(params: PacketParams) -> dict:
    """Show the reviewer's next packet as a form, wait for it (up to the review deadline), and
    record the verdicts given once the reviewer's key proves who gave them."""
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
    answer = wait_for_answer(lake, params.reviewer, context, int(settings.deadline_hours * 3600), params.poll_seconds)
    source = f"ui:{run_id}"
    rows = answered_rows(answer, context, params.reviewer, source, monotonic() - started)
    report = record_verdicts(lake, f"review/ui/{run_id}", source, rows, [], "ui", timestamp(None),
                             unanswered=context.height - len(rows), author=params.reviewer)
    logger.info(report.summary())
    for bad in report.bad:
        logger.warning(str(bad))
    return {"claims": context.height, "recorded": report.recorded, "bad": [str(b) for b in report.bad]}
