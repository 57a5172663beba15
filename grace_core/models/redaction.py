"""Secrets out of everything GRACE stores or prints: API keys, ``Authorization`` / ``api-key`` /
``x-api-key`` header values, AWS secrets.

A :class:`Redactor` replaces the exact values it was given (the configured API key, and the
values of secret-looking environment variables such as ``GRACE_API_KEY``, ``OPENAI_API_KEY``,
``AWS_SECRET_ACCESS_KEY``) and, whatever the value, anything written as a credential: a header
or field named authorization / api-key / x-api-key / secret / token followed by a value, a
``Bearer`` token, and key-shaped strings (``sk-…``, ``AKIA…``). Model errors are recorded and
logged only through :func:`Redactor.error_text`, so a server that echoes the request's
``Authorization`` header in its error body leaks nothing into ``llm_calls.error``, logs,
exceptions or the CLI's output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

REDACTED = "[REDACTED]"

SECRET_ENV = re.compile(r"(API_KEY|SECRET|TOKEN|PASSWORD)", re.IGNORECASE)
"""Environment variables whose values are secrets wherever they appear."""

_PATTERNS = (
    # header or field name, separator, optional scheme, value: keep the name, drop the value
    re.compile(
        r"""(?P<name>\b(?:proxy-)?authorization|\bx-api-key|\bapi[-_]?key|\b(?:aws_)?secret(?:[-_]access)?[-_]?key|"""
        r"""\b(?:aws_)?session[-_]token|\baccess[-_]token|\bpassword)"""
        r"""(?P<sep>["']?\s*[:=]\s*["']?)(?:(?:bearer|basic|token)\s+)?(?!\[REDACTED\])(?P<value>[^\s"',;}\]]+)""",
        re.IGNORECASE,
    ),
    re.compile(r"\b(?P<name>bearer)(?P<sep>\s+)(?!\[REDACTED\])(?P<value>[A-Za-z0-9._~+/=-]{6,})", re.IGNORECASE),
)
_KEY_SHAPES = re.compile(r"\b(?:sk-[A-Za-z0-9_-]{8,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16})\b")
_TRACEBACK = re.compile(r"\s*Traceback \(most recent call last\).*", re.DOTALL)
_SPACE = re.compile(r"\s+")

ERROR_CHARS = 600
"""Longest recorded error text."""


class Redactor:
    """Replaces known secret values and credential-shaped text with ``[REDACTED]``."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        # longest first, so a secret containing another is replaced whole; very short values
        # would redact ordinary words, so they are left to the patterns
        self.secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], *extra: str | None) -> Redactor:
        """A redactor of ``extra`` and of every secret-looking variable of ``environ``."""
        return cls([*extra, *(v for k, v in environ.items() if SECRET_ENV.search(k))])

    def __call__(self, text: str | None) -> str | None:
        """``text`` without secrets (None stays None)."""
        if not text:
            return text
        for pattern in _PATTERNS:  # credential shapes first: "Authorization: Bearer <key>" becomes one marker
            text = pattern.sub(lambda m: f"{m['name']}{m['sep']}{REDACTED}", text)
        text = _KEY_SHAPES.sub(REDACTED, text)
        return self.values(text)

    def values(self, text: str | None) -> str | None:
        """``text`` with only the known secret values replaced (for prompts and replies, whose
        wording must otherwise stay as it was)."""
        if not text:
            return text
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text

    def error_text(self, error: BaseException | str) -> str:
        """One redacted line describing ``error`` (its type, then its message without any
        embedded traceback), at most :data:`ERROR_CHARS` characters."""
        if isinstance(error, BaseException):
            message = str(error)
            name = type(error).__name__
            error = message if message.startswith(name) or f"{name}:" in message[:80] else f"{name}: {message}"
        line = _SPACE.sub(" ", _TRACEBACK.sub("", error)).strip()
        line = self(line) or ""
        return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"
