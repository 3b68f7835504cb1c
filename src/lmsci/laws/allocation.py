"""Compute-optimal allocation under C = 6 N D: Approach 3 (from a fitted law) and Approach 2 (IsoFLOP minima).

Hoffmann et al. 2022 (arXiv 2203.15556), Section 3:

* Approach 3: minimise the fitted ``L(N, D)`` on the line ``C = 6 N D``. For Chinchilla's form the
  minimiser is closed-form (their eq. 4 / Appendix D.2)::

      N_opt(C) = G (C/6)^a,  D_opt(C) = G^-1 (C/6)^b,
      G = (alpha A / (beta B))^(1/(alpha+beta)),  a = beta/(alpha+beta),  b = alpha/(alpha+beta).

  For other two-variable forms (Kaplan's ``L(N, D)``) we minimise numerically over ``log N``.
* Approach 2: for each compute budget (an IsoFLOP profile), fit a parabola to loss vs ``log N``,
  take its minimum as ``N_opt(C)``, then fit power laws ``N_opt ∝ C^a`` and ``D_opt ∝ C^b``.

Intervals come from the bootstrap parameter samples of the fit (percentiles), so tokens per
parameter ``D_opt/N_opt`` at a budget carries the uncertainty of the law's constants.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from lmsci.errors import DataError
from lmsci.laws.fit import FitResult
from lmsci.laws.forms import Form

Array = np.ndarray


def chinchilla_allocation(params: dict[str, float], C: Array | float) -> tuple[Array, Array]:
    """Closed-form compute-optimal (N_opt, D_opt) for ``L = E + A/N^alpha + B/D^beta`` at ``C = 6ND``.

    Args:
        params: ``A``, ``B``, ``alpha``, ``beta`` (``E`` does not move the optimum).
        C: training FLOP, scalar or ``[m]``.

    Returns:
        (N_opt, D_opt), each shaped like ``C``.

    Source: Hoffmann et al. 2022, arXiv 2203.15556, eq. 4.
    """
    A, B, al, be = (float(params[k]) for k in ("A", "B", "alpha", "beta"))
    G = (al * A / (be * B)) ** (1.0 / (al + be))
    c6 = np.asarray(C, dtype=float) / 6.0
    n = G * c6 ** (be / (al + be))
    return n, c6 / n


def _chinchilla_alloc_batch(nat: Array, C: Array, names: list[str]) -> Array:
    """``nat [B, p]`` natural params -> log N_opt ``[B, m]`` (closed form)."""
    A, B = nat[:, names.index("A")], nat[:, names.index("B")]
    al, be = nat[:, names.index("alpha")], nat[:, names.index("beta")]
    lnG = (np.log(al * A) - np.log(be * B)) / (al + be)
    return lnG[:, None] + (be / (al + be))[:, None] * np.log(np.asarray(C, float) / 6.0)[None, :]


def _numeric_alloc_batch(form: Form, thetas: Array, C: Array, n_grid: int = 801) -> Array:
    """Minimise the form's prediction over log N on C = 6ND, for fit-space ``thetas [B, p]``; log N ``[B, m]``."""
    C = np.asarray(C, dtype=float)
    out = np.empty((len(thetas), len(C)))
    for j, c in enumerate(C):
        l6 = np.log(c / 6.0)
        lnN = np.linspace(0.0, l6, n_grid)  # D from C/6 down to 1 token
        X = {"N": np.exp(lnN), "D": np.exp(l6 - lnN)}
        f = form.fj(thetas, X, jac=False)[0]  # [B, n_grid]
        f = np.where(np.isfinite(f), f, np.inf)
        i = np.clip(np.argmin(f, axis=1), 1, n_grid - 2)
        rows = np.arange(len(thetas))
        y0, y1, y2 = f[rows, i - 1], f[rows, i], f[rows, i + 1]
        den = y0 - 2 * y1 + y2
        h = lnN[1] - lnN[0]
        shift = np.where(den > 0, 0.5 * (y0 - y2) / np.where(den > 0, den, 1.0), 0.0)
        out[:, j] = lnN[i] + np.clip(shift, -1, 1) * h
    return out


