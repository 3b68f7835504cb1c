"""The training loop: one readable function, in the style of nanoGPT's ``train.py``.

``train(model, get_batch, cfg, seed=...)`` runs AdamW (weight decay only on weights with two or
more dimensions) with a linear warmup followed by a cosine decay to ``min_lr_ratio * lr``,
gradient clipping and gradient accumulation; it evaluates every ``eval_every`` steps through
``eval_fn``, logs step metrics through ``log(dict)`` and saves/resumes checkpoints in
``checkpoint_dir``. A run interrupted and resumed from its last checkpoint on CPU produces
bit-for-bit the same weights and losses as the uninterrupted run (tested).

Randomness comes only from ``seed``: batches are drawn by ``get_batch`` with a
``torch.Generator`` seeded from it, and anything in the model that uses torch's global RNG
(dropout) runs inside :func:`torch.random.fork_rng` seeded from it, so the caller's global RNG
state is left untouched. The generator states are saved in the checkpoint (:mod:`lmsci.train.checkpoint`:
layout, contents, resume check).

Precision is ``fp32`` by default on every device; ``precision="bf16"`` runs the forward pass under bf16
autocast on the training device (CPU or CUDA; the CUDA path is not exercised on this CPU-only
machine's tests). Losses are cross-entropy in
nats/token; targets equal to ``-100`` are ignored. A model with a ``sum_nll`` method (lmsci's GPT)
computes its loss through the fused head of :mod:`lmsci.models.loss`; the optimizer is fused AdamW.

Source of the recipe: Karpathy, nanoGPT ``train.py`` (AdamW groups, warmup + cosine schedule);
Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", arXiv 1711.05101 (AdamW);
Loshchilov & Hutter 2017, "SGDR", arXiv 1608.03983 (cosine schedule).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
from pydantic import Field, ValidationError, model_validator

from lmsci.config import StrictModel, validation_to_config_error
from lmsci.errors import DivergedError
from lmsci.models.loss import IGNORE_INDEX
from lmsci.train.checkpoint import latest_checkpoint, resume, rng_state, save_checkpoint
from lmsci.train.compile import maybe_compile

Batch = tuple[torch.Tensor, torch.Tensor]
GetBatch = Callable[[int, torch.Generator], Batch]


class TrainSpec(StrictModel):
    """What an experiment registers about training: the optimizer and schedule (AdamW, linear warmup, cosine
    decay), not where or how fast it runs. Experiments that train a GPT nest one as ``train`` in their config
    (``--set train.steps=4000``); :meth:`train_config` adds the execution settings. Defaults are
    :class:`TrainConfig`'s.

    Attributes:
        steps: optimizer steps.
        batch_size: sequences per call of ``get_batch`` (one micro-batch); the effective batch
            per optimizer step is ``batch_size * grad_accum``. The trainer does not build
            batches itself: callers use this field in their ``get_batch``.
        lr: peak learning rate.
        warmup_steps: linear warmup from ``lr / warmup_steps`` to ``lr`` over this many steps.
        warmup_frac: when set, the warmup is ``int(warmup_frac * steps)`` steps: ``warmup_steps`` is then derived
            (a value given for it is replaced; set ``warmup_frac`` to null to set ``warmup_steps`` yourself).
        min_lr_ratio: the cosine decay ends at ``min_lr_ratio * lr`` at the last step.
        weight_decay: AdamW decoupled weight decay, applied to parameters with ``ndim >= 2`` only.
        betas: AdamW betas.
        grad_clip: clip the global gradient norm to this value; 0 disables clipping.
        grad_accum: micro-batches per optimizer step (the loss is averaged over all their tokens).

    Raises:
        pydantic ValidationError (a ConfigError through :func:`lmsci.config.resolve_config`): a value out of
            range.
    """

    steps: int = Field(1000, ge=1)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(100, ge=0)
    warmup_frac: float | None = Field(None, ge=0, le=1)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    weight_decay: float = Field(0.1, ge=0)
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = Field(1.0, ge=0)
    grad_accum: int = Field(1, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _derive_warmup(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("warmup_frac") is not None:
            steps = int(data.get("steps", cls.model_fields["steps"].default))
            data = {**data, "warmup_steps": int(float(data["warmup_frac"]) * steps)}
        return data

    def train_config(self, **settings: Any) -> TrainConfig:
        """The :class:`TrainConfig` of this spec plus execution ``settings`` (``device``, ``log_every``,
        ``eval_every``, ``precision``, ``compile``...). A sweep point that derives the step count passes
        ``steps=`` (its warmup follows ``warmup_frac`` when set).

        Raises:
            ConfigError: a setting is not a TrainConfig field or out of range.
        """
        data = {**self.model_dump(), **settings}
        try:
            return TrainConfig(**data)
        except ValidationError as err:
            raise validation_to_config_error(err, data) from None


class TrainConfig(TrainSpec):
    """Hyper-parameters of :func:`train`: a :class:`TrainSpec` plus where and how it runs.

    Attributes:
        steps, batch_size, lr, warmup_steps, warmup_frac, min_lr_ratio, weight_decay, betas, grad_clip, grad_accum:
            as in :class:`TrainSpec`.
        eval_every: call ``eval_fn`` every this many steps (and always after the last step);
            0 = only after the last step.
        checkpoint_every: save a checkpoint every this many steps (and after the last step) when
            a ``checkpoint_dir`` is given; 0 = only after the last step.
        log_every: call ``log`` with training metrics every this many steps (and at the last).
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda[:i]``.
        tensorboard: also write the metrics as TensorBoard scalars (only if the ``tensorboard``
            package is installed; otherwise a warning) under ``checkpoint_dir/tensorboard``.
        precision: ``fp32`` (the default on every device), or ``bf16`` (autocast
            on any device; on CPUs with AVX512-BF16 or AMX it speeds the trunk's matmuls -- measured
            1.5x at d_model 256 on a 2-core AVX512-BF16 machine, 1.1x at d_model 128 -- but results
            then differ from fp32 beyond rounding). Weights, optimizer state and the loss head
            (:mod:`lmsci.models.loss`) stay fp32.
        compile: ``auto`` (compile the forward and loss with :func:`torch.compile` on CUDA, not on CPU), ``on``,
            ``off``, or None (the process default, set by the executor from the experiment's ``compile``:
            :mod:`lmsci.train.compile`). Compiled training equals eager training to float tolerance.
    """

    eval_every: int = Field(0, ge=0)
    checkpoint_every: int = Field(0, ge=0)
    log_every: int = Field(1, ge=1)
    device: str = Field("auto", pattern="^(auto|cpu|cuda(:[0-9]+)?)$")
    tensorboard: bool = False
    precision: Literal["fp32", "bf16"] = "fp32"
    compile: Literal["auto", "on", "off"] | None = None


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        history: every logged record, in order: training records (step, loss, lr, grad_norm,
            tokens_seen, tokens_per_s) and evaluation records (step plus ``eval_fn``'s metrics).
        final: the last training record merged with the last evaluation record.
        steps: optimizer steps completed.
        tokens_seen: non-ignored target tokens trained on.
        resumed_from: the step the run resumed from (0 for a fresh run).
        seconds: wall time of this call.
    """

    history: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    steps: int = 0
    tokens_seen: int = 0
    resumed_from: int = 0
    seconds: float = 0.0


