"""Training a steer: :func:`train_intervention`, the LM-Steer loss on a frozen LM for every steer of the harness.

Split from :mod:`lmsci.methods.steering` (the steers :class:`~lmsci.methods.steering.LogitOffset`,
:class:`~lmsci.methods.steering.ActAdd` and :class:`~lmsci.methods.lm_steer.LMSteer` are all trained here, with the
same loss on the same data). The loss is LM-Steer's (Han et al. 2024, arXiv 2305.12798 Sec. 3; the authors'
``experiments/training/train.py``): next-token cross-entropy of the steered LM, each example under its own steer
values, padding masked (:func:`lmsci.methods.steerable.mean_nll`), Adam, the LM frozen (checked: after the first
backward no LM parameter has a gradient); a non-finite loss raises :class:`~lmsci.errors.DivergedError`. A
pluggable forward (``loss_fn``) lets :mod:`lmsci.methods.lm_steer_cached` train from cached hidden states with the
same batches, optimiser and checks.

* :func:`train_intervention` ``(model, steer, data, values, ...)`` -> the steer, trained in place; ``values [N, K]``
  (``N`` texts, ``K`` steers); ``steer.history`` gets the per-step losses (nats/token).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from lmsci.errors import ConfigError, DivergedError
from lmsci.methods.steerable import as_steerable, as_token_lists, mean_nll, pad_batch
from lmsci.methods.steering import Steer
from lmsci.models.device import device_of
from lmsci.models.gpt import GPT
from lmsci.models.hf import HFModel


# ------------------------------------------------------------------------------------ training


def _intervention_data(m: GPT | HFModel, steer: Steer, data: Any, values: Tensor, tokenizer: Any, max_length: int,
                       steps: int, batch_size: int, lr: float) -> tuple[list[list[int]], Tensor]:
    """The training texts as token lists (cut to ``max_length`` and a GPT's ``seq_len``; texts of one token
    dropped) and their steer values ``[N', K]``, after checking the arguments of :func:`train_intervention`.

    Raises:
        ConfigError: ``values`` not ``[N, K]``; no text of two or more tokens; non-positive
            ``steps``/``batch_size``/``lr``.
    """
    if isinstance(m, GPT):
        max_length = min(max_length, m.cfg.seq_len)
    seqs = as_token_lists(data, tokenizer, max_length)
    values = torch.as_tensor(values, dtype=torch.float32)
    if values.shape != (len(seqs), steer.K):
        raise ConfigError("values", tuple(values.shape), f"[N, K] = [{len(seqs)}, {steer.K}] ({steer.names})")
    keep = [i for i, s in enumerate(seqs) if len(s) >= 2]  # a text of one token has no next-token target
    if not keep:
        raise ConfigError("data", len(seqs), "at least one text of two or more tokens")
    seqs, values = [seqs[i] for i in keep], values[keep]
    _check_optimiser(steps, batch_size, lr)
    return seqs, values


def _check_optimiser(steps: int, batch_size: int, lr: float) -> None:
    """Raise ConfigError for non-positive ``steps``, ``batch_size`` or ``lr``."""
    for field, v in (("steps", steps), ("batch_size", batch_size)):
        if int(v) < 1:
            raise ConfigError(field, v, ">= 1")
    if not lr > 0:
        raise ConfigError("lr", lr, "> 0")


def _loss_fn_data(steer: Steer, data: Any, values: Tensor, steps: int, batch_size: int,
                  lr: float) -> tuple[int, Tensor]:
    """``N = len(data)`` and the steer values ``[N, K]`` for :func:`train_intervention` with a ``loss_fn``.

    Raises:
        ConfigError: no example; ``values`` not ``[N, K]``; non-positive ``steps``/``batch_size``/``lr``.
    """
    n = len(data)
    values = torch.as_tensor(values, dtype=torch.float32)
    if values.shape != (n, steer.K):
        raise ConfigError("values", tuple(values.shape), f"[N, K] = [{n}, {steer.K}] ({steer.names})")
    if not n:
        raise ConfigError("data", n, "at least one example")
    _check_optimiser(steps, batch_size, lr)
    return n, values


@contextlib.contextmanager
def _frozen_lm(m: GPT | HFModel, steer: Steer) -> Iterator[None]:
    """Inside the block the LM is in eval mode with ``requires_grad`` off on every parameter and the steer is in
    train mode; afterwards the LM's flags and mode are restored and the steer is left in eval mode."""
    lm_params = list(m.parameters())
    flags = [p.requires_grad for p in lm_params]
    was_training = m.training
    try:
        for p in lm_params:
            p.requires_grad_(False)
        m.eval()
        steer.train()
        yield
    finally:
        for p, f in zip(lm_params, flags):
            p.requires_grad_(f)
        m.train(was_training)
        steer.eval()


def _check_no_leak(lm_params: list[Tensor], before: list[Tensor | None]) -> None:
    """Raise RuntimeError when an LM parameter's gradient differs from what it held before training (``before``)."""
    leaked = [i for i, (p, b) in enumerate(zip(lm_params, before))
              if p.grad is not None and (b is None or not torch.equal(p.grad, b))]
    if leaked:
        raise RuntimeError(f"{len(leaked)} LM parameters received gradients; the LM must stay frozen")


def _lm_loss(m: GPT | HFModel, steer: Steer, seqs: list[list[int]],
             pad_id: int) -> Callable[[list[int], Tensor], Tensor]:
    """The default batch loss of :func:`train_intervention` (the steer attached to ``m``): the texts ``seqs[idx]``
    right-padded with ``pad_id``, the steer set to their values ``[B, K]``, the LM's mean NLL over real targets."""
    dev = device_of(m)

    def loss(idx: list[int], values: Tensor) -> Tensor:
        ids, mask = pad_batch([seqs[i] for i in idx], pad_id, dev)
        steer.set_values(values)
        return mean_nll(m, ids, mask)

    return loss


def _steer_steps(m: GPT | HFModel, steer: Steer, n: int, values: Tensor,
                 batch_loss: Callable[[list[int], Tensor], Tensor], *, lr: float, steps: int, batch_size: int,
                 l2: float, seed: int, grad_clip: float | None, on_step: Callable[[int, float], None] | None) -> None:
    """The Adam steps of :func:`train_intervention` (the LM frozen): batches of indices into the ``n`` examples
    drawn without replacement from a ``torch.Generator`` seeded with ``seed``, the loss ``batch_loss(idx,
    values[idx])`` plus ``l2 * steer.regularization()``, losses appended to ``steer.history``.

    Raises:
        DivergedError: a non-finite loss. RuntimeError: an LM parameter received a gradient (checked once).
    """
    dev = device_of(m)
    params = [p for p in steer.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    lm_params = list(m.parameters())
    # gradients the LM already holds (e.g. from its own training) are not leaks: compare against them
    before = [None if p.grad is None else p.grad.detach().clone() for p in lm_params]
    g = torch.Generator().manual_seed(int(seed))
    order: list[int] = []
    for step in range(int(steps)):
        if len(order) < batch_size:
            order += torch.randperm(n, generator=g).tolist()
        idx, order = order[:batch_size], order[batch_size:]
        loss = batch_loss(idx, values[idx].to(dev))
        if l2:
            loss = loss + l2 * steer.regularization()
        val = float(loss.detach())
        if not math.isfinite(val):
            raise DivergedError(step, val, "steer training loss")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:
            _check_no_leak(lm_params, before)
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        steer.history.append(val)
        if on_step is not None:
            on_step(step, val)


def train_intervention(
    model: Any,
    steer: Steer,
    data: Any,
    values: Tensor,
    *,
    lr: float = 1e-2,
    steps: int = 1000,
    batch_size: int = 32,
    max_length: int = 256,
    l2: float = 0.0,
    seed: int = 0,
    pad_id: int = 0,
    tokenizer: Any = None,
    grad_clip: float | None = None,
    on_step: Callable[[int, float], None] | None = None,
    loss_fn: Callable[[list[int], Tensor], Tensor] | None = None,
) -> Steer:
    """Train ``steer`` on ``model`` (frozen) by next-token cross-entropy of the steered LM.

    Loss per step (LM-Steer, arXiv 2305.12798 Sec. 3; ``experiments/training/train.py``): the mean NLL over the
    real (non-padding) target tokens of a batch, each example under its own steer values, plus
    ``l2 * steer.regularization()``. Adam. Padding is masked out of the loss (the authors' code counts padded
    EOS tokens; we do not). The LM runs in eval mode (no dropout) with every parameter's ``requires_grad``
    off (restored afterwards); after the first backward a RuntimeError is raised if any LM parameter holds
    a gradient. Mini-batches are drawn without replacement (reshuffled each epoch) from a generator seeded
    with ``seed``; the steer's parameters move to the model's device.

    Args:
        model: lmsci GPT, HFModel or ``transformers`` causal LM.
        steer: any :class:`Steer` (LMSteer, LogitOffset, ActAdd).
        data: ``N`` texts (with ``tokenizer``) or token sequences (see :func:`as_token_lists`); each cut to
            ``max_length`` (and to an lmsci GPT's ``seq_len``).
        values: per-example steer values ``[N, K]``.
        lr, steps, batch_size, l2, grad_clip: optimiser settings (paper: Adam lr 1e-2, 1000 steps, batch 32).
        on_step: called as ``on_step(step, loss)`` after every step.
        loss_fn: a pluggable forward: ``loss_fn(idx, values) -> scalar tensor``, the loss (without L2) of the
            examples ``idx`` (a list of indices into ``data``) at their steer values ``values [B, K]`` (on the
            model's device). Then ``data`` is any sized collection of ``N`` examples (only ``len(data)`` is read;
            every example is kept), ``loss_fn`` computes the steered loss itself (e.g. from cached hidden states,
            :func:`lmsci.methods.lm_steer_cached.train_steer_cached`), the steer is not attached to the model and
            ``max_length``, ``pad_id``, ``tokenizer`` are unused; the batches, Adam, L2, divergence check, frozen
            LM and history are the same. None (default): the steered model's mean NLL of the padded texts.

    Returns:
        ``steer`` (trained in place); ``steer.history`` gets the per-step losses (nats/token).

    Raises:
        ConfigError: ``values`` not ``[N, K]``; no text of two or more tokens (shorter ones are dropped; with
            ``loss_fn``: no example); non-positive ``steps``/``batch_size``/``lr``.
        DivergedError: a non-finite loss.
    """
    m = as_steerable(model)
    if loss_fn is None:
        seqs, values = _intervention_data(m, steer, data, values, tokenizer, max_length, steps, batch_size, lr)
        n, batch_loss = len(seqs), _lm_loss(m, steer, seqs, pad_id)
    else:
        (n, values), batch_loss = _loss_fn_data(steer, data, values, steps, batch_size, lr), loss_fn
    steer.to(device_of(m))
    t0 = time.perf_counter()
    with _frozen_lm(m, steer):
        handle = steer.attach(m) if loss_fn is None else None
        try:
            _steer_steps(m, steer, n, values, batch_loss, lr=lr, steps=steps, batch_size=batch_size, l2=l2,
                         seed=seed, grad_clip=grad_clip, on_step=on_step)
        finally:
            if handle is not None:
                handle.remove()
            steer.set_values(None)
    steer.train_seconds = time.perf_counter() - t0
    return steer


__all__ = ["train_intervention"]
