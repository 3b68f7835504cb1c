"""``celebrity-helps-minority``: augmented celebrities make unaugmented minority knowledge extractable.

Source: Allen-Zhu & Li, Part 3.1, arXiv 2309.14316, Section 4.4 ("celebrity helps minority"):
with P_train ("celebrities") written with multi5+permute+fullname and P_test ("minority") with
one bioS-single biography each, QA fine-tuning on the celebrities gives minority QA accuracy
86.8%, against 4.4% when everyone is single.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.experiments.base import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.knowledge_common import (
    BiosQAConfig,
    AUGMENTED, MEMORISED, SINGLE, DataSpec, bio_recall, bio_stream, check_model,
    exposures_of, make_model, paired, qa_metrics, qa_stream, recall_gate, seed_summary, seed_values, train_packed,
    within_run,
)
from lmsci.experiments.registry import register
from lmsci.claims import Claim, Verdict, across_seeds
from lmsci.runs import RunDir
from lmsci.worlds.bios import ATTRS, BiosWorld, qa_split


class CelebrityConfig(BiosQAConfig):
    """Configuration of ``celebrity-helps-minority`` (defaults = quick preset).

    Attributes:
        n_people: N; a ``celebrity_fraction`` of them are celebrities (P_train), the rest the minority (P_test).
        augmented: how celebrities' biographies are written.
        exposures: biographies per person in pretraining (the same for celebrities and minority).
    """

    celebrity_fraction: float = Field(0.5, gt=0, lt=1)
    augmented: DataSpec = AUGMENTED

    PRESETS = {
        "smoke": {"n_people": 12, "exposures": 2, "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                  "ft_epochs": 1, "seq_len": 128, "qa_seq_len": 64},
        "quick": {"n_seeds": 3},  # 136 s per seed measured alone (2026-11-23): 3 seeds fit the 15-minute budget
        "paper": {"n_people": 200_000, "exposures": 1000, "model": {"d_model": 768, "n_layers": 12, "n_heads": 12},
                  "seq_len": 512, "qa_seq_len": 512, "pretrain": {"lr": 1e-3, "batch_size": 192},
                  "finetune": {"lr": 3e-4, "batch_size": 48, "weight_decay": 0.0}, "ft_epochs": 50, "n_seeds": 3},
    }


@register("celebrity-helps-minority")
class CelebrityHelpsMinority(Experiment):
    """Minority QA accuracy with and without augmented celebrities in the same pretraining.

    Source: Allen-Zhu & Li, arXiv 2309.14316, Section 4.4.
    """

    claim = ("Including augmented celebrities in pretraining (and QA fine-tuning on them) makes the knowledge of "
             "unaugmented minority individuals extractable (paper: 4.4% -> 86.8% QA accuracy).")
    source = "Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316, Section 4.4"
    Config = CelebrityConfig
    time_estimate = {"smoke": "~8 s", "quick": "5.4 min measured (3 seeds, one thread beside another run)",
                     "paper": "~days on 8 GPUs per seed, 3 seeds (estimated)"}
    claims = [
        Claim("minority-lift",
              "Augmented celebrities in pretraining (and QA fine-tuning on them) make the knowledge of unaugmented "
              "minority people extractable by QA, which it is not when everyone is single.",
              "Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316, Section 4.4",
              "minority QA accuracy: all single 4.4%, with augmented celebrities 86.8%",
              "minority (P_test) QA exact match, with augmented celebrities minus all single, per seed; mean over "
              "seeds (all single reported beside)",
              "mean over seeds: all single <= 0.25 and with celebrities - all single >= 0.5 (95% Student-t CI "
              "across seeds reported)",
              gates=(MEMORISED,)),
    ]

    def validate(self, cfg: CelebrityConfig) -> None:
        check_model(cfg.model)

    def points(self, cfg: CelebrityConfig) -> list[Point]:
        return [Point("baseline_all_single", {"celebrities": False}), Point("celebrities_augmented", {"celebrities": True})]

    def run_point(self, cfg: CelebrityConfig, point: Point, ctx: PointContext) -> dict:
        world = BiosWorld(cfg.n_people, seed=cfg.seed)
        world.write_pools(ctx.run.path / "bios_pools.json")
        celeb, minority = qa_split(cfg.n_people, cfg.seed, cfg.celebrity_fraction)
        celeb_spec = cfg.augmented if point.params["celebrities"] else SINGLE
        stream = bio_stream(world, exposures=cfg.exposures, seed=cfg.seed, seq_len=cfg.seq_len,
                            specs=[(celeb, celeb_spec), (minority, SINGLE)], order_seed=ctx.seed)
        model = make_model(world, cfg.model, cfg.seq_len, ctx.seed)
        pre = train_packed(model, stream, cfg.pretrain, seed=ctx.seed, ctx=ctx, phase="pretrain", device=ctx.device)
        row = {"celebrities_augmented": bool(point.params["celebrities"]), "n_people": cfg.n_people,
               "params": model.num_params(), "pretrain_tokens": pre["tokens_seen"],
               "exposures_celebrity": exposures_of(stream, cfg.n_people, pre["windows_used"], celeb),
               "exposures_minority": exposures_of(stream, cfg.n_people, pre["windows_used"], minority),
               "bio_recall_minority": bio_recall(model, world, minority, seed=cfg.seed, spec=SINGLE, device=ctx.device)}
        ft = qa_stream(world, celeb, epochs=cfg.ft_epochs, seed=ctx.seed, seq_len=cfg.qa_seq_len)
        train_packed(model, ft, cfg.finetune, seed=ctx.seed + 1, ctx=ctx, phase="qa_finetune", device=ctx.device)
        m = qa_metrics(model, world, celeb, minority, device=ctx.device)
        row.update({k.replace("qa_train", "qa_celebrity").replace("qa_test", "qa_minority"): v for k, v in m.items()})
        row["n_qa_minority"] = len(minority) * len(ATTRS)
        return row

    def verdicts(self, cfg: CelebrityConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        base = seed_values(results, "qa_minority", celebrities_augmented=False)
        cel = seed_values(results, "qa_minority", celebrities_augmented=True)
        seeds = paired(base, cel)
        if not seeds:
            return []
        n = int(results["n_qa_minority"].iloc[0])
        rec_b = seed_values(results, "bio_recall_minority", celebrities_augmented=False)
        rec_c = seed_values(results, "bio_recall_minority", celebrities_augmented=True)
        lift = across_seeds([cel[k] - base[k] for k in seeds])
        single = across_seeds([base[k] for k in seeds])
        ok = single.mean <= 0.25 and lift.mean >= 0.5
        return [self.judge(
            cfg, "minority-lift", value=lift.mean, passed=ok, ci=lift.ci, ci_kind=lift.kind, n_seeds=lift.n,
            gates={"memorised": recall_gate(rec_b, rec_c)},
            details={"all_single": seed_summary(base), "with_celebrities": seed_summary(cel),
                     "bio_recall_minority": {"all_single": rec_b, "with_celebrities": rec_c},
                     "all_single_within_run": within_run(base, n), "with_celebrities_within_run": within_run(cel, n),
                     "paper": {"all_single": 0.044, "with_celebrities": 0.868}},
            note="" if ok else (f"At N={cfg.n_people}, d_model={cfg.model.d_model}, {cfg.exposures} exposures. The "
                                "paper uses N=200k (100k celebrities) and GPT-2 small; N >= 10k with a ~10M-parameter "
                                "model would settle it."))]

    def figures(self, cfg: CelebrityConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        x = np.arange(len(results))
        ax.bar(x - 0.2, results["qa_celebrity"], 0.4, label="QA celebrities (fine-tuned on)")
        ax.bar(x + 0.2, results["qa_minority"], 0.4, label="QA minority (held out)")
        ax.plot(x, results["bio_recall_minority"], "k*", ms=10, label="minority bio recall")
        multi = "seed_index" in results and results["seed_index"].max() > 0
        ax.set_xticks(x, [("all single" if not r.celebrities_augmented else "celebrities augmented") +
                          (f"\nseed {r.seed_index}" if multi else "") for r in results.itertuples()])
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("exact-match accuracy")
        ax.legend(fontsize=8)
        return [save_figure(fig, run, "celebrity.png",
                            "QA accuracy of the minority (single biographies, never QA-trained) "
                            "with and without augmented celebrities in the same pretraining.")]
