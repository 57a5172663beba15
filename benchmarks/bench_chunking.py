"""Text chunking time against text length: ``chunk_text`` must be linear (issue 11: the old
chunker re-sliced a long paragraph after every chunk and took 3.1 / 12.6 / 49 s on one
paragraph of 1M / 2M / 4M words).

    .venv/bin/python -m benchmarks.bench_chunking

Prints the best-of-3 time for a single paragraph of 1M and 4M words, and for a text of
1,000-word paragraphs of the same sizes, and the 4M / 1M ratio of each; linear time gives a
ratio near 4 (quadratic: near 16). Exits with code 1 when a ratio is above ``--max-ratio``.
"""

from __future__ import annotations

import argparse
import sys
import time

from grace_core.documents import chunk_text


def best_seconds(text: str, repeat: int) -> float:
    """Best wall time of ``repeat`` runs of ``chunk_text(text)``."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        chunk_text(text)
        best = min(best, time.perf_counter() - start)
    return best


def texts(n_words: int) -> dict[str, str]:
    """The two shapes measured, with ``n_words`` words each."""
    words = [f"w{i % 9973}" for i in range(n_words)]
    return {
        "one paragraph": " ".join(words),
        "1,000-word paragraphs": "\n\n".join(" ".join(words[i:i + 1000]) for i in range(0, n_words, 1000)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=1_000_000, help="words of the small text")
    ap.add_argument("--large", type=int, default=4_000_000, help="words of the large text")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-ratio", type=float, default=6.0, help="fail above this large/small time ratio (linear: large/small words)")
    args = ap.parse_args()

    small, large = texts(args.small), texts(args.large)
    worst = 0.0
    for shape in small:
        t_small, t_large = best_seconds(small[shape], args.repeat), best_seconds(large[shape], args.repeat)
        ratio = t_large / t_small
        worst = max(worst, ratio)
        print(f"{shape:>22}: {args.small:,} words {t_small:.3f} s, {args.large:,} words {t_large:.3f} s, ratio {ratio:.2f}")
    print(f"worst ratio {worst:.2f} for {args.large / args.small:.1f}× the words (limit {args.max_ratio})")
    sys.exit(0 if worst <= args.max_ratio else 1)


if __name__ == "__main__":
    main()
