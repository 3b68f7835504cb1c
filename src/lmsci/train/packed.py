"""Training on packed windows, once and in order, optionally until a memorisation target holds.

:func:`train_packed` drives :func:`lmsci.train.trainer.train` over the windows of a
:class:`~lmsci.worlds.bios_datasets.Packed` (or a streaming ``BioStream`` / ``MixedStream`` of
:mod:`lmsci.worlds.bios_stream`) with AdamW, warmup + cosine to 10% and gradient clipping at 1, checking a recall
function during training and stopping once it reaches a target. Source: Allen-Zhu & Li, "Physics of Language
Models: Part 3.3, Knowledge Capacity Scaling Laws", arXiv 2404.05405, Remark A.2 (the papers train far past
memorisation; at small scale we train until the gate holds and record when it did); Part 3.1, arXiv 2309.14316,
Sections 3-4 (the memorisation-first protocol of the knowledge experiments).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

from lmsci.errors import ConfigError
from lmsci.train import trainer
from lmsci.train.trainer import TrainConfig
from lmsci.worlds.bios_datasets import Packed

__all__ = ["PackedTrainSpec", "train_packed"]


class PackedTrainSpec(Protocol):
    """Optimizer settings of one training phase (e.g. the knowledge family's ``PhaseSpec``): AdamW learning rate
    ``lr``, ``batch_size`` (windows a step), decoupled ``weight_decay`` and ``warmup_frac`` (share of the steps
    warmed up)."""

    lr: float
    batch_size: int
    weight_decay: float
    warmup_frac: float


class _Memorised(Exception):
    """Raised from the trainer's evaluation hook to stop pretraining once the memorisation target holds."""


def _count_windows(packed: Packed | Any, batch_size: int) -> tuple[bool, int]:
    """``(streamed, number of windows)`` of ``packed``: a :class:`~lmsci.worlds.bios_datasets.Packed`, or a
    :mod:`lmsci.worlds.bios_stream` stream (BioStream / MixedStream) whose batch size must be ``batch_size``.

    Raises:
        ConfigError: a stream of another batch size (field ``pretrain.batch_size``).
    """
    streamed = not isinstance(packed, Packed)
    if streamed:
        if packed.batch_size != batch_size:
            raise ConfigError("pretrain.batch_size", batch_size, f"the stream's batch_size {packed.batch_size}")
        return True, packed.count_windows()
    return False, packed.input_ids.shape[0]


def _batch_source(packed: Packed | Any, streamed: bool, B: int, W: int, done: list[int],
                  tokens_drawn: list[int]) -> Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    """The trainer's ``get_batch(step, generator)``: the windows in order (``[B, seq_len]`` ids and targets; for a
    stream, its own batches), recording in ``done[0]`` the steps drawn and in ``tokens_drawn[0]`` the target
    tokens (targets != -100) drawn."""
    if streamed:
        stream_batch = packed.get_batch_fn()
    else:
        x, y = packed.input_ids, packed.targets

    def get_batch(step: int, g: torch.Generator):
        done[0] = step + 1
        if streamed:
            xb, yb = stream_batch(step, g)
        else:
            idx = torch.arange(step * B, step * B + B) % W
            xb, yb = x[idx], y[idx]
        tokens_drawn[0] += int((yb != -100).sum())
        return xb, yb

    return get_batch


def train_packed(model: torch.nn.Module, packed: Packed | Any, spec: PackedTrainSpec, *, seed: int, ctx: Any,
                 phase: str, device: str = "cpu", eval_fn=None, eval_every: int = 0,
                 recall_fn: Callable[[torch.nn.Module], float] | None = None, check_every: int = 0,
                 stop_at: float | None = None, checkpoint: bool = False, precision: str = "fp32",
                 gate_at: float = 0.9) -> dict[str, Any]:
    """Train on the windows of ``packed`` once, in order (the windows are already shuffled), optionally
    until a memorisation target holds (Part 3.3 Remark A.2: the papers train far past memorisation; at
    small scale we train until the gate holds and record when it did).

    Args:
        model: ``input_ids [batch, seq_len] -> logits`` (an lmsci GPT), trained in place.
        spec: the optimizer settings (:class:`PackedTrainSpec`).
        seed: the trainer's seed; ctx: an optional point context (``log``, ``progress``, ``artifact_dir``: a
            :class:`lmsci.contract.PointContext`) or None; phase: the name logged with every record.
        packed: the windows: a :class:`~lmsci.worlds.bios_datasets.Packed`, or a streaming
            :class:`lmsci.worlds.bios_stream.BioStream` / ``MixedStream`` whose ``batch_size`` is
            ``spec.batch_size`` (its ``exposures`` then count what the optimizer consumed).
        recall_fn: ``recall_fn(model) -> recall in [0, 1]``, called every ``check_every`` steps and after
            the last step (in eval mode, no gradients); its values are logged as ``recall_check``.
        stop_at: stop at the first check whose recall is ``>= stop_at`` (None: train every window).
        checkpoint: save/resume trainer checkpoints under ``ctx.artifact_dir / phase`` every
            ``check_every`` steps (or 10% of the steps), so that a run killed and rerun into the same
            directory resumes (commands of at most 10 minutes chain); the recall checks made before the
            interruption come back from the checkpoint's history.
        precision: ``"fp32"`` or ``"bf16"`` (autocast, :class:`lmsci.train.trainer.TrainConfig`).
        gate_at: the recall level ``steps_to_gate`` reports (0.9: the knowledge experiments' ``RECALL_MIN``).

    Returns:
        ``{"steps", "steps_budget", "tokens_seen", "final_loss", "seconds", "tokens_per_s", "windows_used",
        "recall_checks": [(step, recall), ...], "steps_to_gate": first checked step with recall >=
        ``gate_at`` (None if never), "stopped_early", "resumed_from": the step a checkpoint resumed from (0:
        a fresh start)}``; ``seconds`` is wall time, ``tokens_seen`` counts target tokens.

    Raises:
        ConfigError: a stream whose ``batch_size`` is not ``spec.batch_size`` (field ``pretrain.batch_size``).
    """
    B = spec.batch_size
    streamed, W = _count_windows(packed, B)
    steps = max(1, W // B)
    every = check_every if recall_fn is not None else eval_every
    ck_every = (every or max(1, steps // 10)) if checkpoint and ctx is not None else 0
    cfg = TrainConfig(steps=steps, batch_size=B, lr=spec.lr, warmup_steps=int(spec.warmup_frac * steps),
                      min_lr_ratio=0.1, weight_decay=spec.weight_decay, grad_clip=1.0, device=device,
                      log_every=max(1, steps // 50), eval_every=every, checkpoint_every=ck_every,
                      precision=precision)
    done = [0]  # optimizer steps taken (the step of the last batch drawn, plus one)
    tokens_drawn = [0]
    get_batch = _batch_source(packed, streamed, B, W, done, tokens_drawn)
    checks: list[tuple[int, float]] = []
    last_loss = [float("nan")]

    def evaluate(m: torch.nn.Module) -> dict[str, float]:
        out = dict(eval_fn(m)) if eval_fn is not None else {}
        if recall_fn is not None:
            r = float(recall_fn(m))
            out["recall_check"] = r  # recorded in `checks` by log_fn when the trainer emits it
            if stop_at is not None and r >= stop_at and done[0] < steps:
                checks.append((done[0], r))
                if ctx is not None:
                    ctx.log(phase=phase, step=done[0], recall_check=r, stopped="memorised")
                raise _Memorised()
        return out

    def log_fn(m: dict[str, Any]) -> None:  # also receives the records of a checkpoint's history on resume
        if "loss" in m:
            last_loss[0] = float(m["loss"])
        if "recall_check" in m:
            checks.append((int(m["step"]), float(m["recall_check"])))
        if ctx is not None:
            ctx.log(phase=phase, **m)

    bar = ctx.progress(steps, phase) if ctx is not None else None
    ckdir = (ctx.artifact_dir / phase) if ck_every else None
    t0 = time.perf_counter()
    stopped = False
    resumed_from = 0
    try:
        res = trainer.train(model, get_batch, cfg, seed=seed, log=log_fn, progress=bar,
                    eval_fn=evaluate if (eval_fn is not None or recall_fn is not None) else None,
                    checkpoint_dir=ckdir)
        n_steps, tokens, final_loss = res.steps, res.tokens_seen, float(res.final.get("loss", float("nan")))
        resumed_from = res.resumed_from
    except _Memorised:
        model.train()
        stopped = True
        n_steps = done[0]
        tokens = tokens_drawn[0]
        final_loss = last_loss[0]
    finally:
        if bar is not None:
            bar.close()
    secs = time.perf_counter() - t0
    gate = next((s for s, r in checks if r >= gate_at), None)
    return {"steps": n_steps, "steps_budget": steps, "tokens_seen": tokens, "final_loss": final_loss, "seconds": secs,
            "tokens_per_s": tokens / max(secs, 1e-9), "windows_used": n_steps * B, "recall_checks": checks,
            "steps_to_gate": gate, "stopped_early": stopped, "resumed_from": resumed_from}
