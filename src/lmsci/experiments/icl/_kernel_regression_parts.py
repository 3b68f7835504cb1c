"""Parts of ``icl-kernel-regression`` (family-private: only :mod:`lmsci.experiments.icl.icl_kernel_regression`
imports it): the draws of its two null arms (prompts whose demonstrations come from another task; a random head per
task) and its figures (the ICL curve of the real and ``other_task`` arms against the Bayes posterior, the per-head
heat maps).

Source: Han, Wang, Zhao, Ji, arXiv 2305.12766, Table 3 and Figs. 2-3; Xie et al., arXiv 2111.02080 (GINC prompts).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from lmsci.claims.engine import arm_rows
from lmsci.contract import Figure, save_figure
from lmsci.errors import ConfigError
from lmsci.runs import RunDir
from lmsci.train.estimate import gpu_seconds
from lmsci.worlds.hmm_mixture import HMMMixture, ICLPrompts

#: host seconds to sample one training batch of 64 documents x 324 tokens of the paper-size mixture (8 tasks x 80
#: states x 100 observations, x_len 3), measured once on this project's CPU host (one thread, a loaded 2-core
#: machine, 2026-12-06); the stacked trainer draws every member's batch on the host, one after another
HOST_BATCH_S = 0.044
#: host seconds of the evaluation prompts and their exact Bayes posteriors at the gpu preset (``prompts``: 7 x 1000
#: prompts + 8 x (700 + 300) kernel-regression prompts), measured once the same way (66 s)
HOST_PROMPTS_S = 66.0


def estimate_gpu_seconds(cfg: Any, world: HMMMixture, seq_len: int) -> float:
    """Estimated wall seconds of a run of ``cfg`` (an ``ICLKernelRegressionConfig``) on one H100: the stacked training
    (:func:`lmsci.train.estimate.gpu_seconds` for every seed's tokens, the step overhead once per stacked step) plus
    the host's batch sampling (:data:`HOST_BATCH_S` scaled by the batch's tokens, per seed and step), the evaluation
    prompts (:data:`HOST_PROMPTS_S` scaled by their count), the forward passes of every measured prompt (real and
    ``other_task`` arms) and 30 s a seed plus 30 s of allowance for the votes, the MiniLM embeddings and start-up
    (not measured)."""
    m, t = cfg.model, cfg.train
    tokens = cfg.n_seeds * t.steps * t.batch_size * seq_len
    n_eval = 2 * cfg.n_eval * len(cfg.n_grid) + cfg.n_tasks * (cfg.n_val_per_task + cfg.n_test_per_task)
    train = gpu_seconds(m.d_model, m.n_layers, world.vocab_size, seq_len, tokens=tokens, steps=t.steps,
                        eval_tokens=cfg.n_seeds * n_eval * seq_len)
    host = HOST_BATCH_S * tokens / (64 * 324) + HOST_PROMPTS_S * n_eval / (2 * 7 * 1000 + 8 * 1000)
    return float(train + host + 30.0 * cfg.n_seeds + 30.0)


def other_task_prompts(world: HMMMixture, pr: ICLPrompts, rng: np.random.Generator) -> ICLPrompts:
    """``pr`` with every demonstration redrawn from another task (per prompt one task drawn uniformly among the
    ``n_tasks - 1`` others); the test input, its gold label and the prompt's task are kept.

    Raises:
        ConfigError: a world of one task (there is no other).
    """
    if world.n_tasks < 2:
        raise ConfigError("n_tasks", world.n_tasks, ">= 2 (demonstrations from another task)")
    b, n = pr.xs.shape[:2]
    other = (pr.tasks + rng.integers(1, world.n_tasks, size=b)) % world.n_tasks
    ex = world.sample_examples(np.repeat(other, n), world.x_len + 1, rng).reshape(b, n, world.x_len + 1)
    demo = np.concatenate([ex, np.full((b, n, 1), world.delim)], axis=2).reshape(b, -1)
    return ICLPrompts(np.concatenate([demo, pr.x_test], axis=1), pr.tasks, ex[..., :world.x_len],
                      ex[..., world.x_len], pr.x_test, pr.y_test, pr.spans)


def random_head_agreement(votes: np.ndarray, target: np.ndarray, tasks: np.ndarray,
                          rng: np.random.Generator) -> tuple[float, dict[str, list[int]]]:
    """Held-out agreement with ``target [B]`` of the votes ``[B, L, H]`` of one head drawn uniformly at random per
    task of ``tasks [B]`` (the null of the validation-best head, task-specific like it); returns (agreement,
    ``{task: [layer, head]}``)."""
    L, H = votes.shape[1:]
    heads = {int(t): [int(rng.integers(L)), int(rng.integers(H))] for t in np.unique(tasks)}
    pred = np.array([votes[b, heads[int(t)][0], heads[int(t)][1]] for b, t in enumerate(tasks)])
    return float((pred == target).mean()), {str(t): v for t, v in heads.items()}


def kernel_regression_figures(results: pd.DataFrame, run: RunDir) -> list[Figure]:
    """The ICL-accuracy figure (real arm per seed, the ``other_task`` null, the Bayes posterior) and the per-head
    heat maps (mean over the real arm's seeds); none when the table has no real-arm curve."""
    import matplotlib.pyplot as plt

    null, results = arm_rows(results, "other_task"), arm_rows(results, "real")
    if results.empty or "acc_model" not in results:
        return []
    figs = []
    n = json.loads(results["n_grid"].iloc[0])
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, s in enumerate(results["acc_model"]):
        ax.plot(n, json.loads(s), "o-", color="C0", alpha=0.7, label="GPT (each seed)" if k == 0 else None)
    for k, s in enumerate(null["acc_model"].dropna() if "acc_model" in null else []):
        ax.plot(n, json.loads(s), "x:", color="grey", alpha=0.7,
                label="null: another task's demonstrations" if k == 0 else None)
    ax.plot(n, json.loads(results["acc_bayes"].iloc[0]), "s--", color="k", label="Bayes posterior (exact)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("demonstrations n")
    ax.set_ylabel("accuracy vs gold label")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    figs.append(save_figure(fig, run, "icl_accuracy.png", "ICL accuracy against the number of demonstrations: "
                            "the GPT (each seed), the same GPT with every demonstration drawn from another task "
                            "(null arm `other_task`, accuracy against the gold label) and the exact Bayes posterior (cf. "
                            "Han et al. Table 3)", claims=("icl-rises", "near-bayes")))
    heats = [json.loads(s) for s in results["heatmaps"]]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4))
    for ax, key, title in ((axes[0], "agreement", "vote agreement with the model (held-out)"),
                           (axes[1], "corr_similarity", "Pearson(a_i, P(o|x_test)^T P(o|x_i))")):
        m = np.mean([h[key] for h in heats], axis=0)
        im = ax.imshow(m, aspect="auto", cmap="viridis")
        ax.set_xticks(range(m.shape[1]))
        ax.set_yticks(range(m.shape[0]))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(title, fontsize=8)
        fig.colorbar(im, ax=ax)
    figs.append(save_figure(fig, run, "heads.png", "Per-head heat maps (mean over seeds): agreement of each head's "
                            "kernel vote (max kernel) with the model's ICL prediction, and the correlation of its "
                            "kernel values with the prediction similarity (cf. Han et al. Figs. 2-3)",
                            claims=("head-reconstructs",)))
    return figs

