"""LM-Steer training from cached final hidden states: the same objective as :func:`lmsci.methods.lm_steer.train_steer`
without running the frozen LM at every step.

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798, Sec. 3.3
(the steer ``e_v <- (I + eps W) e_v``) and App. D (training: next-token cross-entropy, LM frozen, Adam).

Why it is exact. LM-Steer changes only the unembedding: a position's logits are ``lm_head(h + eps h W(s))`` with
``h [d]`` the input of ``lm_head`` (:mod:`lmsci.methods.lm_steer`). In teacher-forced training every ``h`` is a
function of the text's tokens alone (the steer never reaches the blocks), so the ``[N, T, d]`` hidden states of
the training texts can be computed once (:func:`final_hidden_states`, one forward pass without gradients) and each
Adam step needs only ``lm_head`` on the steered cached states. :func:`train_steer_cached` runs
:func:`lmsci.methods.steer_training.train_intervention`'s own loop with this forward plugged in (its ``loss_fn``): the
same :class:`LMSteer` initialisation (``seed``), the same mini-batches (a ``torch.Generator`` seeded with ``seed``,
drawn without replacement and reshuffled per epoch), the loss = mean NLL over the real (non-padding) targets plus
``l2 * ||params||^2``, Adam; so the two give the same steer to float rounding (tested on a tied tiny Llama). A
real-model step then costs one ``[B T, d] x [d, V]`` product and its gradient instead of a forward and backward
pass through every block (about 5x less for SmolLM2-135M, whose 28M-parameter unembedding is a fifth of its FLOPs).

It holds for causal LMs whose logits are ``lm_head(h)`` (Llama, GPT-2, GPT-NeoX, ...); a model that transforms the
logits after ``lm_head`` (e.g. Gemma-2's soft-capping) would differ: :func:`check_cache` compares the cached path's
logits with the model's own on a few texts and refuses a mismatch.

Shapes: ``N`` texts, ``T`` the longest (after ``max_length``), ``d`` the unembedding width, ``V`` the vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.methods.lm_steer import EPSILON0, LMSteer
from lmsci.methods.steer_training import train_intervention
from lmsci.methods.steerable import (as_steerable, as_token_lists, hidden_size, lm_head, logits_of, masked_nll,
                                     pad_batch)
from lmsci.models.device import device_of


@dataclass
class HiddenCache:
    """The final hidden states of ``N`` texts (:func:`final_hidden_states`).

    Attributes:
        h: ``[N, T, d]`` float32, the input of ``lm_head`` at every position (0 at padding).
        ids: ``[N, T]`` long, right-padded token ids. mask: ``[N, T]`` long, 1 = a real token.
    """

    h: Tensor
    ids: Tensor
    mask: Tensor

    def __len__(self) -> int:
        return int(self.ids.shape[0])


@torch.no_grad()
def final_hidden_states(model: Any, data: Any, *, tokenizer: Any = None, max_length: int = 256, pad_id: int = 0,
                        batch_size: int = 32) -> HiddenCache:
    """Run the frozen ``model`` once over ``data`` and keep the input of ``lm_head`` at every position.

    Args:
        model: lmsci GPT, HFModel or ``transformers`` causal LM.
        data: ``N`` texts (with ``tokenizer``) or token sequences; each cut to ``max_length`` tokens. Texts of one
            token are kept (they have no target and add nothing to the loss).
        batch_size: texts per forward pass (texts sorted by length, each batch padded to its longest).

    Returns:
        :class:`HiddenCache` on the model's device (``h [N, T, d]`` float32).

    Raises:
        ConfigError: no text; ``batch_size`` below 1; a model without ``lm_head``.
    """
    m = as_steerable(model)
    seqs = as_token_lists(data, tokenizer, max_length)
    if not seqs or max(len(s) for s in seqs) < 1:
        raise ConfigError("data", len(seqs), "at least one non-empty text")
    if int(batch_size) < 1:
        raise ConfigError("batch_size", batch_size, ">= 1")
    dev = device_of(m)
    ids, mask = pad_batch(seqs, pad_id, dev)
    d = hidden_size(m)
    h = torch.zeros(ids.shape[0], ids.shape[1], d, device=dev)
    store: list[Tensor] = []
    hook = lm_head(m).register_forward_pre_hook(lambda mod, args: store.append(args[0].detach()))
    was = m.training
    m.eval()
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))  # batches of similar length: little padding
    try:
        for i in range(0, len(seqs), batch_size):
            store.clear()
            rows = torch.tensor(order[i:i + batch_size], device=dev)
            T = max(1, max(len(seqs[j]) for j in order[i:i + batch_size]))
            b_ids, b_mask = ids[rows, :T], mask[rows, :T]
            logits_of(m, b_ids, b_mask)
            h[rows, :T] = store[-1].reshape(b_ids.shape[0], T, d).float()
    finally:
        hook.remove()
        m.train(was)
    return HiddenCache(h * mask[..., None], ids, mask)


def _head_logits(head: torch.nn.Module, h: Tensor) -> Tensor:
    """``lm_head(h)`` with the head's parameters detached (they are frozen): ``[..., V]`` float32."""
    bias = getattr(head, "bias", None)
    return F.linear(h, head.weight.detach().float(), None if bias is None else bias.detach().float())


