"""The one typed settings object (env prefix ``GRACE_``), built at the entry point and passed down."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

from grace_core.params import ScoringParams
from storage.config import LakeConfig


class GraceSettings(BaseSettings, ScoringParams, LakeConfig):
    """All of GRACE's settings. It *is* a ScoringParams and a LakeConfig, so each layer is
    handed the same object and sees only the fields it declares.

    Every field reads ``GRACE_<FIELD>`` from the environment (e.g. ``GRACE_W_ANCHOR=4``,
    ``GRACE_LAKE=s3://bucket/prefix``); explicit keyword arguments win.
    """

    model_config = SettingsConfigDict(env_prefix="GRACE_", frozen=True, extra="ignore")


def build_settings(**overrides: object) -> GraceSettings:
    """Build settings from the environment plus explicit overrides (``None`` values are ignored)."""
    return GraceSettings(**{k: v for k, v in overrides.items() if v is not None})
