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
    AUGMENTED, MEMORISED, SINGLE, DataSpec, bio_recall, bio_stream, check_model,
    exposures_of, first_value_words, make_model, paired, qa_metrics, qa_stream, recall_gate, seed_summary, seed_values, train_packed,
    within_run,
)
from lmsci.experiments.registry import register
from lmsci.measure.probes import p_probe, q_probe
from lmsci.claims import Claim, Verdict, across_seeds
from lmsci.runs import RunDir
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
                  "finetune": {"lr": 3e-4, "batch_size": 48, "weight_decay": 0.0}, "ft_epochs": 50, "n_seeds": 3},
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
    time_estimate = {"smoke": "~10 s", "quick": "5 min 12 s measured (1 seed, one thread beside another run)",
                     "paper": "~days on 8 GPUs per seed, 3 seeds (estimated)"}
    claims = [
        Claim("pretrain-ft-augmentation",
              "After BIO pretraining and QA fine-tuning on P_train, QA on the held-out P_test is poor for bioS single "
              "and high when the biographies are augmented (multi5 + permute + fullname).",
              "Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316, Sections 3-4, Figures 2-3",
              "P_test QA accuracy: bioS single 9.7%, augmented 96.2%",
              "P_test QA exact match after BIO pretrain -> QA fine-tune, augmented minus single, per seed; "
              "mean over seeds (single reported beside)",
              "mean over seeds: single <= 0.25 and augmented - single >= 0.5 (95% Student-t CI across seeds reported)",
              gates=(MEMORISED,)),
        Claim("mixed-vs-pretrain-ft",
              "Mixed training (biographies + P_train QA from scratch) extracts knowledge for P_test far better than "
              "BIO pretrain -> QA fine-tune on bioS single.",
              "Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316, Section 3, Figure 2",
              "P_test QA accuracy: mixed 86.6% vs pretrain -> fine-tune 9.7% (bioS single)",
              "P_test QA exact match on bioS single, mixed minus pretrain -> fine-tune, per seed; mean over seeds",
              "mean over seeds: mixed - pretrain_ft >= 0.4 (95% Student-t CI across seeds reported)",
              gates=(MEMORISED,)),
    ]

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
                            specs=[(range(cfg.n_people), spec)], extra_docs=extra, extra_epochs=cfg.mixed_qa_epochs,
                            order_seed=ctx.seed)
        model = make_model(world, cfg.model, cfg.seq_len, ctx.seed)
        pre = train_packed(model, stream, cfg.pretrain, seed=ctx.seed, ctx=ctx, phase="pretrain", device=ctx.device)
        row = {"data": d, "regime": regime, "n_people": cfg.n_people, "params": model.num_params(),
               "exposures": exposures_of(stream, cfg.n_people, pre["windows_used"]),
               "pretrain_tokens": pre["tokens_seen"], "pretrain_steps": pre["steps"],
               "tokens_per_s": pre["tokens_per_s"]}
        # memorisation on the pretrained model, for the QA-test people (the gate) and the QA-train people
        rec_tr = bio_recall(model, world, tr, seed=cfg.seed, spec=spec, device=ctx.device)
        rec_te = bio_recall(model, world, te, seed=cfg.seed, spec=spec, device=ctx.device)
        row.update({"bio_recall_train": rec_tr, "bio_recall_test": rec_te,
                    "bio_recall": (rec_tr * len(tr) + rec_te * len(te)) / (len(tr) + len(te))})
        if regime == "pretrain_ft":
            if cfg.probes:
                what = {"attrs": ATTRS, "value_words": first_value_words(world)}
                pp = p_probe(model, world, tr, te, seed=cfg.seed, fullname=False, device=ctx.device, **what)
                pb = p_probe(model, world, tr, te, seed=cfg.seed, fullname=False, position="before_value",
                             device=ctx.device, **what)
                qp = q_probe(model, world, tr, te, device=ctx.device, **what)
                for a in ATTRS:
                    row[f"p_probe_{a}"], row[f"q_probe_{a}"] = pp[a]["test_acc"], qp[a]["test_acc"]
                    row[f"p_probe_before_{a}"] = pb[a]["test_acc"]
                row["p_probe"] = float(np.mean([pp[a]["test_acc"] for a in ATTRS]))
                row["p_probe_before"] = float(np.mean([pb[a]["test_acc"] for a in ATTRS]))
                row["q_probe"] = float(np.mean([qp[a]["test_acc"] for a in ATTRS]))
                row["probe_chance"] = float(np.mean([qp[a]["chance"] for a in ATTRS]))
            ft = qa_stream(world, tr, epochs=cfg.ft_epochs, seed=ctx.seed, seq_len=cfg.qa_seq_len)
            train_packed(model, ft, cfg.finetune, seed=ctx.seed + 1, ctx=ctx, phase="qa_finetune", device=ctx.device)
        row.update(qa_metrics(model, world, tr, te, device=ctx.device))
        row["n_qa_test"] = len(te) * len(ATTRS)
        return row

    def verdicts(self, cfg: KnowledgeExtractionConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        out = []
        n = int(results["n_qa_test"].iloc[0]) if "n_qa_test" in results and len(results) else 0
        qa = {(d, r): seed_values(results, "qa_test", data=d, regime=r)
              for d in ("single", "augmented") for r in ("pretrain_ft", "mixed")}
        rec = {(d, r): seed_values(results, "bio_recall_test", data=d, regime=r)
               for d in ("single", "augmented") for r in ("pretrain_ft", "mixed")}
        scale = (f"N={cfg.n_people} people ({cfg.n_people // 2} QA-train), d_model={cfg.model.d_model}, "
                 f"{cfg.model.n_layers} layers, {cfg.exposures} exposures")

        s, a = qa["single", "pretrain_ft"], qa["augmented", "pretrain_ft"]
        seeds = paired(s, a)
        if seeds:
            diff = across_seeds([a[k] - s[k] for k in seeds])
            single = across_seeds([s[k] for k in seeds])
            ok = single.mean <= 0.25 and diff.mean >= 0.5
            out.append(self.judge(
                cfg, "pretrain-ft-augmentation", value=diff.mean, passed=ok, ci=diff.ci, ci_kind=diff.kind,
                n_seeds=diff.n, gates={"memorised": recall_gate(rec["single", "pretrain_ft"],
                                                                rec["augmented", "pretrain_ft"])},
                details={"single": seed_summary(s), "augmented": seed_summary(a),
                         "bio_recall_test": {"single": rec["single", "pretrain_ft"],
                                             "augmented": rec["augmented", "pretrain_ft"]},
                         "single_within_run": within_run(s, n), "augmented_within_run": within_run(a, n),
                         "paper": {"single": 0.097, "augmented": 0.962}},
                note="" if ok else (f"At {scale}; the paper uses N=100k people (50k QA-train), GPT-2 small with "
                                    "rotary and ~1000 exposures. With few QA-train people fine-tuning can memorise "
                                    "their answers instead of learning extraction; N >= 10k with a ~10M-parameter "
                                    "model would settle it.")))
        ms, ps = qa["single", "mixed"], qa["single", "pretrain_ft"]
        seeds = paired(ms, ps)
        if seeds:
            diff = across_seeds([ms[k] - ps[k] for k in seeds])
            ok = diff.mean >= 0.4
            out.append(self.judge(
                cfg, "mixed-vs-pretrain-ft", value=diff.mean, passed=ok, ci=diff.ci, ci_kind=diff.kind, n_seeds=diff.n,
                gates={"memorised": recall_gate(rec["single", "mixed"], rec["single", "pretrain_ft"])},
                details={"mixed": seed_summary(ms), "pretrain_ft": seed_summary(ps),
                         "bio_recall_test": {"mixed": rec["single", "mixed"], "pretrain_ft": rec["single", "pretrain_ft"]},
                         "mixed_within_run": within_run(ms, n), "pretrain_ft_within_run": within_run(ps, n),
                         "paper": {"mixed": 0.866, "pretrain_ft": 0.097}},
                note="" if ok else f"At {scale}; the paper's scale (N=100k, GPT-2 small) would settle it."))
        return out

    def figures(self, cfg: KnowledgeExtractionConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        multi = "seed_index" in results and results["seed_index"].max() > 0
        labels = [f"{r.data}\n{r.regime}" + (f"\nseed {r.seed_index}" if multi else "") for r in results.itertuples()]
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
