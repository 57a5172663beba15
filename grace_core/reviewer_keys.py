"""Reviewer keys and signed verdict files: who said so, checked without storing any secret.

A reviewer is registered with a random key (:func:`new_key`), shown once to the person and
never stored. The lake keeps a random ``salt`` and the salted hash of the key::

    key_hash = HMAC-SHA256(key = salt, message = key)          (hex; RFC 2104, FIPS 180-4)

and a key is proven by recomputing it (:func:`key_matches`, a constant-time comparison).

A verdict file is signed with the same stored value, so that the lake, which knows only
``salt`` and ``key_hash``, can check a signature::

    hmac_sha256 = HMAC-SHA256(key = key_hash, message = payload)   (hex)

``salt`` and ``key_hash`` are used as the ASCII bytes of their hex text, so
``printf %s "$KEY" | openssl dgst -sha256 -hmac "$SALT"`` gives the key hash and
``openssl dgst -sha256 -hmac "$KEY_HASH" payload`` the signature. The signer computes
``key_hash`` from the key and the stored salt; the key itself never travels in the file.
The stored hash is therefore *signing-equivalent*: whoever reads it can sign as that reviewer
(it cannot be turned back into the key, but it need not be). It is kept out of the SQL
catalog and out of the SQL sandbox's reach (:mod:`storage.catalog`, :mod:`storage.readonly_sql`);
only the lake's own files hold it.

The payload is the exact bytes of the verdict file before its signature line, which is its
last line:

- CSV: ``# grace-signature reviewer=<name> key=<key_id> hmac-sha256=<hex>``
- JSONL: ``{"grace_signature": {"reviewer": "<name>", "key_id": "<key_id>", "hmac_sha256": "<hex>"}}``

Any change of the payload (a verdict, a note, a line added before or after the signature)
makes the signature fail. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass

from grace_core.errors import UnprovenReviewer
from grace_core.identifiers import id_problem
from grace_core.verdict_files import RepeatedKey, unique_keys, verdict_file_kind

KEY_PREFIX = "grk_"
CSV_MARK = b"# grace-signature"
JSON_MARK = "grace_signature"
_CSV_LINE = re.compile(rb"^# grace-signature reviewer=(\S+) key=(\S+) hmac-sha256=([0-9a-f]{64})[ \t\r]*$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def new_key() -> str:
    """A fresh reviewer key: ``grk_`` and 43 URL-safe characters (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def new_salt() -> str:
    """A fresh salt: 32 hex digits (128 random bits)."""
    return secrets.token_hex(16)


def new_key_id() -> str:
    """A fresh key id: 12 hex digits naming one key of a reviewer (not secret, not derived from the key)."""
    return secrets.token_hex(6)


def _hmac_hex(key: str, message: bytes) -> str:
    return hmac.new(key.encode("ascii"), message, hashlib.sha256).hexdigest()


def key_hash(salt: str, key: str) -> str:
    """``HMAC-SHA256(salt, key)`` as hex: the stored hash of ``key`` (see the module docstring)."""
    return _hmac_hex(salt, key.encode("utf-8"))


def key_matches(salt: str, stored_hash: str, key: str) -> bool:
    """Whether ``key`` hashes to ``stored_hash`` with ``salt`` (constant-time comparison)."""
    return hmac.compare_digest(key_hash(salt, key), stored_hash)


def sign(stored_hash: str, payload: bytes) -> str:
    """``HMAC-SHA256(key_hash, payload)`` as hex: the signature of ``payload`` by the reviewer
    whose stored key hash is ``stored_hash``."""
    return _hmac_hex(stored_hash, payload)


def signature_ok(stored_hash: str, payload: bytes, signature: str) -> bool:
    """Whether ``signature`` is :func:`sign` of ``payload`` with ``stored_hash`` (constant time)."""
    return hmac.compare_digest(sign(stored_hash, payload), signature)


@dataclass(frozen=True)
class Signature:
    """A verdict file's signature line: who signed, with which of their keys, and the HMAC."""

    reviewer: str
    key_id: str
    hmac_sha256: str


def signature_line(name: str, signature: Signature) -> bytes:
    """The signature line (with its newline) of verdict file ``name``, CSV or JSONL by its suffix."""
    if verdict_file_kind(name) == "csv":
        return (f"{CSV_MARK.decode()} reviewer={signature.reviewer} key={signature.key_id} "
                f"hmac-sha256={signature.hmac_sha256}\n").encode("ascii")
    fields = {"reviewer": signature.reviewer, "key_id": signature.key_id, "hmac_sha256": signature.hmac_sha256}
    return (json.dumps({JSON_MARK: fields}) + "\n").encode("ascii")


def _parse_line(name: str, csv: bool, line: bytes) -> Signature | None:
    """The signature on ``line`` (the file's last non-blank line), None when it is no signature
    line; :class:`UnprovenReviewer` when it is one but malformed."""
    malformed = UnprovenReviewer(f"{name}: refused, nothing recorded: its signature line is malformed (sign it again with `grace review sign`)")
    if csv:
        if not line.startswith(CSV_MARK):
            return None
        m = _CSV_LINE.match(line)
        if m is None:
            raise malformed
        reviewer, key_id, mac = (g.decode("ascii", "replace") for g in m.groups())
    else:
        try:
            obj = json.loads(line, object_pairs_hook=unique_keys)
        except RepeatedKey:
            raise malformed from None  # two "reviewer"s or "hmac_sha256"s: which one signed is a guess
        except (ValueError, RecursionError):
            return None
        if not isinstance(obj, dict) or JSON_MARK not in obj:
            return None
        fields = obj[JSON_MARK]
        if len(obj) != 1 or not isinstance(fields, dict) or not all(isinstance(fields.get(k), str) for k in ("reviewer", "key_id", "hmac_sha256")):
            raise malformed
        reviewer, key_id, mac = fields["reviewer"], fields["key_id"], fields["hmac_sha256"]
        if not _HEX64.match(mac):
            raise malformed
    if id_problem(reviewer) or id_problem(key_id):
        raise malformed
    return Signature(reviewer, key_id, mac)


def split_signed(name: str, data: bytes) -> tuple[bytes, Signature | None]:
    """``(payload, signature)`` of verdict file ``name``: the bytes before its signature line and
    that line's :class:`Signature`; ``(data, None)`` when it has none. A signature line that is
    not the last non-blank line (rows added after signing) or is malformed raises
    :class:`UnprovenReviewer` naming the file."""
    csv = verdict_file_kind(name) == "csv"
    body = data.rstrip(b"\r\n\t ")
    start = body.rfind(b"\n") + 1
    signature = _parse_line(name, csv, body[start:])
    if signature is not None:
        return data[:start], signature
    if (CSV_MARK if csv else f'"{JSON_MARK}"'.encode()) in data:
        raise UnprovenReviewer(f"{name}: refused, nothing recorded: its signature line is not its last line (was it changed after signing?)")
    return data, None


def signed(name: str, data: bytes, reviewer: str, key_id: str, stored_hash: str) -> bytes:
    """Verdict file ``name`` (content ``data``, any signature line of it replaced) signed by
    ``reviewer`` with key ``key_id`` whose stored hash is ``stored_hash``: the payload, ending
    with a newline (one is added when it has none), then the signature line."""
    payload, _ = split_signed(name, data)
    if payload and not payload.endswith(b"\n"):
        payload += b"\n"
    return payload + signature_line(name, Signature(reviewer, key_id, sign(stored_hash, payload)))
