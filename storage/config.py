"""Where the lake lives. Values only; the entry point's settings object is a :class:`LakeConfig`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LakeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    lake: str = Field("./lake", description="Lake root: a local folder or s3://bucket/prefix.")
    s3_endpoint_url: str | None = Field(None, description="S3-compatible endpoint (MinIO, moto, …); AWS when unset.")
    s3_region: str | None = Field(None, description="S3 region; the AWS default chain when unset.")
    catalog_cache: str | None = Field(
        None, description="Folder for the DuckDB catalogs of S3 lakes; ~/.cache/grace/catalogs when unset."
    )
