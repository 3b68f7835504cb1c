"""Experiment ``igsm-probing``: before writing a solution, a GPT trained on iGSM already knows which parameters are
needed (``nece``) and which depends on which (``dep``), as V-probes on its hidden states show.

Source: Ye, Xu, Li, Allen-Zhu, "Physics of Language Models: Part 2.1", arXiv 2407.20311, sec. 4, Results 4-6 and
Fig. 7(a) (iGSM-med, pq: nece 99.8% vs majority 74.7%; dep 99.7% vs 84.6% [fig-src]; can_next and nece_next also
probed). Method (sec. 4, "V-probing"): truncate the document at the probe position, append ``[START] A [END]``
(``[START] A [MID] B [END]`` for dep), freeze the model, train a rank-8 update of the input embedding and a linear
head on the last-layer state at ``[END]``; compare with the same probe on a random-init model and with the majority
rate. Spec: physics_of_lms.md sec. 2.6, 2.8. Instrument: :mod:`lmsci.measure.vprobe`; labels:
:func:`lmsci.worlds.igsm.labels.probe_labels`.

Both claims are registered for the ``paper`` preset only: the quick model stays near 0% accuracy (the sizing pilot in
:mod:`lmsci.experiments.reasoning.igsm_common`), and the scale that could pass the learned gate (3 seeds x 5,000
steps x 96 x 768 tokens of a 6-layer d384 GPT, ~60 min of one H100, plus the probes) does not fit the 10 minutes of a
``gpu`` preset (session 52). ``quick`` and ``gpu`` run and report their values but decide nothing; ``gpu`` is a
values-only run at a larger scale than ``quick``, as ``igsm-ood``'s (one seed, 1,500 steps x 32 x 768 tokens; the
claims' two tasks probed, 250 steps of 32 queries).
Null arm, measured in the same run (``null_arm``; on at ``paper`` and ``smoke``, off at ``quick`` and ``gpu``,
whose extra training would take the values-only ``gpu`` preset to ~14 min of one H100 estimated, over its 9-minute
budget): the same statistic with a model of the same shape trained on the problem statements and questions WITHOUT
their solutions (:func:`~lmsci.experiments.reasoning._igsm_null_models.prompt_only_batch_fn`: it reads the text but
never reasons to an answer) in the trained model's place -- its probe accuracy minus the larger of the majority rate
and the random-init model's probe (the same queries, the same random-init baseline as the real row). It is an arm of
the sweep (point ``null-gpt``, arm ``null``) computed in the same group as the trained model, its row holding the same
``<task>_gap`` columns for nece and dep; both claims are judged by the claims engine. It meets the rule if necessity
or dependency is decodable from the text's surface (the parameters the question names, the dependencies the problem's
sentences state) rather than from reasoning. (Before 2026-12-06 the null arm was a random-init model against a second
random-init model: two draws of the same random map, a gap of <= ~0 by construction.)
"""

from __future__ import annotations

import random
from typing import Any

import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, mean_at_least
from lmsci.errors import ConfigError
from lmsci.experiments.base import Figure, save_figure
from lmsci.experiments.base import Point, PointContext
from lmsci.experiments.reasoning._igsm_null_arm import NullOnTrained
from lmsci.experiments.reasoning._igsm_null_models import prompt_only_batch_fn, train_null_model
from lmsci.experiments.reasoning.igsm_common import (GPU, PAPER, SMOKE, TIME_PAPER, IGSMCommonConfig, IGSMExperiment,
                                           build_gpt, evaluate_ops, estimate_gpu_train_seconds, ok_rows,
                                           tokenizer_of, world_of)
from lmsci.experiments.reasoning._igsm_gpu_budget import run_seconds, time_text
from lmsci.experiments.registry import register
from lmsci.measure.vprobe import vprobe, vprobe_with_baselines
from lmsci.runs import RunDir, derive_seed
from lmsci.worlds.igsm import TASKS, probe_inputs, probe_labels