# --------------------------------------------------------------------------------------------
# pieces
# --------------------------------------------------------------------------------------------


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate at 0-based optimizer ``step``: linear warmup, then cosine to ``min_lr_ratio*lr``.

    ``lr * (step + 1) / warmup_steps`` for ``step < warmup_steps``; afterwards
    ``min_lr + 0.5 * (1 + cos(pi * t)) * (lr - min_lr)`` with
    ``t = (step - warmup_steps) / max(1, steps - 1 - warmup_steps)``, so the last step uses ``min_lr``.
    """
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    min_lr = cfg.min_lr_ratio * cfg.lr
    t = (step - cfg.warmup_steps) / max(1, cfg.steps - 1 - cfg.warmup_steps)
    t = min(max(t, 0.0), 1.0)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * t)) * (cfg.lr - min_lr)


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with two groups: decay for parameters with ``ndim >= 2`` (matmul weights, embeddings),
    no decay for biases and norm gains (nanoGPT's grouping). The fused implementation (one kernel
    for all parameters; CPU and CUDA, torch >= 2.4; the default of Hugging Face's Trainer too)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), fused=True)


def _logits(out: Any) -> torch.Tensor:
    """Accept a model returning logits or an object with ``.logits`` (Hugging Face)."""
    return out.logits if hasattr(out, "logits") else out


def _training_forward(model: nn.Module, mode: str | None, device: str) -> Any:
    """What the training step calls through :func:`sum_nll`: ``model``, or, when training compiles
    (:func:`lmsci.train.compile.resolve`), its ``torch.compile`` wrapper; for a model with its own ``sum_nll``
    (lmsci's GPT) that method itself is compiled, because a compiled module's wrapper hands a method call
    straight to the uncompiled module (before 2026-12-06 ``train`` therefore never compiled an lmsci GPT)."""
    fwd = maybe_compile(model, mode, device)
    if fwd is not model and callable(getattr(model, "sum_nll", None)):
        return SimpleNamespace(sum_nll=torch.compile(model.sum_nll, dynamic=False))
    return fwd


def sum_nll(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy (nats) over non-ignored targets, and their count.

    A model with a ``sum_nll(input_ids, targets)`` method (lmsci's :class:`~lmsci.models.gpt.GPT`:
    a fused, chunked head that never materialises the logits) computes it itself; any other model
    (Hugging Face, the associative memories) returns logits and ``F.cross_entropy`` is applied.

    Args:
        x: input ids ``[batch, seq]`` long. y: targets ``[batch, seq]`` long, ``-100`` ignored.
    """
    own = getattr(model, "sum_nll", None)
    if callable(own):
        return own(x, y), int((y != IGNORE_INDEX).sum())
    logits = _logits(model(x))
    loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1),
                           ignore_index=IGNORE_INDEX, reduction="sum")
    return loss, int((y != IGNORE_INDEX).sum())


