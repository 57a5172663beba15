"""One line saying which model items failed or were stopped by the spend cap: the counts per
role and the first error (already redacted by the client)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def describe_failures(items: Iterable[tuple[str, str, str | None]]) -> str:
    """``items``: (role, outcome, error) of each item that did not succeed, outcome ``failed``
    or ``capped``. E.g. ``"9 model items failed (responder 6, judge 3), first error (responder):
    InternalServerError: …; 2 skipped by the spend cap (judge 2)"``."""
    items = list(items)
    failed = [(r, e) for r, o, e in items if o != "capped"]
    capped = [r for r, o, _ in items if o == "capped"]
    parts = []
    if failed:
        first_role, first_error = failed[0]
        parts.append(f"{len(failed)} model item{'s' if len(failed) != 1 else ''} failed ({_per_role(r for r, _ in failed)}), "
                     f"first error ({first_role}): {first_error or 'no error text'}")
    if capped:
        parts.append(f"{len(capped)} skipped by the spend cap ({_per_role(capped)})")
    return "; ".join(parts) or "no model item failed"


def _per_role(roles: Iterable[str]) -> str:
    return ", ".join(f"{role} {n}" for role, n in Counter(roles).most_common())
