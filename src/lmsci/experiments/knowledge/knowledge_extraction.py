"""``knowledge-extraction``: is knowledge stored in biographies extractable by QA for unseen people?

Source: Allen-Zhu & Li, "Physics of Language Models: Part 3.1, Knowledge Storage and Extraction",
arXiv 2309.14316, Sections 3-4 (Figures 2-3: BIO pretrain -> QA fine-tune on P_train, QA accuracy
on P_test: bioS single ~9.7%, bioS multi5+permute+fullname ~96%; mixed training ~86.6%) and
Section 5-6 (P-probing, Q-probing); Appendix C (mixed training, QA_r = 0.8); the protocol of issue 11:
LoRA QA fine-tuning (Section 4.1; Part 3.2, arXiv 2309.14402, footnote 19), a memorisation gate before
extraction is judged (Part 3.3, arXiv 2404.05405, Remark A.2), probes on the training biographies
against a randomly initialised model.

Claims (both decided at the gpu and paper presets only: at quick, a 15-minute CPU run, the memorisation gate
(recall >= 0.9) and the qa-learned gate cannot pass, issue 29; quick still reports every value):
``pretrain-ft-augmentation`` (augmented minus single P_test QA after LoRA QA fine-tuning) and
``mixed-vs-pretrain-ft`` (mixed training minus pretrain -> fine-tune, bioS single). Their null arm (issue 44 item
4): the treated arm (augmented / mixed) replaced by a second model of the control condition, bioS single pretrain
-> LoRA QA fine-tune exactly as ``single_pretrain_ft`` (same world, biographies, budget and protocol) at its own
seed (initialisation, data order and fine-tuning order: :meth:`KnowledgeExtraction.point_seed`); its P_test QA
accuracy takes the place of the augmented / mixed arm in the same statistic (minus the same seed's real single
pretrain_ft) and rule. No factor differs between the two terms, so the null meets a rule only if the control
condition alone sometimes extracts P_test knowledge (a seed-to-seed spread as large as the claimed effect, or a
leak in the evaluation that some training orders exploit).

Arms (issue 44): the conditions of ``cfg.arms`` are the ``real`` arm's points (ids unchanged); the null arm is its
own point of the sweep, ``null-single_pretrain_ft`` (a separate model: nothing is trained twice; no probes); every
row carries ``condition`` (``<data>_<regime>``; the null row ``single_pretrain_ft_second``), which the statistics
select on. The engine judges ``mixed-vs-pretrain-ft`` (the mean over seeds of [qa_test of single_mixed, or of the
null row] minus qa_test of the real single_pretrain_ft, paired by seed, >= 0.4) and, since issue 44 item 1,
``pretrain-ft-augmentation``: the mean of :data:`AUG_MINUS_SINGLE` >= 0.5 and (``Claim.also``) the real single
arm's mean (:data:`SINGLE_PFT`) <= 0.25 at the same seeds, on the real arm and, with the same single arm, on the
null arm. Both claims' gates read the real arm: a failed
``memorised`` gate means the budget did not memorise the people tested at this scale (the gpu preset, N = 1.2k,
4-layer d_model 256, 300 exposures, is the smallest meant to settle the claims; session 52 cut it from N = 5k, ~31
min of one H100, to fit 10 minutes). The null model is trained to the
same budget as the real single model; its memorisation is in its row (``bio_recall_test``), not a gate.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.contract import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.knowledge._bios_streams import exposures_of, pretraining_data, token_fractions
from lmsci.experiments.knowledge._estimates import H100_ASSUMPTIONS, mean_tokens, model_seconds
from lmsci.experiments.knowledge._gates import QA_LEARNED_MIN, RECALL_MIN
from lmsci.experiments.knowledge._specs import SINGLE
from lmsci.experiments.knowledge.common import MemoriseFirstConfig, first_value_words, pretrain_check_finetune
from lmsci.models.gpt import GPT
from lmsci.report import markdown_table
from lmsci.measure.knowledge import qa_metrics
from lmsci.experiments.registry import register
from lmsci.measure.probes import p_probe, q_probe
from lmsci.claims import Claim, Gate, Stat, every_at_least, mean_at_least, mean_at_most
from lmsci.runs import RunDir, derive_seed
from lmsci.worlds.bios import ATTRS, BiosWorld
from lmsci.worlds.bios_datasets import qa_docs, qa_split

#: P_test QA of the real single pretrain_ft model (the contrasts' subtrahend, on the real arm whatever arm is judged)
SINGLE_PFT = Stat("qa_test", where={"data": "single", "regime": "pretrain_ft"}, arm="real",
                  words="P_test QA exact match of the real bioS-single pretrain -> LoRA fine-tune model")
#: the null arm's row: a second bioS single pretrain_ft model at its own seed (``condition`` of its row)
SECOND = "single_pretrain_ft_second"
#: augmented pretrain_ft (real arm) or the second single pretrain_ft model (null arm) minus SINGLE_PFT
AUG_MINUS_SINGLE = Stat("qa_test", where={"condition": ("augmented_pretrain_ft", SECOND)}, minus=SINGLE_PFT,
                        words="P_test QA exact match after BIO pretrain -> LoRA QA fine-tune (rank 16 on the attention "
                              "qkv, rank up to 128 on the embedding), augmented minus single (the null arm: a second "
                              "single model at another seed minus the same single)")
MIXED_MINUS_PFT = Stat("qa_test", where={"condition": ("single_mixed", SECOND)}, minus=SINGLE_PFT,
                       words="P_test QA exact match on bioS single, mixed training (windows all biographies or all QA, "
                             "QA at 80% of the tokens) minus pretrain -> LoRA fine-tune (the null arm: a second "
                             "pretrain -> fine-tune model at another seed minus the same pretrain_ft)")


def _memorised(*regimes: str, data: tuple[str, ...] = ("single",)) -> Gate:
    return Gate("memorised", every_at_least(RECALL_MIN), arm="real",
                stat=Stat("bio_recall_test", agg="min", where={"data": data, "regime": regimes},
                          words="biography recall (exact match of each of the 6 attribute values given the biography "
                                "prefix, on the pretrained model) of the people tested, lowest over the compared "
                                "conditions"))


def _qa_learned(data: str, regime: str) -> Gate:
    return Gate("qa-learned", every_at_least(QA_LEARNED_MIN), arm="real",
                stat=Stat("qa_train", where={"data": data, "regime": regime},
                          words=f"QA exact match on the QA-trained people (P_train) of the {data} {regime} model: the "
                                "training learned the question format"))


class KnowledgeExtractionConfig(MemoriseFirstConfig):
    """Configuration of ``knowledge-extraction`` (defaults = quick preset).

    Attributes:
        n_people: N individuals; half are P_train (QA seen in training), half P_test.
        arms: the (biography kind, regime) models trained: ``single`` (one fixed biography per person)
            or ``augmented`` (the :attr:`augmented` spec, multiM + permute + fullname) with
            ``pretrain_ft`` (BIO pretrain, then QA fine-tune on P_train, LoRA by default) or ``mixed``
            (biographies and QA of P_train together from scratch). The claims need
            ``single_pretrain_ft``, ``augmented_pretrain_ft`` and ``single_mixed``.
        exposures: biographies per person in pretraining (the budget; see ``memorise_stop``).
        mixed_exposures: biographies per person in mixed training (None: ``exposures``); QA adds
            ``qa_ratio / (1 - qa_ratio)`` times the biography tokens on top.
        qa_ratio: QA share of the tokens in mixed training (QA_r, Part 3.1 Appendix C: 0.8); every window
            holds only biographies or only QA.
        ft_epochs: passes over the QA of P_train in fine-tuning.
        probes: P- and Q-probing after BIO pretraining (``pretrain_ft`` points), on the training
            biographies, with a randomly initialised model of the same shape as the baseline.
        probe_people: at most this many people per side (fit on P_train, score on P_test).
        null_arm: the claims' null arm, its own point per seed: a second bioS single pretrain -> LoRA QA
            fine-tune model at another seed (initialisation, data and fine-tuning order), scored on P_test.
        pipeline: ``"packed"`` (whole epochs packed in memory, :func:`bio_stream`) or ``"stream"``
            (:mod:`lmsci.worlds.bios_stream`, rendered and packed on the fly; gpu and paper presets).
    """

    arms: list[Literal["single_pretrain_ft", "augmented_pretrain_ft", "single_mixed", "augmented_mixed"]] = [
        "single_pretrain_ft", "augmented_pretrain_ft", "single_mixed"]
    qa_ratio: float = Field(0.8, ge=0, lt=1)
    probes: bool = True
    probe_people: int = Field(5000, ge=10)
    null_arm: bool = True
    # the quick preset (2 CPU cores, <= 15 minutes): MemoriseFirstConfig's protocol (N = 600, so 300 QA-train;
    # recall checked on P_test) with an 80-exposure budget; one seed (three do not fit: mixed training alone costs
    # 5x the biography tokens)
    exposures: int = Field(80, ge=1)
    mixed_exposures: int | None = Field(40, ge=1)

    PRESETS = {
        "smoke": {"n_people": 12, "exposures": 2, "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                  "ft_epochs": 1, "seq_len": 128, "qa_seq_len": 64, "finetune": {"batch_size": 4, "rank": 2,
                  "embedding_rank": 4, "lr": 3e-4}, "memorise_check_every": 2, "memorise_check_people": 4,
                  "mixed_exposures": 2},
        "quick": {"n_seeds": 1},
        # one H100 (estimated from the throughput measured on an H200): N = 1.2k (600 QA-train; 10k before
        # 2026-11-26, when the measured throughput put it at 49 min; 5k until session 52, ~31 min), 4-layer
        # d_model 256 RoPE GPT,
        # 300 exposures (100 in mixed training, plus 4x their tokens of QA), batch 24 x 512, lr 1e-3, wd 0.1; LoRA
        # fine-tune (rank 16 on qkv, rank 128 on the embedding, wd 0.01, cosine to 10%) at lr 1e-3 for ~3.6k steps
        # (the papers' 3e-4 is for 50k steps); the whole budget is trained (no early stop), recall checked every
        # 1000 steps; trainer checkpoints let 10-minute commands chain (rerun into the same --out); <= 9 minutes
        "gpu": {"n_people": 1_200, "model": {"d_model": 256, "n_layers": 4, "n_heads": 8}, "exposures": 300,
                "mixed_exposures": 100, "seq_len": 512, "qa_seq_len": 128, "pipeline": "stream",
                "pretrain": {"lr": 1e-3, "batch_size": 24, "weight_decay": 0.1, "warmup_frac": 0.02},
                "finetune": {"method": "lora", "rank": 16, "embedding_rank": 128, "lr": 1e-3, "weight_decay": 0.01,
                             "batch_size": 48},
                "ft_epochs": 40, "memorise_check_every": 1000, "memorise_check_people": 500, "memorise_stop": None,
                "n_seeds": 3, "probe_people": 5000, "precision": "bf16"},
        # the papers' scale (Part 3.1: N = 100k, GPT-2 small with rotary, 512-token windows, batch 96, ~80k
        # steps, lr 1e-3, wd 0.1; LoRA QA fine-tune rank 8-16 (q/v) + 128 (embedding), lr 3e-4, batch 48)
        "paper": {"n_people": 100_000, "exposures": 1000, "model": {"d_model": 768, "n_layers": 12, "n_heads": 12},
                  "seq_len": 512, "qa_seq_len": 512, "pretrain": {"lr": 1e-3, "batch_size": 96, "weight_decay": 0.1},
                  "finetune": {"method": "lora", "rank": 16, "embedding_rank": 128, "lr": 3e-4, "weight_decay": 0.01,
                               "batch_size": 48},
                  "ft_epochs": 50, "memorise_check_every": 5000, "memorise_check_people": 1000, "memorise_stop": None,
                  "mixed_exposures": None, "pipeline": "stream", "n_seeds": 3},
    }


#: what the gpu preset's first point did on CPU (part of the gpu time estimate)
CPU_CHECK = (
    "CPU check (2026-11-23, no GPU lent; a loaded 2-core machine): `lmsci run knowledge-extraction --pres"
    "et gpu --set device=cpu --set threads=1 --set precision=fp32 --set pretrain.batch_size=2 --set expos"
    "ures=1 --set memorise_check_every=2 --set memorise_check_people=20` under `timeout 150` built the N "
    "= 10k world and stream, trained the first point (single_pretrain_ft) to step 2 (recall check, checkp"
    "oint); the same command again resumed from step 2 and reached step 4. With the preset's batch of 24,"
    " one step took > 60 s on this CPU (and bf16 autocast is emulated on a CPU without AVX512-BF16)")


def estimate_h100_seconds(cfg: KnowledgeExtractionConfig) -> float:
    """Estimated wall seconds of a whole run on one H100 (:func:`knowledge_common.model_seconds` for every arm
    and seed: pretraining tokens = N x exposures x mean biography tokens, plus ``qa_ratio / (1 - qa_ratio)`` of
    that in QA for mixed training; LoRA fine-tuning on the N/2 QA-train people; recall, QA and probe evaluation).
    The assumptions (achieved bf16 throughput, per-step overhead, host rates) are those of knowledge_common."""
    n, ntr = cfg.n_people, cfg.n_people // 2
    total = 0.0
    for arm in cfg.arms:
        d, regime = arm.split("_", 1)
        b = mean_tokens("bio", SINGLE if d == "single" else cfg.augmented)
        if regime == "mixed":
            E = cfg.mixed_exposures or cfg.exposures
            qa = n * E * b * cfg.qa_ratio / (1 - cfg.qa_ratio)
            total += model_seconds(cfg, bio_tokens=n * E * b, bio_docs=n * E, qa_tokens=qa, eval_docs=n * 7)
        else:
            probes = 6 * min(cfg.probe_people, ntr) * 2 if cfg.probes else 0  # 2 models x (P, P-before, Q) x 2 sides
            total += model_seconds(cfg, bio_tokens=n * cfg.exposures * b, bio_docs=n * cfg.exposures, ft_people=ntr,
                                   eval_docs=n * 8 + probes)
            if d == "single" and cfg.null_arm:  # the null arm: a second single pretrain_ft model (no probes)
                total += model_seconds(cfg, bio_tokens=n * cfg.exposures * b, bio_docs=n * cfg.exposures,
                                       ft_people=ntr, eval_docs=n * 8)
    return total * cfg.n_seeds


@register("knowledge-extraction")
class KnowledgeExtraction(Experiment):
    """BIO pretrain -> QA fine-tune (LoRA), and mixed training, for bioS single vs augmented.

    Source: Allen-Zhu & Li, arXiv 2309.14316, Sections 3-6, Appendix C.
    """

    claim = ("Without biography augmentation, knowledge memorised in pretraining is not extractable by QA "
             "for held-out people (QA-test accuracy near zero); augmentation (multiM+permute+fullname) lifts it high.")
    source = "Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316, Sections 3-6, Figures 2-3"
    Config = KnowledgeExtractionConfig
    time_estimate = {"smoke": "~15 s", "quick": "13.3 CPU-min measured before the null arm (801 s CPU, 1278 s wall at one thread beside two other runs on the 2-core machine, 2026-11-26; 1 seed), plus the null arm, a second single pretrain -> fine-tune model without probes (issue 44 item 4; not measured: about as long as the single point's training)",
                     "gpu": "~7 min on one H100 (7.4 min), estimated by estimate_h100_seconds; not measured: no GPU in "
                            "the session (3 seeds x (single x 2 (the null arm's second single model) + augmented + "
                            "mixed) models of N = 1.2k people at 22.9 MFLOP/token, 0.24x the tokens of the N = 5k preset "
                            "of issue 11 (31.0 min), LoRA fine-tuning on the 600 P_train people per pretrain_ft model; "
                            + H100_ASSUMPTIONS + "). Pretraining checkpoints every 1000 steps (rerun into the same --out "
                            "to resume). " + CPU_CHECK,
                     "paper": "N=100k, GPT-2 small, 80k steps of 96 x 512 tokens (~4B tokens) per pretraining: ~3 h on "
                              "one H100 at ~0.4M tokens/s (estimated); mixed training 5x the tokens; 3 arms x 3 seeds "
                              "~70 H100-hours"}
    claims = [
        Claim("pretrain-ft-augmentation",
              "After BIO pretraining and LoRA QA fine-tuning on P_train, QA on the held-out P_test is poor for bioS "
              "single and high when the biographies are augmented (multi5 + permute + fullname).",
              "Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316, Sections 3-4 (Figures 2-3; LoRA "
              "fine-tuning Section 4.1)",
              "P_test QA accuracy: bioS single 9.7%, augmented 96.2%",
              AUG_MINUS_SINGLE, mean_at_least(0.5), also=((SINGLE_PFT, mean_at_most(0.25)),),
              gates=(_memorised("pretrain_ft", data=("single", "augmented")), _qa_learned("augmented", "pretrain_ft")),
              presets=("gpu", "paper"),
              null="the augmented arm replaced by a second bioS single model (BIO pretrain -> LoRA QA fine-tune as "
                   "the real single arm, same world, budget and protocol) at another seed (initialisation, data and "
                   "fine-tuning order); same seed's real single arm subtracted, same statistic and rule",
              null_can_meet="no factor differs between the two single models, so it meets the rule only if the "
                            "single condition alone sometimes extracts P_test knowledge: a seed-to-seed spread of "
                            "0.5 in P_test QA, or a leak in the evaluation (P_test answers reachable from the format "
                            "or the answer pools) that some training orders exploit"),
        Claim("mixed-vs-pretrain-ft",
              "Mixed training (biographies + P_train QA from scratch) extracts knowledge for P_test far better than "
              "BIO pretrain -> QA fine-tune on bioS single.",
              "Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316, Section 3 (Figure 2) and Appendix C",
              "P_test QA accuracy: mixed 86.6% vs pretrain -> fine-tune 9.7% (bioS single)",
              statistic=MIXED_MINUS_PFT, rule=mean_at_least(0.4),
              gates=(_memorised("mixed", "pretrain_ft"), _qa_learned("single", "mixed")), presets=("gpu", "paper"),
              null="the mixed arm replaced by a second bioS single pretrain -> LoRA QA fine-tune model (as the real "
                   "pretrain_ft arm, same world, budget and protocol) at another seed (initialisation, data and "
                   "fine-tuning order); same seed's real pretrain_ft arm subtracted, same statistic and rule",
              null_can_meet="no factor differs between the two pretrain_ft models, so it meets the rule only if "
                            "pretrain -> fine-tune alone sometimes extracts P_test knowledge: a seed-to-seed spread "
                            "of 0.4 in P_test QA, or a leak in the evaluation that some training orders exploit"),
    ]

    def points(self, cfg: KnowledgeExtractionConfig) -> list[Point]:
        out = []
        for arm in cfg.arms:
            d, r = arm.split("_", 1)
            out.append(Point(arm, {"data": d, "regime": r}, arm="real"))
            if arm == "single_pretrain_ft" and cfg.null_arm:  # the claims' null arm: a second control model
                out.append(Point(f"null-{arm}", {"data": d, "regime": r}, arm="null"))
        return out

    def point_seed(self, cfg: KnowledgeExtractionConfig, point: Point) -> int:
        """The real points' seeds as before; the null point (a second model of the single pretrain_ft condition)
        gets its own, derived from the paired real point's, so that its initialisation, data order and fine-tuning
        order differ from the model it is compared with."""
        seed = super().point_seed(cfg, point)
        return derive_seed(seed, "second-control-model") if point.arm == "null" else seed

    def run_point(self, cfg: KnowledgeExtractionConfig, point: Point, ctx: PointContext) -> dict:
        d, regime = point.params["data"], point.params["regime"]
        world = BiosWorld(cfg.n_people, seed=cfg.seed)
        world.write_pools(ctx.run.path / "bios_pools.json")
        tr, te = qa_split(cfg.n_people, cfg.seed)
        spec = SINGLE if d == "single" else cfg.augmented
        mixed = regime == "mixed"
        stream, bios_fn = pretraining_data(
            world, pipeline=cfg.pipeline, exposures=(cfg.mixed_exposures or cfg.exposures) if mixed else cfg.exposures,
            seed=cfg.seed, seq_len=cfg.seq_len, batch_size=cfg.pretrain.batch_size,
            specs=[(range(cfg.n_people), spec)], order_seed=ctx.seed, qa=tr if mixed else None,
            qa_ratio=cfg.qa_ratio, max_distinct_epochs=cfg.max_distinct_epochs)
        model, pre, row = pretrain_check_finetune(
            cfg, world, stream, bios_fn, ctx, tested=te, tested_spec=spec,
            recall={"train": (tr, spec), "test": (te, spec)},
            finetune_people=None if mixed else tr, forgetting=("test",),
            before_finetune=(lambda m: self._probes(cfg, world, m, tr, te, bios_fn, ctx))
            if cfg.probes and not mixed and point.arm == "real" else None)
        frac = token_fractions(stream, world.vocab.pad_id)
        cond = SECOND if point.arm == "null" else f"{d}_{regime}"
        row.update({"data": d, "regime": regime, "condition": cond, "n_people": cfg.n_people, "pipeline": cfg.pipeline,
                    "exposures": exposures_of(stream, cfg.n_people, pre["windows_used"]),
                    "qa_token_fraction": frac.get("qa", 0.0), "mixed_windows": frac["mixed_windows"]})
        # memorisation on the pretrained model: the QA-test people (the gate), the QA-train people, and all
        rec_tr, rec_te = row["bio_recall_train"], row["bio_recall_test"]
        row["bio_recall"] = (rec_tr * len(tr) + rec_te * len(te)) / (len(tr) + len(te))
        row.update(qa_metrics(model, world, tr, te, attrs=ATTRS, device=ctx.device))
        row["n_qa_test"] = len(te) * len(ATTRS)
        return row

    def _probes(self, cfg, world, model, tr, te, bios_fn, ctx) -> dict:
        """P-probes (after the name, before each value) on the training biographies and the Q-probe, on the
        pretrained model and on a randomly initialised one of the same shape (the baseline)."""
        k = cfg.probe_people
        ptr, pte = tr[:k], te[:k]
        bios = {int(b.person): b for b in bios_fn(np.concatenate([ptr, pte]))}
        what = {"attrs": ATTRS, "value_words": first_value_words(world), "device": ctx.device}
        rand = GPT(cfg.model.gpt_config(len(world.vocab), cfg.seq_len), seed=ctx.seed + 7).to(ctx.device)
        row: dict = {"probe_people_train": len(ptr), "probe_people_test": len(pte)}
        for tag, m in (("", model), ("_rand", rand)):
            pp = p_probe(m, world, ptr, pte, seed=cfg.seed, bios=bios, **what)
            pb = p_probe(m, world, ptr, pte, seed=cfg.seed, bios=bios, position="before_value", **what)
            qp = q_probe(m, world, ptr, pte, **what)
            for a in ATTRS:
                row[f"p_probe{tag}_{a}"], row[f"q_probe{tag}_{a}"] = pp[a]["test_acc"], qp[a]["test_acc"]
                row[f"p_probe_before{tag}_{a}"] = pb[a]["test_acc"]
            row[f"p_probe{tag}"] = float(np.mean([pp[a]["test_acc"] for a in ATTRS]))
            row[f"p_probe_before{tag}"] = float(np.mean([pb[a]["test_acc"] for a in ATTRS]))
            row[f"q_probe{tag}"] = float(np.mean([qp[a]["test_acc"] for a in ATTRS]))
            if not tag:
                row["probe_chance"] = float(np.mean([qp[a]["chance"] for a in ATTRS]))
        return row

    def report_sections(self, cfg: KnowledgeExtractionConfig, results: pd.DataFrame, run: RunDir) -> str:
        cols = [c for c in ("arm", "point", "pretrain_steps", "pretrain_steps_budget", "steps_to_gate", "exposures",
                            "qa_token_fraction", "bio_recall_test", "qa_train", "qa_test", "bio_recall_test_after_ft",
                            "forgetting_test",
                            "p_probe", "p_probe_rand", "p_probe_before", "p_probe_before_rand", "q_probe",
                            "q_probe_rand") if c in results]
        if not len(results):
            return ""
        lines = ["## Protocol", "",
                 f"QA fine-tuning: **{cfg.finetune.method}** (rank {cfg.finetune.rank} on the attention qkv, rank "
                 f"{cfg.finetune.embedding_rank} on the embedding, lr {cfg.finetune.lr}, wd {cfg.finetune.weight_decay}"
                 f", cosine to 10%; peft). Memorisation gate: biography recall of P_test >= {RECALL_MIN} on the "
                 f"pretrained model (checked every {cfg.memorise_check_every or 'last'} steps; `steps_to_gate` is the "
                 f"first check that met it). Mixed training: windows all biographies or all QA, QA at "
                 f"{cfg.qa_ratio:.0%} of the tokens (measured: `qa_token_fraction`). Probes read the training "
                 "biographies; `_rand` columns are the same probes on a randomly initialised model. The null arm's rows "
                 "(condition `single_pretrain_ft_second`): a second bioS single pretrain -> LoRA QA fine-tune model "
                 "at another seed (initialisation, data and fine-tuning order), no probes.",
                 "",
                 markdown_table(results, None, cols=cols, float_format=".3f")]
        after = "bio_recall_test_after_ft"
        ft = results.dropna(subset=[after]) if after in results else results[:0]
        if len(ft):
            fcols = [c for c in ("point", "ft_method", "qa_train", "bio_recall_test", "bio_recall_test_after_ft",
                                 "forgetting_test") if c in ft]
            lines += ["## Forgetting after QA fine-tuning", "",
                      "QA accuracy on the fine-tuned people (P_train) and biography recall of the held-out people "
                      "(P_test) before and after fine-tuning; `forgetting_test` = before - after (Part 3.1, Section 4.1: "
                      "LoRA leaves the pretrained weights untouched, full fine-tuning may overwrite them).", "",
                      markdown_table(ft, None, cols=fcols, float_format=".3f")]
        return "\n".join(lines)

    def figures(self, cfg: KnowledgeExtractionConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        multi = "seed_index" in results and results["seed_index"].max() > 0
        labels = [f"{r.data}\n{r.regime}" + ("\n(null)" if getattr(r, "arm", "real") == "null" else "")
                  + (f"\nseed {r.seed_index}" if multi else "") for r in results.itertuples()]
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
                if f"p_probe_rand_{ATTRS[0]}" in sub:
                    ax.plot(np.arange(len(ATTRS)) + (k - 0.5) * w, [getattr(r, f"p_probe_rand_{a}") for a in ATTRS],
                            "x", color="gray", label=f"P-probe, random-init model {r.data}")
            ax.axhline(float(sub["probe_chance"].mean()), color="gray", ls=":", label="majority class")
            ax.set_xticks(range(len(ATTRS)), ATTRS, fontsize=7)
            ax.set_ylabel("probe test accuracy (first value token)")
            ax.legend(fontsize=7)
            figs.append(save_figure(fig, run, "probes.png",
                                    "Linear probes of the first value token after BIO pretraining, fit on "
                                    "P_train and scored on P_test: P-probe right after the name and right "
                                    "before the value inside each person's training biography, Q-probe on the "
                                    "name alone; crosses: the after-name P-probe on a randomly initialised model."))
        return figs
