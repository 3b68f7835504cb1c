"""Statistics of lmsci's verdicts, in one home: intervals across training seeds, binomial intervals, bootstrap.

* :func:`across_seeds`: the Student-t interval of a mean over per-seed values (what every registered rule with
  ``uncertainty="seeds"`` reads).
* :func:`wilson_interval` and :func:`clopper_pearson`: intervals of a proportion (Wilson 1927; Clopper and
  Pearson 1934, exact).
* :func:`bootstrap_ci`: a percentile bootstrap interval of any statistic of a sample (Efron 1979).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np


@dataclass
class SeedStat:
    """Mean and interval of one statistic across training seeds.

    Attributes:
        mean: mean over seeds.
        lo, hi: the interval (equal to ``mean`` when n < 2).
        n: number of seeds.
        kind: a label for reports (``"95% CI across 3 seeds (Student t)"``).
    """

    mean: float
    lo: float
    hi: float
    n: int
    kind: str

    @property
    def ci(self) -> tuple[float, float] | None:
        """``(lo, hi)``, or None with fewer than two seeds."""
        return (self.lo, self.hi) if self.n >= 2 else None


def across_seeds(values: Iterable[float], level: float = 0.95) -> SeedStat:
    """Student-t interval of the mean of per-seed values (non-finite values dropped).

    Args:
        values: one value per training seed.
        level: confidence level.

    Returns:
        :class:`SeedStat`; with one seed the interval collapses to the value and ``kind`` says "1 seed".

    Raises:
        ValueError: no finite value.
    """
    from scipy import stats

    x = np.asarray([float(v) for v in values], dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        raise ValueError("across_seeds: no finite values")
    m = float(x.mean())
    if x.size < 2:
        return SeedStat(m, m, m, 1, "1 seed (no interval across seeds)")
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return SeedStat(m, m - half, m + half, int(x.size),
                    f"{round(level * 100)}% CI across {x.size} seeds (Student t)")


def wilson_interval(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval (95% at the default ``z``) of a proportion ``p`` observed over ``n`` trials.

    Returns ``(nan, nan)`` when ``n <= 0``. Source: Wilson 1927, "Probable inference, the law of succession,
    and statistical inference", JASA 22.
    """
    if n <= 0:
        return (float("nan"), float("nan"))
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson 1934) binomial interval for ``k`` successes out of ``n`` trials."""
    from scipy.stats import beta

    a = 1 - level
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def bootstrap_ci(x: Iterable[float], stat: Callable[[np.ndarray], float] | None = None, *, n_boot: int = 1000,
                 level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over a sample ``x`` (shape ``[n]``), resampled ``n_boot``
    times from ``numpy.random.default_rng(seed)`` (Efron 1979). ``stat=None`` is the mean (vectorised over the
    resamples); the interval's tails are ``(1 - level) / 2`` each (rounded to 12 digits, so 0.95 gives exactly
    the 2.5th and 97.5th percentiles).

    Raises:
        ValueError: an empty sample.
    """
    a = np.asarray(list(x), dtype=float)
    if a.size == 0:
        raise ValueError("bootstrap_ci: empty sample")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, (n_boot, a.size))
    boots = a[idx].mean(1) if stat is None else np.array([stat(a[i]) for i in idx])
    q = round((1 - level) / 2, 12)
    lo, hi = np.quantile(boots, [q, 1 - q])
    return float(lo), float(hi)
