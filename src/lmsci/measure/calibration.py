"""Instruments of "Calibrated Language Models Must Hallucinate" (Kalai & Vempala, STOC 2024, arXiv 2311.14648).

All distributions are dense numpy vectors over the plausible factoids ``Y`` (length ``|Y|``):

* :func:`monofact_rate` -- the Good-Turing estimate of the missing mass, ``MF = N_1 / n`` (facts seen
  exactly once over the number of training documents; sec. 4).
* :func:`missing_mass` -- the true ``p(Y \\ O)`` of the unobserved factoids.
* :func:`mle_generator` -- the empirical distribution ``c(y) / n`` (never hallucinates; maximally
  miscalibrated on the unseen).
* :func:`good_turing_generator` -- Good-Turing adjusted counts on the seen (scaled to ``1 - MF``),
  ``MF / |Y \\ O|`` on each unseen factoid: the calibrated positive control (its hallucination rate is
  ``MF (1 - |F \\ O| / |Y \\ O|)``).
* :func:`adaptive_bins` and :func:`miscalibration` -- ``Mis_b(g, p) = 1/2 sum_B |p(B) - g(B)|`` over the
  bins ``V_b(g)`` of factoids grouped by the generator's own probability (sec. 3, "semi-calibration" by
  binning): ``b`` bins of about equal ``g``-mass, ties kept together, plus one bin for ``g(y) = 0``.
* :func:`hallucination_rate` -- ``g(H)``, the generator's mass on non-facts.
* :func:`kv_bound` -- the authors' simplified corollary (probability >= 99% over the training set):
  ``g(H) >= MF - Mis_b - 300 |F| / |H| - 7 / sqrt(n)``.
"""

from __future__ import annotations

import math

import numpy as np


def counts_over(y: np.ndarray, n_y: int) -> np.ndarray:
    """``[n_y]`` int64 counts of the flat factoid indices ``y`` (``[n]``) in ``[0, n_y)``."""
    return np.bincount(np.asarray(y, dtype=np.int64), minlength=n_y)


def monofact_rate(counts: np.ndarray) -> float:
    """``MF = #{y : c(y) = 1} / n`` with ``n = sum c`` (Good-Turing missing-mass estimate).

    Raises:
        ValueError: no documents (``n = 0``).
    """
    n = int(np.sum(counts))
    if n == 0:
        raise ValueError("monofact_rate: no documents")
    return float(np.sum(counts == 1)) / n


def missing_mass(p: np.ndarray, counts: np.ndarray) -> float:
    """``p(Y \\ O)``: the true probability of the factoids that were not observed (``counts == 0``)."""
    return float(np.sum(p[np.asarray(counts) == 0]))


def mle_generator(counts: np.ndarray) -> np.ndarray:
    """The empirical distribution ``c / n`` (``[|Y|]`` float64)."""
    c = np.asarray(counts, dtype=np.float64)
    return c / c.sum()


def good_turing_generator(counts: np.ndarray, k: int = 5) -> np.ndarray:
    """The Good-Turing generator: mass ``MF`` spread evenly over the unseen factoids, and on a factoid seen
    ``r`` times the Good-Turing adjusted count ``r* = (r + 1) N_{r+1} / N_r`` (for ``r <= k`` with
    ``N_{r+1} > 0``; ``r`` itself above the cutoff ``k``, as in Katz back-off), the seen part renormalised to
    ``1 - MF``. ``N_r`` is the number of factoids seen exactly ``r`` times.

    When every factoid was seen it is the empirical distribution. ``[|Y|]`` float64, sums to 1.
    Source: Good 1953; Gale & Sampson 1995 (simple Good-Turing); the positive control of spec §3.
    """
    c = np.asarray(counts, dtype=np.int64)
    n = c.sum()
    unseen = c == 0
    m = int(unseen.sum())
    if m == 0:
        return c / n
    mf = monofact_rate(counts)
    nr = np.bincount(c)
    adj = c.astype(np.float64)
    for r in range(1, min(k, len(nr) - 2) + 1):
        if nr[r] > 0 and nr[r + 1] > 0:
            adj[c == r] = (r + 1) * nr[r + 1] / nr[r]
    seen = adj * (~unseen)
    return np.where(unseen, mf / m, (1.0 - mf) * seen / seen.sum())


