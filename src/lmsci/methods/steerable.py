"""The model side of the steering harness: a steerable causal LM, its token batches and its next-token NLL.

Split from :mod:`lmsci.methods.steering` (the steers, which attach at the sites these adapters locate) so that the
steers, their training (:mod:`lmsci.methods.steer_training`) and the interventions built on them (LM-Steer, Han et
al. 2024, arXiv 2305.12798, :mod:`lmsci.methods.lm_steer`; representation reading, :mod:`lmsci.methods.rep_reading`)
share one view of a model:

* model adapters: :func:`as_steerable` (an lmsci :class:`~lmsci.models.gpt.GPT`, an
  :class:`~lmsci.models.hf.HFModel`, or a raw ``transformers`` causal LM, wrapped), :func:`lm_head` (the
  unembedding, weight ``[V, d]``), :func:`hidden_size` ``d``, :func:`vocab_size` ``V``, :func:`output_embeddings`
  ``E [V, d]``, :func:`n_layers`, :func:`logits_of` ``-> [B, T, V]``;
* data: :func:`as_token_lists` (texts or token sequences -> id lists), :func:`pad_batch` (right padding ->
  ``ids, mask [B, T]``), :func:`masked_nll` ``-> [B, T-1]`` (nats), :func:`mean_nll` (the LM-Steer training loss,
  arXiv 2305.12798 Sec. 3: mean NLL over the real targets, nats/token), :func:`unembed_inputs` ``-> [N, d]`` (the
  final hidden states at the real positions).

Shapes: ``B`` batch, ``T`` sequence, ``V`` vocabulary, ``d`` = ``d_model``, ``N`` real (non-padding) tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmsci.errors import ConfigError
from lmsci.models.device import device_of
from lmsci.models.gpt import GPT
from lmsci.models.hf import HFModel


# ------------------------------------------------------------------------------------ models


def as_steerable(model: Any) -> GPT | HFModel:
    """``model`` as an lmsci :class:`GPT` or :class:`HFModel` (a raw ``transformers`` model is wrapped).

    Raises:
        ConfigError: field ``model`` for anything else, or for a Hugging Face model without an output
            embedding (``get_output_embeddings()`` is None or not a linear layer: a base model without
            ``lm_head``).
    """
    if isinstance(model, GPT):
        return model
    if not isinstance(model, HFModel):
        if isinstance(model, nn.Module) and hasattr(model, "get_output_embeddings") and hasattr(model, "config"):
            model = HFModel(model, None, type(model).__name__)
        else:
            raise ConfigError("model", type(model).__name__,
                              "an lmsci GPT, an lmsci HFModel or a transformers causal LM with an lm_head")
    head = model.model.get_output_embeddings() if hasattr(model.model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if not isinstance(head, nn.Module) or not isinstance(weight, Tensor) or weight.dim() != 2:
        raise ConfigError("model", f"{type(model.model).__name__} (output embeddings: {type(head).__name__})",
                          "a causal LM with an lm_head (a linear output embedding, weight [vocab, d]), e.g. "
                          "LlamaForCausalLM; not a base model such as LlamaModel")
    return model


def lm_head(model: GPT | HFModel) -> nn.Module:
    """The unembedding module (``lm_head``; GPT-NeoX ``embed_out``), weight ``[V, d]``."""
    model = as_steerable(model)
    return model.lm_head if isinstance(model, GPT) else model.model.get_output_embeddings()


def hidden_size(model: Any) -> int:
    """``d``: the width of the input of the unembedding."""
    return int(lm_head(model).weight.shape[1])


def vocab_size(model: Any) -> int:
    """``V``: the number of logits (rows of the unembedding)."""
    return int(lm_head(model).weight.shape[0])


def output_embeddings(model: Any) -> Tensor:
    """The output word embeddings ``E [V, d]`` (the ``lm_head`` weight; tied models share it with the input
    embedding), detached."""
    return lm_head(model).weight.detach()


def n_layers(model: Any) -> int:
    """Number of transformer blocks (lmsci GPT: ``cfg.n_layers``; Hugging Face: the architecture map)."""
    model = as_steerable(model)
    if isinstance(model, GPT):
        return model.cfg.n_layers
    from lmsci.models.arch import arch_of

    return arch_of(model).n_layers


def logits_of(model: GPT | HFModel, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """Forward pass: ``input_ids [B, T]`` (+ ``attention_mask [B, T]`` for Hugging Face models; lmsci GPTs are
    causal and right padding never reaches an earlier position) -> logits ``[B, T, V]``."""
    if isinstance(model, GPT):
        return model(input_ids)
    return model.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


# ------------------------------------------------------------------------------------ data


def as_token_lists(data: Any, tokenizer: Any = None, max_length: int | None = None) -> list[list[int]]:
    """Texts or token sequences -> a list of token-id lists (each cut to ``max_length``).

    ``data``: a ``[N, T]`` long tensor, a list of id lists / 1-D tensors, or a list of strings with
    ``tokenizer`` (anything with ``encode(text) -> list[int]``, e.g. lmsci's BPETokenizer, or a Hugging Face
    tokenizer). Raises ConfigError: strings without a tokenizer.
    """
    if isinstance(data, Tensor):
        data = data.tolist() if data.dim() == 2 else [data.tolist()]
    out = []
    for x in data:
        if isinstance(x, str):
            if tokenizer is None:
                raise ConfigError("tokenizer", None, "a tokenizer with encode(text) when the data are strings")
            ids = tokenizer.encode(x)
            ids = list(getattr(ids, "ids", ids))
        else:
            ids = x.tolist() if isinstance(x, Tensor) else list(x)
        out.append([int(i) for i in ids][:max_length] if max_length else [int(i) for i in ids])
    return out


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int = 0, device: str | torch.device | None = None) -> tuple[Tensor, Tensor]:
    """Right-pad token lists to ``ids [B, T]`` (long) and ``mask [B, T]`` (long, 1 = real token)."""
    T = max(1, max(len(s) for s in seqs))
    ids = torch.full((len(seqs), T), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids.to(device), mask.to(device)


def masked_nll(logits: Tensor, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Next-token NLL per target position ``[B, T-1]`` (nats; 0 where the target is padding) and the target
    mask ``[B, T-1]``: position t scores ``ids[:, t+1]`` from ``logits[:, t]``."""
    tgt = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
    nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), tgt, ignore_index=-100, reduction="none")
    return nll, mask[:, 1:].to(nll.dtype)


