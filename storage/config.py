"""Where the lake lives. Values only; the entry point's settings object is a :class:`LakeConfig`."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

SIZE_PATTERN = r"^\s*(\d*[1-9]\d*(?:\.\d+)?|\d+\.\d*[1-9]\d*)\s*([KMGTkmgt][iI]?[bB]|[bB])\s*$"
"""A DuckDB memory size above zero: 512MB, 2GB, 1.5GiB, …"""
SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
MEMORY_LIMITS = (16 * 10**6, 10**15)
"""Least and most a statement's memory limit may be, in bytes: DuckDB cannot even open the
catalog under ~1 MB (it pins blocks of 256 KiB), and 99999999999TB overflowed a C long."""
MIN_RETENTION_HOURS = 1
"""Vacuum keeps at least this many hours of files: a running writer's files are fresh until it commits."""
MAX_RETENTION_HOURS = 10 * 8766
"""Ten years: ``timedelta(hours=…)`` overflows past ~2.4e10 hours, and no lake keeps its history longer."""
MAX_SQL_TIMEOUT_S = 86_400.0
"""A day: the statement's timer thread refused 1e300 s (``OverflowError``) and ran unlimited."""


class LakeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    lake: str = Field("./lake", description="Lake root: a local folder or s3://bucket/prefix.")
    s3_endpoint_url: str | None = Field(None, description="S3-compatible endpoint (MinIO, moto, …); AWS when unset.")
    s3_region: str | None = Field(None, description="S3 region; the AWS default chain when unset.")
    catalog_cache: str | None = Field(
        None, description="Folder for the DuckDB catalogs of S3 lakes; ~/.cache/grace/catalogs when unset."
    )
    sql_timeout_s: float = Field(
        60.0, gt=0, le=MAX_SQL_TIMEOUT_S, allow_inf_nan=False,
        description="grace sql / Lake.query: a statement running longer is stopped (at most a day: 86,400 s)."
    )
    sql_memory_limit: str = Field(
        "2GB", pattern=SIZE_PATTERN, description="grace sql / Lake.query: most memory of one statement and of its result (512MB, 2GB, …; 16MB to 1000TB)."
    )
    vacuum_retention_hours: int = Field(
        168, ge=MIN_RETENTION_HOURS, le=MAX_RETENTION_HOURS, description="grace compact / grace vacuum / the weekly lake "
        "maintenance: keep the files that table versions of the last N hours name (at least 1, so no running writer's files are "
        "touched; at most 87,660, ten years; time travel reaches back this far).")
    sql_threads: int = Field(2, ge=1, le=64, description="grace sql / Lake.query: DuckDB threads of one statement.")

    @field_validator("sql_memory_limit")
    @classmethod
    def _memory_in_range(cls, value: str) -> str:
        m = re.match(SIZE_PATTERN, value)
        if m and not MEMORY_LIMITS[0] <= float(m.group(1)) * SIZE_UNITS[m.group(2).lower()] <= MEMORY_LIMITS[1]:
            raise ValueError("must be between 16MB and 1000TB")
        return value

    @field_validator("lake", "s3_endpoint_url", "s3_region", "catalog_cache")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        """An empty path or address is refused: ``GRACE_LAKE=''`` made the current folder the lake."""
        if value is not None and not value.strip():
            raise ValueError("must not be empty (unset it for the default)")
        return value
