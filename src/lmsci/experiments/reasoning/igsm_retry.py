"""Experiment ``igsm-retry``: pretraining on iGSM data with retry steps (a wrong step, ``[BACK]``, then the right one)
raises accuracy on the hardest problems over error-free pretraining; masking the mistakes' loss is not needed.

Source: Ye, Xu, Li, Allen-Zhu, "Physics of Language Models: Part 2.2, How to Learn From Mistakes on Grade-School
Math Problems", arXiv 2408.16293 (retry data ``id_retry_gen.py``: before each correct step, with probability q, a
wrong "Define <not yet computable param> as [BACK]." repeated geometrically). Headline numbers [quote-3p]:
GPT2-12-12 on iGSM-med op = 23, error-free 78% -> 94-95% with retry pretraining at q = 0.5; "masking mistakes is
unnecessary"; at q = 0.2 the model retries < 0.3 times per problem, at q = 0.5 2-4 times. Spec: physics_of_lms.md
sec. 2.7-2.8.

Protocol: one model per (retry rate, masking) point and seed (seed k of every point reads the same problem
stream; only the inserted mistakes differ), scored greedy with the full-solution checker (retracted ``[BACK]``
steps are skipped and counted) on the same fresh test-hash problems in distribution and at the hardest op
``max_op + ood_extra``.

Every claim is registered for the ``paper`` preset only: the quick models stay near 0% accuracy (the sizing pilot in
:mod:`lmsci.experiments.reasoning.igsm_common`), and the scale that could pass the learned gate (6 models x 3 seeds x
2,500 steps x 96 x 768 tokens of a 6-layer d384 GPT, ~179 min of one H100 estimated) does not fit the 10 minutes of a
``gpu`` preset (session 52). ``quick`` and ``gpu`` run and report their values and null arms but decide nothing;
``gpu`` is a values-only run at a larger scale than ``quick``: igsm-small, one seed of the 6 trained models, each a
4-layer d256 GPT trained 750 steps x 16 x 768 tokens (~7 min of one H100 estimated by
:mod:`lmsci.experiments.reasoning._igsm_gpu_budget`, mostly host data generation).
Null arms are arms of the sweep, measured in the same run (every point of a seed shares that seed's initialisation
and problem stream): for the three "retry helps" claims the ``null`` arm is a second error-free model (point
``q0_nullarm``: the same initialisation, another problem stream) compared with the first by the same paired statistic
and rule (the retry data are absent from both, so no gain may be found); for ``masking-unneeded`` (an equivalence
rule: the CI of masked minus unmasked inside +-``MASK_DELTA``) the ``rand`` arm is a random-init model of the same
shape (point ``q0_randinit``, evaluated on the hard bucket, never trained) that takes the unmasked model's place in
the difference: a model that learned differs from it, so the equivalence rule must fail there -- if it holds, the
accuracies are too low for equivalence to mean anything. Each row names its role in the ``variant`` column
(``error-free``, ``retry-q<q>``, ``masked``, ``weak``, ``error-free-2``, ``random-init``) and ``mask_baseline`` marks
the term the masked model is compared with (the unmasked model at ``masked_rate``; the random-init model on the
``rand`` arm). Every claim is judged by the claims engine (no hand-written verdicts).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, equivalent_within, mean_at_least
from lmsci.errors import ConfigError
from lmsci.experiments.base import Figure, Point, PointContext, save_figure
from lmsci.experiments.reasoning.igsm_common import (GPU, PAPER, SMOKE, TIME_PAPER, IGSMCommonConfig, IGSMExperiment,
                                           evaluate_ops, ok_rows, random_init, tokenizer_of, world_of)
from lmsci.experiments.reasoning._igsm_gpu_budget import run_seconds, time_text
from lmsci.experiments.registry import register
from lmsci.runs import RunDir, derive_seed
from lmsci.worlds.igsm.config import check_retry_rate

LEARNED_GATE = 0.5   # registered gate: the error-free model's in-distribution accuracy >= 0.5
MASK_DELTA = 0.05    # registered equivalence margin: masked minus unmasked hard-op accuracy within +-0.05


class IGSMRetryConfig(IGSMCommonConfig):
    """Configuration of ``igsm-retry``.

    Attributes:
        retry_rates: retry rates q > 0 compared with error-free pretraining (q = 0); each must be in (0, 1).
        masked_rate: the rate at which a second model is trained with the mistakes' loss masked (0: none).
        retry_weak: draw the wrong steps of every retry point from future necessary parameters (Part 2.2's
            ``retry_weak``).
        weak_rate: the rate of one more point whose wrong steps are retry_weak ones, compared with error-free
            pretraining by the claim ``retry-weak-helps`` (0: none; ignored when ``retry_weak`` makes every point
            weak).
    """

    retry_rates: list[float] = Field(default_factory=lambda: [0.2, 0.5])
    masked_rate: float = 0.5
    retry_weak: bool = False
    weak_rate: float = 0.5
    n_seeds: int = Field(3, ge=1, le=100)

    PRESETS = {
        "smoke": {**SMOKE, "retry_rates": [0.5], "masked_rate": 0.5},
        "quick": {"train.steps": 250, "n_eval": 16, "n_seeds": 1, "max_new_tokens": 400},
        # values only (claims decided at paper): one seed of the 6 trained models, 4-layer d256, 750 x 16 x 768 tokens
        "gpu": {**GPU, "model.n_layers": 4, "model.n_heads": 4, "model.d_model": 256, "train.batch_size": 16,
                "train.steps": 750, "train.warmup_steps": 75, "n_eval": 128, "n_seeds": 1},
        "paper": {**PAPER, "ood_extra": 8},
    }


def _key(q: float, masked: bool, weak: bool = False, data_tag: str = "") -> str:
    return (f"q{q:g}" + ("_weak" if weak and q > 0 else "") + ("_masked" if masked else "")
            + (f"_{data_tag}" if data_tag else ""))


#: the null arm's second error-free model (same initialisation, another problem stream)
NULL_KEY = _key(0.0, False, False, "nullarm")
#: masking-unneeded's null arm: a random-init model of the same shape (evaluated, never trained)
RAND_KEY = _key(0.0, False, False, "randinit")


def _row_keys(rows: pd.DataFrame) -> list[str]:
    """The point key of each results row (tables written before the retry_weak / data_tag columns count as not weak,
    no data tag)."""
    weak = rows["retry_weak"] if "retry_weak" in rows else [False] * len(rows)
    tags = rows["data_tag"] if "data_tag" in rows else [""] * len(rows)
    return [_key(float(q), bool(m), False if pd.isna(x) else bool(x), "" if pd.isna(t) else str(t))
            for q, m, x, t in zip(rows["retry_rate"], rows["mask_mistakes"], weak, tags)]


def _gain(variant: str, what: str) -> Stat:
    """Per seed: hard-op accuracy of the point ``variant`` (on the null arm: the second error-free model) minus that of
    the error-free model (always read on the real arm)."""
    return Stat("acc_hard", where={"variant": (variant, "error-free-2")},
                minus=Stat("acc_hard", where={"variant": "error-free"}, arm="real",
                           words="the error-free model's greedy full-solution accuracy at the hardest op"),
                words=f"greedy full-solution accuracy at the hardest op (max_op + ood_extra) of the model pretrained with "
                      f"{what} minus that of the error-free model (same fresh test-hash problems)")


@register("igsm-retry")
class IGSMRetry(IGSMExperiment):
    """Error-free vs retry-data pretraining on iGSM (and masked vs unmasked mistakes)."""

    claim = ("Pretraining with retry data (q = 0.2, 0.5) raises full-solution accuracy on the hardest op bucket over "
             "error-free pretraining; masking the mistakes' loss does not help.")
    source = "Ye, Xu, Li, Allen-Zhu, Physics of Language Models Part 2.2, arXiv 2408.16293, sec. 4-5"
    Config = IGSMRetryConfig
    time_estimate = {"smoke": "~5 s", "quick": ("407 s measured (5 points x 1 seed, 250 steps, igsm-tiny; threads=2, "
                     "nothing else running) before the null arms; ~500 s estimated with them (a sixth point, the "
                     "second error-free model, and one random-init model decoded on the hard bucket)"),
                     "gpu": time_text(7, "6 trained points (the null arm's second error-free model included) x 1 "
                                      "seed x 750 steps x 16 x 768 tokens of a 4-layer d256 GPT, 2 test buckets of 128 "
                                      "problems each decoded greedily; was ~179 min at 3 seeds x 2500 steps x 96 x 768 "
                                      "tokens of a 6-layer d384 GPT"),
                     "paper": TIME_PAPER + "; 6 models per seed"}

    _SRC = "Ye, Xu, Li, Allen-Zhu, arXiv 2408.16293 (Part 2.2), retry pretraining results"
    _GATE = Gate("learned", mean_at_least(LEARNED_GATE), arm="real",
                 stat=Stat("acc_greedy_id", where={"variant": "error-free"},
                           words="the error-free model's greedy in-distribution full-solution accuracy"))
    _NULL = ("the same paired statistic and rule for a second error-free model (same initialisation, another problem "
             "stream) against the first: no retry data in either, so no gain may be found")
    _CAN_MEET = ("yes, through seed and stream noise: the two error-free models differ only in their problem streams, "
                 "so the CI of their hard-op difference lies above 0 about 1 run in 40 at a 95% interval, and more "
                 "often when hard-op accuracy depends strongly on the stream")
    claims = [
        Claim("retry-helps-q0.5",
              "Retry pretraining at q = 0.5 raises the hardest-op full-solution accuracy over error-free pretraining.",
              _SRC, "iGSM-med op = 23: 78% (error-free) -> 94-95% (retry, q = 0.5) [quote-3p]",
              statistic=_gain("retry-q0.5", "retry data at q = 0.5"), rule=ci_above(0.0), gates=(_GATE,),
              presets=("paper",), null=_NULL, null_can_meet=_CAN_MEET),
        Claim("retry-helps-q0.2",
              "Retry pretraining at q = 0.2 raises the hardest-op full-solution accuracy over error-free pretraining.",
              _SRC, "accuracy grows with q up to 0.5 (q = 0.2 already above error-free) [quote-3p]",
              statistic=_gain("retry-q0.2", "retry data at q = 0.2"), rule=ci_above(0.0), gates=(_GATE,),
              presets=("paper",), null=_NULL, null_can_meet=_CAN_MEET),
        Claim("masking-unneeded",
              "Masking the loss on the mistakes is not needed: the masked model is not more accurate than the "
              "unmasked one.",
              _SRC + " ('masking mistakes is unnecessary')",
              "masked ~ unmasked (no gain) [quote-3p]",
              statistic=Stat("acc_hard", where={"variant": "masked"}, arm="real",
                             minus=Stat("acc_hard", where={"mask_baseline": True},
                                        words="hard-op accuracy of the unmasked model at masked_rate (rand arm: of "
                                              "the random-init model)"),
                             words="hardest-op greedy accuracy of the model trained at masked_rate with the mistakes' "
                                   "loss masked minus the unmasked model at the same rate"),
              rule=equivalent_within(MASK_DELTA), gates=(_GATE,), presets=("paper",), arms=("real", "rand"),
              null="the same equivalence rule on the masked model's hard-op accuracy minus that of a random-init model "
                   "of the same shape (per seed): a model that learned is not equivalent to an untrained one, so the "
                   "rule must fail there (if it holds, the accuracies are too low for equivalence to mean anything)",
              null_can_meet="yes, when the masked model's hardest-op accuracy is itself within 0.05 of 0 (a model "
                            "that learned in distribution can still fail at the hardest op): the untrained model's 0 "
                            "is then equivalent to it"),
        Claim("retry-weak-helps",
              "Retry pretraining whose wrong steps are cheap fakes (retry_weak: a future necessary parameter, q = 0.5) "
              "also raises the hardest-op full-solution accuracy over error-free pretraining.",
              _SRC + " (retry_weak data 'significantly' improves accuracy)",
              "significant gain over error-free pretraining [quote-3p]",
              statistic=_gain("weak", "retry_weak data at q = weak_rate"), rule=ci_above(0.0), gates=(_GATE,),
              presets=("paper",), null=_NULL, null_can_meet=_CAN_MEET),
    ]

    def validate(self, cfg: IGSMRetryConfig) -> None:
        for q in cfg.retry_rates:
            check_retry_rate(q)
            if q == 0:
                raise ConfigError("retry_rates", cfg.retry_rates, "rates in (0, 1) (q = 0 is always run)")
        check_retry_rate(cfg.masked_rate)
        check_retry_rate(cfg.weak_rate)
        super().validate(cfg)

    def points(self, cfg: IGSMRetryConfig) -> list[Point]:
        w = cfg.retry_weak

        def pt(key: str, variant: str, q: float, masked: bool, weak: bool, arm: str = "real", tag: str = "",
               baseline: bool = False) -> Point:
            params = {"retry_rate": q, "mask_mistakes": masked, "retry_weak": weak, "variant": variant,
                      "mask_baseline": baseline}
            return Point(key, params | ({"data_tag": tag} if tag else {}), arm=arm)

        pts = [pt(_key(0.0, False), "error-free", 0.0, False, False)]
        pts += [pt(_key(q, False, w), f"retry-q{q:g}", q, False, w, baseline=q == cfg.masked_rate)
                for q in cfg.retry_rates]
        if cfg.masked_rate > 0:
            pts.append(pt(_key(cfg.masked_rate, True, w), "masked", cfg.masked_rate, True, w))
        if cfg.weak_rate > 0 and not w:
            pts.append(pt(_key(cfg.weak_rate, False, True), "weak", cfg.weak_rate, False, True))
        pts.append(pt(NULL_KEY, "error-free-2", 0.0, False, False, arm="null", tag="nullarm"))
        # masking-unneeded's null arm: a random-init model of the same shape, never trained
        pts.append(pt(RAND_KEY, "random-init", 0.0, False, False, arm="rand", tag="randinit", baseline=True))
        return pts

    def trained_points(self, cfg: IGSMRetryConfig) -> list[Point]:
        """The points that train a model (all but the random-init null arm): what the GPU estimate counts."""
        return [p for p in self.points(cfg) if p.arm != "rand"]

    def estimate_gpu_seconds(self, cfg: IGSMRetryConfig) -> dict[str, float]:
        """Estimated seconds of a run of ``cfg`` on one H100 (:func:`~lmsci.experiments.reasoning._igsm_gpu_budget.
        run_seconds`): every trained point, its 2 test buckets decoded greedily, and the random-init arm's hard bucket."""
        shapes = [self.shape(cfg, p) for p in self.trained_points(cfg)]
        rand = [self.shape(cfg, p) for p in self.points(cfg) if p.arm == "rand"]
        return run_seconds(cfg, shapes, [(s, 2, 1) for s in shapes] + [(s, 1, 1) for s in rand])

    def point_seed(self, cfg: IGSMRetryConfig, point: Point) -> int:
        """The seed of ``point``: one per training seed index, shared by every point."""
        # seed k of every point: the same initialisation and problem stream (a paired comparison)
        return derive_seed(cfg.seed, self.name, f"seed{point.seed_index}")

    def run_group(self, cfg: IGSMRetryConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict[str, Any]]:
        if points[0].arm != "rand":
            return super().run_group(cfg, points, ctxs)
        world = world_of(cfg)  # the random-init arm: nothing trained, the same hard bucket decoded
        tok = tokenizer_of(cfg, world)
        hard = world.cfg.max_op + cfg.ood_extra
        rows = []
        for p, c in zip(points, ctxs):
            rand = evaluate_ops(cfg, random_init(cfg, tok, self.shape(cfg, p), c), tok, world, [hard], beams=(1,))
            rows.append({**p.params, "hard_op": hard, "acc_hard": rand[f"acc_greedy_op{hard}"]})
        return rows

    def measure(self, cfg, point, ctx, world, tok, model) -> dict[str, Any]:
        hard = world.cfg.max_op + cfg.ood_extra
        row = evaluate_ops(cfg, model, tok, world, [None, hard], beams=(1,))
        return {"hard_op": hard, "acc_hard": row[f"acc_greedy_op{hard}"], "data_tag": point.params.get("data_tag", ""),
                "retries_hard": row[f"retries_greedy_op{hard}"], "retries_id": row["retries_greedy_id"], **row}

    def figures(self, cfg: IGSMRetryConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        ok = ok_rows(results)
        if ok.empty or "acc_hard" not in ok:
            return []
        g = ok.assign(key=_row_keys(ok)).groupby("key", sort=False)
        names = list(g.groups)
        fig, ax = plt.subplots(figsize=(6.0, 3.6))
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], [g.get_group(n)["acc_greedy_id"].mean() for n in names], 0.4, label="in-distribution")
        ax.bar([i + 0.2 for i in x], [g.get_group(n)["acc_hard"].mean() for n in names], 0.4,
               label=f"op = {int(ok['hard_op'].iloc[0])} (hardest)")
        ax.set_xticks(list(x), names)
        ax.set_ylabel("full-solution accuracy (greedy)")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7)
        return [save_figure(fig, run, "retry_accuracy.png", "Accuracy by pretraining data: error-free (q0), retry data "
                            "at rate q, and retry data with the mistakes' loss masked (mean over seeds)",
                            claims=tuple(c.id for c in self.claims))]

    def report_sections(self, cfg: IGSMRetryConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        ok = ok_rows(results)
        cols = ["point", "arm", "variant", "seed_index", "retry_rate", "mask_mistakes", "retry_weak", "data_tag",
                "train_loss", "acc_greedy_id", "acc_hard", "retries_id", "retries_hard"]
        return ("## Results\n\n`retries_*`: retracted `[BACK]` steps per problem in the greedy generations "
                "(Part 2.2: < 0.3 at q = 0.2, 2-4 at q = 0.5). Null arms: `q0_nullarm` (arm `null`) is a second "
                "error-free model (another problem stream); `q0_randinit` (arm `rand`) a random-init model decoded on "
                "the hard bucket.\n\n") + markdown_table(ok[[c for c in cols if c in ok]])
