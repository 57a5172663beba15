"""``review_packet``: one review packet in the Prefect UI. The run takes the reviewer's next
``packet_size`` pending claims, names itself for them (``review alice · round 3 · 5 claims``:
the server's random name says nothing in the run list) and pauses with a form: per claim, a
verdict select (confirm / reject / abstain / leave pending, the last one preselected) whose
description is the claim's evidence (its text, status, confidence, due date, the passage it
was decomposed from and its nearest prior) and a note, and below them the reviewer's key
(``grace reviewer add NAME``). The evidence is in the fields because Prefect's default (V1) UI
draws the text above the form in a box that shrinks to what the form leaves of the dialog
(nothing, for a long packet), while it draws each field's description in full.
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
JSON schema cannot say (a note needs a verdict, at least one claim needs one, the key must be
the reviewer's) is checked once the submitted form is read; a form that fails those checks does
not fail the run (PrefectHQ/prefect#12279): the run pauses again with the reason on top of the
same form (above it and at the head of the first claim's description), the reviewer's answers
filled in (never the key). A form with nothing answered is refused so, rather than ending the
packet with every claim left pending: closing the form keeps the packet, cancelling the run
hands it back.
"""

from __future__ import annotations

import json
from itertools import count
from time import monotonic
from typing import Annotated, Literal, Optional
from uuid import UUID

import polars as pl
import pydantic
from prefect import flow, get_run_logger
from prefect.client.orchestration import get_client
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
from grace_core.verdict_files import MAX_SECONDS_SPENT, VerdictRow
from storage.lake import Lake

PENDING = "leave pending"
Choice = Literal["confirm", "reject", "abstain", "leave pending"]
PASSAGE_CHARS = 600
NOT_RECORDED = "Not recorded, please correct:"


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


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _rounds(context: pl.DataFrame) -> str:
    """``round 3``, or ``rounds 2–3`` for a packet of claims deferred in several rounds."""
    low, high = int(context["round"].min()), int(context["round"].max())
    return f"round {low}" if low == high else f"rounds {low}–{high}"


def packet_name(reviewer: str, context: pl.DataFrame) -> str:
    """The run's name, for whom and what it is: ``review alice · round 3 · 5 claims``."""
    return f"review {reviewer} · {_rounds(context)} · {_plural(context.height, 'claim')}"


def packet_markdown(reviewer: str, context: pl.DataFrame, problem: str | None = None) -> str:
    """What is shown above the form: ``problem`` (why the last answer was not recorded) first,
    then whose packet it is and how to answer. It stays short: the V1 UI draws it in a box that
    shrinks to what the form leaves of the dialog, so the evidence is in each claim's field."""
    parts = [f"**{NOT_RECORDED}** {problem}"] if problem else []
    parts.append(f"## Review packet of {reviewer}: {_plural(context.height, 'claim')}, {_rounds(context)}\n"
                 "Answer each claim with **confirm**, **reject** or **abstain**; **leave pending** keeps it for later. "
                 "A note goes with a verdict. Your reviewer key (from `grace reviewer add`) goes last: it proves the "
                 "answers are yours, and it is checked, never stored.")
    return "\n\n".join(parts)


def _when(deadline: str | None) -> str:
    """A packet's deadline (``2026-12-09T03:34:49Z``) as a person reads it: ``2026-12-09 03:34 UTC``."""
    return "—" if not deadline else f"{deadline[:10]} {deadline[11:16]} UTC"


def claim_evidence(r: dict) -> str:
    """What a reviewer needs to judge one claim (a row of the packet's context): the claim, its
    status, confidence and due date, the passage it was decomposed from and its nearest prior,
    shown as the description of the claim's field. One paragraph per item, and no markdown
    beyond paragraphs: the V1 UI renders it as markdown, the V2 UI as plain text."""
    confidence = "—" if r["confidence"] is None else f"{r['confidence']:.2f}"
    due = f"{_when(r['deadline'])}{' (overdue)' if r['overdue'] else ''}"
    return "\n\n".join([
        f"“{_clip(r['claim'], 1000)}”",
        f"Status: {r['status'] or '—'} · confidence {confidence} · round {r['round']} · due {due}.",
        f"Source passage ({r['source'] or '—'}): {_clip(r['source_passage'], PASSAGE_CHARS)}",
        f"Nearest prior: {_clip(r['nearest_prior'], PASSAGE_CHARS)}",
        f"Document {r['doc_id']} · claim {r['claim_id']}.",
    ])


NOTHING_ANSWERED = (f"nothing was answered (every claim is still '{PENDING}'). Pick confirm, reject or abstain for at least "
                    "one claim; to answer later, close this form (the run stays paused until the review deadline), "
                    "or cancel the run to hand the packet back")


