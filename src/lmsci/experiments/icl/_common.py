"""Pieces shared by the icl family's experiments (:mod:`.icl_kernel_regression`, :mod:`.icl_linear_regression`)."""

from __future__ import annotations

from typing import Any

from lmsci.stats import across_seeds


def seed_interval(x) -> tuple[Any, float, float]:
    """``(stat, lower, upper)`` across training seeds of the per-seed values ``x`` (a Student-t 95% CI,
    :func:`lmsci.stats.across_seeds`); with one seed both ends are the mean."""
    st_ = across_seeds(x)
    return st_, (st_.lo), (st_.hi)
