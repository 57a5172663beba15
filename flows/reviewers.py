"""The reviewer registry: who may vote, proven by a key (:mod:`grace_core.reviewer_keys`).

``grace reviewer add NAME`` registers a reviewer and shows their key once; the lake's
``reviewers`` table keeps only a salt and the salted hash of it, as event rows (``added``,
``revoked``) that are only ever added to. A reviewer is registered while their latest added key
has no ``revoked`` row; adding them again after a revocation gives a new key under a new
``key_id``. Every human channel proves the reviewer before a vote is stored: the terminal and the
Prefect UI ask for the key (:func:`prove`), a verdict file carries a signature line made with it
(:func:`sign_verdict_file`, checked by :func:`verify_verdict_file`). The built-in LLM verifier
needs no key, and its name cannot be registered.
"""

from __future__ import annotations

from collections.abc import Sequence

from datetime import datetime

import polars as pl

from grace_core.settings_groups import VERIFIER
from grace_core.errors import ReviewerRegistryRefused, UnprovenReviewer
from grace_core.identifiers import check_id
from grace_core.limits import InputLimits
from grace_core.reviewer_keys import key_hash, key_matches, new_key, new_key_id, new_salt, signature_ok, signed, split_signed
from grace_core.verdict_files import parse_verdict_file
from storage.lake import Lake

REGISTRY_COLUMNS = ["reviewer", "key_id", "added_at", "revoked_at"]


def _keys(lake: Lake) -> pl.DataFrame:
    """One row per key ever added: ``reviewer, key_id, salt, key_hash, added_at, revoked_at``
    (null while the key is not revoked), oldest first."""
    events = lake.read("reviewers")
    added = events.filter(pl.col("event") == "added").select("reviewer", "key_id", "salt", "key_hash", pl.col("at").alias("added_at"))
    revoked = events.filter(pl.col("event") == "revoked").group_by("reviewer", "key_id").agg(pl.col("at").min().alias("revoked_at"))
    return added.join(revoked, on=["reviewer", "key_id"], how="left").sort("reviewer", "added_at", "key_id")


def _current_key(lake: Lake, name: str) -> dict | None:
    """``name``'s latest added key (a row of :func:`_keys`, revoked or not), or None when they never had one."""
    mine = _keys(lake).filter(pl.col("reviewer") == name)
    return mine.row(-1, named=True) if mine.height else None


def registry(lake: Lake) -> pl.DataFrame:
    """Every key of every reviewer: ``reviewer, key_id, added_at, revoked_at`` (null while
    registered), by reviewer and age. No salt, no hash."""
    return _keys(lake).select(REGISTRY_COLUMNS)


def unregistered(lake: Lake, names: Sequence[str]) -> list[str]:
    """Those of ``names`` with no key in force (never added, or revoked): they are assigned
    claims they cannot answer until ``grace reviewer add NAME``."""
    keys = _keys(lake)
    active = set(keys.filter(pl.col("revoked_at").is_null())["reviewer"].to_list())
    return [n for n in names if n not in active]


def register(lake: Lake, name: str, now: datetime) -> str:
    """Register reviewer ``name`` with a new key at ``now`` and return the key (shown once, never
    stored). :class:`ReviewerRegistryRefused` when ``name`` is registered already or is the
    verifier's; :class:`~grace_core.errors.InvalidIdentifier` when it is not a safe id."""
    check_id(name, "reviewer")
    if name == VERIFIER:
        raise ReviewerRegistryRefused(f"reviewer {name!r} is the built-in LLM verifier's name, which needs no key and cannot be registered")
    current = _current_key(lake, name)
    if current is not None and current["revoked_at"] is None:
        raise ReviewerRegistryRefused(f"reviewer {name!r} is registered already (key {current['key_id']}); "
                                      f"`grace reviewer revoke {name}` first to give them a new key")
    key, salt, key_id = new_key(), new_salt(), new_key_id()
    row = {"reviewer": name, "key_id": key_id, "event": "added", "salt": salt, "key_hash": key_hash(salt, key), "at": now}
    lake.commit(f"reviewers/{name}/{key_id}/added", {"reviewers": pl.DataFrame([row])})
    return key