class _PacketAnswer(RunInput):
    """A submitted packet: ``claim_<i>`` and ``note_<i>`` per claim, and the reviewer's ``key``;
    a note needs a verdict, and at least one claim needs a verdict: a form submitted with
    nothing answered (often a slip of the Submit button) does not end the packet."""

    @model_validator(mode="after")
    def _answered(self) -> _PacketAnswer:
        values = self.model_dump()
        lonely = [k.removeprefix("note_") for k, v in values.items() if k.startswith("note_") and v.strip()
                  and values.get(f"claim_{k.removeprefix('note_')}") == PENDING]
        if lonely:
            raise ValueError(f"claim {', '.join(lonely)}: a note was written but the verdict is still '{PENDING}'; "
                             "pick confirm, reject or abstain, or clear the note")
        if all(v == PENDING for k, v in values.items() if k.startswith("claim_")):
            raise ValueError(NOTHING_ANSWERED)
        return self


def packet_form(reviewer: str, context: pl.DataFrame, problem: str | None = None, answers: dict | None = None) -> type[RunInput]:
    """The :class:`~prefect.input.RunInput` form of one packet: ``claim_<i>`` (a select of
    confirm, reject, abstain, leave pending; the last preselected; its description the claim's
    evidence, :func:`claim_evidence`) and ``note_<i>`` per claim i = 1…n, then the required
    ``key`` (a password field, never prefilled), with whose packet it is (and ``problem``) as
    description and ``answers`` filled in. The same packet gives the same fields, titles and
    descriptions whatever ``problem`` and ``answers`` are, but for the defaults and ``problem``
    at the head of the first claim's description (where the V1 UI shows it)."""
    answers = answers or {}
    fields: dict[str, tuple] = {}
    for i, r in enumerate(context.iter_rows(named=True), start=1):
        evidence = claim_evidence(r)
        if problem and i == 1:  # the V1 UI squeezes the description above the form to nothing: the reason leads the form too
            evidence = f"{NOT_RECORDED} {problem}\n\n{evidence}"
        fields[f"claim_{i}"] = (Choice, Field(answers.get(f"claim_{i}", PENDING), title=f"Claim {i}", description=evidence))
        fields[f"note_{i}"] = (str, Field(answers.get(f"note_{i}", ""), title=f"Note on claim {i}"))
    fields["key"] = (SecretStr, Field(..., title="Reviewer key", description="The key `grace reviewer add` printed for you."))
    form = pydantic.create_model("ReviewPacket", __base__=_PacketAnswer, **fields)
    return form.with_initial_data(description=packet_markdown(reviewer, context, problem))  # answers as defaults: with_initial_data would drop titles


def refusal(exc: ValidationError) -> str:
    """Why a submitted form was refused, in one line."""
    return "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())


def answered_rows(answer: RunInput, context: pl.DataFrame, reviewer: str, source: str, seconds: float) -> list[VerdictRow]:
    """The verdicts of a submitted form: one row per claim given a verdict, each with an equal
    share of the ``seconds`` the packet was open, at most :data:`~grace_core.verdict_files.MAX_SECONDS_SPENT` (24 h)."""
    values = answer.model_dump()
    chosen = [i for i in range(1, context.height + 1) if values[f"claim_{i}"] != PENDING]
    share = min(seconds / len(chosen), MAX_SECONDS_SPENT) if chosen else 0.0  # a form left open for days is not days of work
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
            answer = pause_flow_run(wait_for_input=packet_form(reviewer, context, problem, answers), timeout=timeout_s,
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


def name_run(run_id: UUID, name: str) -> None:
    """Rename this run: the server names a run at random ("omega174-serpentis-mass"); a paused
    packet in the run list should say whose it is and what it holds."""
    with get_client(sync_client=True) as client:
        client.set_flow_run_name(run_id, name)


@flow(name="review_packet", log_prints=True)
def review_packet(params: PacketParams) -> dict:
    """Show the reviewer's next packet as a form, wait for it (up to the review deadline), and
    record the verdicts given once the reviewer's key proves who gave them."""
    settings = params.settings()
    logger = get_run_logger()
    lake = open_lake(settings)
    run_id = FlowRunContext.get().flow_run.id
    pending = pending_for(lake, params.reviewer, timestamp(None)).head(settings.packet_size)
    if pending.height == 0:
        name_run(run_id, f"review {params.reviewer} · nothing waiting")
        logger.info("no claims waiting for %s", params.reviewer)
        return {"claims": 0, "recorded": 0}
    roles, _ = roles_with_cache(settings, lake, int(pending["round"].max()))
    context = review_context(lake, roles, pending)
    name_run(run_id, packet_name(params.reviewer, context))
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
