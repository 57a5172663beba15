"""README.md's session, produced by running it (issue 37: a tested README).

The session is the ``text`` block under the README's "## A session" heading: its ``$ `` lines are
the commands, run in that order in one bash shell, as a user of a fresh clone types them, and
what follows each is what it printed (stdout and stderr), shortened where :data:`SHORTEN` says
(a ``…`` line). ``python scripts/readme_session.py`` runs the commands on a fresh temporary lake
and writes the block anew; ``--check`` only compares, and exits 1 with a diff when the README
and the fresh run differ beyond ids, times and paths (:func:`normalise`), as
``tests/test_readme.py`` does.

The shell starts in a new temporary folder that holds the clone's ``.venv`` and ``flows/`` (links)
and nothing else, so the lake (``./lake``, the default) and Prefect's home are new; no ``GRACE_*``
or ``PREFECT_*`` variable of the caller's environment reaches it and ``grace`` is not on its
PATH until the session activates the ``.venv``. The folder is shown as :data:`CLONE`."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
HEADING = "## A session"
CLONE = "/home/you/grace"
"""How the session's folder (a temporary one) is shown in the README: a clone in a home folder."""

SHORTEN: dict[str, tuple[int, int]] = {"grace review": (17, 1), 'grace ask "What dataset': (2, 0), "grace ask": (8, 0)}
"""Output lines kept of a command that starts with the key (or pipes into it): (first, last), a
``…`` line between; the first key that matches counts."""

MARK = "@@grace-readme-session@@"  # a line no command prints
TIMEOUT_S = 1800

NORMALISE: list[tuple[str, str]] = [
    (r"grk_[A-Za-z0-9_-]{43}", "grk_KEY"),  # a reviewer's key
    (r"\b[0-9a-f]{12,64}\b", "ID"),  # content ids: batches, claims, responses, key ids
    (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?", "TIME"),  # due dates, timestamps
    (r"127\.0\.0\.1:\d+", "127.0.0.1:PORT"),  # a temporary Prefect server
    (r"\b\d+(?:\.\d+)? s\b", "N s"),  # seconds spent or taken
    (r"[ \t]+$", ""),  # padding at the end of a line
]
"""What may differ between two runs of the session, each replaced by a fixed token before the
README and a fresh run are compared (regular expression, replacement; applied in this order)."""


def normalise(text: str) -> str:
    """``text`` with its ids, keys, times, ports and durations replaced by fixed tokens."""
    for pattern, replacement in NORMALISE:
        text = re.sub(pattern, replacement, text, flags=re.MULTILINE)
    return text


def session_block(readme: str) -> tuple[int, int]:
    """Line indices (first, last + 1) of the session's lines: inside the first ```text fence
    after :data:`HEADING`."""
    lines = readme.splitlines()
    start = lines.index(HEADING)
    opening = next(i for i in range(start, len(lines)) if lines[i].strip() == "```text")
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].strip() == "```")
    return opening + 1, closing


def commands(block: list[str]) -> list[str]:
    """The session's commands: its ``$ `` lines, without the prompt."""
    return [line[2:] for line in block if line.startswith("$ ")]


def session_env(folder: Path) -> dict[str, str]:
    """A fresh shell's environment: no GRACE_*/PREFECT_* variable, no .venv on the PATH, its own
    Prefect home; unbuffered Python (stdout and stderr interleave as in a terminal), 120 columns."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRACE_", "PREFECT_")) and k not in ("VIRTUAL_ENV", "COLUMNS")}
    venv = str(REPO / ".venv")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(venv))
    return env | {"PREFECT_HOME": str(folder / ".prefect"), "PYTHONUNBUFFERED": "1", "COLUMNS": "120", "TERM": "dumb"}


def run_session(cmds: list[str], folder: Path) -> list[tuple[str, int, list[str]]]:
    """Run ``cmds`` in one bash shell started in ``folder`` (which gets links to the clone's
    ``.venv`` and ``flows``); returns (command, exit code, output lines) per command."""
    (folder / ".venv").symlink_to(REPO / ".venv")
    (folder / "flows").symlink_to(REPO / "flows")
    script = [f"cd {shlex.quote(str(folder))}"]
    for i, cmd in enumerate(cmds):
        script += [cmd, f"printf '\\n{MARK} {i} %d\\n' $?"]
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", "\n".join(script)], cwd=folder, env=session_env(folder),
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=TIMEOUT_S, start_new_session=True)
    results, output = [], []
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            i, code = (int(x) for x in line.split()[1:])
            while output and not output[-1].strip():
                output.pop()
            results.append((cmds[i], code, output))
            output = []
        else:
            output.append(line.rstrip().replace(str(folder), CLONE))
    if len(results) != len(cmds):
        raise RuntimeError(f"the session stopped after {len(results)} of {len(cmds)} commands:\n{done.stdout[-3000:]}")
    return results


def render(results: list[tuple[str, int, list[str]]]) -> list[str]:
    """The session block's lines: each command after ``$ ``, then its output as :data:`SHORTEN`
    shortens it and a blank line (none after a command that printed nothing). A command that
    failed is an error: the session shows a working path."""
    failed = [f"{cmd!r} exited {code}:\n" + "\n".join(out[-20:]) for cmd, code, out in results if code != 0]
    if failed:
        raise RuntimeError("a command of the README session failed: " + "\n".join(failed))
    lines: list[str] = []
    for cmd, _, out in results:
        head, tail = next((n for prefix, n in SHORTEN.items() if cmd.startswith(prefix) or f"| {prefix}" in cmd), (len(out), 0))
        shown = out if len(out) <= head + tail else out[:head] + ["…"] + (out[-tail:] if tail else [])
        lines += [f"$ {cmd}", *shown, *([""] if shown else [])]
    return lines[:-1] if lines and not lines[-1] else lines


def fresh_block(readme: str) -> list[str]:
    """The session block of a fresh run of the README's commands."""
    first, last = session_block(readme)
    with tempfile.TemporaryDirectory(prefix="grace-readme-") as tmp:
        return render(run_session(commands(readme.splitlines()[first:last]), Path(tmp)))


def difference(readme: str, fresh: list[str]) -> str:
    """A unified diff of the README's session and ``fresh``, both normalised; empty when they agree."""
    first, last = session_block(readme)
    ours = normalise("\n".join(readme.splitlines()[first:last])).splitlines()
    theirs = normalise("\n".join(fresh)).splitlines()
    return "\n".join(difflib.unified_diff(ours, theirs, "README.md (normalised)", "a fresh run (normalised)", lineterm="", n=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare only: exit 1 with a diff when the README is stale")
    args = parser.parse_args()
    readme = README.read_text(encoding="utf-8")
    fresh = fresh_block(readme)
    if args.check:
        diff = difference(readme, fresh)
        print(diff or "README.md's session matches a fresh run")
        return 1 if diff else 0
    first, last = session_block(readme)
    lines = readme.splitlines()
    README.write_text("\n".join(lines[:first] + fresh + lines[last:]) + "\n", encoding="utf-8")
    print(f"README.md: session rewritten from a fresh run ({len(fresh)} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
