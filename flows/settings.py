"""The one typed settings object (env prefix ``GRACE_``), built at the entry point and passed down.

Every command and flow builds it through :func:`build_settings`, so a bad value, from the
environment or from an option, is one :class:`InvalidSettings` line naming the setting
(``GRACE_BUDGET: input should be a valid number, got 'abc'``), never a pydantic traceback."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from deployments.config import RunnerConfig, ScheduleConfig
from grace_core.errors import InvalidSettings
from grace_core.limits import InputLimits
from grace_core.models.config import ModelConfig
from grace_core.params import ScoringParams
from grace_core.settings_groups import MAX_BUDGET, AdjudicationConfig, AuditConfig, QueryConfig, ReviewConfig
from storage.config import LakeConfig


class PipelineConfig(BaseModel):
    """How the flows run an expansion round."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    budget: float = Field(3.0, ge=0, le=MAX_BUDGET, description="Review budget per round, in cost units (DESIGN §4; at most 1e9).")
    quorum: int = Field(1, ge=1, le=1000, description="Reviewers that must answer before a claim's verdict counts (at most 1,000, "
                        "like GRACE_OVERLAP).")
    context_passages: int = Field(3, ge=1, le=1000, description="Prior passages given to the responder per question (at most 1,000).")
    docs_per_task: int = Field(8, ge=1, le=100_000, description="Documents per build task (tasks are coarse: ~20 ms of server time "
                               "each; at most 100,000).")
    score_docs_per_task: int = Field(
        1000, ge=1, le=10_000_000, description="Documents per scoring task, at most: fewer documents are spread evenly over "
        "score_tasks_at_once tasks (at most 10 million)."
    )
    score_tasks_at_once: int = Field(
        2, ge=1, le=1024, description="Scoring tasks running at once: each holds its chunk of documents in memory, so peak memory "
        "grows with it (at most 1,024 threads)."
    )
    inbox: str | None = Field(None, description="Batch inbox: a folder or s3://bucket/prefix; none when unset.")
    prior_sections: tuple[str, ...] = Field(
        (), description="Section names ingested as priors (the rest become passages); all sections when empty. "
        'E.g. GRACE_PRIOR_SECTIONS=\'["Abstract", "Introduction"]\'.'
    )


class GraceSettings(BaseSettings, ScoringParams, LakeConfig, ModelConfig, PipelineConfig, ReviewConfig, AdjudicationConfig, AuditConfig, QueryConfig, ScheduleConfig, RunnerConfig, InputLimits):
    """All of GRACE's settings. It *is* a ScoringParams, a LakeConfig, a ModelConfig and a
    PipelineConfig (and a ReviewConfig, …), so each layer is handed the same object and sees only the fields it declares.

    Every field reads ``GRACE_<FIELD>`` from the environment (e.g. ``GRACE_W_ANCHOR=4``,
    ``GRACE_LAKE=s3://bucket/prefix``); explicit keyword arguments win.
    """

    model_config = SettingsConfigDict(env_prefix="GRACE_", frozen=True, extra="ignore", allow_inf_nan=False)


ENV_PREFIX = "GRACE_"


def setting_name(field: str, overrides: dict[str, object]) -> str:
    """How the user gave ``field``: ``--w-anchor`` when it came as an option, else ``GRACE_W_ANCHOR``."""
    if field in overrides:
        return "--" + field.replace("_", "-")
    return ENV_PREFIX + field.upper()


def _is_secret(field: str) -> bool:
    info = GraceSettings.model_fields.get(field)
    return info is not None and SecretStr in (info.annotation, *getattr(info.annotation, "__args__", ()))


def _problem(error: Any, overrides: dict[str, object] | None) -> str:
    """One pydantic error as ``NAME: problem, got VALUE`` (the value of a secret is never shown).
    ``overrides`` None: a model other than the settings, its fields named as they are."""
    loc = error.get("loc") or ()
    field = str(loc[0]) if loc else ""
    named = overrides is not None and field in GraceSettings.model_fields
    name = setting_name(field, overrides) if named else (field or "settings")
    name += "".join(f"[{part}]" for part in loc[1:])
    msg = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    msg = msg[:1].lower() + msg[1:]
    if "input" in error and error.get("type") != "missing" and not _is_secret(field):
        shown = repr(error["input"])
        msg += f", got {shown if len(shown) <= 80 else shown[:77] + '...'}"
    return f"{name}: {msg}"


def validation_message(exc: ValidationError, overrides: dict[str, object] | None = None) -> str:
    """Every error of ``exc`` on one line, each naming its setting (see :func:`setting_name`);
    without ``overrides``, each naming its field (a model other than the settings)."""
    return "; ".join(_problem(e, overrides) for e in exc.errors())


def build_settings(**overrides: object) -> GraceSettings:
    """Build settings from the environment plus explicit overrides (``None`` values are ignored).
    A value that does not validate raises :class:`InvalidSettings` naming every bad setting."""
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return GraceSettings(**given)
    except ValidationError as exc:
        raise InvalidSettings(validation_message(exc, given)) from None
    except SettingsError as exc:  # a list or JSON setting whose environment value is not JSON
        m = re.search(r'field "(\w+)"', str(exc))
        name = setting_name(m.group(1), given) if m else "a GRACE_ setting"
        raise InvalidSettings(f'{name}: not valid JSON (a list is written like \'["a", "b"]\')') from None
    except (OverflowError, ValueError) as exc:  # a library's own check (a cron, a time zone) meeting an extreme value
        raise InvalidSettings(f"a GRACE_ setting is out of range: {' '.join(str(exc).split()) or type(exc).__name__}") from None
