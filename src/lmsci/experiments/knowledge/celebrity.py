"""``celebrity-helps-minority``: augmented celebrities make unaugmented minority knowledge extractable.

Source: Allen-Zhu & Li, Part 3.1, arXiv 2309.14316, Section 4.4 ("celebrity helps minority"):
with P_train ("celebrities") written with multi5+permute+fullname and P_test ("minority") with
one bioS-single biography each, QA fine-tuning on the celebrities gives minority QA accuracy
86.8%, against 4.4% when everyone is single. The protocol of issue 11: LoRA QA fine-tuning (Section 4.1)
and a memorisation gate on the minority's biographies before the lift is judged.

The claim ``minority-lift`` is decided at the gpu and paper presets only (issue 29: at quick, a 15-minute CPU run,
the memorisation gate (recall >= 0.9) and the qa-learned gate cannot pass; quick still reports the values). Its
null arm (issue 44 item 4): the with-celebrities arm replaced by a second model of the control condition, everyone
single (pretraining and LoRA QA fine-tuning on the celebrities exactly as ``baseline_all_single``: same world,
biographies, budget and protocol) at a seed of its own (initialisation, data order and fine-tuning order:
:meth:`CelebrityHelpsMinority.point_seed`); its minority QA accuracy takes the place of the with-celebrities arm in
the same statistic (minus the same seed's real all-single arm) and rule. No factor differs between the two terms, so
the null meets the rule only if the all-single condition alone sometimes makes the minority extractable (a
seed-to-seed spread as large as the claimed lift, or a leak in the evaluation that some training orders exploit).

Arms (issue 44): the two conditions are the ``real`` arm's points (ids unchanged); the null arm is its own point,
``null-baseline_all_single`` (a separate model: nothing is trained twice); a row's ``condition`` is ``all_single``,
``celebrities_augmented`` or (the null arm) ``all_single_second``. The gates read the real arm; the null model's
minority recall is in its row.
The claims engine judges ``minority-lift`` (issue 44 item 1): the mean lift (:data:`LIFT`) >= 0.5, and
(``Claim.also``) the real all-single arm's mean (:data:`ALL_SINGLE`) <= 0.25 at the same seeds, on the real arm and,
with the same all-single arm, on the null arm; the gates read the real arm. A failed ``memorised`` gate means the
budget did not memorise the minority at this scale: the gpu preset (N=2k, 4-layer d_model 256, 300 exposures) is
the smallest meant to settle the claim (the paper uses N=200k and GPT-2 small).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.contract import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.knowledge._bios_streams import exposures_of, pretraining_data
from lmsci.experiments.knowledge._estimates import H100_ASSUMPTIONS, mean_tokens, model_seconds
from lmsci.experiments.knowledge._gates import QA_LEARNED_MIN, RECALL_MIN
from lmsci.experiments.knowledge._specs import SINGLE
from lmsci.experiments.knowledge.common import MemoriseFirstConfig, pretrain_check_finetune
from lmsci.report import markdown_table
from lmsci.measure.knowledge import qa_metrics
from lmsci.experiments.registry import register
from lmsci.claims import Claim, Gate, Stat, every_at_least, mean_at_least, mean_at_most
from lmsci.runs import RunDir, derive_seed
from lmsci.worlds.bios import ATTRS, BiosWorld
from lmsci.worlds.bios_datasets import qa_split

CONDITION = {False: "all_single", True: "celebrities_augmented"}
NULL_CONDITION = "all_single_second"  # the null arm: a second all-single model at its own seed
#: minority QA of the real all-single model (the lift's subtrahend, on the real arm whatever arm is judged)
ALL_SINGLE = Stat("qa_minority", where={"condition": "all_single"}, arm="real",
                  words="minority (P_test) QA exact match of the all-single model after LoRA QA fine-tuning on the "
                        "celebrities")
LIFT = Stat("qa_minority", where={"condition": (CONDITION[True], NULL_CONDITION)}, minus=ALL_SINGLE,
            words="minority (P_test) QA exact match after LoRA QA fine-tuning on the celebrities (rank 16 on the "
                  "attention qkv, rank up to 128 on the embedding) with augmented celebrities (the null arm: a second "
                  "all-single model at another seed) minus all single")
MEMORISED_MINORITY = Gate("memorised", every_at_least(RECALL_MIN), arm="real",
                          stat=Stat("bio_recall_minority", agg="min", where={"condition": tuple(CONDITION.values())},
                                    words="minority biography recall (exact match of each of the 6 attribute values "
                                          "given the biography prefix, on the pretrained model), lowest of the two "
                                          "conditions"))
QA_LEARNED_CELEB = Gate("qa-learned", every_at_least(QA_LEARNED_MIN), arm="real",
                        stat=Stat("qa_celebrity", where={"condition": CONDITION[True]},
                                  words="QA exact match on the celebrities (fine-tuned on) of the with-celebrities "
                                        "model: the fine-tuning learned the question format"))


class CelebrityConfig(MemoriseFirstConfig):
    """Configuration of ``celebrity-helps-minority`` (defaults = quick preset).

    Attributes:
        n_people: N; a ``celebrity_fraction`` of them are celebrities (P_train), the rest the minority (P_test).
        augmented: how celebrities' biographies are written.
        exposures: biographies per person in pretraining (the same for celebrities and minority).
        finetune: QA fine-tuning on the celebrities (LoRA by default, the papers' protocol).
        pipeline: ``"packed"`` (whole epochs packed in memory) or ``"stream"`` (:mod:`lmsci.worlds.bios_stream`,
            rendered and packed on the fly; gpu and paper presets).
        null_arm: the claim's null arm, its own point per seed: a second all-single model (pretraining and LoRA
            QA fine-tuning on the celebrities as ``baseline_all_single``) at another seed, scored on the minority.
    """

    celebrity_fraction: float = Field(0.5, gt=0, lt=1)
    null_arm: bool = True
    # the quick preset (2 CPU cores, <= 15 minutes, 3 seeds): MemoriseFirstConfig's protocol (N = 600, so 300
    # celebrities; recall checked on the minority) with a 60-exposure budget
    exposures: int = Field(60, ge=1)

    PRESETS = {
        "smoke": {"n_people": 12, "exposures": 2, "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                  "ft_epochs": 1, "seq_len": 128, "qa_seq_len": 64, "finetune": {"batch_size": 4, "rank": 2,
                  "embedding_rank": 4, "lr": 3e-4}, "memorise_check_every": 2, "memorise_check_people": 4},
        "quick": {"n_seeds": 3},
        # one H100, <= 9 minutes (estimated, not measured; session 52, was N = 10k at ~40.5 min): N = 2k (1k
        # celebrities), 4-layer d_model 256 RoPE GPT, 300 exposures, batch 24 x 512, lr 1e-3, wd 0.1, LoRA fine-tune
        # on the celebrities at lr 1e-3 for 40 epochs (the papers' 3e-4 is for 50k steps); checkpoints chain
        "gpu": {"n_people": 2_000, "model": {"d_model": 256, "n_layers": 4, "n_heads": 8}, "exposures": 300,
                "seq_len": 512, "qa_seq_len": 128,
                "pretrain": {"lr": 1e-3, "batch_size": 24, "weight_decay": 0.1, "warmup_frac": 0.02},
                "finetune": {"method": "lora", "rank": 16, "embedding_rank": 128, "lr": 1e-3, "weight_decay": 0.01,
                             "batch_size": 48},
                "ft_epochs": 40, "memorise_check_every": 1000, "memorise_check_people": 500, "memorise_stop": None,
                "pipeline": "stream", "n_seeds": 3, "precision": "bf16"},
        # the paper's scale (Section 4.4: N = 200k, 100k celebrities; GPT-2 small with rotary; LoRA fine-tune)
        "paper": {"n_people": 200_000, "exposures": 1000, "model": {"d_model": 768, "n_layers": 12, "n_heads": 12},
                  "seq_len": 512, "qa_seq_len": 512, "pretrain": {"lr": 1e-3, "batch_size": 96, "weight_decay": 0.1},
                  "finetune": {"method": "lora", "rank": 16, "embedding_rank": 128, "lr": 3e-4, "weight_decay": 0.01,
                               "batch_size": 48},
                  "ft_epochs": 50, "memorise_check_every": 5000, "memorise_check_people": 1000, "memorise_stop": None,
                  "pipeline": "stream", "n_seeds": 3},
    }


def estimate_h100_seconds(cfg: CelebrityConfig) -> float:
    """Estimated wall seconds of a whole run on one H100 (:func:`knowledge_common.model_seconds`): per seed, two
    models pretrained on N x exposures biographies (the celebrities augmented in one of them) and LoRA
    fine-tuned on the celebrities' QA; recall and QA evaluation of everyone. Assumptions: knowledge_common's."""
    n_cel = round(cfg.n_people * cfg.celebrity_fraction)
    single, aug = mean_tokens("bio", SINGLE), mean_tokens("bio", cfg.augmented)
    total = 0.0
    for b_cel in (single, aug):
        tokens = cfg.exposures * (n_cel * b_cel + (cfg.n_people - n_cel) * single)
        total += model_seconds(cfg, bio_tokens=tokens, bio_docs=cfg.n_people * cfg.exposures, ft_people=n_cel,
                               eval_docs=cfg.n_people * 9)
    if cfg.null_arm:  # the null arm: a second all-single model
        total += model_seconds(cfg, bio_tokens=cfg.exposures * cfg.n_people * single,
                               bio_docs=cfg.n_people * cfg.exposures, ft_people=n_cel, eval_docs=cfg.n_people * 9)
    return total * cfg.n_seeds


@register("celebrity-helps-minority")
class CelebrityHelpsMinority(Experiment):
    """Minority QA accuracy with and without augmented celebrities in the same pretraining.

    Source: Allen-Zhu & Li, arXiv 2309.14316, Section 4.4.
    """

    claim = ("Including augmented celebrities in pretraining (and QA fine-tuning on them) makes the knowledge of "
             "unaugmented minority individuals extractable (paper: 4.4% -> 86.8% QA accuracy).")
    source = "Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316, Section 4.4"
    Config = CelebrityConfig
    time_estimate = {"smoke": "~10 s", "quick": "8.3 min measured with --backend processes on the 2 cores of the AMD EPYC host (S58 timing pilot at master seed 1000100: its 9 groups on 2 workers at one thread, 15.3 CPU-minutes, so ~16 min one after another); ~16 min estimated before: 10.5 min measured for the two real arms (629 s wall, 1189 s CPU, 3 seeds, threads=2 alone on the 2-core machine, 2026-11-26; 1378 s wall, 905 s CPU at one thread beside two other runs) plus the null arm, a third model of the all-single kind per seed (issue 44 item 4; not measured)",
                     "gpu": "~8 min on one H100 (8.1 min), estimated by estimate_h100_seconds; not measured: no GPU in "
                            "the session (3 seeds x 3 models x ~40M pretraining tokens of N = 2k people x 300 exposures "
                            "at 22.9 MFLOP/token, each LoRA fine-tuned on the 1k celebrities; " + H100_ASSUMPTIONS
                            + "). Session 52 cut N from 10k (40.5 min estimated) to 2k; at N = 10k an H200 shared with "
                            "7 other runs (2026-11-26) took 415 s for the first of 6 points (344 s pretraining, 177.6M "
                            "tokens; 53 s LoRA) and did not finish the preset in the 470 s given (no verdict)",
                     "paper": "N=200k, GPT-2 small, ~1000 exposures (~10B tokens) per model: ~7 h on one H100 at "
                              "~0.4M tokens/s (estimated); 2 arms x 3 seeds ~40 H100-hours"}
    claim_notes = {"minority-lift": "The gpu preset (N=2k, 4-layer d_model 256, 300 exposures) is the smallest meant "
                                    "to settle the claim: below it the minority's biographies are not memorised "
                                    "(recall < 0.9) within the budget; the paper uses N=200k (100k celebrities) and "
                                    "GPT-2 small."}
    claims = [
        Claim("minority-lift",
              "Augmented celebrities in pretraining (and LoRA QA fine-tuning on them) make the knowledge of "
              "unaugmented minority people extractable by QA, which it is not when everyone is single.",
              "Allen-Zhu & Li, Physics of LMs Part 3.1, arXiv 2309.14316, Section 4.4 (LoRA fine-tuning Section 4.1)",
              "minority QA accuracy: all single 4.4%, with augmented celebrities 86.8%",
              LIFT, mean_at_least(0.5), also=((ALL_SINGLE, mean_at_most(0.25)),),
              gates=(MEMORISED_MINORITY, QA_LEARNED_CELEB), presets=("gpu", "paper"),
              null="the with-celebrities arm replaced by a second all-single model (pretraining and LoRA QA "
                   "fine-tuning on the celebrities as the real all-single arm, same world, budget and protocol) at "
                   "another seed (initialisation, data and fine-tuning order); same seed's real all-single arm "
                   "subtracted, same statistic and rule",
              null_can_meet="no factor differs between the two all-single models, so it meets the rule only if the "
                            "all-single condition alone sometimes makes the minority extractable: a seed-to-seed "
                            "spread of 0.5 in minority QA, or a leak in the evaluation (minority answers reachable "
                            "from the format or the answer pools) that some training orders exploit"),
    ]

    def points(self, cfg: CelebrityConfig) -> list[Point]:
        pts = [Point("baseline_all_single", {"celebrities": False}, arm="real"),
               Point("celebrities_augmented", {"celebrities": True}, arm="real")]
        if cfg.null_arm:  # the claim's null arm: a second all-single model (point_seed gives it its own seed)
            pts.append(Point("null-baseline_all_single", {"celebrities": False}, arm="null"))
        return pts

    def point_seed(self, cfg: CelebrityConfig, point: Point) -> int:
        """The real points' seeds as before; the null point (a second all-single model) gets its own, derived from
        the paired real point's, so that its initialisation, data order and fine-tuning order differ."""
        seed = super().point_seed(cfg, point)
        return derive_seed(seed, "second-control-model") if point.arm == "null" else seed

    def run_point(self, cfg: CelebrityConfig, point: Point, ctx: PointContext) -> dict:
        world = BiosWorld(cfg.n_people, seed=cfg.seed)
        world.write_pools(ctx.run.path / "bios_pools.json")
        celeb, minority = qa_split(cfg.n_people, cfg.seed, cfg.celebrity_fraction)
        celeb_spec = cfg.augmented if point.params["celebrities"] else SINGLE
        stream, bios_fn = pretraining_data(world, pipeline=cfg.pipeline, exposures=cfg.exposures, seed=cfg.seed,
                                           seq_len=cfg.seq_len, batch_size=cfg.pretrain.batch_size,
                                           specs=[(celeb, celeb_spec), (minority, SINGLE)], order_seed=ctx.seed,
                                           max_distinct_epochs=cfg.max_distinct_epochs)
        model, pre, row = pretrain_check_finetune(
            cfg, world, stream, bios_fn, ctx, tested=minority, tested_spec=SINGLE,
            recall={"minority": (minority, SINGLE), "celebrity": (celeb, celeb_spec)}, finetune_people=celeb,
            forgetting=("minority",))
        row.update({"celebrities_augmented": bool(point.params["celebrities"]),
                    "condition": NULL_CONDITION if point.arm == "null" else CONDITION[bool(point.params["celebrities"])],
                    "n_people": cfg.n_people,
                    "pipeline": cfg.pipeline,
                    "exposures_celebrity": exposures_of(stream, cfg.n_people, pre["windows_used"], celeb),
                    "exposures_minority": exposures_of(stream, cfg.n_people, pre["windows_used"], minority)})
        m = qa_metrics(model, world, celeb, minority, attrs=ATTRS, device=ctx.device)
        row.update({k.replace("qa_train", "qa_celebrity").replace("qa_test", "qa_minority"): v for k, v in m.items()})
        row["n_qa_minority"] = len(minority) * len(ATTRS)
        return row

    def report_sections(self, cfg: CelebrityConfig, results: pd.DataFrame, run: RunDir) -> str:
        cols = [c for c in ("arm", "point", "condition", "pretrain_steps", "pretrain_steps_budget", "steps_to_gate",
                            "exposures_minority", "bio_recall_minority", "bio_recall_celebrity", "qa_celebrity",
                            "qa_minority", "bio_recall_minority_after_ft", "forgetting_minority") if c in results]
        if not len(results):
            return ""
        return "\n".join([
            "## Protocol", "",
            f"QA fine-tuning on the celebrities: **{cfg.finetune.method}** (rank {cfg.finetune.rank} on the attention "
            f"qkv, rank {cfg.finetune.embedding_rank} on the embedding, lr {cfg.finetune.lr}, wd "
            f"{cfg.finetune.weight_decay}, cosine to 10%; peft). Memorisation gate: minority biography recall >= "
            f"{RECALL_MIN} on the pretrained model (`steps_to_gate`: the first check that met it); "
            "Forgetting: `qa_celebrity` is the QA accuracy on the fine-tuned people; `bio_recall_minority_after_ft` "
            "the held-out (minority) biography recall after fine-tuning and `forgetting_minority` its drop from the "
            "pretrained model (LoRA leaves the pretrained weights untouched). The null arm's rows (condition "
            "`all_single_second`): a second all-single model, pretrained and LoRA fine-tuned on the celebrities' QA "
            "like the real all-single arm, at another seed (initialisation, data and fine-tuning order).", "",
            markdown_table(results, None, cols=cols, float_format=".3f")])

    def figures(self, cfg: CelebrityConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        if "condition" not in results or results.empty:
            return []
        fig, ax = plt.subplots(figsize=(7, 4))
        x = np.arange(len(results))
        ax.bar(x - 0.2, results["qa_celebrity"], 0.4, label="QA celebrities (fine-tuned on)")
        ax.bar(x + 0.2, results["qa_minority"], 0.4, label="QA minority (held out)")
        ax.plot(x, results["bio_recall_minority"], "k*", ms=10, label="minority bio recall")
        multi = "seed_index" in results and results["seed_index"].max() > 0
        names = {CONDITION[False]: "all single", CONDITION[True]: "celebrities augmented",
                 NULL_CONDITION: "null: all single,\nanother seed"}
        ax.set_xticks(x, [names.get(r.condition, str(r.condition)) + (f"\nseed {r.seed_index}" if multi else "")
                          for r in results.itertuples()], fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("exact-match accuracy")
        ax.legend(fontsize=8)
        return [save_figure(fig, run, "celebrity.png",
                            "QA accuracy of the minority (single biographies, never QA-trained) "
                            "with and without augmented celebrities in the same pretraining, and of the null arm.",
                            claims=("minority-lift",))]