def temper(g: np.ndarray, temperature: float) -> np.ndarray:
    """``g ** (1/T)`` renormalised (``T > 0``); zeros stay zero.

    Raises:
        ValueError: ``temperature <= 0``.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logg = np.where(g > 0, np.log(np.where(g > 0, g, 1.0)), -np.inf) / temperature
    w = np.exp(logg - logg[np.isfinite(logg)].max())
    return w / w.sum()


def adaptive_bins(g: np.ndarray, b: int) -> np.ndarray:
    """Bin index (``[|Y|]`` int64 in ``[0, b]``) of each factoid by the generator's own probability.

    Factoids are sorted by ``g`` (largest first); a factoid's bin is ``floor(b * G / g_total)``, where
    ``G`` is the ``g``-mass of all factoids with a strictly larger ``g`` (so tied values share a bin and each
    of the ``b`` bins holds about ``1/b`` of the mass); factoids with ``g = 0`` get the extra bin ``b``.

    Raises:
        ValueError: ``b < 1``.
    """
    if b < 1:
        raise ValueError(f"b must be >= 1, got {b}")
    g = np.asarray(g, dtype=np.float64)
    order = np.argsort(-g)  # ties get the same bin, so their order does not matter
    gs = g[order]
    total = gs.sum()
    before = np.cumsum(gs) - gs
    new_run = np.r_[True, gs[1:] != gs[:-1]]
    run_first = np.flatnonzero(new_run)
    run_id = np.cumsum(new_run) - 1
    start_mass = before[run_first][run_id]
    bins_sorted = np.minimum(np.floor(b * start_mass / total + 1e-12).astype(np.int64), b - 1)
    bins_sorted[gs <= 0] = b
    out = np.empty_like(bins_sorted)
    out[order] = bins_sorted
    return out


def miscalibration(g: np.ndarray, p: np.ndarray, b: int = 10, bins: np.ndarray | None = None) -> float:
    """``Mis_b(g, p) = 1/2 sum_B |p(B) - g(B)|`` over :func:`adaptive_bins` of ``g`` (total variation between
    ``g`` and its bin-wise recalibration ``p^{V_b(g)}``; Kalai & Vempala sec. 3).

    Args:
        g: ``[|Y|]`` the generator's distribution over factoids.
        p: ``[|Y|]`` the world's distribution.
        b: number of bins (``bins`` overrides).
        bins: precomputed bin indices.
    """
    bins = adaptive_bins(g, b) if bins is None else bins
    k = int(bins.max()) + 1
    return 0.5 * float(np.abs(np.bincount(bins, weights=p, minlength=k) - np.bincount(bins, weights=g, minlength=k)).sum())


def hallucination_rate(g: np.ndarray, fact_mask: np.ndarray) -> float:
    """``g(H)``: the generator's probability of a plausible factoid that is not a fact."""
    return float(np.sum(np.asarray(g)[~np.asarray(fact_mask, dtype=bool)]))


def kv_bound(mf: float, mis: float, n_facts: int, n_hallucinations: int, n: int) -> dict[str, float]:
    """The simplified corollary of Kalai & Vempala (stated by the authors for probability >= 99%):
    ``g(H) >= MF - Mis_b - 300 |F| / |H| - 7 / sqrt(n)``.

    Returns:
        ``{"bound", "regularity", "concentration"}`` (the two subtracted terms and the bound).
    """
    reg = 300.0 * n_facts / n_hallucinations
    conc = 7.0 / math.sqrt(n)
    return {"bound": mf - mis - reg - conc, "regularity": reg, "concentration": conc}
