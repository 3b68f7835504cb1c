"""``knowledge-extraction``: is knowledge stored in biographies extractable by QA for unseen people?

Source: Allen-Zhu & Li, "Physics of Language Models: Part 3.1, Knowledge Storage and Extraction",
arXiv 2309.14316, Sections 3-4 (Figures 2-3: BIO pretrain -> QA fine-tune on P_train, QA accuracy
on P_test: bioS single ~9.7%, bioS multi5+permute+fullname ~96%; mixed training ~86.6%) and
Section 5-6 (P-probing, Q-probing).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.experiments.base import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.knowledge_common import (
    BiosQAConfig,
    AUGMENTED, SINGLE, DataSpec, binom_ci, bio_recall, bio_stream, check_model,
    exposures_of, make_model, qa_metrics, qa_stream, train_packed,
)
from lmsci.experiments.registry import register
from lmsci.measure.probes import p_probe, q_probe
from lmsci.runs import RunDir, Verdict
from lmsci.worlds.bios import ATTRS, BiosWorld, qa_docs, qa_split


class KnowledgeExtractionConfig(BiosQAConfig):
    """Configuration of ``knowledge-extraction`` (defaults = quick preset).

    Attributes:
        n_people: N individuals; half are P_train (QA seen in training), half P_test.
        data: which biography kinds to compare (``single``: one fixed biography per person;
            ``augmented``: the :attr:`augmented` spec, multiM + permute + fullname).
        regimes: ``pretrain_ft`` (BIO pretrain, then QA fine-tune on P_train) and/or ``mixed``
            (biographies and QA of P_train together from scratch).
        exposures: biographies per person in pretraining.
        ft_epochs: passes over the QA of P_train in fine-tuning.
        mixed_qa_epochs: in mixed training, how many times the QA of P_train is included.
        probes: run P- and Q-probing after BIO pretraining (``pretrain_ft`` points).
    """

    data: list[Literal["single", "augmented"]] = ["single", "augmented"]
    regimes: list[Literal["pretrain_ft", "mixed"]] = ["pretrain_ft", "mixed"]
    augmented: DataSpec = AUGMENTED
    mixed_qa_epochs: int = Field(20, ge=1)
    probes: bool = True

    PRESETS = {
        "smoke": {"n_people": 12, "exposures": 2, "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                  "ft_epochs": 1, "seq_len": 128, "qa_seq_len": 64},
        "quick": {},
        "paper": {"n_people": 100_000, "exposures": 1000, "model": {"d_model": 768, "n_layers": 12, "n_heads": 12},
                  "seq_len": 512, "qa_seq_len": 512, "pretrain": {"lr": 1e-3, "batch_size": 192},
                  "finetune": {"lr": 3e-4, "batch_size": 48, "weight_decay": 0.0}, "ft_epochs": 50},
    }


@register("knowledge-extraction")
class KnowledgeExtraction(Experiment):
    """BIO pretrain -> QA fine-tune, and mixed training, for bioS single vs augmented.

    Source: Allen-Zhu & Li, arXiv 2309.14316, Sections 3-6.
    """

    claim = ("Without biography augmentation, knowledge memorised in pretraining is not extractable by QA "
             "for held-out people (QA-test accuracy near zero); augmentation (multiM+permute+fullname) lifts it high.")
    source = "Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316, Sections 3-6, Figures 2-3"
    Config = KnowledgeExtractionConfig
    time_estimate = {"smoke": "~10 s", "quick": "11 min wall measured (266 s CPU) on 2 shared cores", "paper": "~days on 8 GPUs"}

    def validate(self, cfg: KnowledgeExtractionConfig) -> None:
        check_model(cfg.model)

    def points(self, cfg: KnowledgeExtractionConfig) -> list[Point]:
        return [Point(f"{d}_{r}", {"data": d, "regime": r}) for d in cfg.data for r in cfg.regimes]

    def run_point(self, cfg: KnowledgeExtractionConfig, point: Point, ctx: PointContext) -> dict:
        d, regime = point.params["data"], point.params["regime"]
        world = BiosWorld(cfg.n_people, seed=cfg.seed)
        world.write_pools(ctx.run.path / "bios_pools.json")
        tr, te = qa_split(cfg.n_people, cfg.seed)
        spec = SINGLE if d == "single" else cfg.augmented
        extra = qa_docs(world, tr) if regime == "mixed" else []
        stream = bio_stream(world, exposures=cfg.exposures, seed=cfg.seed, seq_len=cfg.seq_len,
                            specs=[(range(cfg.n_people), spec)], extra_docs=extra, extra_epochs=cfg.mixed_qa_epochs)
        model = make_model(world, cfg.model, cfg.seq_len, ctx.seed)
        pre = train_packed(model, stream, cfg.pretrain, seed=ctx.seed, ctx=ctx, phase="pretrain", device=ctx.device)
        row = {"data": d, "regime": regime, "n_people": cfg.n_people, "params": model.num_params(),
               "exposures": exposures_of(stream, cfg.n_people, pre["windows_used"]),
               "pretrain_tokens": pre["tokens_seen"], "tokens_per_s": pre["tokens_per_s"],
               "bio_recall": bio_recall(model, world, range(cfg.n_people), seed=cfg.seed, spec=spec,
                                        device=ctx.device)}
        if regime == "pretrain_ft":
            if cfg.probes:
                pp = p_probe(model, world, tr, te, seed=cfg.seed, fullname=False, device=ctx.device)
                pb = p_probe(model, world, tr, te, seed=cfg.seed, fullname=False, position="before_value",
                             device=ctx.device)
                qp = q_probe(model, world, tr, te, device=ctx.device)
                for a in ATTRS:
                    row[f"p_probe_{a}"], row[f"q_probe_{a}"] = pp[a]["test_acc"], qp[a]["test_acc"]
                    row[f"p_probe_before_{a}"] = pb[a]["test_acc"]
                row["p_probe"] = float(np.mean([pp[a]["test_acc"] for a in ATTRS]))
                row["p_probe_before"] = float(np.mean([pb[a]["test_acc"] for a in ATTRS]))
                row["q_probe"] = float(np.mean([qp[a]["test_acc"] for a in ATTRS]))
                row["probe_chance"] = float(np.mean([qp[a]["chance"] for a in ATTRS]))
            ft = qa_stream(world, tr, epochs=cfg.ft_epochs, seed=cfg.seed, seq_len=cfg.qa_seq_len)
            train_packed(model, ft, cfg.finetune, seed=ctx.seed + 1, ctx=ctx, phase="qa_finetune", device=ctx.device)
        row.update(qa_metrics(model, world, tr, te, device=ctx.device))
        row["n_qa_test"] = len(te) * len(ATTRS)
        return row

    def _get(self, results: pd.DataFrame, d: str, r: str, col: str = "qa_test") -> float | None:
        m = results[(results["data"] == d) & (results["regime"] == r)]
        return float(m[col].iloc[0]) if len(m) else None

    def verdicts(self, cfg: KnowledgeExtractionConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        out = []
        n = int(results["n_qa_test"].iloc[0])
        for regime, label in (("pretrain_ft", "BIO pretrain -> QA fine-tune"), ("mixed", "mixed training")):
            s, a = self._get(results, "single", regime), self._get(results, "augmented", regime)
            if s is None or a is None:
                continue
            ok = s <= 0.2 and a - s >= 0.3
            rec_s = self._get(results, "single", regime, "bio_recall")
            note = "" if ok else (
                f"Not reproduced at CPU scale (N={cfg.n_people}, d_model={cfg.model.d_model}, "
                f"{cfg.exposures} exposures; biography recall of single = {rec_s:.2f}). The paper uses N=100k people "
                "(50k QA-train), GPT-2 small with rotary, ~1000 passes; with only N/2 QA-train people fine-tuning "
                "memorises their answers instead of learning extraction. N >= 10k with a ~10M-parameter model "
                "would settle it.")
            out.append(Verdict(
                self.claim + f" [{label}]", f"QA-test exact-match accuracy, {label}: augmented minus single",
                a - s, "single <= 0.20 and augmented - single >= 0.30", ok, ci=None,
                details={"single": s, "augmented": a, "single_ci95": binom_ci(s, n), "augmented_ci95": binom_ci(a, n),
                         "paper": {"single": 0.097, "augmented": 0.962} if regime == "pretrain_ft" else {}},
                note=note))
        ms, ps = self._get(results, "single", "mixed"), self._get(results, "single", "pretrain_ft")
        if ms is not None and ps is not None:
            ok = ms - ps >= 0.2
            out.append(Verdict(
                "Mixed training (biographies + P_train QA from scratch) extracts knowledge for P_test far better than "
                "BIO pretrain -> QA fine-tune on bioS single (paper: 86.6% vs 9.7%).",
                "QA-test accuracy on bioS single: mixed minus pretrain->finetune", ms - ps, ">= 0.20", ok,
                details={"mixed": ms, "pretrain_ft": ps, "mixed_ci95": binom_ci(ms, n)},
                note="" if ok else "Not reproduced at CPU scale; needs the paper's N and model size (see above)."))
        return out

    def figures(self, cfg: KnowledgeExtractionConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        labels = [f"{r.data}\n{r.regime}" for r in results.itertuples()]
        x = np.arange(len(results))
        ax[0].bar(x - 0.2, results["qa_train"], 0.4, label="QA train (P_train)")
        ax[0].bar(x + 0.2, results["qa_test"], 0.4, label="QA test (P_test)")
        ax[0].plot(x, results["bio_recall"], "k*", ms=10, label="bio recall (memorisation)")
        ax[0].set_xticks(x, labels)
        ax[0].set_ylim(0, 1.05)
        ax[0].set_ylabel("exact-match accuracy")
        ax[0].legend(fontsize=8)
        ax[0].set_title("Knowledge extraction (bioS)")
        for j, a in enumerate(ATTRS):
            ax[1].plot(x + (j - 2.5) * 0.05, results[f"qa_test_{a}"], "o", label=a)
        ax[1].set_xticks(x, labels)
        ax[1].set_ylim(-0.02, 1.05)
        ax[1].set_title("QA-test accuracy per attribute")
        ax[1].legend(fontsize=7)
        figs = [save_figure(fig, run, "extraction.png",
                            "QA exact-match on P_train and P_test per condition; stars: memorisation "
                            "of the biographies (exact match of each value in a biography).")]
        if "p_probe" in results:
            sub = results.dropna(subset=["p_probe"])
            fig, ax = plt.subplots(figsize=(7, 3.5))
            w = 0.35
            for k, r in enumerate(sub.itertuples()):
                ax.plot(np.arange(len(ATTRS)) + (k - 0.5) * w, [getattr(r, f"p_probe_{a}") for a in ATTRS], "o",
                        label=f"P-probe {r.data}")
                ax.plot(np.arange(len(ATTRS)) + (k - 0.5) * w, [getattr(r, f"q_probe_{a}") for a in ATTRS], "s",
                        mfc="none", label=f"Q-probe {r.data}")
                ax.plot(np.arange(len(ATTRS)) + (k - 0.5) * w, [getattr(r, f"p_probe_before_{a}") for a in ATTRS], "^",
                        label=f"P-probe before value {r.data}")
            ax.axhline(float(sub["probe_chance"].mean()), color="gray", ls=":", label="majority class")
            ax.set_xticks(range(len(ATTRS)), ATTRS, fontsize=7)
            ax.set_ylabel("probe test accuracy (first value token)")
            ax.legend(fontsize=7)
            figs.append(save_figure(fig, run, "probes.png",
                                    "Linear probes of the first value token after BIO pretraining, fit on "
                                    "P_train and scored on P_test: P-probe right after the name and right "
                                    "before the value inside a biography, Q-probe on the name alone."))
        return figs
