"""lmsci.stats: the one home of intervals (across seeds, binomial, bootstrap)."""

import math

import numpy as np
import pytest

from lmsci import stats


def test_across_seeds_student_t():
    st = stats.across_seeds([1.0, 2.0, 3.0])
    # t_{0.975, 2} = 4.3027; sd 1; n 3
    assert st.mean == 2.0 and st.n == 3
    assert st.hi - st.mean == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert stats.across_seeds([5.0, float("nan")]).ci is None
    with pytest.raises(ValueError):
        stats.across_seeds([float("nan")])


def test_binomial_intervals():
    lo, hi = stats.wilson_interval(0.5, 100)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
    assert all(math.isnan(v) for v in stats.wilson_interval(0.5, 0))
    lo, hi = stats.clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.3085, abs=1e-3)  # exact: 1 - 0.025**(1/10)
    lo, hi = stats.clopper_pearson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** 0.1, abs=1e-9)


def test_bootstrap_ci_covers_the_mean_and_is_reproducible():
    x = np.random.default_rng(0).normal(3.0, 1.0, size=200)
    lo, hi = stats.bootstrap_ci(x, n_boot=500, seed=1)
    assert lo < 3.0 < hi and hi - lo < 0.5
    assert stats.bootstrap_ci(x, n_boot=500, seed=1) == (lo, hi)
    with pytest.raises(ValueError):
        stats.bootstrap_ci([])