GAP_MIN = 0.10       # registered rule: probe accuracy above max(majority, random-init probe) by >= 10 points
LEARNED_GATE = 0.5   # registered gate: in-distribution full-solution accuracy >= 0.5
NULL_TASKS = ("nece", "dep")  # the claims' tasks, probed on the null arm's model
N_CLASSES = {"nece": 2, "dep": 2, "known": 2, "can_next": 2, "nece_next": 2, "value": 24}


class IGSMProbingConfig(IGSMCommonConfig):
    """Configuration of ``igsm-probing``.

    Attributes:
        probe_tasks: V-probing tasks (``nece`` and ``dep`` decide the claims; the others are reported).
        n_probe_train, n_probe_test: fresh problems whose queries train / test the probes (disjoint).
        queries_per_problem: at most this many queries per problem and task (the paper's rule: 10).
        probe_rank, probe_steps, probe_batch, probe_lr: the V-probe (rank of the embedding update, Adam steps).
        null_arm: train and probe the null arm's model trained without solutions (off at quick and gpu: see the
            module).
    """

    probe_tasks: list[str] = Field(default_factory=lambda: ["nece", "dep", "can_next"])
    n_probe_train: int = Field(120, ge=1)
    n_probe_test: int = Field(40, ge=1)
    queries_per_problem: int = Field(10, ge=1)
    probe_rank: int = Field(8, ge=0)
    probe_steps: int = Field(80, ge=1)
    probe_batch: int = Field(24, ge=1)
    probe_lr: float = Field(5e-3, gt=0)
    null_arm: bool = True

    PRESETS = {
        "smoke": {**SMOKE, "n_probe_train": 3, "n_probe_test": 2, "queries_per_problem": 2, "probe_steps": 2,
                  "probe_batch": 4},
        "quick": {"train.steps": 500, "n_eval": 16, "null_arm": False},
        # values only (the claims are decided at paper): one seed, 1500 x 32 x 768 tokens (was 3 x 5000 x 96 x 768)
        "gpu": {**GPU, "train.steps": 1500, "train.batch_size": 32, "train.warmup_steps": 150, "n_eval": 64,
                "n_seeds": 1, "n_probe_train": 500, "n_probe_test": 200, "probe_steps": 250, "probe_batch": 32,
                "probe_tasks": ["nece", "dep"], "null_arm": False},
        "paper": {**PAPER, "n_probe_train": 10000, "n_probe_test": 2000, "probe_steps": 5000, "probe_batch": 256,
                  "probe_tasks": ["nece", "dep", "can_next", "nece_next", "known", "value"]},
    }


def probe_queries(problems: list, tok, task: str, per_problem: int, seed: int, max_len: int, fmt: str | None = None):
    """V-probing inputs of ``task``: for each problem, up to ``per_problem`` items of
    :func:`~lmsci.worlds.igsm.probe_labels` as token ids (:func:`~lmsci.worlds.igsm.probe_inputs`: ``<bos>`` + the
    document prefix up to the probe position + ``[START] A [END]``, or ``[START] A [MID] B [END]`` for dep);
    sequences longer than ``max_len`` are dropped.

    Returns:
        ``(seqs, labels)``: token-id lists and class ids.
    """
    rnd = random.Random(seed)
    seqs, labels = [], []
    for p in problems:
        items = probe_labels(p, tasks=(task,), fmt=fmt, max_per_task=per_problem, rng=rnd)
        for it, ids in zip(items, probe_inputs(p, items, tok, fmt)):
            if len(ids) <= max_len:
                seqs.append(ids)
                labels.append(int(it.target))
    return seqs, labels


