"""The report kit: figure builders every experiment composes instead of writing its own plotting module.

Each builder takes plain data (a results table, a matrix, arrays) and returns a matplotlib ``Figure``;
:func:`lmsci.contract.save_figure` writes it into the run directory. The report also draws
:func:`claim_points` by itself for every claim judged by the engine that no experiment figure names, so each
claim leads with a picture of its statistic on the real and the null arm.

- :func:`arm_points`: one statistic per arm and training seed, with each arm's mean and 95% interval;
- :func:`curves`: metrics over training steps (``metrics.jsonl``), one line per point;
- :func:`head_heatmap`: a ``[n_layers, n_heads]`` score matrix (attention-head scores, patching effects);
- :func:`loglog_fit`: points and a fitted power law on log-log axes;
- :func:`claim_points`: :func:`arm_points` of a registered claim's :class:`~lmsci.claims.Stat`, with its rule's
  threshold drawn.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def arm_points(per_arm: dict[str, Sequence[float]], *, ylabel: str, title: str = "",
               hlines: dict[str, float] | None = None, figsize: tuple[float, float] = (4.6, 3.4)) -> Any:
    """Dots for each arm's per-seed values, with the arm's mean and Student-t 95% interval.

    Args:
        per_arm: arm name -> per-seed values (``[n_seeds]`` floats; non-finite values dropped).
        ylabel: the statistic with its units.
        title: the axes title.
        hlines: label -> y of horizontal reference lines (a rule's threshold, a baseline).
        figsize: inches.

    Returns:
        the matplotlib ``Figure``.
    """
    from lmsci.stats import across_seeds

    plt = _plt()
    fig, ax = plt.subplots(figsize=figsize)
    names = list(per_arm)
    for k, name in enumerate(names):
        x = np.asarray([float(v) for v in per_arm[name]], dtype=float)
        x = x[np.isfinite(x)]
        if x.size == 0:
            continue
        jitter = (np.arange(x.size) - (x.size - 1) / 2) * 0.04
        ax.scatter(k + jitter, x, s=18, alpha=0.8, label=f"{name} ({x.size} seed{'s' * (x.size != 1)})")
        s = across_seeds(x)
        ax.errorbar([k + 0.25], [s.mean], yerr=[[s.mean - s.lo], [s.hi - s.mean]], fmt="_", color="k", capsize=3)
    for label, y in (hlines or {}).items():
        ax.axhline(y, ls="--", lw=1, color="gray")
        ax.annotate(label, (len(names) - 0.5, y), fontsize=7, va="bottom", ha="right", color="gray")
    ax.set_xticks(range(len(names)), names)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel(ylabel, fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return fig


def curves(metrics: pd.DataFrame, *, y: str, x: str = "step", by: str = "point", logy: bool = False,
           ylabel: str = "", title: str = "", max_lines: int = 24, figsize: tuple[float, float] = (5.2, 3.4)) -> Any:
    """A metric over training steps, one line per ``by`` group (e.g. per point of ``metrics.jsonl``).

    Args:
        metrics: rows with columns ``x``, ``y`` and ``by`` (rows where ``y`` is missing are dropped).
        y, x, by: the columns.
        logy: log-scale y axis.
        max_lines: draw at most this many groups (the first ones in order).

    Returns:
        the matplotlib ``Figure``.

    Raises:
        KeyError: ``x``, ``y`` or ``by`` is not a column of ``metrics``.
    """
    missing = [c for c in (x, y, by) if c not in metrics]
    if missing:
        raise KeyError(f"curves: columns {missing} not in the metrics ({list(metrics.columns)[:12]}...)")
    plt = _plt()
    fig, ax = plt.subplots(figsize=figsize)
    d = metrics.dropna(subset=[y])
    for k, (name, g) in enumerate(d.groupby(by, sort=False)):
        if k >= max_lines:
            break
        ax.plot(g[x], g[y], lw=1, label=str(name))
    if logy:
        ax.set_yscale("log")
    ax.set(xlabel=x, ylabel=ylabel or y)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    return fig


def head_heatmap(scores: np.ndarray | Sequence[Sequence[float]], *, label: str, title: str = "",
                 cmap: str = "viridis", annotate: bool | None = None, center: bool = False) -> Any:
    """A ``[n_layers, n_heads]`` matrix as a heat map (layers on y, heads on x).

    Args:
        scores: ``[n_layers, n_heads]`` floats.
        label: the colour bar's label (the score and its units).
        annotate: write each cell's value (default: when the matrix has at most 64 cells).
        center: a diverging map centred on 0 (for signed effects).

    Returns:
        the matplotlib ``Figure``.

    Raises:
        ValueError: ``scores`` is not 2-d.
    """
    m = np.asarray(scores, dtype=float)
    if m.ndim != 2:
        raise ValueError(f"head_heatmap: scores must be [n_layers, n_heads], got shape {m.shape}")
    plt = _plt()
    L, H = m.shape
    fig, ax = plt.subplots(figsize=(min(10, 1.2 + 0.45 * H), min(10, 1.0 + 0.35 * L)))
    kw: dict[str, Any] = {"cmap": "RdBu_r" if center else cmap, "aspect": "auto"}
    if center:
        v = float(np.nanmax(np.abs(m))) or 1.0
        kw.update(vmin=-v, vmax=v)
    im = ax.imshow(m, origin="lower", **kw)
    fig.colorbar(im, ax=ax, label=label)
    ax.set(xlabel="head", ylabel="layer")
    if title:
        ax.set_title(title, fontsize=9)
    if annotate if annotate is not None else m.size <= 64:
        for i in range(L):
            for j in range(H):
                ax.text(j, i, f"{m[i, j]:.2g}", ha="center", va="center", fontsize=6, color="w")
    return fig


def loglog_fit(x: Sequence[float], y: Sequence[float], *, xlabel: str, ylabel: str, fit: tuple[float, float] | None = None,
               groups: Sequence[Any] | None = None, title: str = "") -> Any:
    """Points on log-log axes with a power law ``y = a * x ** b``.

    Args:
        x, y: positive values (others dropped).
        fit: ``(a, b)``; default: least squares on ``log y = log a + b log x``.
        groups: a label per point (one colour each).

    Returns:
        the matplotlib ``Figure`` (the fitted ``b`` in the legend).

    Raises:
        ValueError: fewer than two positive points.
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = (xs > 0) & (ys > 0) & np.isfinite(xs) & np.isfinite(ys)
    if keep.sum() < 2:
        raise ValueError("loglog_fit: needs at least two positive points")
    g = np.asarray(groups if groups is not None else ["points"] * len(xs), dtype=object)[keep]
    xs, ys = xs[keep], ys[keep]
    if fit is None:
        b, loga = np.polyfit(np.log(xs), np.log(ys), 1)
        fit = (float(np.exp(loga)), float(b))
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    for name in dict.fromkeys(g):
        sel = g == name
        ax.scatter(xs[sel], ys[sel], s=16, label=str(name))
    grid = np.geomspace(xs.min(), xs.max(), 50)
    ax.plot(grid, fit[0] * grid ** fit[1], "k--", lw=1, label=f"fit: b = {fit[1]:.3g}")
    ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return fig


def claim_points(claim: Any, results: pd.DataFrame, arm_column: str = "arm") -> Any | None:
    """:func:`arm_points` of a claim's statistic on its real and null arm (None when the claim has no ``Stat``
    or no arm gives a value); the rule's threshold is drawn where it has one."""
    from lmsci.claims.engine import arm_rows, finished

    stat = getattr(claim, "stat", None)
    if stat is None:
        return None
    ok = finished(results)
    arms = claim.arms if claim.kind == "claim" and claim.null else claim.arms[:1]
    per_arm = {a: stat.per_seed(arm_rows(ok, a, arm_column), ok, arm_column).to_numpy() for a in arms}
    per_arm = {a: v for a, v in per_arm.items() if len(v)}
    if not per_arm:
        return None
    spec = claim.decider.spec()
    lines = {f"rule: {k} = {v:.3g}": float(v) for k, v in spec.items()
             if k in ("x", "a", "b") and isinstance(v, float) and np.isfinite(v)}
    words = stat.words or stat.definition()
    return arm_points(per_arm, ylabel=words if len(words) < 60 else words[:57] + "...",
                      title=f"{claim.id}: {claim.decider.text()}"[:90], hlines=lines)
