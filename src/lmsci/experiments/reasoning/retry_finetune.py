"""Experiment ``retry-finetune``: LoRA fine-tuning of an error-free-pretrained iGSM model on retry data does not teach
it to retry; pretraining on retry data does.

Source: Ye, Xu, Li, Allen-Zhu, "Physics of Language Models: Part 2.2, How to Learn From Mistakes on Grade-School
Math Problems", arXiv 2408.16293 (the CS546 lecture's slide "Fine-Tuning Retry Doesn't Work": retry rate 0.2, LoRA
"qv{r}e{2r}" -- rank r on the attention query/value matrices and rank 2r on the embedding -- for r = 4 .. 256, each with
and without masking the mistakes, against continued pretraining and pretraining on retry data). Part 2.2's own words
as quoted in ``physics_of_lms.md`` sec. 2.8 [quote-3p]: LoRA fine-tuning on retry data gives no significant gain and
can hurt at small rank; full fine-tuning is roughly continued pretraining; retry pretraining at q = 0.5 lifts
iGSM-med op = 23 from 78% to 95%. Checked against the paper's Sec. 5 ("Result 7: Finetune with Retry Data") and Fig. 7
(retry rate 0.2; "qv stands for the LoRA rank on the query/value matrices, and e stands for the LoRA rank on the
embedding matrix"; "No significant improvement over the original model; for small LoRA ranks, finetuning even hurts
and label masking becomes important"): iGSM-med_pq op = 23, original 77.7%, the LoRA rows 59-79%, retry pretraining
(q = 0.2) 87.7-88.3%. The paper's LoRA learning rate and fine-tuning length are not used here (``ft_lr``, ``ft_steps``
are lmsci's choices).

Protocol, per training seed (one group: every model of a seed shares the initialisation and the pretraining problem
stream, as in ``igsm-retry``): (1) pretrain a GPT on error-free iGSM data (``steps``); (2) pretrain the same
initialisation on retry data at ``retry_rate`` (same steps, same problems, mistakes inserted); (3) from (1), LoRA
fine-tune (:func:`lmsci.train.finetune.add_lora`, ``peft``: rank ``qv`` on the fused attention projection ``qkv``
-- lmsci's GPT fuses query, key and value, so the key matrix is adapted too -- and rank ``e`` on the token embedding)
for ``ft_steps`` on retry data at ``retry_rate``, for each rank pair in ``lora_ranks``, with and without the mistakes'
loss masked; (4) from (1), the same LoRA fine-tuning (the largest rank pair) on *more error-free data* for the same
steps and problems. Adapters are merged (``merge_and_unload``) and every model is decoded greedily on the same fresh
test-hash problems (in distribution and each op ``max_op + 1 .. max_op + ood_extra``) and scored with the
full-solution checker (:mod:`lmsci.experiments.reasoning.igsm_common`).

Claims (registered for the ``paper`` preset only: a quick iGSM model does not learn, see ``igsm_common``, and the
scale that could pass the learned gate -- 3 seeds x (2 pretrainings of 2,500 steps + 5 LoRA fine-tunings of 500
steps) x 96 x 768 tokens of a 6-layer d384 GPT, ~90 min of one H100 estimated -- does not fit the 10 minutes of a
``gpu`` preset (session 52); ``gpu`` is a values-only run at a larger scale than ``quick``: igsm-small, one seed, a
4-layer d256 GPT, 2 pretrainings of 1,500 steps + 5 LoRA fine-tunings of 300 steps x 16 x 768 tokens, ~7 min of one
H100 estimated by :mod:`lmsci.experiments.reasoning._igsm_gpu_budget`, mostly host data generation): ``lora-retry-no-gain`` (every LoRA-on-retry arm minus the error-free fine-tuning at the hardest op:
CI upper end below ``NO_GAIN_MARGIN``; null arm: the retry-pretrained model in its place, which does gain, so the
rule must fail there) and ``retry-pretrain-helps`` (igsm-retry's rule: retry pretraining minus error-free
pretraining, CI above 0; null arm: error-free fine-tuning for the same extra steps minus error-free pretraining).

Claims engine: each row names its model in the ``model`` column; the error-free fine-tuning (``ft_errorfree``) is the
``null`` arm of the sweep, every other model the ``real`` arm. ``retry-pretrain-helps`` is judged by the engine
(``acc_hard`` of the retry-pretrained model, on the null arm of the error-free fine-tuned one, minus that of the
error-free pretrained model, paired by seed). Escape hatch (``hand_verdicts``): ``lora-retry-no-gain`` requires the
rule of every LoRA-on-retry model (a conjunction over models, reported at the largest upper end), which one
statistic and one rule cannot express.
"""

