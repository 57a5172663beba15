"""When and where the deployed flows run. Values only: the entry point's settings object *is* a
:class:`ScheduleConfig` and a :class:`RunnerConfig`, so every field reads ``GRACE_<FIELD>``
(``GRACE_NIGHTLY_CRON``, ``GRACE_MAINTENANCE_CRON``, ``GRACE_INBOX_INTERVAL_S``, ``GRACE_TIMEZONE``, ``GRACE_TASK_RUNNER``,
``GRACE_DASK_ADDRESS``)."""

from __future__ import annotations

from typing import Literal

import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from grace_core.errors import InvalidSettings

DASK_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ucx|ws|wss)://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(\d{1,5}))?$"
                          r"|^inproc://[A-Za-z0-9._-]+/\d+/\d+$")
"""A Dask scheduler address as distributed reads it: [protocol://]host[:port], or a cluster's
in-process ``inproc://host/pid/n``."""


class ScheduleConfig(BaseModel):
    """Schedules of the served deployments (``grace serve``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    nightly_cron: str = Field("0 2 * * *", description="Cron schedule of the nightly expansion round.")
    maintenance_cron: str = Field(
        "0 5 * * 0", description="Cron schedule of the lake's maintenance (compaction, then vacuum): weekly, hours away from the "
        "nightly round by default (Sunday 05:00).")
    inbox_interval_s: int = Field(300, ge=1, le=7 * 86_400, description="Seconds between two scans of the batch inbox (at most a week).")
    timezone: str = Field("UTC", description="IANA time zone of the cron schedules, e.g. Europe/Paris.")

    @model_validator(mode="after")
    def _valid_crons_and_zone(self) -> ScheduleConfig:
        """Refuse a cron string or time zone that Prefect would refuse, as one clear line."""
        defaults = {name: field.default for name, field in type(self).model_fields.items()}
        crons = {"nightly": ("GRACE_NIGHTLY_CRON", self.nightly_cron), "maintenance": ("GRACE_MAINTENANCE_CRON", self.maintenance_cron)}
        if (self.nightly_cron, self.maintenance_cron, self.timezone) == (
                defaults["nightly_cron"], defaults["maintenance_cron"], defaults["timezone"]):
            return self  # valid; commands that schedule nothing (grace score) then start without importing Prefect
        from prefect.client.schemas.schedules import CronSchedule

        for schedule, (setting, cron) in crons.items():
            try:
                CronSchedule(cron=cron, timezone=self.timezone)
            except ValidationError as exc:
                reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
                raise InvalidSettings(f"{schedule} schedule ({setting}, GRACE_TIMEZONE): {reason}") from None
        return self


class RunnerConfig(BaseModel):
    """Where an expansion round runs the chunk tasks of its build and score sub-flows."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    task_runner: Literal["thread", "dask"] = Field(
        "thread", description="thread: a thread pool in the flow's process; dask: a Dask cluster (prefect-dask)."
    )
    dask_address: str | None = Field(
        None, description="Scheduler of an existing Dask cluster (tcp://host:8786); implies task_runner=dask. "
        "With task_runner=dask and no address, each round starts a LocalCluster of one worker process per core."
    )

    @field_validator("dask_address")
    @classmethod
    def _dask_address(cls, value: str | None) -> str | None:
        """Refuse an address distributed cannot parse, at start-up in one line (it failed in the
        round's task runner with a traceback)."""
        if value is None:
            return None
        m = DASK_ADDRESS.match(value.strip())
        if not m or (m.group(1) is not None and not 0 < int(m.group(1)) < 65536):
            raise ValueError("expected a Dask scheduler address [tcp://]host[:port] with a port in 1-65535, e.g. "
                             "tcp://10.0.0.5:8786")
        return value.strip()
