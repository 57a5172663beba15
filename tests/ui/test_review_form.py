"""The review packet's form as the server stores it, without a browser: what the first form
holds, that a refused answer brings back the same form (answers as defaults, the reason first),
that a form with nothing answered is refused, and the run's name."""

from __future__ import annotations

import polars as pl
import pytest
from prefect.input.run_input import create_v2_schema
from pydantic import ValidationError

from flows.review_ui import NOTHING_ANSWERED, PENDING, claim_evidence, packet_form, packet_markdown, packet_name, refusal

CONTEXT = pl.DataFrame({
    "doc_id": ["paper-a", "paper-b"], "claim_id": ["c:1", "c:2"], "round": [2, 3],
    "claim": ["The parser was trained on the Penn Treebank.", "Training ran for ten epochs."],
    "status": ["boundary", "boundary"], "confidence": [0.4236, None],
    "deadline": ["2026-12-09T03:34:49Z", None], "overdue": [False, True],
    "source": ["Abstract", "response sample 1 (round 1)"],
    "source_passage": ["We train the parser on the Penn Treebank.\nIt reaches 91% accuracy.", "x" * 2000],
    "nearest_prior": ["The parser uses the Penn Treebank.", None],
})


def schema_of(form) -> dict:
    """The schema Prefect stores for a form (``RunInput.save``), which both UIs draw."""
    return create_v2_schema(form.__name__, model_base=form)


def test_each_claims_field_carries_its_evidence() -> None:
    props = schema_of(packet_form("alice", CONTEXT))["properties"]
    assert list(props) == ["claim_1", "note_1", "claim_2", "note_2", "key"]
    first = props["claim_1"]
    assert first["title"] == "Claim 1" and first["default"] == PENDING
    assert first["description"].split("\n\n") == [
        "“The parser was trained on the Penn Treebank.”",
        "Status: boundary · confidence 0.42 · round 2 · due 2026-12-09 03:34 UTC.",
        "Source passage (Abstract): We train the parser on the Penn Treebank. It reaches 91% accuracy.",
        "Nearest prior: The parser uses the Penn Treebank.",
        "Document paper-a · claim c:1.",
    ]
    second = props["claim_2"]["description"]
    assert "confidence — · round 3 · due — (overdue)" in second and "Nearest prior: —" in second
    assert "x" * 599 + "…" in second and "x" * 601 not in second  # a long passage is cut, visibly
    assert props["note_1"]["title"] == "Note on claim 1" and props["key"]["format"] == "password"
    assert "**" not in first["description"] and "`" not in first["description"]  # the V2 UI shows it as plain text
    assert packet_markdown("alice", CONTEXT).startswith("## Review packet of alice: 2 claims, rounds 2–3\n")


def test_a_refused_answer_brings_back_the_same_form() -> None:
    first = schema_of(packet_form("alice", CONTEXT))
    answers = {"claim_1": "confirm", "note_1": "seen in table 2", "claim_2": PENDING, "note_2": "unsure", "key": "never kept"}
    problem = "claim 2: a note was written but the verdict is still 'leave pending'"
    kept = {k: v for k, v in answers.items() if k != "key"}
    again_form = packet_form("alice", CONTEXT, problem, kept)
    again = schema_of(again_form)
    assert list(again["properties"]) == list(first["properties"]) and again["required"] == first["required"] == ["key"]
    for name, field in first["properties"].items():
        other = again["properties"][name]
        assert other["title"] == field["title"], name  # same labels
        if name == "claim_1":  # the reason leads the first claim's description too: the V1 UI hides the text above the form
            assert other["description"] == f"Not recorded, please correct: {problem}\n\n{field['description']}"
        else:
            assert other.get("description") == field.get("description"), name
        assert other.get("default") == kept.get(name, field.get("default")), name  # the answers filled in, never the key
    assert again_form._description.startswith(f"**Not recorded, please correct:** {problem}\n\n## Review packet of alice")


def test_a_form_with_nothing_answered_is_refused() -> None:
    form = packet_form("alice", CONTEXT)
    with pytest.raises(ValidationError) as refused:
        form(claim_1=PENDING, claim_2=PENDING, key="k")
    assert refusal(refused.value) == NOTHING_ANSWERED
    assert form(claim_1=PENDING, claim_2="abstain", key="k").claim_2 == "abstain"  # one answer is enough


def test_the_run_is_named_for_whom_and_what() -> None:
    assert packet_name("alice", CONTEXT) == "review alice · rounds 2–3 · 2 claims"
    assert packet_name("bob", CONTEXT.head(1)) == "review bob · round 2 · 1 claim"
