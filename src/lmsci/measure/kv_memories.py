"""MLP layers as key-value memories (Geva et al., EMNLP 2021, arXiv 2012.14913).

A transformer MLP ``FF(x) = f(x K^T) V`` is read as ``d_mlp`` memories: neuron ``i``'s *key* is row ``i`` of
the first matrix (its activation ``m_i = f(x . k_i)`` is the memory coefficient, hook ``blocks.{l}.mlp.post``)
and its *value* ``v_i`` is row ``i`` of ``V`` (column ``i`` of the down projection, ``[d_model]``), which the
MLP adds to the residual stream scaled by ``m_i``.

* **Keys** (Sec. 3): the *trigger examples* of neuron ``i`` are the prefixes of a corpus whose last token gives
  the largest ``m_i``; :func:`key_value_memories` keeps the top ``k`` per neuron, over every position of the
  corpus windows given, with the token that follows each prefix.
* **Values** (Sec. 4): ``p_i = softmax(v_i E)`` with ``E`` the output embedding (the LM head's weight,
  ``[vocab, d_model]``); as the paper, values are projected *without* the final norm (``norm="none"``;
  ``norm="gain"`` multiplies by the final norm's elementwise weight first, which changes the ranking only
  through that weight: the mean-centring and scale of LayerNorm/RMSNorm depend on the whole residual, not
  on one value).
* **Agreement** (Sec. 4, Fig. 4): the fraction of a layer's neurons whose value's top token equals the next
  token of the neuron's top-1 trigger example. The paper (16-layer LM on WikiText-103, vocabulary ~267k):
  close to 0 in layers 1-10, rising from layer 11 to ~3.5% in the upper layers, against 0.0004% for a
  random token. Here the chance level is the **shuffled-neuron baseline**: neuron ``i``'s value paired with
  neuron ``j != i``'s key (same layer), averaged exactly over all ``n (n - 1)`` pairs
  (:meth:`KVMemories.shuffled_agreement`), which keeps the token frequencies of both sides.
* **Rank** (Fig. 5): the rank of the top-1 trigger example's next token in the value's distribution (0 = top).

Works on lmsci :class:`~lmsci.models.gpt.GPT` and on Hugging Face models (:class:`~lmsci.models.hf.HFModel`)
through the hook names ``blocks.{l}.mlp.post`` and the architecture map (:func:`lmsci.models.arch.arch_of`:
``mlp_values``, ``lm_head``, ``final_norm``), on the model's device, in batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.models.arch import arch_of

NORMS = ("none", "gain")


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def check_layers(model: Any, layers: Sequence[int] | None) -> list[int]:
    """The layer indices (all when None), each checked against the model's depth.

    Raises:
        ConfigError: field ``layer``: an index outside ``[0, n_layers - 1]`` (names the range).
    """
    n = arch_of(model).n_layers
    out = list(range(n)) if layers is None else [int(x) for x in layers]
    for i in out:
        if not 0 <= i < n:
            raise ConfigError("layer", i, f"an integer in [0, {n - 1}] (the model has {n} layers)")
    return out


def value_logits(model: Any, layer: int, *, norm: str = "none", neurons: Tensor | None = None) -> Tensor:
    """Each neuron's value projected onto the vocabulary, ``v_i E``: ``[n_neurons, vocab_size]`` (float32).

    Args:
        layer: the MLP layer. neurons: a subset of neuron indices (default all ``d_mlp``).
        norm: ``"none"`` (the paper: ``v_i E``) or ``"gain"`` (``(v_i * g) E`` with ``g`` the final norm's weight).

    Raises:
        ConfigError: a bad layer, norm or neuron index (names the valid range).
    """
    if norm not in NORMS:
        raise ConfigError("norm", norm, " or ".join(NORMS))
    check_layers(model, [layer])
    arch = arch_of(model)
    with torch.no_grad():
        vals = arch.mlp_values(layer).detach().float()
        if neurons is not None:
            neurons = torch.as_tensor(neurons, dtype=torch.long, device=vals.device)
            if len(neurons) and (int(neurons.min()) < 0 or int(neurons.max()) >= vals.shape[0]):
                raise ConfigError("neuron", [int(neurons.min()), int(neurons.max())],
                                  f"indices in [0, {vals.shape[0] - 1}] (d_mlp = {vals.shape[0]})")
            vals = vals[neurons]
        if norm == "gain":
            g = getattr(arch.final_norm(), "weight", None)
            if g is not None:
                vals = vals * g.detach().float()
        return vals @ arch.lm_head().weight.detach().float().T


@dataclass
class KVMemories:
    """Keys, values and their agreement for the MLP layers measured.

    Attributes:
        layers: the layer indices, in order (``L`` of them).
        key_acts: ``[L, d_mlp, k]`` the top ``k`` activations of each neuron over the corpus, descending.
        key_where: ``[L, d_mlp, k, 2]`` (window, position) of the last token of each trigger prefix.
        key_next: ``[L, d_mlp, k]`` the token following each trigger prefix.
        value_top: ``[L, d_mlp, n_top]`` the tokens each value promotes most (descending ``v_i E``).
        next_rank: ``[L, d_mlp]`` rank (0 = top) of the top-1 trigger's next token in ``v_i E``.
        n_positions: corpus positions searched.
    """

    layers: list[int]
    key_acts: Tensor
    key_where: Tensor
    key_next: Tensor
    value_top: Tensor
    next_rank: Tensor
    n_positions: int

    def agreement(self) -> Tensor:
        """``[L]``: fraction of neurons whose value's top token is the next token of their top-1 trigger."""
        return (self.value_top[:, :, 0] == self.key_next[:, :, 0]).float().mean(1)

    def shuffled_agreement(self) -> Tensor:
        """``[L]``: the same agreement with neuron ``i``'s value paired with neuron ``j``'s key, ``j != i`` of the
        same layer, averaged over all ``n (n - 1)`` ordered pairs (exact, no sampling):
        ``(sum_t c_v(t) c_k(t) - #{i: v_i = k_i}) / (n (n - 1))`` with ``c_v(t)`` the number of values whose top
        token is ``t`` and ``c_k(t)`` the number of keys whose top-1 trigger is followed by ``t``."""
        out = []
        for v, k in zip(self.value_top[:, :, 0], self.key_next[:, :, 0]):
            n = v.numel()
            size = int(max(int(v.max()), int(k.max())) + 1)
            cv, ck = torch.bincount(v, minlength=size), torch.bincount(k, minlength=size)
            same = int((v == k).sum())
            out.append((float((cv * ck).sum()) - same) / max(1, n * (n - 1)))
        return torch.tensor(out)

    def summary(self) -> list[dict[str, Any]]:
        """One dict per layer: ``layer``, ``agreement``, ``shuffled``, ``median_rank``, ``d_mlp``."""
        a, s = self.agreement(), self.shuffled_agreement()
        return [{"layer": l, "agreement": float(a[j]), "shuffled": float(s[j]),
                 "median_rank": float(self.next_rank[j].float().median()), "d_mlp": int(self.key_acts.shape[1])}
                for j, l in enumerate(self.layers)]


def key_value_memories(model: Any, inputs: Tensor, next_tokens: Tensor, *, layers: Sequence[int] | None = None,
                       k: int = 1, n_top: int = 5, norm: str = "none", batch_size: int = 32,
                       neuron_chunk: int = 1024) -> KVMemories:
    """Find every neuron's top trigger prefixes in a corpus and its value's top tokens (Geva et al. Secs. 3-4).

    Args:
        model: an lmsci GPT or an :class:`~lmsci.models.hf.HFModel` (hook ``blocks.{l}.mlp.post``).
        inputs: ``[N, T]`` token windows (long). next_tokens: ``[N, T]`` the token after each position
            (``inputs[:, 1:]`` shifted, or a training target); negative where a position is not a prefix to
            consider (padding, the end of a window without a successor).
        layers: which MLP layers (default all). k: trigger prefixes kept per neuron. n_top: value tokens kept.
        norm: see :func:`value_logits`. batch_size: windows per forward pass.
        neuron_chunk: neurons projected onto the vocabulary at a time (memory ``neuron_chunk x vocab_size``).

    Returns:
        :class:`KVMemories`.

    Raises:
        ConfigError: mismatched shapes, ``k`` larger than the positions available, a bad layer or norm.
    """
    if inputs.shape != next_tokens.shape or inputs.dim() != 2:
        raise ConfigError("next_tokens", tuple(next_tokens.shape), f"the shape of inputs {tuple(inputs.shape)} ([N, T])")
    layers = check_layers(model, layers)
    if norm not in NORMS:
        raise ConfigError("norm", norm, " or ".join(NORMS))
    valid = int((next_tokens >= 0).sum())
    if not 1 <= k <= valid:
        raise ConfigError("k", k, f"an integer in [1, {valid}] (the valid positions of the corpus)")
    dev = _device(model)
    names = [f"blocks.{l}.mlp.post" for l in layers]
    T = inputs.shape[1]
    best_a: list[Tensor | None] = [None] * len(layers)
    best_i: list[Tensor | None] = [None] * len(layers)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for s in range(0, inputs.shape[0], batch_size):
                x = inputs[s:s + batch_size].to(dev)
                nxt = next_tokens[s:s + batch_size].to(dev)
                with model.hooks(cache=names) as cache:
                    model(x)
                flat_idx = (torch.arange(s, s + x.shape[0], device=dev)[:, None] * T
                            + torch.arange(T, device=dev)[None, :]).reshape(-1)
                ok = (nxt >= 0).reshape(-1)
                for j, name in enumerate(names):
                    a = cache[name].float().reshape(-1, cache[name].shape[-1])  # [B*T, d_mlp]
                    a = a.masked_fill(~ok[:, None], float("-inf"))
                    idx = flat_idx[:, None].expand_as(a)
                    if best_a[j] is not None:
                        a, idx = torch.cat([best_a[j], a]), torch.cat([best_i[j], idx])
                    kk = min(k, a.shape[0])
                    top, where = torch.topk(a, kk, dim=0)
                    best_a[j], best_i[j] = top, torch.gather(idx, 0, where)
    finally:
        model.train(was_training)
    flat_next = next_tokens.reshape(-1).to(dev)
    acts, where_, nexts, vtop, ranks = [], [], [], [], []
    for j, l in enumerate(layers):
        a, i = best_a[j].T.contiguous(), best_i[j].T.contiguous()  # [d_mlp, k]
        w = flat_next[i]
        acts.append(a)
        where_.append(torch.stack([i // T, i % T], dim=-1))
        nexts.append(w)
        d = a.shape[0]
        tops, rk = [], []
        for c in range(0, d, neuron_chunk):
            lg = value_logits(model, l, norm=norm, neurons=torch.arange(c, min(d, c + neuron_chunk)))
            tops.append(torch.topk(lg, min(n_top, lg.shape[1]), dim=1).indices)
            tgt = lg.gather(1, w[c:c + neuron_chunk, :1])
            rk.append((lg > tgt).sum(1))
        vtop.append(torch.cat(tops))
        ranks.append(torch.cat(rk))
    return KVMemories(layers, torch.stack(acts).cpu(), torch.stack(where_).cpu(), torch.stack(nexts).cpu(),
                      torch.stack(vtop).cpu(), torch.stack(ranks).cpu(), valid)


def next_token_targets(inputs: Tensor, pad_id: int | None = None) -> Tensor:
    """``[N, T]`` next tokens of contiguous windows: ``inputs[:, t + 1]``, -1 at the last position (no successor)
    and where either token is ``pad_id``."""
    nxt = torch.full_like(inputs, -1)
    nxt[:, :-1] = inputs[:, 1:]
    if pad_id is not None:
        nxt[(inputs == pad_id) | (nxt == pad_id)] = -1
    return nxt


__all__ = ["KVMemories", "key_value_memories", "value_logits", "next_token_targets", "check_layers", "NORMS"]
