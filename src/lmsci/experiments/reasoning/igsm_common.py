"""Shared machinery of the iGSM experiments (``igsm-ood``, ``igsm-depth``, ``igsm-retry``, ``igsm-probing``,
``igsm-noop``): the configuration, training a GPT on streamed iGSM documents, and evaluating generated solutions
per op bucket with the full-solution checker.

Source: Ye, Xu, Li, Allen-Zhu, "Physics of Language Models: Part 2.1", arXiv 2407.20311 (sec. 2-3, App. F) and
"Part 2.2", arXiv 2408.16293 (retry data); spec ``physics_of_lms.md`` sec. 2.4 (models and training: GPT2-l-h
with rotary positions, AdamW betas (0.9, 0.98), cosine decay to 0.01x, lr 2e-3, wd 0.05, fresh problems packed
into context windows) and sec. 2.5 (evaluation: fresh test-hash problems per op, greedy and beam 4, scored by the
full-solution checker, the official ``true_correct``; unnecessary parameters per correct solution).

Pieces:

* :class:`IGSMCommonConfig` -- world, format, model shape, training and evaluation fields every experiment shares;
  :func:`validate_common` checks them before any work (``ConfigError``).
* :func:`train_members` -- train one model per seed context (:func:`lmsci.train.adaptor.train_group`): the seeds
  of one point are trained as one stacked computation (:func:`lmsci.train.stacked.train_stacked`) when
  ``stack_seeds`` and there are several, else one at a time with the lmsci trainer (checkpointed, resumable).
  Documents are ``<bos> <prob> problem <sol> solution <ans> answer <eos>`` packed into ``seq_len`` windows
  (:func:`lmsci.worlds.igsm.tokenizer.get_batch_fn`), with retry data at ``retry_rate`` and the mistakes' loss
  masked or not.
* :func:`test_set` / :func:`solve` / :func:`evaluate_ops` -- fresh test-hash problems per op (the same for every
  point and training seed: drawn from ``cfg.seed``), decoded greedily and with beam search
  (:mod:`lmsci.models.decode`), scored by :func:`lmsci.worlds.igsm.checker.check_solution`.
* :class:`IGSMExperiment` -- the base class: ``groups`` stacks the seeds of each point; ``run_group`` trains and
  hands every model to the subclass's ``measure``.

What the quick presets can judge: nothing. A sizing pilot on 2026-11-26 (seed 777, used by no verdict) trained
the quick model (4 layers, d_model 64, igsm-tiny, batch 8 x 512) for 4000 steps, 4x igsm-ood's quick preset, about
17 minutes on 2 cores: greedy in-distribution full-solution accuracy stayed at 0-4% (48 fresh problems every 500
steps; loss 1.22 -> 0.81 nats/token) and the model wrote well-formed solutions about the wrong entities. The
learned-model gates (>= 0.5 or >= 0.9) are out of reach on a CPU in 15 minutes, so every iGSM claim is registered
for the ``gpu`` and ``paper`` presets only (issue 29); the quick presets still run, report their values and null
arms, and check the pipeline end to end; the ``gpu`` presets are the smallest runs that can judge
(:func:`estimate_gpu_train_seconds`).

Null arms (issue 29): every claim's statistic is also measured, in the same run, where the effect is absent by
construction; :func:`random_init` gives the random-init model of a point's shape (same seed stream) that most of
them decode.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.stats import across_seeds
from lmsci.config import ExperimentConfig
from lmsci.errors import ConfigError
from lmsci.experiments.base import Experiment, Point, PointContext
from lmsci.models.decode import beam_decode, greedy_decode
from lmsci.models.gpt import GPT, GPTSpec
from lmsci.runs import derive_seed
from lmsci.train.adaptor import train_group
from lmsci.train.trainer import TrainSpec
from lmsci.worlds.igsm import IGSMWorld, get_world_config
from lmsci.worlds.igsm.checker import SolutionCheck, check_solution
from lmsci.worlds.igsm.tokenizer import IGSMTokenizer, get_batch_fn


class IGSMCommonConfig(ExperimentConfig):
    """Fields shared by the iGSM experiments (defaults: a CPU-sized quick preset).

    Attributes:
        world: a named iGSM world (``igsm-tiny``, ``igsm-small``, ``igsm-med``, ``igsm-hard``).
        op_dist: training op distribution, ``light`` (the paper's min of two uniforms) or ``uniform`` (balanced).
        fmt: ``pq`` (problem, then question) or ``qp``.
        tokenizer: ``word`` (word level over the world's vocabulary) or ``bpe`` (byte-level BPE via ``tokenizers``).
        model: the GPT trained (:class:`~lmsci.models.gpt.GPTSpec`; rotary positions, GELU MLP, LayerNorm, untied
            embeddings; GPT2-l-h has d_model = 64 h). A point may vary its n_layers, n_heads, d_model.
        seq_len: the context window (tokens) the documents are packed into and the GPT's position count.
        train: its optimizer and schedule (:class:`~lmsci.train.trainer.TrainSpec`: AdamW betas (0.9, 0.98), cosine
            decay to ``min_lr_ratio * lr``; paper: lr 2e-3, wd 0.05, 1,000 warmup steps, decay to 0.01x).
        stack_seeds: train the seeds of a point as one stacked computation.
        n_eval: fresh test-hash problems per op bucket.
        ood_extra: out-of-distribution ops evaluated: ``max_op + 1 .. max_op + ood_extra``.
        beam: beam width of the second decoder (0: greedy only).
        eval_batch: prompts per decoding batch.
        max_new_tokens: most generated tokens per solution (0: up to ``seq_len``); the quick default 224 covers the
            longest igsm-tiny solution at op 10 (189 tokens measured on 60 problems) and stops a model that never
            writes ``<eos>`` from decoding to the end of the context.
    """

    world: str = "igsm-tiny"
    op_dist: Literal["light", "uniform"] = "light"
    fmt: Literal["pq", "qp"] = "pq"
    tokenizer: Literal["word", "bpe"] = "word"
    model: GPTSpec = GPTSpec(n_layers=4, n_heads=4, d_model=64, pos="rope")
    seq_len: int = Field(512, ge=64)
    train: TrainSpec = TrainSpec(steps=1500, batch_size=8, lr=2e-3, warmup_steps=100, weight_decay=0.05,
                                 min_lr_ratio=0.01, betas=(0.9, 0.98))
    stack_seeds: bool = True
    n_eval: int = Field(24, ge=1)
    ood_extra: int = Field(2, ge=1)
    beam: int = Field(4, ge=0)
    eval_batch: int = Field(32, ge=1)
    max_new_tokens: int = Field(224, ge=0)

    PRECISIONS = ("fp32", "bf16")  # the base field ``precision`` goes to the trainer


#: Preset pieces every iGSM experiment starts from (each adds its own fields).
#: smoke: seconds; an untrained-in-effect model, decoding capped at 8 tokens.
SMOKE = {"model.n_layers": 1, "model.n_heads": 2, "model.d_model": 16, "seq_len": 512, "train.steps": 2,
         "train.batch_size": 2, "train.warmup_steps": 0, "n_eval": 2, "beam": 2, "max_new_tokens": 8, "n_seeds": 1}
#: gpu: one H100, igsm-small (max_op 10, OOD to 12), a 6-layer d384 model, bf16, 3 seeds trained one at a time
#: (checkpointed, so a run longer than one command resumes).
GPU = {"world": "igsm-small", "model.n_layers": 6, "model.n_heads": 6, "model.d_model": 384, "seq_len": 768,
       "train.batch_size": 96, "train.steps": 5000, "train.warmup_steps": 300, "train.lr": 1e-3, "n_eval": 256,
       "eval_batch": 128, "n_seeds": 3, "precision": "bf16", "threads": 0, "max_new_tokens": 0, "stack_seeds": False}
#: paper: iGSM-med, GPT2-12-12 (d768), ctx 768, batch 512, 100k steps, lr 2e-3, wd 0.05, 1,000 warmup steps (sec. 2.4).
PAPER = {"world": "igsm-med", "model.n_layers": 12, "model.n_heads": 12, "model.d_model": 768, "seq_len": 768,
         "train.batch_size": 512, "train.steps": 100_000, "train.warmup_steps": 1000, "train.lr": 2e-3,
         "train.weight_decay": 0.05, "n_eval": 4096,
         "eval_batch": 256, "n_seeds": 3, "precision": "bf16", "threads": 0, "stack_seeds": False,
         "max_new_tokens": 0}
#: time estimates shared by the presets (the quick one is measured per experiment).
TIME_PAPER = ("~1 day per model on one H100, estimated (GPT2-12-12, 100k steps x 512 x 768 = 39B tokens, ~2e19 FLOPs "
              "at ~40% of bf16 peak); the paper used several A100s")


def estimate_gpu_train_seconds(cfg: IGSMCommonConfig, shapes: Sequence[tuple[int, int, int]]) -> float:
    """Estimated seconds on one H100 to train one model of each of ``shapes`` (``(n_layers, n_heads, d_model)``,
    repeated as often as models of that shape are trained) for each of ``cfg.n_seeds`` seeds:
    ``cfg.train.steps`` steps of ``cfg.train.batch_size x cfg.seq_len`` tokens
    (:func:`lmsci.train.estimate.gpu_seconds`; its assumptions). Decoding the test buckets is not included."""
    from lmsci.train.estimate import gpu_seconds

    V = tokenizer_of(cfg, world_of(cfg)).vocab_size
    tokens = cfg.train.steps * cfg.train.batch_size * cfg.seq_len
    return cfg.n_seeds * sum(gpu_seconds(D, L, V, cfg.seq_len, tokens=tokens, steps=cfg.train.steps)
                             for L, _, D in shapes)


def world_of(cfg: IGSMCommonConfig, **overrides: Any) -> IGSMWorld:
    """The configured iGSM world (``overrides`` go to its :class:`~lmsci.worlds.igsm.IGSMConfig`)."""
    return IGSMWorld(get_world_config(cfg.world, op_dist=cfg.op_dist, fmt=cfg.fmt, tokenizer=cfg.tokenizer,
                                      **overrides))


def tokenizer_of(cfg: IGSMCommonConfig, world: IGSMWorld) -> IGSMTokenizer:
    """Word-level tokenizer (fixed vocabulary), or a BPE trained on the world's problems from ``cfg.seed``."""
    return IGSMTokenizer(world, kind=cfg.tokenizer, seed=cfg.seed)


def validate_common(cfg: IGSMCommonConfig, shapes: Sequence[tuple[int, int, int]] = ()) -> IGSMWorld:
    """Check the shared fields (and the model ``shapes`` (n_layers, n_heads, d_model) an experiment trains).

    Returns:
        the world.

    Raises:
        ConfigError (UnknownNameError): an unknown world, a head width that does not divide ``d_model`` or is odd
            (rotary), OOD ops beyond the world's ``max_eval_op``, a warmup longer than training.
    """
    world = world_of(cfg)
    for L, H, D in list(shapes) or [(cfg.model.n_layers, cfg.model.n_heads, cfg.model.d_model)]:
        if D % H or (D // H) % 2:
            raise ConfigError("d_model", D, f"a multiple of n_heads={H} with an even head width (rotary positions)")
        if L < 1:
            raise ConfigError("n_layers", L, ">= 1")
    hi = world.cfg.max_op + cfg.ood_extra
    if hi > world.cfg.max_eval_op:
        raise ConfigError("ood_extra", cfg.ood_extra, f"at most max_eval_op - max_op = "
                          f"{world.cfg.max_eval_op - world.cfg.max_op} for {cfg.world}")
    if cfg.train.warmup_steps >= cfg.train.steps and cfg.train.steps > 1:
        raise ConfigError("train.warmup_steps", cfg.train.warmup_steps, f"< train.steps={cfg.train.steps}")
    return world


def build_gpt(cfg: IGSMCommonConfig, tok: IGSMTokenizer, shape: tuple[int, int, int], seed: int) -> GPT:
    """``cfg.model`` (GPT2-l-h style by default: rotary positions, GELU MLP, LayerNorm, untied embeddings) with the
    ``(n_layers, n_heads, d_model)`` of ``shape``."""
    L, H, D = shape
    return GPT(cfg.model.gpt_config(tok.vocab_size, cfg.seq_len, n_layers=L, n_heads=H, d_model=D), seed=seed)


def random_init(cfg: IGSMCommonConfig, tok: IGSMTokenizer, shape: tuple[int, int, int], ctx: PointContext) -> GPT:
    """The null arms' random-init model of ``shape`` (its initialisation from ``derive_seed(ctx.seed, "rand-init")``),
    in eval mode on the context's device."""
    return build_gpt(cfg, tok, shape, derive_seed(ctx.seed, "rand-init")).to(ctx.device).eval()


@dataclass
class Trained:
    """One trained model of a seed context (``model`` None when training diverged)."""

    model: GPT | None
    final: dict
    diverged: str = ""


def train_members(cfg: IGSMCommonConfig, ctxs: Sequence[PointContext], world: IGSMWorld, tok: IGSMTokenizer,
                  shape: tuple[int, int, int], *, retry_rate: float = 0.0, retry_weak: bool = False,
                  mask_mistakes: bool = False, tag: str = "", data_tag: str = "") -> list[Trained]:
    """Train one model per context (same shape and data recipe, each its own seed).

    The data of member k are drawn from ``derive_seed(ctx_k.seed, "data", tag + data_tag)``, its initialisation
    from ``derive_seed(ctx_k.seed, "init", tag)`` (``data_tag`` changes the problem stream only: a null arm's
    second error-free model has the same initialisation and other problems). Several contexts with ``cfg.stack_seeds``
    train as one stacked computation; otherwise each trains with :func:`lmsci.train.trainer.train` (checkpoints under
    the point's artifact directory, so an interrupted run resumes); both through
    :func:`lmsci.train.adaptor.train_group`. A member whose loss becomes non-finite is returned as diverged (model
    None), in either mode; the other members still train.

    Returns:
        one :class:`Trained` per context, models in eval mode on the context's device.
    """
    device = ctxs[0].device
    steps = cfg.train.steps
    get_batch = get_batch_fn(world, tok, cfg.seq_len, cfg.train.batch_size, retry_rate=retry_rate,
                             retry_weak=retry_weak, mask_mistakes=mask_mistakes)
    models = [build_gpt(cfg, tok, shape, derive_seed(c.seed, "init", tag)) for c in ctxs]
    # a one-step run has no warmup (validate_common refuses warmup_steps >= steps for longer runs)
    res = train_group(models, get_batch, cfg.train, ctxs, stack=cfg.stack_seeds, desc=f"train x{len(ctxs)}{tag}",
                      seeds=[derive_seed(c.seed, "data", tag + data_tag) for c in ctxs],
                      checkpoint=f"ckpt{tag}",
                      warmup_steps=min(cfg.train.warmup_steps, max(steps - 1, 0)), log_every=max(steps // 50, 1),
                      checkpoint_every=max(steps // 4, 1), precision=cfg.precision)
    return [Trained(None, {}, str(res.diverged[k])) if k in res.diverged else
            Trained(m.to(device).eval(), res.members[k].final) for k, m in enumerate(models)]


# ------------------------------------------------------------------------------------------------- evaluation


def test_set(cfg: IGSMCommonConfig, world: IGSMWorld, op: int | None, n: int, tag: str = "") -> list:
    """``n`` fresh test-split problems (template hashes 16..22) with ``op`` operations (None: op drawn from the
    training distribution, the in-distribution slice); drawn from ``cfg.seed`` only, so every point and training
    seed is scored on the same problems."""
    rnd = random.Random(derive_seed(cfg.seed, "igsm-test", str(op), tag))
    return [world.sample(rnd, op=op, split="test") for _ in range(n)]


def solve(model: GPT, tok: IGSMTokenizer, prompts: Sequence[str], *, beam: int = 1, max_new_tokens: int | None = None,
          batch_size: int = 32) -> list[str]:
    """Generated continuations (text after ``<sol>``) of the prompt texts (``Problem.prompt()``), greedy
    (``beam = 1``) or beam search, on the model's device; each prompt is ``<bos>`` + its tokens."""
    ids = [[tok.bos_id] + tok.encode(p) for p in prompts]
    mx = max_new_tokens or model.cfg.seq_len
    if beam <= 1:
        gen = greedy_decode(model, ids, mx, tok.eos_id, batch_size=batch_size, pad_id=tok.pad_id)
    else:
        gen = beam_decode(model, ids, mx, tok.eos_id, num_beams=beam, batch_size=max(1, batch_size // beam),
                          pad_id=tok.pad_id)
    return [tok.decode(g) for g in gen]


def check_all(problems: Sequence, texts: Sequence[str]) -> list[SolutionCheck]:
    """:func:`check_solution` of each generated continuation against its problem."""
    return [check_solution(p, t) for p, t in zip(problems, texts)]


def summarize(checks: Sequence[SolutionCheck]) -> dict[str, float]:
    """Bucket statistics: ``acc`` (full solution, official-compatible ``correct``), ``strict_acc``,
    ``answer_acc`` (final answer only), ``unneeded_per_correct`` (unnecessary parameters per correct solution,
    NaN without a correct one), ``retries`` (``[BACK]`` steps per problem)."""
    n = max(len(checks), 1)
    correct = [c for c in checks if c.correct]
    return {"acc": sum(c.correct for c in checks) / n,
            "strict_acc": sum(c.strict_correct for c in checks) / n,
            "answer_acc": sum(c.answer_correct for c in checks) / n,
            "unneeded_per_correct": float(np.mean([c.n_unneeded for c in correct])) if correct else float("nan"),
            "retries": sum(c.n_retries for c in checks) / n}


def evaluate_ops(cfg: IGSMCommonConfig, model: GPT, tok: IGSMTokenizer, world: IGSMWorld,
                 ops: Sequence[int | None], *, beams: Sequence[int] = (1,), reask: bool = False) -> dict[str, float]:
    """Full-solution statistics per op bucket and decoder, as a flat results row.

    Keys: ``{stat}_{dec}_{bucket}`` with ``dec`` = ``greedy`` or ``beam{k}``, ``bucket`` = ``id`` (op from the
    training distribution) or ``op{k}``, ``stat`` as :func:`summarize`; with ``reask`` also bucket ``reask``: the
    ``max_op + ood_extra`` problems re-asked about another parameter with the same op (paper sec. 2.5).
    """
    row: dict[str, float] = {}
    buckets: list[tuple[str, list]] = [("id" if op is None else f"op{op}", test_set(cfg, world, op, cfg.n_eval))
                                       for op in ops]
    if reask:
        op = world.cfg.max_op + cfg.ood_extra
        rnd = random.Random(derive_seed(cfg.seed, "igsm-reask"))
        probs = []
        for p in test_set(cfg, world, op, 4 * cfg.n_eval, "reask-src"):
            r = world.reask(p, rnd, op=op)
            if r is not None:
                probs.append(r)
            if len(probs) == cfg.n_eval:
                break
        buckets.append(("reask", probs))
    for k in beams:
        dec = "greedy" if k <= 1 else f"beam{k}"
        for name, probs in buckets:
            if not probs:
                continue
            texts = solve(model, tok, [p.prompt() for p in probs], beam=k, batch_size=cfg.eval_batch,
                          max_new_tokens=cfg.max_new_tokens or None)
            for stat, v in summarize(check_all(probs, texts)).items():
                row[f"{stat}_{dec}_{name}"] = v
    return row


def ood_ops(cfg: IGSMCommonConfig, world: IGSMWorld) -> list[int]:
    """The out-of-distribution ops ``max_op + 1 .. max_op + ood_extra``."""
    return list(range(world.cfg.max_op + 1, world.cfg.max_op + cfg.ood_extra + 1))


def ok_rows(results: pd.DataFrame) -> pd.DataFrame:
    """The finished rows of a results table."""
    return results[results["status"] == "ok"] if "status" in results else results


def paired_diff(results: pd.DataFrame, key: str, a: Any, b: Any, col: str):
    """Per training seed, ``col`` of the row with ``key == a`` minus that with ``key == b`` (paired by
    ``seed_index``), as :func:`lmsci.stats.across_seeds`; None when no seed has both."""
    ok = ok_rows(results)
    if key not in ok or col not in ok:
        return None
    A = ok[ok[key] == a].set_index("seed_index")[col]
    B = ok[ok[key] == b].set_index("seed_index")[col]
    d = (A - B).dropna()
    return across_seeds(d.values) if len(d) else None


# ------------------------------------------------------------------------------------------------- base class


class IGSMExperiment(Experiment):
    """Base of the iGSM experiments: the seeds of each point are trained together (stacked) and each trained model
    is measured by :meth:`measure`. Subclasses give :meth:`points` (with ``params`` naming the model shape and the
    data recipe: ``n_layers``, ``n_heads``, ``d_model``, ``retry_rate``, ``retry_weak``, ``mask_mistakes``,
    ``data_tag``, any of which default to the config) and :meth:`measure`."""

    def validate(self, cfg: IGSMCommonConfig) -> None:
        validate_common(cfg, [self.shape(cfg, p) for p in self.points(cfg)])

    @staticmethod
    def shape(cfg: IGSMCommonConfig, point: Point) -> tuple[int, int, int]:
        """``(n_layers, n_heads, d_model)`` of ``point``'s GPT: its params where given, else the config's."""
        p = point.params
        return (int(p.get("n_layers", cfg.model.n_layers)), int(p.get("n_heads", cfg.model.n_heads)),
                int(p.get("d_model", cfg.model.d_model)))

    def groups(self, cfg: IGSMCommonConfig, points: list[Point]) -> list[list[Point]]:
        by: dict[str, list[Point]] = {}
        for p in points:
            by.setdefault(p.id.split("__s")[0], []).append(p)
        return list(by.values())

    def run_point(self, cfg: IGSMCommonConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        return self.run_group(cfg, [point], [ctx])[0]

    def run_group(self, cfg: IGSMCommonConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict[str, Any]]:
        world = world_of(cfg)
        tok = tokenizer_of(cfg, world)
        p0 = points[0].params
        shape = self.shape(cfg, points[0])
        trained = train_members(cfg, ctxs, world, tok, shape, retry_rate=float(p0.get("retry_rate", 0.0)),
                                retry_weak=bool(p0.get("retry_weak", False)),
                                mask_mistakes=bool(p0.get("mask_mistakes", False)),
                                data_tag=str(p0.get("data_tag", "")))
        rows = []
        for p, c, t in zip(points, ctxs, trained):
            row = {**p.params, "n_layers": shape[0], "n_heads": shape[1], "d_model": shape[2]}
            if t.model is None:
                rows.append({**row, "status": "diverged", "diverged": t.diverged})
                continue
            row["n_params"] = t.model.num_params()
            row["n_params_non_embedding"] = t.model.num_params(non_embedding=True)
            row["train_loss"] = float(t.final.get("loss", float("nan")))
            row.update(self.measure(cfg, p, c, world, tok, t.model))
            rows.append(row)
        return rows

    def measure(self, cfg: IGSMCommonConfig, point: Point, ctx: PointContext, world: IGSMWorld,
                tok: IGSMTokenizer, model: GPT) -> dict[str, Any]:
        """The measurements of one trained ``model`` (a member of the point's stacked training) as results-row
        columns; ``world`` and ``tok`` are the run's iGSM world and tokenizer. Subclasses implement it.

        Raises:
            NotImplementedError: on the base class.
        """
        raise NotImplementedError