@torch.no_grad()
def evaluate_nll(model: nn.Module, batches: Iterable[Batch], device: str | None = None) -> float:
    """Mean negative log-likelihood in nats/token over all non-ignored targets of ``batches``.

    Args:
        model: maps input ids ``[batch, seq]`` to logits ``[batch, seq, vocab_size]``.
        batches: iterable of ``(input_ids [batch, seq], targets [batch, seq])``; ``-100`` ignored.
        device: where to move the batches (default: the model's device).

    Raises:
        ValueError: the batches contain no target token.
    """
    was_training = model.training
    model.eval()
    dev = device or next(model.parameters()).device
    total, count = 0.0, 0
    for x, y in batches:
        s, n = sum_nll(model, x.to(dev), y.to(dev))
        total += float(s)
        count += n
    model.train(was_training)
    if count == 0:
        raise ValueError("evaluate_nll: the batches contain no target tokens (all -100?)")
    return total / count


@contextlib.contextmanager
def seed_scope(seed: int) -> Iterator[None]:
    """Run a block with torch's global RNG seeded to ``seed`` and restore the caller's state after.

    Use it to initialise a model deterministically without touching global state::

        with seed_scope(seed):
            model = GPT(cfg)
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _autocast(device: str, precision: str = "fp32"):
    """bf16 autocast on ``device``'s type for ``precision="bf16"``; otherwise nothing (fp32)."""
    if precision == "bf16":
        return torch.autocast(device.split(":")[0], dtype=torch.bfloat16)
    return contextlib.nullcontext()


# --------------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------------