def mean_nll(model: Any, input_ids: Tensor, attention_mask: Tensor, fused: bool = True) -> Tensor:
    """Mean next-token NLL (nats/token) over the real targets of ``input_ids [B, T]`` with ``attention_mask
    [B, T]``, with whatever steer is attached. On an lmsci GPT, unless a steer acts on the logits, the fused
    chunked head (``GPT.sum_nll``; hook point ``final`` fires there) avoids materialising ``[B, T, V]`` logits;
    ``fused=False`` forces the plain path (equal to float rounding)."""
    m = as_steerable(model)
    tgt = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
    n = (tgt != -100).sum().clamp(min=1)
    logit_hooks = bool(lm_head(m)._forward_hooks) if isinstance(m, GPT) else True
    if fused and isinstance(m, GPT) and not logit_hooks:
        return m.sum_nll(input_ids[:, :-1], tgt) / n
    nll, _ = masked_nll(logits_of(m, input_ids, attention_mask), input_ids, attention_mask)
    return nll.sum() / n


@torch.no_grad()
def unembed_inputs(model: Any, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """The inputs of the unembedding (final hidden states) at the real positions: ``[N, d]`` with ``N`` the number
    of non-padding tokens of ``input_ids [B, T]`` (e.g. the ``contexts`` of the SVD probe)."""
    m = as_steerable(model)
    ids = input_ids.to(device_of(m))
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask.to(ids.device)
    store: list[Tensor] = []

    def grab(module: nn.Module, args: tuple) -> None:
        store.append(args[0].detach())

    h = lm_head(m).register_forward_pre_hook(grab)
    try:
        logits_of(m, ids, mask)
    finally:
        h.remove()
    return store[-1].reshape(ids.shape[0], ids.shape[1], -1)[mask.bool()]


__all__ = ["as_steerable", "lm_head", "hidden_size", "vocab_size", "output_embeddings", "n_layers", "logits_of",
           "as_token_lists", "pad_batch", "masked_nll", "mean_nll", "unembed_inputs"]
