"""Input size limits: how much of a document batch or a verdict file GRACE reads before it
refuses the input with one clear line (file, line, field, the limit and the setting's name).

Values only. The entry point's settings object *is* an :class:`InputLimits` (env
``GRACE_MAX_BATCH_BYTES``, …); readers and parsers take one and check against it, so an
endless or huge input stops at the limit instead of growing memory.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MIB = 1024 * 1024
GIB = 1024 * MIB


class InputLimits(BaseModel):
    """Limits on what ``grace ingest``, the batch inbox and verdict files may hold. Each has a
    ceiling too (a batch or verdict file of at most 4 GiB, a line, field or prior of at most
    1 GiB, …): a file is held in memory whole, so a limit past the machine's memory is no limit."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    max_batch_bytes: int = Field(256 * MIB, gt=0, le=4 * GIB, description="Largest document batch file, in bytes (GRACE_MAX_BATCH_BYTES).")
    max_line_bytes: int = Field(64 * MIB, gt=0, le=GIB, description="Longest line of a document batch, in bytes (GRACE_MAX_LINE_BYTES).")
    max_field_chars: int = Field(
        64_000_000, gt=0, le=GIB, description="Longest text field of a batch line (id, title, text, paragraph, question, …), in characters "
        "(GRACE_MAX_FIELD_CHARS).")
    max_paragraphs: int = Field(
        50_000, gt=0, le=10_000_000, description="Most paragraphs in one document (all sections together, or the paragraphs of its text) "
        "(GRACE_MAX_PARAGRAPHS).")
    max_paragraph_chars: int = Field(
        20_000, gt=0, le=GIB, description="Longest paragraph of a document, and longest title, question or option, in characters: a "
        "round cuts each paragraph into sentences with pysbd, whose time grows with the square of the length (measured: 10,000 "
        "characters 0.14 s, 20,000 0.44 s, 100,000 12 s, 300,000 101 s); real QASPER and QuALITY paragraphs hold at most ~3,100 "
        "(GRACE_MAX_PARAGRAPH_CHARS).")
    max_prior_chars: int = Field(
        1_000_000, gt=0, le=GIB, description="Longest prior or passage (a section, the abstract or a chunk of a text), in characters: a "
        "round embeds each one whole, and tokenizing 1,000,000 characters takes 1.2 s and 180 MB, 4,000,000 7.4 s and 620 MB, "
        "60 MB aborted the round; real QASPER sections hold at most ~38,000 (GRACE_MAX_PRIOR_CHARS).")
    max_questions: int = Field(
        1_000, gt=0, le=1_000_000, description="Most questions of one document (over all its lines): a round answers each one "
        "(n_samples responses, each decomposed, judged and scored); QuALITY articles have ~20, QASPER papers ~5 "
        "(GRACE_MAX_QUESTIONS).")
    max_json_values: int = Field(
        200_000, gt=0, le=100_000_000, description="Most JSON values (strings, numbers, arrays, objects, …) in one batch line, counted on its bytes "
        "before it is parsed, so that no field, known or not, costs more than ~30 MB of Python objects (the real QASPER and "
        "QuALITY lines hold at most ~500) (GRACE_MAX_JSON_VALUES).")
    max_json_depth: int = Field(
        64, gt=0, le=500, description="Deepest nesting of JSON arrays and objects in a batch line or verdict line (GRACE_MAX_JSON_DEPTH).")
    max_verdict_bytes: int = Field(64 * MIB, gt=0, le=4 * GIB, description="Largest verdict file, in bytes (GRACE_MAX_VERDICT_BYTES).")
    max_verdict_rows: int = Field(100_000, gt=0, le=100_000_000, description="Most rows in one verdict file (GRACE_MAX_VERDICT_ROWS).")


def setting_name(field: str) -> str:
    """The environment variable of limit ``field``: ``max_batch_bytes`` → ``GRACE_MAX_BATCH_BYTES``."""
    return f"GRACE_{field.upper()}"


def over_limit(size: int, unit: str, field: str, limit: int, *, at_least: bool = False) -> str:
    """How an input part exceeds limit ``field``, e.g. ``70,000,000 bytes, over the limit of
    67,108,864 (GRACE_MAX_LINE_BYTES)``; ``at_least`` when reading stopped at the limit, so
    only a lower bound of the size is known."""
    amount = f"more than {limit:,} {unit}" if at_least else f"{size:,} {unit}"
    return f"{amount}, over the limit of {limit:,} ({setting_name(field)})"
