"""Whole-process ``grace sql`` and ``grace ask`` against bare processes doing the same core work,
and ``grace ask -``'s time per question (issue 35).

    .venv/bin/python -m benchmarks.bench_ask_cli                      # makes a demo lake first (1–3 min)
    .venv/bin/python -m benchmarks.bench_ask_cli --lake /tmp/demo-lake

- ``grace sql --lake L "SELECT count(*) FROM claims"`` against ``python -c`` opening the lake's
  ``catalog.duckdb`` with plain duckdb and running the same query (the counts must agree).
- ``grace ask --lake L --doc D --no-record Q`` against ``python -c`` loading the offline
  embedder (the settings' threads and precision) and encoding one sentence. The lake's stored
  embeddings are filled by a first, untimed ``grace ask``, as any question after the first finds them.
- ``grace ask - --doc D --no-record`` on N distinct questions (the lake's own questions and those
  of tests/fixtures' QASPER sample): its answers are JSON lines flushed as each is answered, so
  the time per question after the first is (arrival of the last line − arrival of the first) / (N − 1).

Every command runs once untimed (Python's bytecode caches), then the commands take turns
``--runs`` times, so a load on the machine hits them alike; ratios are of the medians (and of the
best runs) measured in this run, wall time and CPU time (user + system of the process).

Targets (issue 35): ``grace sql`` ≤ 3× plain duckdb; ``grace ask`` ≤ 1.5× the bare embedder
process; ``grace ask -`` ≤ 50 ms per question after the first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GRACE = [sys.executable, "-c", "from flows.cli import main\nmain()"]
SQL = "SELECT count(*) FROM claims"
PLAIN_SQL = ("import sys, duckdb\n"
             "print(duckdb.connect(sys.argv[1], read_only=True).sql(sys.argv[2]).fetchall()[0][0])")
BARE_EMBEDDER = ("import sys\n"
                 "from grace_core.models.offline_embedder import OfflineEmbedder\n"
                 "OfflineEmbedder(threads=int(sys.argv[1]), precision=sys.argv[2]).embed([sys.argv[3]])")
QUESTION = "Which network gives the image representations?"
DOC = "1806.00738"


def run(cmd: list[str], stdin: str | None = None) -> tuple[float, float, str]:
    """One process: wall seconds, CPU seconds (user + system), stdout. A failure stops the benchmark."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, input=stdin, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd[3:])}: exit {proc.returncode}: {proc.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.stdout


def batch_per_question(lake: str, questions: list[str]) -> tuple[float, float]:
    """``grace ask -`` on ``questions``: seconds from start to the first answer line, and the mean
    seconds per question after it (the answer lines' arrival times)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    t = time.perf_counter()
    proc = subprocess.Popen([*GRACE, "ask", "-", "--lake", lake, "--doc", DOC, "--no-record"], cwd=REPO, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(q + "\n" for q in questions))
    proc.stdin.close()
    arrivals = []
    for line in proc.stdout:
        arrivals.append(time.perf_counter())
        json.loads(line)
    if proc.wait() or len(arrivals) != len(questions):
        raise SystemExit(f"grace ask -: exit {proc.returncode}, {len(arrivals)} answers of {len(questions)}: {proc.stderr.read().strip()}")
    return arrivals[0] - t, (arrivals[-1] - arrivals[0]) / (len(questions) - 1)


def batch_questions(lake: str) -> list[str]:
    """Distinct questions: the lake's own, then those of tests/fixtures/qasper_dev_sample.jsonl."""
    _, _, out = run([*GRACE, "sql", "--lake", lake, "--format", "json", "SELECT question FROM questions ORDER BY doc_id, ord"])
    own = [r["question"] for r in json.loads(out)]
    sample = [q["question"] for line in (REPO / "tests/fixtures/qasper_dev_sample.jsonl").read_text().splitlines()
              for q in json.loads(line)["questions"]]
    return list(dict.fromkeys([QUESTION, *own, *sample]))


def summary(name: str, runs: list[tuple[float, float, str]]) -> tuple[float, float, float]:
    """Print one line of ``runs``; returns (median wall, best wall, median CPU)."""
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    med, best, cpu = statistics.median(walls), min(walls), statistics.median(cpus)
    print(f"{name:26s} median {med:6.2f} s, best {best:6.2f} s wall ({', '.join(f'{w:.2f}' for w in walls)}); CPU median {cpu:6.2f} s")
    return med, best, cpu


def ratio(name: str, ours: tuple[float, float, float], ref: tuple[float, float, float], target: float) -> None:
    med, best, cpu = ours[0] / ref[0], ours[1] / ref[1], ours[2] / ref[2]
    print(f"{name:26s} {med:5.2f}× median wall, {best:5.2f}× best wall, {cpu:5.2f}× CPU   (target ≤ {target:g}×)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lake", help="a lake holding the demo's documents (made with grace demo when not given)")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="grace-bench-ask-") as tmp:
        lake = args.lake
        if lake is None:
            lake = str(Path(tmp) / "demo-lake")
            print(f"making a demo lake at {lake} (grace demo) …", flush=True)
            run([*GRACE, "demo", "--lake", lake])
        from flows.settings import build_settings

        settings = build_settings(lake=lake)
        threads, precision = str(settings.torch_threads or os.cpu_count()), settings.embed_precision
        catalog = str(Path(lake) / "catalog.duckdb")
        commands = {
            "grace sql": [*GRACE, "sql", "--lake", lake, "--format", "csv", SQL],
            "plain duckdb": [sys.executable, "-c", PLAIN_SQL, catalog, SQL],
            "grace ask": [*GRACE, "ask", "--lake", lake, "--doc", DOC, "--no-record", QUESTION],
            "bare embedder": [sys.executable, "-c", BARE_EMBEDDER, threads, precision, QUESTION],
        }
        warm = {name: run(cmd) for name, cmd in commands.items()}  # also stores the candidates' embeddings
        counts = warm["grace sql"][2].split()[-1], warm["plain duckdb"][2].strip()
        if counts[0] != counts[1]:
            raise SystemExit(f"grace sql counted {counts[0]} claims, plain duckdb {counts[1]}")
        runs: dict[str, list] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, cmd in commands.items():
                runs[name].append(run(cmd))
        print(f"lake {lake}: {counts[0]} claims; {args.runs} runs each, taking turns; load average {os.getloadavg()[0]:.1f}")
        stats = {name: summary(name, r) for name, r in runs.items()}
        ratio("grace sql / plain duckdb", stats["grace sql"], stats["plain duckdb"], 3)
        ratio("grace ask / bare embedder", stats["grace ask"], stats["bare embedder"], 1.5)

        questions = batch_questions(lake)
        batches = [batch_per_question(lake, questions) for _ in range(max(1, args.runs // 2))]
        first, per = statistics.median(b[0] for b in batches), statistics.median(b[1] for b in batches)
        print(f"grace ask - ({len(questions)} questions): first answer after {first:.2f} s, then {1000 * per:.1f} ms per question "
              f"(median of {len(batches)} runs: {', '.join(f'{1000 * b[1]:.1f}' for b in batches)} ms)   (target ≤ 50 ms)")


if __name__ == "__main__":
    main()
