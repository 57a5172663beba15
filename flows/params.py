"""Flow parameters: pydantic models, so the Prefect UI renders and validates them. Every field
left empty falls back to the settings (``GRACE_*`` environment variables)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from flows.settings import GraceSettings, build_settings


class RunOptions(BaseModel):
    """Overrides of the settings for one run."""

    lake: str | None = Field(None, description="Lake root (folder or s3://bucket/prefix); GRACE_LAKE when empty.")
    backend: Literal["offline", "litellm"] | None = Field(None, description="Model backend; GRACE_BACKEND when empty.")
    seed: int | None = Field(None, description="Seed of sampled choices; GRACE_SEED when empty.")
    hallucination_rate: float | None = Field(None, ge=0, le=1, description="Offline responder's corruption rate.")
    budget: float | None = Field(None, ge=0, description="Review budget per round; GRACE_BUDGET when empty.")
    inbox: str | None = Field(None, description="Batch inbox (folder or s3://bucket/prefix); GRACE_INBOX when empty.")
    prior_sections: list[str] | None = Field(None, description="Section names ingested as priors; GRACE_PRIOR_SECTIONS when empty.")

    def settings(self) -> GraceSettings:
        """The run's settings: the environment, then these overrides."""
        return build_settings(**self.model_dump(include=set(RunOptions.model_fields)))


class IngestParams(RunOptions):
    batch: str = Field(..., description="A JSONL batch file: a local path or s3://bucket/key.")


class RoundParams(RunOptions):
    round_id: int | None = Field(None, ge=1, description="Round to run; the one after the last finished round when empty.")
    now: datetime | None = Field(None, description="Timestamp recorded on the round's rows; the current time when empty.")


class StageParams(RunOptions):
    round_id: int = Field(..., ge=1, description="Round this stage belongs to.")
    now: datetime | None = Field(None, description="Timestamp recorded on new rows; the current time when empty.")
