"""docs/settings.md carries a reference table generated from the settings object's fields."""

from __future__ import annotations

from flows.settings import GraceSettings
from flows.settings_doc import DOC, render, section


def test_the_settings_reference_is_current() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert section() in doc, "docs/settings.md is stale: run python -m flows.settings_doc"
    assert render(doc) == doc


def test_every_setting_is_listed_once_with_its_default() -> None:
    table = section()
    for name, field in GraceSettings.model_fields.items():
        assert table.count(f"`GRACE_{name.upper()}`") == 1, name
    assert "| `GRACE_MU` | `0.002` |" in table
