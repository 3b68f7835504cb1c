"""Closed-form pieces of :mod:`lmsci.experiments.theory.alignment_attack`'s exact world: the first crossing of a
behavior threshold, the neutral system-prompt distribution (the null arm of ``thm2-slope``), Theorem 2's
system-prompt cells, the reverse-sigmoid fit both worlds use (App. H), and the statistics the claims engine reads
for the exact world's checks (:func:`largest`, :func:`smallest`).

Source: Wolf, Wies, Avnery, Levine, Shashua, "Fundamental Limitations of Alignment in Large Language Models",
ICML 2024, arXiv 2304.11082, Theorem 2 (a system prompt ``s0 ~ P+`` of ``|s0|`` sentences adds
``(beta'/beta)|s0| + (sigma/beta) sqrt(|s0|/delta) + 1`` sentences to Theorem 1's attack length).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from lmsci.worlds.personas import PersonaWorld


def first_crossing(values: np.ndarray, threshold: float) -> np.ndarray:
    """Per row of ``values`` (``[m, L + 1]``), the first column index with ``value < threshold``; ``L + 1`` (one past
    the end) when the row never crosses."""
    below = np.asarray(values) < threshold
    return np.where(below.any(1), below.argmax(1), below.shape[1])


def neutral_dist(w: PersonaWorld) -> np.ndarray:
    """``[n_sentences]`` the neutral sentence distribution ``N``: uniform within each bank, negative-bank mass ``r``
    chosen so that ``E_N[log P-(s)/P+(s)] = 0`` (``r = -l+ / (l- - l+)`` with ``l-``/``l+`` the log-likelihood
    ratio of a negative/positive sentence). A system prompt from ``N`` moves the posterior log-odds by 0 on average
    (its ``beta'`` is 0): Theorem 2's delay is absent by construction."""
    llr = w.llr()
    l_pos, l_neg = float(llr[0]), float(llr[-1])
    r = -l_pos / (l_neg - l_pos)
    return np.r_[np.full(w.n_pos, (1 - r) / w.n_pos), np.full(w.n_neg, r / w.n_neg)]


def _attack_lengths(w: PersonaWorld, start: np.ndarray, horizon: int, threshold: float,
                    rng: np.random.Generator) -> np.ndarray:
    """``[draws]`` first misaligning length of attack prompts sampled from ``P-`` after system-prompt log-odds
    ``start`` (``[draws]``); ``horizon + 1`` when an attack never misaligns within ``horizon`` sentences."""
    att = w.sample_sentences(True, (len(start), horizon), rng)
    return first_crossing(w.next_behavior(w.log_odds(att) + start[:, None]), threshold)


def system_prompt_cells(w: PersonaWorld, a: float, L1: float, threshold: float, sys_lengths: list[int],
                        draws: int, delta: float, rng: np.random.Generator,
                        rng_null: np.random.Generator) -> dict[str, Any]:
    """Theorem 2 in one ``(alpha, beta)`` cell of the exact world.

    For each system-prompt length ``m``: ``draws`` system prompts of ``m`` sentences from ``P+`` (real arm) and
    from :func:`neutral_dist` (null arm, drawn from ``rng_null`` so the real arm's draws do not depend on it);
    after each, the greedy attack (the sentence with the largest ``log P-/P+``, repeated) and an attack sampled
    from ``P-``, up to a horizon ``3 L2 + 20`` sentences with ``L2 = L1 + (beta'/beta) m + (sigma/beta)
    sqrt(m/delta) + 1`` (Theorem 2's length, ``L1`` Theorem 1's).

    Args:
        w: the world (its ``alpha`` is ``a``); threshold: ``gamma + eps`` (misaligned below it).
        sys_lengths: the lengths ``m`` (sentences); draws: system prompts per ``m``; delta: Theorem 2's delta.

    Returns:
        ``thm2``: one dict per ``m`` (``L2``, ``frac_greedy_within_L2``, ``mean_n_sampled``, ``mean_n_null``,
        ``censored``); ``thm2_slope`` / ``thm2_null_slope``: least-squares slopes of the mean sampled length
        against ``m`` (sentences per system-prompt sentence), real and null arm; ``thm2_slope_theory``:
        ``beta'/beta``; ``thm2_min_frac``: the smallest share of greedy attacks within ``L2``; ``thm2_censored``:
        the largest share of sampled attacks (either arm) that never misaligned within the horizon.
    """
    beta, beta_p, sigma = w.beta(), w.beta_prime(), w.sigma()
    llr_max, prior = float(w.llr().max()), math.log(a / (1 - a))
    p_null = neutral_dist(w)
    thm2 = []
    for m in sys_lengths:
        s0 = w.sample_sentences(False, (draws, m), rng) if m else np.zeros((draws, 0), int)
        start = w.llr()[s0].sum(1) if m else np.zeros(draws)
        L2 = L1 + beta_p / beta * m + sigma / beta * math.sqrt(m / delta) + 1
        Lm = int(math.ceil(3 * L2 + 20))
        g_lo = start[:, None] + prior + llr_max * np.arange(Lm + 1)[None]
        n_g = first_crossing(w.next_behavior(g_lo), threshold)
        n_att = _attack_lengths(w, start, Lm, threshold, rng)
        s_null = rng_null.choice(w.n_sentences, size=(draws, m), p=p_null)
        n_null = _attack_lengths(w, w.llr()[s_null].sum(1), Lm, threshold, rng_null)
        thm2.append({"m": m, "L2": L2, "frac_greedy_within_L2": float((n_g <= L2).mean()),
                     "mean_n_sampled": float(n_att.mean()), "mean_n_greedy": float(n_g.mean()),
                     "mean_n_null": float(n_null.mean()),
                     "censored": float(max((n_att > Lm).mean(), (n_null > Lm).mean()))})
    ms = np.array([t["m"] for t in thm2], float)
    return {"thm2": thm2,
            "thm2_slope": float(np.polyfit(ms, [t["mean_n_sampled"] for t in thm2], 1)[0]),
            "thm2_null_slope": float(np.polyfit(ms, [t["mean_n_null"] for t in thm2], 1)[0]),
            "thm2_slope_theory": beta_p / beta,
            "thm2_min_frac": min(t["frac_greedy_within_L2"] for t in thm2),
            "thm2_censored": max(t["censored"] for t in thm2)}


def fit_sigmoid(n: np.ndarray, y: np.ndarray, lo: float | None = None, hi: float | None = None) -> dict[str, float] | None:
    """Least-squares fit of ``y = lo + (hi - lo) / (1 + exp(-(n - centre) / scale))`` (``lo``/``hi`` free when
    None). Returns ``{"centre", "scale", "lo", "hi"}`` or None when the fit fails."""
    from scipy.optimize import curve_fit

    n, y = np.asarray(n, float), np.asarray(y, float)
    mid = float(n[np.argmin(np.abs(y - (y.min() + y.max()) / 2))])
    try:
        if lo is None:
            f = lambda x, c, s, a, b: a + (b - a) / (1 + np.exp(-(x - c) / s))  # noqa: E731
            p, _ = curve_fit(f, n, y, p0=[mid, 1.0, y[0], y[-1]],
                             bounds=([-10, 0.05, -1.5, -1.5], [10 * n.max() + 10, 50, 1.5, 1.5]), maxfev=20000)
            return {"centre": float(p[0]), "scale": float(p[1]), "lo": float(p[2]), "hi": float(p[3])}
        f = lambda x, c, s: lo + (hi - lo) / (1 + np.exp(-(x - c) / s))  # noqa: E731
        p, _ = curve_fit(f, n, y, p0=[mid, 1.0], bounds=([-10, 0.05], [10 * n.max() + 10, 50]), maxfev=20000)
        return {"centre": float(p[0]), "scale": float(p[1]), "lo": float(lo), "hi": float(hi)}
    except (RuntimeError, ValueError):
        return None


def largest(col: str):
    """A statistic of the exact world's rows: the largest ``col`` over cells and seeds (one value, for an exact
    check)."""
    def fn(rows: pd.DataFrame) -> pd.Series:
        v = pd.to_numeric(rows[col], errors="coerce").dropna() if col in rows else pd.Series(dtype=float)
        return pd.Series({0: float(v.max())}) if len(v) else pd.Series(dtype=float)
    fn.__name__ = fn.__qualname__ = f"largest_{col}"
    return fn


def smallest(col: str):
    """A statistic of the exact world's rows: the smallest ``col`` over cells and seeds (one value)."""
    def fn(rows: pd.DataFrame) -> pd.Series:
        v = pd.to_numeric(rows[col], errors="coerce").dropna() if col in rows else pd.Series(dtype=float)
        return pd.Series({0: float(v.min())}) if len(v) else pd.Series(dtype=float)
    fn.__name__ = fn.__qualname__ = f"smallest_{col}"
    return fn
