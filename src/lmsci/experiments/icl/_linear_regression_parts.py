"""Parts of ``icl-linear-regression`` (family-private: only :mod:`lmsci.experiments.icl.icl_linear_regression`
imports it): the draws of its null arms (the ``other_w`` labels, the ridge estimate behind the ``control_target``
probe) and its figures (error and SPD against n, probe R^2 per layer).

Sources: Garg et al., arXiv 2208.01066, Fig. 2; Akyurek et al., arXiv 2211.15661, Sec. 4-5; Hewitt & Liang,
arXiv 1909.03368 (control tasks for probes).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import torch

from lmsci.claims.engine import arm_rows
from lmsci.contract import Figure, save_figure
from lmsci.runs import RunDir
from lmsci.train.estimate import gpu_seconds
from lmsci.worlds.linear_regression import BASELINES


def estimate_gpu_seconds(cfg: Any) -> float:
    """Estimated wall seconds of a run of ``cfg`` (an ``ICLLinearRegressionConfig``) on one H100: every seed's
    training (``n_seeds x train.steps`` steps of ``batch_size x 2 (2d + 1)`` vectors; the whole prompt length, an upper
    bound under the curriculum) by :func:`lmsci.train.estimate.gpu_seconds` (its step overhead dominates at this
    size), plus the forward passes of the three measured arms (evaluation and two probe passes) and 10 s a seed of
    host work (the exact baselines in numpy, the scikit-learn probes), an allowance, not measured."""
    seq = 2 * (2 * cfg.d + 1)
    m, t = cfg.model, cfg.train
    per_seed = gpu_seconds(m.d_model, m.n_layers, (cfg.d_in or cfg.d) + 1, seq, tokens=t.steps * t.batch_size * seq,
                           steps=t.steps, eval_tokens=(2 * cfg.n_eval + 3 * cfg.n_probe) * seq)
    return float(cfg.n_seeds * (per_seed + 10.0))


def ridge_estimate(X: np.ndarray, Y: np.ndarray, lam: float) -> np.ndarray:
    """Per prompt ``(X^T X + lam I)^{-1} X^T Y`` ``[batch, d]`` from ``X [batch, n, d]``, ``Y [batch, n]``."""
    XtX, XtY = np.einsum("bij,bik->bjk", X, X), np.einsum("bij,bi->bj", X, Y)
    return np.linalg.solve(XtX + lam * np.eye(X.shape[-1]), XtY[..., None])[..., 0]


def other_w_labels(ev: Any, n_context: int, noise_std: float, gen: torch.Generator) -> torch.Tensor:
    """Labels ``[batch, n_points]`` of the ``other_w`` arm: the first ``n_context`` are ``w'.x_i + noise`` with
    ``w'`` the next prompt's task vector (cyclically) and fresh noise; the rest (the query's) are the prompt's own."""
    ys = ev.ys.clone()
    w_other = torch.roll(ev.ws, 1, dims=0)
    noise = noise_std * torch.randn(ys.shape[0], n_context, generator=gen).to(ys.device)
    # host work on the evaluation prompts (kept on the CPU), in numpy as the exact baselines are
    wx = np.einsum("bnd,bd->bn", ev.xs[:, :n_context].cpu().numpy(), w_other.cpu().numpy())
    ys[:, :n_context] = torch.from_numpy(wx).to(ys.device, ys.dtype) + noise
    return ys


def probe_columns(r2: list[float]) -> dict:
    """The probe columns of per-layer R^2 values (best, its layer, the list)."""
    return {"probe_r2_best": float(max(r2)), "probe_best_layer": int(np.argmax(r2)),
            "probe_r2_by_layer": json.dumps([round(x, 4) for x in r2])}


def linear_regression_figures(cfg: Any, results: pd.DataFrame, run: RunDir, spd_candidates: tuple[str, ...],
                              probe_r2_min: float) -> list[Figure]:
    """The real arm's error curves and SPD to each of ``spd_candidates`` against n, and its probe R^2 per layer
    with the registered bar ``probe_r2_min`` (none without a real-arm curve)."""
    import matplotlib.pyplot as plt

    results = arm_rows(results, "real")
    if results.empty or "err_curves" not in results:
        return []
    curves = [json.loads(s) for s in results["err_curves"]]
    d = cfg.d
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    names = ["model"] + [b for b in BASELINES]
    for i, name in enumerate(names):
        arr = np.array([c[name] for c in curves]) / d
        n = np.arange(arr.shape[1])
        m = arr.mean(0)
        ax.plot(n, m, label="GPT (mean over seeds)" if name == "model" else name, lw=2 if name == "model" else 1,
                color="k" if name == "model" else f"C{i}")
        if name == "model" and arr.shape[0] > 1:
            ax.fill_between(n, arr.min(0), arr.max(0), color="k", alpha=0.15)
    ax.axvline(d, color="gray", ls=":", lw=1)
    ax.axvline(2 * d, color="gray", ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("in-context examples n")
    ax.set_ylabel("squared error / d")
    ax.set_title(f"d = {d}, noise sigma = {cfg.noise_std} ({len(curves)} seed(s); shade: min-max)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    figs = [save_figure(fig, run, "error_vs_n.png", "Squared error (normalised by d) against the number of "
                        "in-context examples: the GPT and the exact baselines (cf. Garg et al. Fig. 2)",
                        claims=("ls-error", "beats-baselines"))]
    spdc = [json.loads(s) for s in results["spd_curves"]]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, name in enumerate(spd_candidates):
        arr = np.array([c[name] for c in spdc]) / d
        ax.plot(np.arange(1, arr.shape[1]), arr.mean(0)[1:], label=name, color=f"C{i}")
    ax.set_yscale("log")
    ax.set_xlabel("in-context examples n")
    ax.set_ylabel("SPD(GPT, baseline) / d")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    figs.append(save_figure(fig, run, "spd_vs_n.png", "Squared prediction difference between the GPT and each "
                            "baseline (mean over seeds; cf. Akyurek et al. Fig. 3)", claims=("implied-ridge",)))
    fig, ax = plt.subplots(figsize=(5.4, 3.8))
    for col, lab, ls in (("probe_r2_by_layer", "w", "-"), ("probe_what_r2_by_layer", "ridge estimate of w", "--")):
        arr = np.array([json.loads(s) for s in results[col]])
        for k, row in enumerate(arr):
            ax.plot(np.arange(len(row)), row, ls=ls, color="C0" if col.startswith("probe_r2") else "C1",
                    alpha=0.7, label=lab if k == 0 else None)
    ax.axhline(probe_r2_min, color="gray", ls=":", lw=1)
    ax.set_xlabel("layer (0 = embedding)")
    ax.set_ylabel("held-out R^2 of a linear probe")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    figs.append(save_figure(fig, run, "probe_r2.png", "Held-out R^2 of ridge probes of w and of the ridge estimate "
                            "of w at the query after 2d examples, per layer, every seed", claims=("probe-w",)))
    return figs

