"""Content hashes: cache keys of texts and model calls, and seeds that do not depend on
Python's per-process string hash randomisation."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any


def text_hash(text: str) -> str:
    """A 128-bit hex digest of ``text`` (the embedder's cache key)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from the ``repr`` of ``parts``; the same parts give the same seed in any process."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces, so equal values give equal strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def call_key(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
    """The content address of a model call: a SHA-256 of the model, the messages and the parameters."""
    payload = canonical_json({"model": model, "messages": list(messages), "params": dict(params)})
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
