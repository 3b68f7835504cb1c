"""Figures for fitted laws: curves over the data, IsoLoss contours with the efficient frontier,
IsoFLOP profiles, residuals. Matplotlib (Agg); each function writes one PNG and returns its path.

The IsoLoss figure follows Hoffmann et al. 2022 (arXiv 2203.15556), Figure 4 (left): contours of the
fitted loss over (FLOP, parameters) with the efficient frontier ``N_opt(C)`` in blue.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmsci.laws.allocation import isoloss_grid, optimal_log_n
from lmsci.laws.fit import FitResult

Array = np.ndarray


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    """Write ``fig`` as a PNG at 120 dpi to ``path``, close it, and return the path."""
    fig.savefig(path, dpi=120)
    _plt().close(fig)
    return Path(path)


def plot_fit(res: FitResult, X: dict[str, Array], y: Array, path: Path, title: str = "") -> Path:
    """Data and fitted curves: for two-variable laws, loss vs the second input in bins of the first."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    inputs = res.form.inputs
    ylab = "loss (nats/token)" if res.form.space == "log" else "accuracy"
    if len(inputs) == 1:
        v = inputs[0]
        x = np.asarray(X[v])
        ax.scatter(x, y, s=14, c="k", alpha=0.6, label="runs")
        xs = np.geomspace(x.min() / 1.5, x.max() * 3, 200)
        ax.plot(xs, res.form.predict(res.theta, {v: xs}), "C3", label=f"{res.form.name} fit")
        ax.set_xlabel(v)
    else:
        v1, v2 = inputs
        a, b = np.asarray(X[v1]), np.asarray(X[v2])
        nb = int(min(6, max(1, len(np.unique(a)))))
        edges = np.quantile(np.log(a), np.linspace(0, 1, nb + 1))
        bins = np.clip(np.searchsorted(edges, np.log(a), side="right") - 1, 0, nb - 1)
        cmap = plt.get_cmap("viridis")
        for k in range(nb):
            m = bins == k
            if not m.any():
                continue
            col = cmap(k / max(nb - 1, 1))
            med = float(np.exp(np.median(np.log(a[m]))))
            ax.scatter(b[m], np.asarray(y)[m], s=14, color=col, alpha=0.7)
            xs = np.geomspace(b.min() / 1.5, b.max() * 3, 200)
            ax.plot(xs, res.form.predict(res.theta, {v1: np.full_like(xs, med), v2: xs}), color=col,
                    label=f"{v1} ≈ {med:.3g}")
        ax.set_xlabel(v2)
        ax.legend(fontsize=7, title=f"fit at median {v1} of bin", title_fontsize=7)
    ax.set_xscale("log")
    if res.form.space == "log":
        ax.set_yscale("log")
    ax.set_ylabel(ylab)
    ax.set_title(title or f"{res.form.name}: {res.form.equation}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    fig.subplots_adjust(left=0.13, right=0.95, bottom=0.13, top=0.92)
    return _save(fig, path)


def plot_isoloss(res: FitResult, X: dict[str, Array], y: Array, path: Path, frontier_C: Array | None = None,
                 approach2: dict | None = None, title: str = "") -> Path:
    """IsoLoss contours over (C, N) with D = C/(6N), the efficient frontier N_opt(C) and the runs."""
    plt = _plt()
    N, C = np.asarray(X["N"]), np.asarray(X["C"] if "C" in X else 6 * X["N"] * X["D"])
    c_lo, c_hi = C.min() / 3, C.max() * 1e3
    n_lo, n_hi = N.min() / 3, N.max() * 30
    Cs, Ns, L = isoloss_grid(res, (c_lo, c_hi), (n_lo, n_hi), n=100)
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    levels = np.quantile(L[np.isfinite(L)], np.linspace(0.02, 0.9, 14))
    cs = ax.contour(Cs, Ns, L, levels=np.unique(levels), cmap="viridis_r", linewidths=0.9)
    ax.clabel(cs, fontsize=6, fmt="%.2f")
    sc = ax.scatter(C, N, c=y, s=10, cmap="viridis_r", edgecolors="k", linewidths=0.2, zorder=3)
    fig.colorbar(sc, ax=ax, label="loss", fraction=0.05, pad=0.02)
    fc = np.geomspace(c_lo, c_hi, 100) if frontier_C is None else np.asarray(frontier_C)
    ln = optimal_log_n(res.form, res.theta[None], fc)[0]
    ax.plot(fc, np.exp(ln), "C0", lw=2, label="efficient frontier (Approach 3)")
    if res.boot_theta is not None:
        bl = optimal_log_n(res.form, res.boot_theta, fc)
        ax.fill_between(fc, np.exp(np.quantile(bl, 0.025, axis=0)), np.exp(np.quantile(bl, 0.975, axis=0)),
                        color="C0", alpha=0.2, label="95% bootstrap band")
    if approach2 is not None and approach2.get("n_profiles", 0):
        p = approach2["profiles"]
        ax.scatter(p["C"], p["N_opt"], marker="*", s=50, c="C3", zorder=4, label="IsoFLOP minima (Approach 2)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(c_lo, c_hi)
    ax.set_ylim(n_lo, n_hi)
    ax.set_xlabel("training FLOP C = 6ND")
    ax.set_ylabel("parameters N")
    ax.set_title(title or f"IsoLoss contours of the fitted {res.form.name} law", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.subplots_adjust(left=0.13, right=0.9, bottom=0.13, top=0.92)
    return _save(fig, path)


def plot_isoflop(N: Array, C: Array, loss: Array, approach2: dict, path: Path, res: FitResult | None = None,
                 budget: Array | None = None) -> Path:
    """IsoFLOP profiles: loss vs N per compute budget, parabola fits and their minima (Approach 2).

    ``budget`` labels the profile of each run (as given to :func:`lmsci.laws.allocation.approach2`);
    by default runs are grouped by log10 C within 0.05 dex."""
    from lmsci.laws.allocation import group_budgets

    plt = _plt()
    N, C, loss = (np.asarray(v, float) for v in (N, C, loss))
    gid = group_budgets(C) if budget is None else np.unique(np.asarray(budget), return_inverse=True)[1]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    cmap = plt.get_cmap("plasma")
    prof = approach2["profiles"]
    ug = np.unique(gid)
    for i, g in enumerate(ug):
        m = gid == g
        if len(np.unique(N[m])) < 3:
            continue
        col = cmap(i / max(len(ug) - 1, 1))
        ax.scatter(N[m], loss[m], s=12, color=col)
        x = np.log10(N[m])
        if len(np.unique(x)) >= 3:
            c = np.polyfit(x, loss[m], 2)
            xs = np.linspace(x.min(), x.max(), 50)
            ax.plot(10 ** xs, np.polyval(c, xs), color=col, lw=0.8)
        if res is not None:
            cb = float(np.exp(np.mean(np.log(C[m]))))
            ns = np.geomspace(N[m].min(), N[m].max(), 50)
            ax.plot(ns, res.form.predict(res.theta, {"N": ns, "D": cb / (6 * ns)}), color=col, lw=0.8, ls=":")
    if len(prof):
        ax.scatter(prof["N_opt"], prof["loss_min"], marker="*", s=60, c="k", zorder=4, label="parabola minima")
        ax.legend(fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("parameters N")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("IsoFLOP profiles (solid: parabola per budget; dotted: fitted law)", fontsize=9)
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.13, right=0.95, bottom=0.13, top=0.92)
    return _save(fig, path)


def plot_residuals(res: FitResult, X: dict[str, Array], y: Array, path: Path, by: str | None = None) -> Path:
    """Fit-space residuals (log y - log y_hat) against an input (default: C, else the first input)."""
    plt = _plt()
    by = by or ("C" if "C" in X else res.form.inputs[0])
    pred = res.predict({k: X[k] for k in res.form.inputs})
    y = np.asarray(y, float)
    r = np.log(y) - np.log(pred) if res.form.space == "log" else y - pred
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.scatter(X[by], r, s=10, c="k", alpha=0.6)
    ax.axhline(0, color="C3", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel(by)
    ax.set_ylabel("log y − log ŷ" if res.form.space == "log" else "y − ŷ")
    ax.set_title(f"{res.form.name} residuals (RMSE {res.rmse:.4f}, n={res.n})", fontsize=9)
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.13, right=0.95, bottom=0.13, top=0.92)
    return _save(fig, path)