def optimal_log_n(form: Form, thetas: Array, C: Array) -> Array:
    """log N_opt ``[B, m]`` for fit-space parameter rows ``thetas [B, p]`` at budgets ``C [m]``.

    Raises:
        DataError: the form is not a law of both N and D.
    """
    if set(form.inputs) != {"N", "D"} or form.space != "log":
        raise DataError(f"law {form.name!r} is not a loss law of N and D; no allocation under C = 6ND")
    thetas = np.atleast_2d(thetas)
    if form.name == "chinchilla":
        return _chinchilla_alloc_batch(form.natural_array(thetas), np.atleast_1d(C), form.param_names)
    return _numeric_alloc_batch(form, thetas, np.atleast_1d(C))


def allocation_table(res: FitResult, C: Array, level: float = 0.95) -> pd.DataFrame:
    """N_opt, D_opt, tokens per parameter and predicted loss at each budget, with bootstrap intervals.

    Args:
        res: a fit of a two-variable loss law (``chinchilla`` or ``kaplan_nd``).
        C: budgets in FLOP ``[m]``.
        level: interval level (percentile bootstrap; needs ``res.boot``).

    Returns:
        columns ``C, N_opt, N_lo, N_hi, D_opt, D_lo, D_hi, tokens_per_param, tpp_lo, tpp_hi, loss_opt``
        (interval columns are NaN without bootstrap).
    """
    C = np.atleast_1d(np.asarray(C, dtype=float))
    form = res.form
    lnN = optimal_log_n(form, res.theta[None], C)[0]
    N = np.exp(lnN)
    D = C / (6 * N)
    loss = form.predict(res.theta, {"N": N, "D": D})
    df = pd.DataFrame({"C": C, "N_opt": N, "D_opt": D, "tokens_per_param": D / N, "loss_opt": loss})
    q = (1 - level) / 2
    if res.boot_theta is not None:
        bl = optimal_log_n(form, res.boot_theta, C)
        bN = np.exp(bl)
        bD = C[None] / (6 * bN)
        for name, arr in (("N", bN), ("D", bD), ("tpp", bD / bN)):
            df[f"{name}_lo"] = np.nanquantile(arr, q, axis=0)
            df[f"{name}_hi"] = np.nanquantile(arr, 1 - q, axis=0)
    else:
        for name in ("N", "D", "tpp"):
            df[f"{name}_lo"] = np.nan
            df[f"{name}_hi"] = np.nan
    return df[["C", "N_opt", "N_lo", "N_hi", "D_opt", "D_lo", "D_hi", "tokens_per_param", "tpp_lo", "tpp_hi",
               "loss_opt"]]


def allocation_exponents(res: FitResult, level: float = 0.95) -> dict[str, Any]:
    """Exponents ``a`` (N_opt ∝ C^a) and ``b`` (D_opt ∝ C^b) implied by a fit, with bootstrap intervals.

    Chinchilla: ``a = beta/(alpha+beta)`` exactly; other forms: the log-log slope of the numeric
    optimum between C = 1e18 and 1e24 (units of the fitted inputs).
    """
    def ab(thetas):
        C = np.array([1e18, 1e24])
        l = optimal_log_n(res.form, thetas, C)
        a = (l[:, 1] - l[:, 0]) / np.log(C[1] / C[0])
        return a, 1 - a

    a, b = ab(res.theta[None])
    out: dict[str, Any] = {"a": float(a[0]), "b": float(b[0]), "a_ci": None, "b_ci": None}
    if res.boot_theta is not None:
        ba, bb = ab(res.boot_theta)
        q = (1 - level) / 2
        out["a_ci"] = tuple(float(x) for x in np.nanquantile(ba, [q, 1 - q]))
        out["b_ci"] = tuple(float(x) for x in np.nanquantile(bb, [q, 1 - q]))
        out["a_se"] = float(np.nanstd(ba, ddof=1))
    return out


