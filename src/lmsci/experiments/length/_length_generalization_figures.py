"""Figures of :mod:`lmsci.experiments.length.length_generalization`: one function per figure.

Each reads the arrays that the run's points saved (``points/eval-<method>/nll.npy``: per-position NLL
``[n_eval_seqs, T - 1]`` in nats/token; ``points/profile/profile.npz``: attention statistics and the PCA) and
writes one PNG into the run's figures directory. Source: Han et al., "LM-Infinite", NAACL 2024, arXiv 2308.16137,
Figure 1 (logits, entropy), Figure 3 (NLL by position), Theorem 3 (start-token PCA), Appendix A (n_global).
"""

from __future__ import annotations

import numpy as np

from lmsci.experiments.base import Figure, save_figure
from lmsci.runs import RunDir


def nll_array(run: RunDir, method: str, seed_index: int = 0) -> np.ndarray | None:
    """The per-position NLL ``[n_eval_seqs, T - 1]`` (nats/token) of ``eval-<method>`` for training seed
    ``seed_index``, or None when that point has not been run."""
    sfx = "" if seed_index == 0 else f"__s{seed_index}"
    p = run.point_dir(f"eval-{method}{sfx}") / "nll.npy"
    return np.load(p) if p.is_file() else None


def nll_by_position(cfg, run: RunDir, plt) -> Figure:
    """NLL vs context length (log buckets) for the methods (left) and the n_global ablation (right)."""
    from lmsci.measure.attention import bucket_mean, log_buckets

    L, T = cfg.seq_len, cfg.eval_factor * cfg.seq_len
    edges = log_buckets(T - 1, first=max(4, L // 8), per_octave=2)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for m, style in (("vanilla", "k-"), ("sliding_window", "C1--"), ("attention_sinks", "C2-."),
                     (f"lm_infinite_G{cfg.n_global}", "C0-")):
        a = nll_array(run, m)
        if a is None:
            continue
        c, mu, se = bucket_mean(a, edges)
        axes[0].errorbar(c + 1, mu, yerr=np.nan_to_num(se), fmt=style, label=m, capsize=2)
    for g in sorted(cfg.ablation_n_global):
        a = nll_array(run, f"lm_infinite_G{g}")
        if a is None:
            continue
        c, mu, se = bucket_mean(a, edges)
        axes[1].plot(c + 1, mu, marker="o", ms=3, label=f"n_global={g}")
    for ax, t in zip(axes, ("methods", "LM-Infinite ablation over n_global")):
        ax.axvline(L, color="gray", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("NLL (nats/token)")
        ax.set_title(t)
        ax.legend(fontsize=8)
    return save_figure(fig, run, "nll_by_position.png",
                       f"NLL vs context length (log buckets, mean ± SE over sequences); dotted line = training "
                       f"length L={L}. Left: methods; right: LM-Infinite n_global ablation.")


def logits_entropy(cfg, run: RunDir, z, plt) -> Figure:
    """Theorem 1 and Proposition 1: running max logit by distance, max logit and entropy by position
    (vanilla vs LM-Infinite), from the profile arrays ``z``."""
    from lmsci.measure.attention import bucket_mean, log_buckets

    L = cfg.seq_len
    n_layers = z["vanilla_max_logit"].shape[0]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    pos = np.arange(1, z["vanilla_max_logit"].shape[1] + 1)
    for i in range(n_layers):
        axes[0].plot(pos, z["vanilla_runmax"][i], color=f"C{i}", lw=1, label=f"layer {i} vanilla")
        axes[0].plot(pos, z["lm_infinite_runmax"][i], color=f"C{i}", lw=1, ls="--",
                     label=f"layer {i} LM-Inf")
        for key, ls in (("vanilla_max_logit", "-"), ("lm_infinite_max_logit", "--")):
            c, mu, _ = bucket_mean(z[key][i][None], log_buckets(len(pos), first=4, per_octave=4))
            axes[1].plot(c + 1, mu, color=f"C{i}", lw=1.2, ls=ls, marker=".", ms=3)
    ents = {}
    for key in ("vanilla_entropy", "lm_infinite_entropy"):
        c, mu, _ = bucket_mean(np.nanmean(z[key], 0)[None], log_buckets(len(pos), first=4, per_octave=4))
        ents[key] = (c + 1, mu)
    axes[2].plot(*ents["vanilla_entropy"], "k-", marker=".", label="vanilla")
    axes[2].plot(*ents["lm_infinite_entropy"], "C0-", marker=".", label="LM-Infinite")
    axes[2].plot(pos, np.log(pos), "k:", lw=0.8, label="ln n (uniform)")
    axes[0].set_xlabel("distance from the last query")
    axes[0].set_ylabel("running max logit (max over heads)")
    axes[0].set_title("Thm 1: logit vs distance (last query)")
    axes[1].set_xlabel("query position + 1")
    axes[1].set_ylabel("max logit over keys and heads (bucket mean)")
    axes[1].set_title("max logit vs position (solid vanilla, dashed LM-Inf)")
    axes[2].set_xlabel("query position + 1")
    axes[2].set_ylabel("attention entropy (nats)")
    axes[2].set_title("Prop. 1: entropy vs length")
    for ax in axes:
        ax.set_xscale("log")
        ax.axvline(L, color="gray", lw=0.8, ls=":")
    axes[0].legend(fontsize=6)
    axes[2].legend(fontsize=8)
    return save_figure(fig, run, "logits_entropy.png",
                       "Attention statistics on the evaluation text: running max of the last query's logits "
                       "by distance, max logit per query position, and mean attention entropy (vanilla vs "
                       "LM-Infinite).")


def start_token_pca(run: RunDir, z, plt) -> Figure:
    """Theorem 3: each layer's 2-D PCA of the hidden states, the first 4 tokens marked, from the profile arrays."""
    coords, sep = z["pca_coords"], z["pca_separation"]
    nl = coords.shape[0]
    fig, axes = plt.subplots(1, nl, figsize=(3.6 * nl, 3.4), squeeze=False)
    for i in range(nl):
        ax = axes[0, i]
        c = coords[i]
        sc = ax.scatter(c[4:, 0], c[4:, 1], c=np.arange(4, len(c)), s=6, cmap="viridis")
        ax.scatter(c[:4, 0], c[:4, 1], c="red", s=30, marker="x", label="first 4 tokens")
        ax.set_title(f"layer {i}: separation {sep[i]:.1f}")
    axes[0, 0].legend(fontsize=7)
    fig.colorbar(sc, ax=axes[0, -1], label="position")
    return save_figure(fig, run, "start_token_pca.png",
                       "Thm 3: 2-D PCA of each layer's hidden states (batch-mean per position, first 2L "
                       "positions); red = first 4 tokens; separation = centroid distance / spread.")


def figures(cfg, run: RunDir) -> list[Figure]:
    """Every figure of the run, in report order (the profile figures only once the profile point has run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = [nll_by_position(cfg, run, plt)]
    pf = run.point_dir("profile") / "profile.npz"
    if pf.is_file():
        z = np.load(pf)
        figs += [logits_entropy(cfg, run, z, plt), start_token_pca(run, z, plt)]
    return figs