@torch.no_grad()
def check_cache(model: Any, cache: HiddenCache, n: int = 4, atol: float = 1e-3) -> float:
    """The largest absolute difference between the model's logits and ``lm_head(cached h)`` on the first ``n``
    texts (at real positions); raises when it exceeds ``atol`` times the logits' scale (max |logit|, at least 1).

    Raises:
        ConfigError: field ``model``: the logits are not ``lm_head`` of the cached states (a model that
            transforms its logits after ``lm_head``), so cached training would not be exact.
    """
    m = as_steerable(model)
    k = min(int(n), len(cache))
    ids, mask = cache.ids[:k], cache.mask[:k]
    ref = logits_of(m, ids, mask).float()
    got = _head_logits(lm_head(m), cache.h[:k])
    sel = mask.bool()
    diff = float((ref[sel] - got[sel]).abs().max())
    scale = max(1.0, float(ref[sel].abs().max()))
    if diff > atol * scale:
        raise ConfigError("model", type(getattr(m, "model", m)).__name__,
                          f"a causal LM whose logits are lm_head(final hidden state) (cached steer training would "
                          f"differ from the model: max |logit difference| {diff:.3g})")
    return diff


def train_steer_cached(
    model: Any,
    cache: HiddenCache,
    labels: Any,
    *,
    names: Sequence[str] = ("attr",),
    rank: int | None = None,
    epsilon: float = EPSILON0,
    init_std: float = 1e-2,
    dummy: bool = True,
    lr: float = 1e-2,
    steps: int = 1000,
    batch_size: int = 32,
    l2: float = 0.0,
    seed: int = 0,
) -> LMSteer:
    """Train an :class:`LMSteer` on cached hidden states: :func:`lmsci.methods.lm_steer.train_steer`'s objective
    and loop (:func:`lmsci.methods.steer_training.train_intervention` with ``lm_head`` on the steered cached states as its
    ``loss_fn``; module docstring), the LM frozen and not run.

    Args:
        model: the model ``cache`` was computed on (only its ``lm_head`` is used).
        cache: :func:`final_hidden_states` of the ``N`` training texts.
        labels: ``[N]``, the value of the first attribute steer per text (+1 / -1 in the paper), every dummy at 1.
        names, rank, epsilon, init_std, dummy, seed: as :func:`train_steer` (``seed``: initialisation and batches).
        lr, steps, batch_size, l2: Adam learning rate, steps, texts per step, L2 on the steer's parameters.

    Returns:
        The trained steer (eval mode); ``.history``: the loss per step (nats/token); ``.train_seconds``.

    Raises:
        ConfigError: ``labels`` not ``[N]``; non-positive ``steps`` / ``batch_size`` / ``lr``; no text with a
            target. DivergedError: a non-finite loss.
    """
    m = as_steerable(model)
    n = len(cache)
    y = torch.as_tensor(labels, dtype=torch.float32)
    if y.dim() != 1 or y.shape[0] != n:
        raise ConfigError("labels", tuple(y.shape), f"[N] with N={n} cached texts")
    keep = torch.nonzero(cache.mask.sum(1) >= 2).flatten().cpu()  # as train_intervention: texts with a target
    if not len(keep):
        raise ConfigError("data", n, "at least one text of two or more tokens")
    steer = LMSteer(hidden_size(m), names, rank=rank, epsilon=epsilon, init_std=init_std, dummy=dummy, seed=seed,
                    device=device_of(m))
    vals = steer.values(batch=n).cpu()
    vals[:, steer.index(steer.attributes[0])] = y
    kept = HiddenCache(*(t[keep.to(t.device)] for t in (cache.h, cache.ids, cache.mask)))
    head = lm_head(m)

    def loss_fn(idx: list[int], values: Tensor) -> Tensor:
        """Mean NLL over the real targets of the kept texts ``idx``: ``lm_head`` on their steered cached states."""
        bi = torch.tensor(idx, device=kept.ids.device)
        b_mask = kept.mask[bi]
        T = int(b_mask.sum(1).max())
        logits = _head_logits(head, steer.shift(kept.h[bi, :T], values))
        nll, tmask = masked_nll(logits, kept.ids[bi, :T], b_mask[:, :T])
        return nll.sum() / tmask.sum().clamp(min=1)

    return train_intervention(m, steer, kept, vals[keep], lr=lr, steps=steps, batch_size=batch_size, l2=l2,
                              seed=seed, loss_fn=loss_fn)


@torch.no_grad()
def cached_loss(model: Any, cache: HiddenCache, steer: LMSteer | None, labels: Any, batch_size: int = 64) -> float:
    """Mean NLL (nats/token) over every real target of ``cache`` with ``steer`` at the per-text attribute values
    ``labels [N]`` (dummies at 1); ``steer=None``: the unsteered model. The training objective without L2."""
    m = as_steerable(model)
    head = lm_head(m)
    y = torch.as_tensor(labels, dtype=torch.float32)
    total, count = 0.0, 0.0
    for i in range(0, len(cache), batch_size):
        h, ids, mask = cache.h[i:i + batch_size], cache.ids[i:i + batch_size], cache.mask[i:i + batch_size]
        if steer is not None:
            v = steer.values(batch=h.shape[0])
            v[:, steer.index(steer.attributes[0])] = y[i:i + batch_size].to(v.device)
            h = steer.shift(h, v)
        nll, tmask = masked_nll(_head_logits(head, h), ids, mask)
        total += float(nll.sum())
        count += float(tmask.sum())
    return total / max(count, 1.0)


__all__ = ["HiddenCache", "final_hidden_states", "check_cache", "train_steer_cached", "cached_loss"]
