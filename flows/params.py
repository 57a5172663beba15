"""Flow parameters: pydantic models, so the Prefect UI renders and validates them as the run form.

Each flow's model holds only what that flow uses, its required fields first. A settings override
(``lake``, ``budget``, …) left empty falls back to the settings (``GRACE_*`` environment variables
of the process that runs the flow); its form field is a plain input of its type (not a choice
between the type and ``None``), so the UI shows an empty field, a select for a choice, and a
bounds error as plainly as "-1 is less than the minimum of 0"."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from flows.settings import GraceSettings, build_settings


def _without_null(schema: dict[str, Any]) -> None:
    """JSON schema of an optional override: its non-null branch, with no ``null`` default."""
    branches = [b for b in schema.pop("anyOf", []) if b.get("type") != "null"]
    if len(branches) == 1:
        schema.update(branches[0])
    elif branches:
        schema["anyOf"] = branches
    if schema.get("default", 0) is None:
        del schema["default"]


def override(description: str, **constraints: Any) -> Any:
    """A field that overrides a setting for one run; empty (``None``) keeps the setting."""
    return Field(None, description=description, json_schema_extra=_without_null, **constraints)


class RunOptions(BaseModel):
    """Overrides of the settings for one run: only the lake here; each flow's model adds what it uses."""

    lake: str | None = override("Lake root (folder or s3://bucket/prefix); GRACE_LAKE when empty.")

    @model_serializer(mode="wrap")
    def _given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Only the fields given: an empty override is left out (a form's default is ``{}``, not nulls)."""
        return {k: v for k, v in handler(self).items() if v is not None}

    def settings(self) -> GraceSettings:
        """The run's settings: the environment, then the overrides this model holds."""
        return build_settings(**{k: v for k, v in self.model_dump().items() if k in GraceSettings.model_fields})


class BackendOption(RunOptions):
    """Override of the model backend (the stages that call a judge or verifier)."""

    backend: Literal["offline", "litellm"] | None = override("Model backend; GRACE_BACKEND when empty.")


class ModelOptions(BackendOption):
    """Overrides of the model backend and of what sampling uses."""

    seed: int | None = override("Seed of sampled choices; GRACE_SEED when empty.")
    hallucination_rate: float | None = override(
        "Offline responder's corruption rate (0 to 1); GRACE_HALLUCINATION_RATE when empty.", ge=0, le=1)


class PriorOptions(RunOptions):
    prior_sections: list[str] | None = override("Section names ingested as priors; GRACE_PRIOR_SECTIONS when empty.")


class InboxOptions(PriorOptions):
    """What the inbox watcher uses."""

    inbox: str | None = override("Batch inbox (folder or s3://bucket/prefix); GRACE_INBOX when empty.")


class MaintenanceParams(RunOptions):
    """The lake's upkeep: compaction, then vacuum."""

    vacuum_retention_hours: int | None = override(
        "Keep the files that table versions of the last N hours name (time travel reaches back this far); "
        "GRACE_VACUUM_RETENTION_HOURS when empty.", ge=1)


class _Batch(BaseModel):
    batch: str = Field(..., description="A JSONL batch file: a local path or s3://bucket/key.")


class IngestParams(PriorOptions, _Batch):  # the last base's fields come first in the form
    """One batch file to ingest."""


class _Now(BaseModel):
    now: datetime | None = override("Timestamp recorded on new rows; the current time when empty.")


class _Budget(_Now):
    budget: float | None = override("Review budget per round; GRACE_BUDGET when empty.", ge=0)


class _StageRound(BaseModel):
    round_id: int = Field(..., ge=1, description="Round this stage belongs to.")


class VerdictParams(_Now, RunOptions):
    """Verdict ingestion: the review inbox of a lake."""


class _Rescore(BaseModel):
    rescore_all: bool | None = Field(None, description="Rescore every document, not only those whose state changed since their last scoring.",
                                     json_schema_extra=_without_null)


class ScoreParams(_Now, _Rescore, BackendOption, _StageRound):
    """A round's settle and scoring step (the judge reads promoted claims for the cascade)."""


class BuildParams(_Now, ModelOptions, _StageRound):
    """A round's build: sample, decompose, judge."""


class DispatchParams(_Budget, BackendOption, _StageRound):
    """A round's dispatch: budgeted deferrals, the verifier and the reviewers' packets."""


class StageParams(DispatchParams, BuildParams, ScoreParams, VerdictParams):
    """Every stage's overrides at once: what an expansion round hands each stage (each stage's
    own model is a base of this one, so a stage takes it as its own)."""


class _Round(BaseModel):
    round_id: int | None = override(
        "Round to run; the one after the last finished round when empty. A finished round may be run again (it changes "
        "nothing); a later one would skip rounds and is refused.", ge=1)


class RoundParams(_Budget, _Rescore, InboxOptions, ModelOptions, _Round):
    """One expansion round: every override its stages use."""