def revoke(lake: Lake, name: str, now: datetime) -> str:
    """Revoke reviewer ``name``'s key at ``now``; returns its ``key_id``. From then on their key
    proves nothing and files signed with it are refused (votes stored before stay).
    :class:`ReviewerRegistryRefused` when ``name`` is not registered or revoked already."""
    check_id(name, "reviewer")
    current = _current_key(lake, name)
    if current is None:
        raise ReviewerRegistryRefused(f"reviewer {name!r} is not registered (`grace reviewer list` shows who is)")
    if current["revoked_at"] is not None:
        raise ReviewerRegistryRefused(f"reviewer {name!r}: key {current['key_id']} was revoked already")
    row = {"reviewer": name, "key_id": current["key_id"], "event": "revoked", "salt": None, "key_hash": None, "at": now}
    lake.commit(f"reviewers/{name}/{current['key_id']}/revoked", {"reviewers": pl.DataFrame([row], schema_overrides={"salt": pl.Utf8, "key_hash": pl.Utf8})})
    return current["key_id"]


def _active_key(lake: Lake, name: str, what: str) -> dict:
    """``name``'s registered key (a row of :func:`_keys`); :class:`UnprovenReviewer` starting
    with ``what`` when they are not registered or their key was revoked."""
    current = _current_key(lake, name)
    if current is None:
        raise UnprovenReviewer(f"{what}: reviewer {name!r} is not registered (`grace reviewer add {name}` registers them)")
    if current["revoked_at"] is not None:
        raise UnprovenReviewer(f"{what}: the key of reviewer {name!r} was revoked on {current['revoked_at']:%Y-%m-%d %H:%M}Z")
    return current


def _proven_key(lake: Lake, name: str, key: str) -> dict:
    """``name``'s registered key (a row of :func:`_keys`) when ``key`` is it; see :func:`prove`."""
    check_id(name, "reviewer")
    current = _active_key(lake, name, "key refused")
    if not key_matches(current["salt"], current["key_hash"], key.strip()):
        raise UnprovenReviewer(f"key refused: wrong key for reviewer {name!r}")
    return current


def prove(lake: Lake, name: str, key: str) -> str:
    """The ``key_id`` of reviewer ``name``'s registered key when ``key`` is that key;
    :class:`UnprovenReviewer` (never showing the key) when ``name`` is not registered, their key
    was revoked or ``key`` is another."""
    return _proven_key(lake, name, key)["key_id"]


def sign_verdict_file(lake: Lake, name: str, data: bytes, reviewer: str, key: str, limits: InputLimits = InputLimits()) -> tuple[bytes, int]:
    """Verdict file ``name`` (content ``data``) signed by ``reviewer`` proven by ``key``, and the
    number of its answered rows: its content with a signature line
    (:func:`grace_core.reviewer_keys.signed`; an earlier signature line is replaced).
    :class:`UnprovenReviewer` when the key does not prove ``reviewer`` or an answered row is
    another reviewer's (a file holds one reviewer's votes)."""
    current = _proven_key(lake, reviewer, key)
    rows = parse_verdict_file(name, split_signed(name, data)[0], limits).rows
    stranger = next((r for r in rows if r.reviewer != reviewer), None)
    if stranger is not None:
        raise UnprovenReviewer(f"{name}: not signed: line {stranger.line} is a vote of {stranger.reviewer!r}, not of {reviewer!r} "
                               "(a file holds one reviewer's votes)")
    return signed(name, data, reviewer, current["key_id"], key_hash(current["salt"], key.strip())), len(rows)


def verify_verdict_file(lake: Lake, name: str, data: bytes) -> tuple[str, bytes]:
    """``(reviewer, payload)`` of verdict file ``name`` when its signature line is valid: made
    with the registered, unrevoked key of the reviewer it names over the bytes before it.
    Otherwise :class:`UnprovenReviewer`, one line naming the file: not signed, signed by someone
    not registered, with a revoked or replaced key, or not matching the content (changed after
    signing, or signed with another key)."""
    refused = f"{name}: refused, nothing recorded"
    payload, signature = split_signed(name, data)
    if signature is None:
        raise UnprovenReviewer(f"{refused}: the file is not signed (sign it with `grace review sign {name} --reviewer NAME`)")
    current = _active_key(lake, signature.reviewer, refused)
    if current["key_id"] != signature.key_id:
        raise UnprovenReviewer(f"{refused}: signed with key {signature.key_id} of {signature.reviewer!r}, which is not their current key")
    if not signature_ok(current["key_hash"], payload, signature.hmac_sha256):
        raise UnprovenReviewer(f"{refused}: the signature of {signature.reviewer!r} does not match the file "
                               "(changed after signing, or signed with another key)")
    return signature.reviewer, payload
