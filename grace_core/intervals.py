"""Confidence intervals of shares estimated from reviewed samples."""

from __future__ import annotations

import math

Z95 = 1.959963984540054
"""The standard normal quantile of 0.975: a two-sided 95% interval."""


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial share ``successes / n`` (95% by default).

    With p̂ = successes / n::

        centre = (p̂ + z²/(2n)) / (1 + z²/n)
        half   = z / (1 + z²/n) · sqrt(p̂(1 − p̂)/n + z²/(4n²))
        [centre − half, centre + half]

    Unlike the normal (Wald) interval it stays inside [0, 1] and is not empty at p̂ = 0 or 1,
    which is what small audit samples give. Reference: E. B. Wilson, "Probable inference, the
    law of succession, and statistical inference", JASA 22 (1927) 209–212; recommended by
    L. D. Brown, T. T. Cai, A. DasGupta, "Interval estimation for a binomial proportion",
    Statistical Science 16 (2001) 101–133. ``None`` when ``n`` is 0.
    """
    if n <= 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} outside 0..{n}")
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)
