"""Figure and report section of :mod:`lmsci.experiments.knowledge.reversal_curse`.

The figure compares the forward-only and with-reverse conditions on P_test (Allen-Zhu & Li, Part 3.2, arXiv
2309.14402, Section 5; Berglund et al., arXiv 2309.12288, Table 1 and Figure 4); the report section lists the
memorisation, QA fine-tuning, forgetting and null-arm columns of every point and seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from lmsci.contract import Figure, save_figure
from lmsci.report import markdown_table
from lmsci.runs import RunDir


def report_sections(cfg: Any, results: pd.DataFrame, run: RunDir) -> str:
    """The memorisation, QA fine-tuning and forgetting section: what the columns mean and one row per point and
    seed (empty without results)."""
    cols = [c for c in ("arm", "point", "condition", "pipeline", "pretrain_steps", "exposures", "reverse_exposures",
                        "bio_recall_test", "reverse_recall_test", "reverse_completion_test", "name_gap_bits_test",
                        "qa_train", "inverse_train", "qa_test", "inverse_test", "bio_recall_test_after_ft",
                        "forgetting_test") if c in results]
    if not len(results):
        return ""
    return "\n".join([
        "## Memorisation, QA fine-tuning and forgetting", "",
        f"Reversed biographies: reverse{cfg.reverse_groups} (the name after the attributes of each of "
        f"{cfg.reverse_groups} sentence(s)), {cfg.reverse_multiplicity} per person. QA fine-tuning "
        f"({cfg.finetune.method}) on P_train: `qa_train` / `inverse_train` are its accuracy on the fine-tuned "
        "people; `bio_recall_test_after_ft` is the held-out people's biography recall after it and "
        "`forgetting_test` its drop from the pretrained model. The null arm's rows (condition `forward_only_second`): a "
        "second forward-only model, trained, prompted and LoRA QA fine-tuned as the real forward-only arm at another "
        "seed (initialisation, data and fine-tuning order).", "",
        markdown_table(results, None, cols=cols, float_format=".3f")])


def figures(cfg: Any, results: pd.DataFrame, run: RunDir) -> list[Figure]:
    """reversal.png: left, P_test exact match per condition (forward QA and inverse search after QA fine-tuning,
    held-out reversed prompt on the pretrained model; bars the mean, dots the seeds); right, the correct-minus-random
    name log-probability gap in bits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1.2]})
    if "condition" not in results or results.empty:
        return []
    g = results.groupby("condition")
    cols = [("qa_test", "forward QA (fine-tuned)"), ("inverse_test", "inverse QA (fine-tuned)"),
            ("reverse_completion_test", "held-out reversed prompt (pretrained)")]
    labels = {"forward_only": "forward only", "with_reverse": "with reversed biographies",
              "forward_only_second": "null: forward only,\nanother seed"}
    conds = [c for c in labels if c in g.groups]
    x = np.arange(len(conds))
    for k, (c, lab) in enumerate(cols):
        m = [g.get_group(cond)[c].mean() for cond in conds]
        ax[0].bar(x + (k - 1) * 0.27, m, 0.27, label=lab)
        for j, cond in enumerate(conds):
            ax[0].scatter(np.full(len(g.get_group(cond)), x[j] + (k - 1) * 0.27), g.get_group(cond)[c],
                          color="k", s=8, zorder=3)
    ax[0].set_xticks(x, [labels[c] for c in conds])
    ax[0].set_ylim(0, 1.05)
    ax[0].set_ylabel("exact match (P_test)")
    ax[0].legend(fontsize=8)
    ax[0].set_title("Reversal curse on bioS (dots: seeds)")
    for j, cond in enumerate(conds):
        v = g.get_group(cond)["name_gap_bits_test"]
        ax[1].bar(j, v.mean(), 0.6, color={"forward_only": "C0", "with_reverse": "C3"}.get(cond, "C7"))
        ax[1].scatter(np.full(len(v), j), v, color="k", s=8, zorder=3)
    ax[1].axhline(0, color="k", lw=0.8)
    ax[1].set_xticks(range(len(conds)), [labels[c] for c in conds], fontsize=8)
    ax[1].set_ylabel("log2 p(correct) - log2 p(random name), bits")
    ax[1].set_title("Berglund et al. completion test")
    return [save_figure(fig, run, "reversal.png",
                        "Left: forward QA and inverse search after QA fine-tuning on P_train, and greedy "
                        "completion of the held-out attributes-only prompt on the pretrained model, for P_test. "
                        "Right: how much more likely the correct name is than another person's name after that "
                        "prompt (0: the reversal curse). The null arm: a second forward-only model at another "
                        "seed.", claims=("reversal", "reverse-completion", "name-logprob"))]