from __future__ import annotations

import copy
from typing import Any

import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, Verdict, ci_above, mean_at_least
from lmsci.stats import across_seeds
from lmsci.errors import ConfigError
from lmsci.experiments.base import Figure, Point, PointContext, save_figure
from lmsci.experiments.reasoning.igsm_common import (GPU, PAPER, SMOKE, TIME_PAPER, IGSMCommonConfig, IGSMExperiment,
                                                     evaluate_ops, ok_rows, ood_ops, tokenizer_of,
                                                     train_members, world_of)
from lmsci.experiments.reasoning._igsm_gpu_budget import run_seconds, time_text
from lmsci.experiments.registry import register
from lmsci.runs import RunDir, derive_seed
from lmsci.worlds.igsm.config import check_retry_rate

LEARNED_GATE = 0.5     # registered: the error-free model's in-distribution accuracy >= 0.5 (as igsm-retry)
NO_GAIN_MARGIN = 0.05  # registered: "no gain" = the CI's upper end of the accuracy difference below 0.05
#: the slide's rank pairs (qv rank, embedding rank)
PAPER_RANKS = [[4, 8], [8, 16], [16, 32], [32, 64], [64, 128], [128, 256], [256, 512]]


class RetryFinetuneConfig(IGSMCommonConfig):
    """Configuration of ``retry-finetune`` (iGSM fields: :class:`IGSMCommonConfig`).

    Attributes:
        retry_rate: retry rate q of the retry data (pretraining and fine-tuning), in (0, 1).
        lora_ranks: LoRA rank pairs ``[qv_rank, embedding_rank]`` (the slide's ``qv{r}e{2r}``); at least 2.
        ft_steps: fine-tuning steps of every fine-tuning arm (``train.batch_size`` windows of ``seq_len`` a step).
        ft_lr: peak learning rate of the adapters (AdamW, betas (0.9, 0.98), 10% warmup, cosine to 0.1x).
        ft_weight_decay: weight decay of the adapters.
    """

    retry_rate: float = 0.2
    lora_ranks: list[list[int]] = Field(default_factory=lambda: [[8, 16], [32, 64]])
    ft_steps: int = Field(100, ge=1)
    ft_lr: float = Field(1e-3, gt=0)
    ft_weight_decay: float = Field(0.01, ge=0)
    n_seeds: int = Field(1, ge=1, le=100)

    PRESETS = {
        "smoke": {**SMOKE, "lora_ranks": [[2, 4], [4, 8]], "ft_steps": 2, "beam": 0},
        "quick": {"train.steps": 250, "ft_steps": 100, "n_eval": 8, "beam": 0, "max_new_tokens": 400},
        # values only (the claims are decided at paper): one seed of a 4-layer d256 GPT, 16 x 768 tokens a step
        "gpu": {**GPU, "model.n_layers": 4, "model.n_heads": 4, "model.d_model": 256, "train.batch_size": 16,
                "train.steps": 1500, "train.warmup_steps": 150, "ft_steps": 300, "lora_ranks": [[8, 16], [64, 128]],
                "beam": 0, "n_eval": 128, "n_seeds": 1},
        "paper": {**PAPER, "ood_extra": 8, "ft_steps": 10_000, "lora_ranks": PAPER_RANKS, "beam": 0},
    }


def _arm(qv: int, e: int, masked: bool) -> str:
    return f"lora_qv{qv}e{e}" + ("_masked" if masked else "")


PRE, PRE_RETRY, FT_NULL = "pretrain_errorfree", "pretrain_retry", "ft_errorfree"