@dataclass
class _Loop:
    """The state one :func:`train` call shares between its phases (setup, resume, step, evaluate, checkpoint)."""

    model: nn.Module
    cfg: TrainConfig
    seed: int
    device: str
    opt: torch.optim.AdamW
    gen: torch.Generator
    eval_fn: Callable[[nn.Module], dict[str, float]] | None
    log: Callable[[dict[str, Any]], None] | None
    checkpoint_dir: str | Path | None
    tb: Any = None
    fwd: Any = None  # what the training step calls: ``model`` or its compiled loss (``_training_forward``)
    result: TrainResult = field(default_factory=TrainResult)
    step: int = 0
    tokens_seen: int = 0

    def emit(self, rec: dict[str, Any]) -> None:
        """Append ``rec`` to the history and pass it to ``log`` and TensorBoard."""
        self.result.history.append(rec)
        if self.log is not None:
            self.log(dict(rec))
        if self.tb is not None:
            for k, v in rec.items():
                if k != "step" and isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, rec["step"])

    def checkpoint(self) -> None:
        """Save the weights, optimizer, generator states and history (when a ``checkpoint_dir`` is given)."""
        if self.checkpoint_dir is None:
            return
        save_checkpoint(self.checkpoint_dir, self.model, {
            "step": self.step, "tokens_seen": self.tokens_seen, "seed": int(self.seed),
            "config": self.cfg.model_dump(mode="json"), "optimizer": self.opt.state_dict(),
            "batch_rng": self.gen.get_state(), **rng_state(),
            "history": json.dumps(self.result.history),
        })

    def evaluate(self) -> None:
        """Call ``eval_fn`` in eval mode without gradients and emit its metrics at the current step."""
        if self.eval_fn is None:
            return
        self.model.eval()
        with torch.no_grad(), _autocast(self.device, self.cfg.precision):
            metrics = self.eval_fn(self.model)
        self.model.train()
        self.emit({"step": self.step, **{k: float(v) if isinstance(v, (int, float)) else v
                                         for k, v in metrics.items()}})


def _open_tensorboard(cfg: TrainConfig, checkpoint_dir: str | Path | None) -> Any:
    """A TensorBoard ``SummaryWriter`` under ``checkpoint_dir/tensorboard`` when ``cfg.tensorboard`` (None, with a
    warning, when the package is missing)."""
    if not cfg.tensorboard:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(Path(checkpoint_dir or ".") / "tensorboard"))
    except ImportError:
        warnings.warn("TrainConfig.tensorboard=True but the tensorboard package is not installed; "
                      "pip install tensorboard", stacklevel=3)
        return None


def _train_step(loop: _Loop, get_batch: GetBatch) -> tuple[float, float, float, int]:
    """One optimizer step at ``loop.step`` (then advanced): set the lr, draw ``grad_accum`` micro-batches,
    accumulate token-weighted gradients, clip, step.

    Returns:
        ``(loss nats/token, lr, grad_norm before clipping, target tokens of this step)``.

    Raises:
        DivergedError: the loss is non-finite.
    """
    cfg, model, opt, device = loop.cfg, loop.model, loop.opt, loop.device
    lr = lr_at(loop.step, cfg)
    for group in opt.param_groups:
        group["lr"] = lr
    # Fetch all micro-batches first so each is weighted by its share of the target tokens:
    # the accumulated gradient then equals the gradient of the mean over all of them.
    micro = [get_batch(loop.step, loop.gen) for _ in range(cfg.grad_accum)]
    n_tok = sum(int((y != IGNORE_INDEX).sum()) for _, y in micro)
    opt.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for x, y in micro:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with _autocast(device, cfg.precision):
            s, n_micro = sum_nll(loop.fwd, x, y)
        objective = s / max(n_tok, 1)
        aux = model.moe_aux_loss() if hasattr(model, "moe_aux_loss") else None  # MoE load balancing (Switch)
        if aux is not None:
            objective = objective + aux * (n_micro / max(n_tok, 1))
        objective.backward()
        loss_sum += float(s.detach())
    if cfg.grad_clip > 0:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
    else:
        grad_norm = float(torch.norm(torch.stack(
            [p.grad.detach().norm() for p in model.parameters() if p.grad is not None])))
    opt.step()
    loop.step += 1
    loop.tokens_seen += n_tok
    loss = loss_sum / max(n_tok, 1)
    if not math.isfinite(loss):
        raise DivergedError(loop.step, loss)
    return loss, lr, grad_norm, n_tok