def isoloss_grid(res: FitResult, C_range: tuple[float, float], N_range: tuple[float, float], n: int = 160):
    """Loss on a log-spaced grid of (C, N) with D = C/(6N), for IsoLoss contour plots.

    Returns:
        (C ``[n]``, N ``[n]``, L ``[n, n]`` indexed [N, C]).
    """
    Cs = np.geomspace(*C_range, n)
    Ns = np.geomspace(*N_range, n)
    CC, NN = np.meshgrid(Cs, Ns)
    L = res.form.predict(res.theta, {"N": NN.ravel(), "D": (CC / (6 * NN)).ravel()}).reshape(NN.shape)
    return Cs, Ns, L


# ------------------------------------------------------------------------------------------------
def group_budgets(C: Array, tol_dex: float = 0.05) -> Array:
    """Group runs into compute budgets: sorted log10 C values closer than ``tol_dex`` share a group id."""
    lc = np.log10(np.asarray(C, dtype=float))
    order = np.argsort(lc)
    gid = np.empty(len(lc), int)
    g = 0
    start = lc[order[0]] if len(lc) else 0.0
    for i, j in enumerate(order):
        if i > 0 and lc[j] - start > tol_dex:
            g += 1
            start = lc[j]
        gid[j] = g
    return gid


def approach2(
    N: Array, C: Array, loss: Array, *, budget: Array | None = None, tol_dex: float = 0.05, min_points: int = 4,
    level: float = 0.95,
) -> dict[str, Any]:
    """Hoffmann et al.'s Approach 2: parabola per IsoFLOP profile, then power laws of the minima.

    Args:
        N, C, loss: runs ``[n]`` (parameters, FLOP, final loss).
        budget: optional budget label per run; otherwise runs are grouped by ``log10 C`` within ``tol_dex``.
        min_points: fewest distinct model sizes for a profile to be used.

    Returns:
        ``profiles`` (DataFrame: budget C, n, N_opt, D_opt, loss_min, interior), ``a``/``b`` (slopes
        of log N_opt, log D_opt vs log C over the profiles whose minimum is interior) with t-based
        intervals, ``n_profiles``. Exponents are NaN with fewer than 2 usable profiles.

    Source: Hoffmann et al. 2022, arXiv 2203.15556, Section 3.2, Figure 3.
    """
    N, C, loss = (np.asarray(v, dtype=float) for v in (N, C, loss))
    gid = group_budgets(C, tol_dex) if budget is None else pd.factorize(np.asarray(budget))[0]
    rows = []
    for g in np.unique(gid):
        m = gid == g
        if len(np.unique(N[m])) < min_points:
            continue
        x = np.log10(N[m])
        c2, c1, c0 = np.polyfit(x, loss[m], 2)
        cb = float(np.exp(np.mean(np.log(C[m]))))
        interior = c2 > 0 and x.min() <= -c1 / (2 * c2) <= x.max()
        xo = -c1 / (2 * c2) if c2 > 0 else x[np.argmin(loss[m])]
        n_opt = 10 ** xo
        rows.append({"C": cb, "n": int(m.sum()), "N_opt": n_opt, "D_opt": cb / (6 * n_opt),
                     "loss_min": float(c0 + c1 * xo + c2 * xo * xo), "interior": bool(interior),
                     "curvature": float(c2)})
    prof = pd.DataFrame(rows)
    out: dict[str, Any] = {"profiles": prof, "n_profiles": int(len(prof)), "a": float("nan"), "b": float("nan"),
                           "a_ci": None, "b_ci": None}
    use = prof[prof["interior"]] if not prof.empty else prof
    if len(use) >= 2:
        lc = np.log(use["C"].to_numpy())
        for key, col in (("a", "N_opt"), ("b", "D_opt")):
            r = stats.linregress(lc, np.log(use[col].to_numpy()))
            out[key] = float(r.slope)
            out[f"{key}_intercept"] = float(r.intercept)
            if len(use) >= 3:
                t = stats.t.ppf(0.5 + level / 2, len(use) - 2)
                out[f"{key}_ci"] = (float(r.slope - t * r.stderr), float(r.slope + t * r.stderr))
    out["n_used"] = int(len(use))
    return out
