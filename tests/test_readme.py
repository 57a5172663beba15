"""The README's session is what running it prints (issue 37, item 2): scripts/readme_session.py
runs its commands on a fresh lake; the README and the fresh run may differ in ids, keys, times,
ports and durations only (``normalise``)."""

from __future__ import annotations

import pytest

from scripts import readme_session


def test_the_comparison_ignores_ids_times_and_ports_but_not_figures() -> None:
    run = ["$ grace round", "• Prefect: temporary server at http://127.0.0.1:8002/api (stopped when the round ends)",
           "[1/3] round 1 · claim c:86c8575c6bc452188d5f71b560b134d8 · due 2026-12-09T06:35:51Z", "recorded: confirm (0 s)",
           "batch 218aef28c6e5: ingested 3 new documents", "grk_zgP6kU2yJTuVoJKn5FBBknT9ZtjtvDxw2kt1dnJoqb8   "]
    other = ["$ grace round", "• Prefect: temporary server at http://127.0.0.1:9113/api (stopped when the round ends)",
             "[1/3] round 1 · claim c:0123456789abcdef0123456789abcdef · due 2027-01-01T00:00:00Z", "recorded: confirm (12 s)",
             "batch 0123456789ab: ingested 3 new documents", "grk_AAAAkU2yJTuVoJKn5FBBknT9ZtjtvDxw2kt1dnJoqb8"]
    readme = "## A session\n\n```text\n" + "\n".join(run) + "\n```\n"
    assert readme_session.difference(readme, other) == ""
    stale = [line.replace("3 new documents", "4 new documents") for line in other]
    assert "-batch ID: ingested 3 new documents\n+batch ID: ingested 4 new documents" in readme_session.difference(readme, stale)


@pytest.mark.slow
def test_the_readme_session_is_what_a_fresh_run_prints() -> None:
    readme = readme_session.README.read_text(encoding="utf-8")
    diff = readme_session.difference(readme, readme_session.fresh_block(readme))
    assert not diff, ("README.md's session differs from a fresh run of its commands beyond ids, times and paths; "
                      f"run .venv/bin/python scripts/readme_session.py to write it anew, and read the change:\n{diff}")