@register("igsm-probing")
class IGSMProbing(NullOnTrained):
    """V-probing of nece / dep / can_next on a GPT trained on iGSM vs a random-init model and the majority rate."""

    claim = ("The hidden states of a GPT trained on iGSM encode which parameters are necessary (nece) and which "
             "depends on which (dep), before any solution step: V-probes beat the majority rate and a random-init model "
             "by at least 10 points.")
    source = "Ye, Xu, Li, Allen-Zhu, Physics of Language Models Part 2.1, arXiv 2407.20311, sec. 4, Results 4-6, Fig. 7"
    Config = IGSMProbingConfig
    time_estimate = {"smoke": "~5 s", "quick": ("690 s wall, 449 s CPU measured (one seed, 500 steps, igsm-tiny; "
                     "3 tasks x 2 models x 80 probe steps; "
                     "one thread beside another run on a loaded 2-core machine); since 2026-12-06 quick runs no null "
                     "arm"),
                     "gpu": time_text(7, "1 seed x 1500 steps x 32 x 768 tokens of a 6-layer d384 GPT; 64 problems "
                                      "decoded greedily; nece and dep probed on the trained and the random-init "
                                      "model, 250 steps of 32 queries each, counted as training steps of 32 x 768 "
                                      "tokens (an upper bound); no null arm (its training would take it to ~14 "
                                      "min); was ~60 min of training compute alone"),
                     "paper": TIME_PAPER + "; 2 models per seed (the null arm's model trained without solutions included)"}

    _SRC = "Ye, Xu, Li, Allen-Zhu, arXiv 2407.20311, sec. 4 and Fig. 7(a)"
    _GATE = Gate("learned", mean_at_least(LEARNED_GATE), arm="real",
                 stat=Stat("acc_greedy_id", words="the greedy in-distribution full-solution accuracy (the probed "
                                                  "model reasons)"))
    _STAT = ("V-probe test accuracy of {t} (rank-8 embedding update + linear head at [END], frozen model, queries of "
             "fresh problems disjoint from the probe's training problems) minus the larger of the majority rate and "
             "the same probe's accuracy on a random-init model of the same shape")
    _RULE = mean_at_least(GAP_MIN)
    _NULL = ("the same statistic with a model of the same shape trained on the problem statements and questions "
             "without their solutions (it reads the text, never reasons to an answer) in the trained model's place: "
             "its {t} V-probe accuracy minus the larger of the majority rate and the same probe on the random-init "
             "model (run at paper and smoke; off at quick and gpu)")
    _CAN_MEET = {"nece": "yes, if whether a parameter is necessary is decodable from the question's surface (the "
                         "parameter it names and the problem's sentences that mention it) without reasoning to an "
                         "answer: the model trained without solutions then beats the majority rate and the "
                         "random-init probe by 10 points too",
                 "dep": "yes, if 'A depends on B' is read from the problem's own sentences, which state the "
                        "dependencies, without reasoning: the model trained without solutions then beats the majority "
                        "rate and the random-init probe by 10 points too"}
    claims = [
        Claim("nece-probe", "At the end of the question, whether a parameter is necessary for the answer is decodable "
              "from the model, at least 10 points above both the majority rate and a random-init model.",
              _SRC, "nece 99.8% vs majority 74.7% (op <= 15, iGSM-med) [fig-src]",
              statistic=Stat("nece_gap", words=_STAT.format(t="nece")), rule=_RULE, gates=(_GATE,), presets=("paper",), null=_NULL.format(t="nece"),
              null_can_meet=_CAN_MEET["nece"]),
        Claim("dep-probe", "At the end of the problem (before the question), whether parameter A depends on B is "
              "decodable from the model, at least 10 points above both the majority rate and a random-init model.",
              _SRC, "dep 99.7% vs majority 84.6% (op <= 15, iGSM-med) [fig-src]",
              statistic=Stat("dep_gap", words=_STAT.format(t="dep")), rule=_RULE, gates=(_GATE,), presets=("paper",), null=_NULL.format(t="dep"),
              null_can_meet=_CAN_MEET["dep"]),
    ]

    def validate(self, cfg: IGSMProbingConfig) -> None:
        for t in cfg.probe_tasks:
            if t not in TASKS:
                raise ConfigError("probe_tasks", t, f"tasks in {TASKS}")
        for t in ("nece", "dep"):
            if t not in cfg.probe_tasks:
                raise ConfigError("probe_tasks", cfg.probe_tasks, "a list containing nece and dep (they decide the claims)")
        super().validate(cfg)

    def points(self, cfg: IGSMProbingConfig) -> list[Point]:
        return [p for p in super().points(cfg) if cfg.null_arm or p.arm != "null"]

    def trained_points(self, cfg: IGSMProbingConfig) -> list[Point]:
        """The points that train a model (both arms: the null arm's model is trained without solutions): what the
        GPU estimate counts."""
        return self.points(cfg)

    def estimate_gpu_seconds(self, cfg: IGSMProbingConfig) -> dict[str, float]:
        """Estimated seconds of a run of ``cfg`` on one H100 (:func:`~lmsci.experiments.reasoning._igsm_gpu_budget.
        run_seconds`, one greedy bucket decoded by the trained model), plus ``probe``: every task probed on the
        trained and the random-init model and, with the null arm, the claims' tasks on the model trained without
        solutions, ``probe_steps`` steps each, counted as training steps of ``probe_batch x seq_len`` tokens of the
        same model (an upper bound: probe inputs are truncated documents)."""
        shapes = [self.shape(cfg, p) for p in self.trained_points(cfg)]
        est = run_seconds(cfg, shapes, [(shapes[0], 1, 1)])
        n_probes = 2 * len(cfg.probe_tasks) + (len(NULL_TASKS) if cfg.null_arm else 0)
        probe_cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={
            "steps": n_probes * cfg.probe_steps, "batch_size": cfg.probe_batch})})
        est["probe"] = estimate_gpu_train_seconds(probe_cfg, shapes[:1])
        est["total"] += est["probe"]
        return est

    def run_group(self, cfg: IGSMProbingConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict[str, Any]]:
        """The real arm's models train and are probed (:meth:`measure`); each null point's model is trained on the
        problems without solutions and probed on nece and dep, its gap taken against the same seed's majority rate
        and random-init probe (the real row's ``<task>_majority`` and ``<task>_rand``: the same queries)."""
        real = [(p, c) for p, c in zip(points, ctxs) if p.arm != "null"]
        rows = IGSMExperiment.run_group(self, cfg, [p for p, _ in real], [c for _, c in real]) if real else []
        by_seed = {p.seed_index: r for (p, _), r in zip(real, rows)}
        world = world_of(cfg)
        tok = tokenizer_of(cfg, world)
        out = []
        for p, c in zip(points, ctxs):
            if p.arm != "null":
                out.append(by_seed[p.seed_index])
                continue
            r = by_seed.get(p.seed_index, {})
            if r.get("status", "ok") != "ok" or not r:
                out.append({**p.params, "status": r.get("status", "diverged")})  # diverged, or the seed not trained
                continue
            get_batch = prompt_only_batch_fn(world, tok, cfg.seq_len, cfg.train.batch_size)
            t = train_null_model(cfg, c, tok, self.shape(cfg, p), get_batch, "nosol")
            row = {**p.params, "train_loss": float(t.final.get("loss", float("nan"))),
                   "n_params": t.model.num_params()}
            for task, (xtr, ytr, xte, yte) in self._queries(cfg, world, tok, NULL_TASKS).items():
                b = vprobe(t.model, xtr, ytr, xte, yte, N_CLASSES[task], rank=cfg.probe_rank, steps=cfg.probe_steps,
                           batch_size=cfg.probe_batch, lr=cfg.probe_lr, seed=derive_seed(c.seed, "probe", task),
                           pad_id=tok.pad_id)
                base = {k: r[f"{task}_{k}"] for k in ("rand", "majority") if f"{task}_{k}" in r}
                row.update({f"{task}_acc": b.test_acc, **{f"{task}_{k}": v for k, v in base.items()}})
                if len(base) == 2:
                    row[f"{task}_gap"] = b.test_acc - max(base["majority"], base["rand"])
            out.append(row)
        return out

    @staticmethod
    def _queries(cfg: IGSMProbingConfig, world, tok, tasks) -> dict[str, tuple]:
        """Per task of ``tasks``: the probe's ``(xtr, ytr, xte, yte)`` queries (fresh problems from ``cfg.seed``; the
        same for every model and seed); tasks with no query are left out."""
        rnd = random.Random(derive_seed(cfg.seed, "probe-problems"))
        tr = [world.sample(rnd, split="train") for _ in range(cfg.n_probe_train)]
        te = [world.sample(rnd, split="train") for _ in range(cfg.n_probe_test)]
        out = {}
        for task in tasks:
            xtr, ytr = probe_queries(tr, tok, task, cfg.queries_per_problem, derive_seed(cfg.seed, "q", task), cfg.seq_len)
            xte, yte = probe_queries(te, tok, task, cfg.queries_per_problem, derive_seed(cfg.seed, "qt", task),
                                     cfg.seq_len)
            if xtr and xte:
                out[task] = (xtr, ytr, xte, yte)
        return out

    def measure(self, cfg, point, ctx, world, tok, model) -> dict[str, Any]:
        row: dict[str, Any] = evaluate_ops(cfg, model, tok, world, [None], beams=(1,))
        rand = build_gpt(cfg, tok, self.shape(cfg, point), derive_seed(ctx.seed, "rand-init")).to(ctx.device).eval()
        for task, (xtr, ytr, xte, yte) in self._queries(cfg, world, tok, cfg.probe_tasks).items():
            r = vprobe_with_baselines(model, rand, xtr, ytr, xte, yte, N_CLASSES[task], rank=cfg.probe_rank,
                                      steps=cfg.probe_steps, batch_size=cfg.probe_batch, lr=cfg.probe_lr,
                                      seed=derive_seed(ctx.seed, "probe", task), pad_id=tok.pad_id)
            row[f"{task}_acc"] = r["acc"]
            row[f"{task}_train_acc"] = r["train_acc"]
            row[f"{task}_rand"] = r["random_init_acc"]
            row[f"{task}_majority"] = r["majority"]
            row[f"{task}_n_test"] = r["n_test"]
            row[f"{task}_gap"] = r["acc"] - max(r["majority"], r["random_init_acc"])
        return row

    def figures(self, cfg: IGSMProbingConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        ok = ok_rows(results)
        ok = ok[ok["arm"] == "real"] if "arm" in ok else ok
        tasks = [t for t in TASKS if f"{t}_acc" in ok]
        if ok.empty or not tasks:
            return []
        fig, ax = plt.subplots(figsize=(6.0, 3.6))
        x = range(len(tasks))
        for k, (suffix, label) in enumerate((("acc", "trained model"), ("rand", "random-init model"),
                                             ("majority", "majority rate"))):
            ax.bar([i + (k - 1) * 0.27 for i in x], [ok[f"{t}_{suffix}"].mean() for t in tasks], 0.27, label=label)
        ax.set_xticks(list(x), tasks)
        ax.set_ylabel("V-probe test accuracy")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7)
        return [save_figure(fig, run, "probe_accuracy.png", "V-probe accuracy per task on the trained model vs the "
                            "same probe on a random-init model and the majority rate (mean over seeds; cf. Part 2.1 "
                            "Fig. 7)", claims=("nece-probe", "dep-probe"))]

    def report_sections(self, cfg: IGSMProbingConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        ok = ok_rows(results)
        cols = ["point", "arm", "seed_index", "train_loss", "acc_greedy_id"] + [
            f"{t}_{k}" for t in TASKS for k in ("acc", "train_acc", "rand", "majority", "n_test", "gap")
            if f"{t}_{k}" in ok]
        return ("## Method\n\nV-probe: rank-{r} update of the input embedding + linear head on the last-layer state at "
                "[END], {s} Adam steps of {b} queries; {ntr} / {nte} fresh problems for probe training / testing, at "
                "most {q} queries per problem and task. Arm `null`: `<task>_acc` is the probe accuracy of a model "
                "trained on the problems without their solutions, `<task>_rand` and `<task>_majority` the same "
                "seed's random-init probe and majority rate (as the real row), `<task>_gap` the first minus the "
                "larger of the other two.\n\n## Results\n\n").format(
            r=cfg.probe_rank, s=cfg.probe_steps, b=cfg.probe_batch, ntr=cfg.n_probe_train, nte=cfg.n_probe_test,
            q=cfg.queries_per_problem) + markdown_table(ok[[c for c in cols if c in ok]])