def _run_steps(loop: _Loop, get_batch: GetBatch, progress: Any) -> None:
    """Train from ``loop.step`` to ``cfg.steps``: log every ``log_every`` steps (tokens/s over training steps
    only, not evaluation or checkpoint time), evaluate and checkpoint on their schedules and after the last."""
    cfg = loop.cfg
    loop.model.train()
    t_window, tok_window = 0.0, 0
    while loop.step < cfg.steps:
        t_step = time.perf_counter()
        loss, lr, grad_norm, n_tok = _train_step(loop, get_batch)
        step = loop.step
        t_window += time.perf_counter() - t_step
        tok_window += n_tok
        if step % cfg.log_every == 0 or step == cfg.steps:
            tps = tok_window / max(t_window, 1e-9)
            t_window, tok_window = 0.0, 0
            loop.emit({"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                       "tokens_seen": loop.tokens_seen, "tokens_per_s": tps})
            if progress is not None:
                progress.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tps:,.0f}", refresh=False)
        if progress is not None:
            progress.update(1)
        if step == cfg.steps or (cfg.eval_every and step % cfg.eval_every == 0):
            loop.evaluate()
        if step == cfg.steps or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0):
            loop.checkpoint()


def train(
    model: nn.Module,
    get_batch: GetBatch,
    cfg: TrainConfig,
    *,
    seed: int,
    eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    log: Callable[[dict[str, Any]], None] | None = None,
    checkpoint_dir: str | Path | None = None,
    progress: Any = None,
    replay_log_on_resume: bool = True,
) -> TrainResult:
    """Train ``model`` in place for ``cfg.steps`` optimizer steps (resuming when possible).

    Args:
        model: maps input ids ``[batch, seq]`` long to logits ``[batch, seq, vocab_size]`` (or
            an object with ``.logits``). Moved to ``cfg.device``.
        get_batch: ``get_batch(step, generator) -> (input_ids [batch, seq] long, targets [batch, seq]
            long)``, targets ``-100`` ignored; called ``cfg.grad_accum`` times per step and must
            draw all its randomness from ``generator``.
        cfg: the :class:`TrainConfig`.
        seed: seeds the batch generator and the model's global-RNG use (dropout).
        eval_fn: ``eval_fn(model) -> dict`` of metrics, called in eval mode without gradients every
            ``cfg.eval_every`` steps and after the last step.
        log: receives each record (training and evaluation) as a dict with ``step``.
        checkpoint_dir: where checkpoints go; if it holds one, training resumes from it.
        progress: a tqdm-like bar (``update``, ``set_postfix``); updated once per step.
        replay_log_on_resume: when resuming, first pass the checkpoint's stored history to ``log``
            again (an lmsci run directory drops the metrics of unfinished points on resume, so
            this keeps ``metrics.jsonl`` complete); False logs only the new steps.

    Returns:
        :class:`TrainResult`.

    Raises:
        ConfigError: the checkpoint in ``checkpoint_dir`` was written with a different config.
        DivergedError: a training loss was non-finite (NaN or inf); training stops at that step.
    """
    from lmsci.runs import resolve_device

    t_start = time.perf_counter()
    device = resolve_device(cfg.device)
    model.to(device)
    opt = make_optimizer(model, cfg)
    gen = torch.Generator().manual_seed(int(seed))  # CPU on purpose: the same batches on every device
    loop = _Loop(model, cfg, seed, device, opt, gen, eval_fn, log, checkpoint_dir,
                 tb=_open_tensorboard(cfg, checkpoint_dir), fwd=_training_forward(model, cfg.compile, device))

    # fork (and so restore on exit) every CUDA generator: a resumed run restores all their states
    cuda_devices = list(range(torch.cuda.device_count())) if device.startswith("cuda") and torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(int(seed) ^ 0x5EED)  # seeds CPU and CUDA generators (dropout)
        ckpt = latest_checkpoint(checkpoint_dir) if checkpoint_dir is not None else None
        if ckpt is not None:
            resume(loop, ckpt, progress, replay_log_on_resume)
        _run_steps(loop, get_batch, progress)

    if loop.tb is not None:
        loop.tb.close()
    result = loop.result
    result.steps, result.tokens_seen = loop.step, loop.tokens_seen
    train_recs = [r for r in result.history if "grad_norm" in r]
    eval_recs = [r for r in result.history if "grad_norm" not in r]
    result.final = {**(train_recs[-1] if train_recs else {}), **(eval_recs[-1] if eval_recs else {})}
    result.seconds = time.perf_counter() - t_start
    return result
