"""The one typed settings object (env prefix ``GRACE_``), built at the entry point and passed down."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from deployments.config import RunnerConfig, ScheduleConfig
from grace_core.assignment import ReviewConfig
from grace_core.limits import InputLimits
from grace_core.models.config import ModelConfig
from grace_core.params import ScoringParams
from storage.config import LakeConfig


class PipelineConfig(BaseModel):
    """How the flows run an expansion round."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    budget: float = Field(3.0, ge=0, description="Review budget per round, in cost units (DESIGN §4).")
    quorum: int = Field(1, ge=1, description="Reviewers that must answer before a claim's verdict counts.")
    context_passages: int = Field(3, ge=1, description="Prior passages given to the responder per question.")
    docs_per_task: int = Field(8, ge=1, description="Documents per build task (tasks are coarse: ~20 ms of server time each).")
    score_docs_per_task: int = Field(2000, ge=1, description="Documents per scoring task.")
    inbox: str | None = Field(None, description="Batch inbox: a folder or s3://bucket/prefix; none when unset.")
    prior_sections: tuple[str, ...] = Field(
        (), description="Section names ingested as priors (the rest become passages); all sections when empty. "
        'E.g. GRACE_PRIOR_SECTIONS=\'["Abstract", "Introduction"]\'.'
    )


class GraceSettings(BaseSettings, ScoringParams, LakeConfig, ModelConfig, PipelineConfig, ReviewConfig, ScheduleConfig, RunnerConfig, InputLimits):
    """All of GRACE's settings. It *is* a ScoringParams, a LakeConfig, a ModelConfig and a
    PipelineConfig (and a ReviewConfig, …), so each layer is handed the same object and sees only the fields it declares.

    Every field reads ``GRACE_<FIELD>`` from the environment (e.g. ``GRACE_W_ANCHOR=4``,
    ``GRACE_LAKE=s3://bucket/prefix``); explicit keyword arguments win.
    """

    model_config = SettingsConfigDict(env_prefix="GRACE_", frozen=True, extra="ignore")


def build_settings(**overrides: object) -> GraceSettings:
    """Build settings from the environment plus explicit overrides (``None`` values are ignored)."""
    return GraceSettings(**{k: v for k, v in overrides.items() if v is not None})