@register("retry-finetune")
class RetryFinetune(IGSMExperiment):
    """LoRA fine-tuning on retry data vs retry pretraining on iGSM (Physics of LMs Part 2.2)."""

    claim = ("LoRA fine-tuning an error-free-pretrained iGSM model on retry data (any rank, masked or not) gains no "
             "accuracy on the hardest op over fine-tuning on error-free data, while pretraining on retry data does.")
    source = "Ye, Xu, Li, Allen-Zhu, Physics of Language Models Part 2.2, arXiv 2408.16293 (retry fine-tuning)"
    Config = RetryFinetuneConfig
    time_estimate = {
        "smoke": "~10 s",
        "quick": "4.1 min wall measured 2026-11-27 at threads=1 on the shared 2-core machine (2 pretrainings x 250 "
                 "steps + 5 LoRA fine-tunings x 100 steps of the igsm-tiny quick model, 7 models decoded on 8 problems x "
                 "3 buckets); decides nothing (the quick model does not learn iGSM)",
        "gpu": time_text(7, "2 pretrained models x 1 seed x 1,500 steps, plus 5 LoRA fine-tunings x 300 steps counted "
                            "at a full step's cost (an upper bound: the frozen weights get no gradient), x 16 x 768 "
                            "tokens of a 4-layer d256 GPT, 7 models decoded greedily on 3 buckets of 128 problems; was "
                            "~90 min at 3 seeds x (2 x 2,500 + 5 x 500 steps) x 96 x 768 tokens of a 6-layer d384 GPT"),
        "paper": TIME_PAPER + "; 2 pretrained models and 15 LoRA fine-tunings of 10k steps per seed"}

    _SRC = "Ye, Xu, Li, Allen-Zhu, arXiv 2408.16293 (Part 2.2), retry fine-tuning vs retry pretraining"
    _GATE = Gate("learned", f"mean over seeds of the error-free pretrained model's greedy in-distribution full-solution "
                 f"accuracy >= {LEARNED_GATE}")
    _GATE_STAT = Gate("learned", mean_at_least(LEARNED_GATE), arm="real",
                      stat=Stat("acc_greedy_id", where={"model": PRE}, words="the error-free pretrained model's greedy "
                                                                              "in-distribution full-solution accuracy"))
    claims = [
        Claim("lora-retry-no-gain",
              "LoRA fine-tuning an error-free-pretrained model on retry data, at every rank pair and with or without "
              "masking the mistakes, gains no more hardest-op accuracy than LoRA fine-tuning on error-free data for "
              "the same steps.",
              _SRC, "LoRA (qv4e8 .. qv256e512, masked or not) on retry data (q = 0.2): no significant gain, can hurt "
                    "at small rank [quote-3p]",
              "per training seed and LoRA-on-retry arm: greedy full-solution accuracy at the hardest op (max_op + "
              "ood_extra) minus that of the error-free LoRA fine-tuning (largest rank pair, same steps and problems); "
              "mean over seeds with a 95% Student-t CI; value = the largest upper end over arms",
              f"for every LoRA-on-retry arm: upper end of the 95% CI across >= 3 seeds < {NO_GAIN_MARGIN} (decided at "
              "the gpu and paper presets only: quick iGSM models stay near 0% accuracy)",
              gates=(_GATE,), presets=("paper",),
              null="the retry-pretrained model in place of the LoRA arm (retry pretraining does teach retrying: 78% -> "
                   "95% in the paper), the same difference and rule: it must fail there, else the accuracies cannot "
                   "tell a gain from none",
              null_can_meet="yes, when retry pretraining gains less than 5 points of hardest-op accuracy over the "
                            "error-free LoRA fine-tuning (accuracies near 0, or no retry effect at this scale, or the "
                            "extra error-free steps gaining as much): the model that should gain then shows no gain"),
        Claim("retry-pretrain-helps",
              "Pretraining on retry data raises hardest-op accuracy over error-free pretraining (igsm-retry's claim, "
              "measured beside the fine-tuning arms).",
              _SRC, "iGSM-med op = 23: 78% (error-free) -> 94-95% (retry pretraining) [quote-3p]",
              statistic=Stat("acc_hard", where={"model": (PRE_RETRY, FT_NULL)},
                             minus=Stat("acc_hard", where={"model": PRE}, arm="real",
                                        words="the error-free pretrained model's"),
                             words="greedy full-solution accuracy at the hardest op of the model pretrained on retry "
                                   "data at retry_rate minus that of the error-free pretrained model (same "
                                   "initialisation, problems and steps)"),
              # the old "mean > 0 and the CI's lower end > 0": with >= 2 seeds the lower end above 0 implies the mean
              rule=ci_above(0.0),
              gates=(_GATE_STAT,), presets=("paper",),
              null="the error-free pretrained model LoRA-fine-tuned on more error-free data for the same fine-tuning "
                   "steps, minus the error-free pretrained model: the same rule must fail (extra error-free steps are "
                   "not retry data)",
              null_can_meet="yes, whenever the extra error-free fine-tuning steps alone raise the hardest-op accuracy "
                            "over the error-free pretrained model (more training, no retry data); then a gain of the "
                            "real arm need not come from the retry data"),
    ]

    def validate(self, cfg: RetryFinetuneConfig) -> None:
        check_retry_rate(cfg.retry_rate)
        if cfg.retry_rate == 0:
            raise ConfigError("retry_rate", cfg.retry_rate, "a rate in (0, 1)")
        if len(cfg.lora_ranks) < 2 or any(len(r) != 2 or min(r) < 1 for r in cfg.lora_ranks):
            raise ConfigError("lora_ranks", cfg.lora_ranks, "at least 2 pairs [qv_rank >= 1, embedding_rank >= 1]")
        if len({tuple(r) for r in cfg.lora_ranks}) != len(cfg.lora_ranks):
            raise ConfigError("lora_ranks", cfg.lora_ranks, "distinct pairs")
        super().validate(cfg)

    def points(self, cfg: RetryFinetuneConfig) -> list[Point]:
        pts = [Point(PRE, {"model": PRE, "stage": "pretrain", "retry_rate": 0.0, "mask_mistakes": False}, arm="real"),
               Point(PRE_RETRY, {"model": PRE_RETRY, "stage": "pretrain", "retry_rate": cfg.retry_rate,
                                 "mask_mistakes": False}, arm="real")]
        for qv, e in cfg.lora_ranks:
            for masked in (False, True):
                pts.append(Point(_arm(qv, e, masked), {"model": _arm(qv, e, masked), "stage": "finetune",
                                                       "qv_rank": qv, "emb_rank": e, "retry_rate": cfg.retry_rate,
                                                       "mask_mistakes": masked}, arm="real"))
        qv, e = max(cfg.lora_ranks, key=lambda r: (r[0], r[1]))
        # the error-free fine-tuning: the null arm of retry-pretrain-helps (and the comparator of the LoRA arms)
        pts.append(Point(FT_NULL, {"model": FT_NULL, "stage": "finetune", "qv_rank": qv, "emb_rank": e,
                                   "retry_rate": 0.0, "mask_mistakes": False}, arm="null"))
        return pts

    def estimate_gpu_seconds(self, cfg: RetryFinetuneConfig) -> dict[str, float]:
        """Estimated seconds of a run of ``cfg`` on one H100 (:func:`~lmsci.experiments.reasoning._igsm_gpu_budget.
        run_seconds` for the 2 pretrainings, each fine-tuning counted as a pretraining of ``ft_steps``; every model
        decoded greedily on the in-distribution and every OOD bucket)."""
        shape = (cfg.model.n_layers, cfg.model.n_heads, cfg.model.d_model)
        n_ft = sum(p.params["stage"] == "finetune" for p in self.points(cfg))
        pre = run_seconds(cfg, [shape, shape], [(shape, 1 + cfg.ood_extra, 1)] * (2 + n_ft))
        ft_cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"steps": cfg.ft_steps})})
        ft = run_seconds(ft_cfg, [shape] * n_ft, [])
        out = {k: pre[k] + ft[k] for k in ("train", "data", "decode")}
        return {**out, "total": sum(out.values())}

    def point_seed(self, cfg: RetryFinetuneConfig, point: Point) -> int:
        # every model of seed k: the same initialisation and pretraining problems (paired comparisons)
        return derive_seed(cfg.seed, self.name, f"seed{point.seed_index}")

    def groups(self, cfg: RetryFinetuneConfig, points: list[Point]) -> list[list[Point]]:
        """One group per training seed: its fine-tuning arms start from its error-free pretrained model."""
        by: dict[int, list[Point]] = {}
        for p in points:
            by.setdefault(p.seed_index, []).append(p)
        return list(by.values())

    def run_group(self, cfg: RetryFinetuneConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict[str, Any]]:
        world = world_of(cfg)
        tok = tokenizer_of(cfg, world)
        shape = (cfg.model.n_layers, cfg.model.n_heads, cfg.model.d_model)
        ctx_of = {p.params["model"]: c for p, c in zip(points, ctxs)}
        base = train_members(cfg, [ctx_of[PRE]], world, tok, shape)[0]
        models: dict[str, Any] = {PRE: base}
        if PRE_RETRY in ctx_of:
            models[PRE_RETRY] = train_members(cfg, [ctx_of[PRE_RETRY]], world, tok, shape, retry_rate=cfg.retry_rate)[0]
        rows = []
        for p, c in zip(points, ctxs):
            prm = p.params
            row = {**prm, "n_layers": shape[0], "n_heads": shape[1], "d_model": shape[2]}
            if prm["stage"] == "finetune":
                if base.model is None:
                    rows.append({**row, "status": "diverged", "diverged": "the error-free pretraining diverged"})
                    continue
                model, info = self._finetune(cfg, base.model, world, tok, prm, c)
                row.update(info)
            else:
                t = models[prm["model"]]
                if t.model is None:
                    rows.append({**row, "status": "diverged", "diverged": t.diverged})
                    continue
                model = t.model
                row["train_loss"] = float(t.final.get("loss", float("nan")))
            row.update(self.measure(cfg, p, c, world, tok, model))
            rows.append(row)
        return rows

    def _finetune(self, cfg: RetryFinetuneConfig, base, world, tok, prm: dict, ctx: PointContext):
        """LoRA fine-tuning of a copy of ``base`` on the arm's data; returns the merged model and a results dict."""
        import torch

        from lmsci.train.finetune import FinetuneSpec, add_lora, trainable_parameters
        from lmsci.train.adaptor import train_point
        from lmsci.train.trainer import TrainSpec
        from lmsci.worlds.igsm.tokenizer import get_batch_fn

        spec = FinetuneSpec(rank=int(prm["qv_rank"]), embedding_rank=int(prm["emb_rank"]), lr=cfg.ft_lr,
                            weight_decay=cfg.ft_weight_decay, targets=["qkv"])
        model = copy.deepcopy(base).train()
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=cuda):  # peft draws lora_A from the global generator
            torch.manual_seed(derive_seed(ctx.seed, "lora-init", prm["model"]) % 2 ** 63)
            model = add_lora(model, spec)
        counts = trainable_parameters(model)
        ft = TrainSpec(steps=cfg.ft_steps, batch_size=cfg.train.batch_size, lr=cfg.ft_lr,
                       warmup_steps=cfg.ft_steps // 10, weight_decay=cfg.ft_weight_decay, min_lr_ratio=0.1,
                       betas=(0.9, 0.98))
        get_batch = get_batch_fn(world, tok, cfg.seq_len, cfg.train.batch_size, retry_rate=float(prm["retry_rate"]),
                                 mask_mistakes=bool(prm["mask_mistakes"]))
        res = train_point(model, get_batch, ft, ctx, seed=derive_seed(ctx.seed, "ft-data"),
                          desc=f"finetune {prm['model']}", log_every=max(cfg.ft_steps // 20, 1), checkpoint_every=0,
                          precision=cfg.precision)
        merged = model.merge_and_unload().eval()
        return merged, {"train_loss": float(res.final.get("loss", float("nan"))),
                        "trainable_params": counts["trainable"], "ft_steps": cfg.ft_steps}

    def measure(self, cfg, point, ctx, world, tok, model) -> dict[str, Any]:
        hard = world.cfg.max_op + cfg.ood_extra
        row = evaluate_ops(cfg, model, tok, world, [None, *ood_ops(cfg, world)], beams=(1,))
        return {"hard_op": hard, "acc_hard": row[f"acc_greedy_op{hard}"], "retries_hard": row[f"retries_greedy_op{hard}"],
                **row}

    # ------------------------------------------------- verdicts: lora-retry-no-gain by hand (module docstring)
    def hand_verdicts(self, cfg: RetryFinetuneConfig, results: pd.DataFrame, run: RunDir | None) -> list[Verdict]:
        return decide(self, cfg, ok_rows(results))

    def figures(self, cfg: RetryFinetuneConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        ok = ok_rows(results)
        if ok.empty or "acc_hard" not in ok:
            return []
        buckets = ["id"] + [c.split("_")[-1] for c in ok.columns if c.startswith("acc_greedy_op")]
        arms = list(dict.fromkeys(ok["model"]))
        fig, ax = plt.subplots(figsize=(7.5, 3.8))
        w = 0.8 / max(len(arms), 1)
        for i, arm in enumerate(arms):
            g = ok[ok["model"] == arm]
            ax.bar([j + (i - len(arms) / 2) * w for j in range(len(buckets))],
                   [g[f"acc_greedy_{b}"].mean() for b in buckets], w, label=arm)
        ax.set_xticks(range(len(buckets)), ["in-dist."] + [b.replace("op", "op = ") for b in buckets[1:]])
        ax.set_ylabel("full-solution accuracy (greedy)")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=6, ncol=2)
        return [save_figure(fig, run, "accuracy_by_op.png", "Accuracy by op bucket for each arm: error-free and retry "
                            "pretraining, LoRA fine-tuning on retry data (rank pairs, masked or not) and on error-free "
                            "data (mean over seeds)", claims=("lora-retry-no-gain", "retry-pretrain-helps"))]

    def report_sections(self, cfg: RetryFinetuneConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        ok = ok_rows(results)
        cols = ["point", "seed_index", "model", "arm", "retry_rate", "mask_mistakes", "qv_rank", "emb_rank",
                "trainable_params",
                "train_loss", "acc_greedy_id", "acc_hard", "retries_greedy_id", "retries_hard"]
        return ("## Results\n\n`retries_*`: retracted `[BACK]` steps per problem in the greedy generations. LoRA adapts "
                "the fused qkv projection (query, key and value) and the token embedding.\n\n"
                + markdown_table(ok[[c for c in cols if c in ok]]))


def decide(exp: RetryFinetune, cfg: RetryFinetuneConfig, ok: pd.DataFrame) -> list[Verdict]:
    """``lora-retry-no-gain`` from the finished rows of every arm (columns ``model``, ``seed_index``, ``acc_hard``,
    ``acc_greedy_id``): every LoRA-on-retry model minus the error-free fine-tuning, CI upper end below the margin."""
    c = exp.get_claim("lora-retry-no-gain")
    if ok.empty or "acc_hard" not in ok or "model" not in ok:
        return [exp.judge(cfg, c.id, value=None, passed=None, why_not_computed="no finished model")]
    by = {a: g.set_index("seed_index") for a, g in ok.groupby("model")}
    gate = {"learned": (None, None)}
    if PRE in by:
        s0 = across_seeds(by[PRE]["acc_greedy_id"])
        gate = {"learned": (s0.mean, bool(s0.mean >= LEARNED_GATE))}

    def diff(a: str, b: str):
        if a not in by or b not in by:
            return None
        d = (by[a]["acc_hard"] - by[b]["acc_hard"]).dropna()
        return across_seeds(d.values) if len(d) else None

    def no_gain(s) -> bool:
        return bool(s.n >= 2 and s.hi < NO_GAIN_MARGIN)

    accs = {a: {"acc_hard": float(g["acc_hard"].mean()), "acc_id": float(g["acc_greedy_id"].mean())}
            for a, g in by.items()}
    stats = {a: diff(a, FT_NULL) for a in by if a.startswith("lora_")}
    stats = {a: s for a, s in stats.items() if s is not None}
    sn = diff(PRE_RETRY, FT_NULL)
    null = None if sn is None else (sn.hi, no_gain(sn))
    if not stats:
        return [exp.judge(cfg, c.id, value=None, passed=None, gates=gate, null=null,
                          why_not_computed="no LoRA-on-retry arm with its error-free fine-tuning comparator")]
    worst = max(stats, key=lambda a: stats[a].hi)
    s = stats[worst]
    return [exp.judge(cfg, c.id, value=s.hi, passed=all(no_gain(v) for v in stats.values()),
                      ci=s.ci, ci_kind=s.kind + f" ({worst})", n_seeds=min(v.n for v in stats.values()),
                      gates=gate, null=null,
                      details={"per_arm": {a: {"mean": v.mean, "ci": v.ci} for a, v in stats.items()},
                               "null_retry_pretrain_minus_ft_errorfree": None if sn is None else
                               {"mean": sn.mean, "ci": sn.ci}, "accuracy": accs})]


__all__ = ["RetryFinetune", "RetryFinetuneConfig", "decide", "PAPER_RANKS"]
