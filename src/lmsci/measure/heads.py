"""Per-head instruments: attention patterns, argmax matching accuracy, prefix-matching and copying scores,
and the effect of mean-ablating one head on the per-token loss.

Sources:

* prefix-matching score: Olsson et al. 2022, "In-context Learning and Induction Heads", arXiv 2209.11895,
  sec. "Key concepts / Definitions" (on repeated sequences of random tokens, the attention a head pays from a
  token to the token that *followed* the previous occurrence of that token);
* copying score: Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits", sec. "Copying / OV
  circuit eigenvalues" (the direct-path OV circuit ``W_E W_V^h W_O^h W_U`` is a copying matrix when its
  eigenvalues are mostly positive; summary ``sum(lambda) / sum(|lambda|)`` in ``[-1, 1]``), the score Olsson et
  al. use for copying in their small attention-only models;
* argmax matching accuracy (bracket heads): Ebrahimi et al. 2020, "How Can Self-Attention Networks Recognize
  Dyck-n Languages?", arXiv 2010.04303 (heads attending to the matching bracket), issue 34 part 1;
* mean-ablation: Wang et al. 2022, "Interpretability in the Wild", arXiv 2211.00593, sec. 3 (replace a head's
  output by its mean over a reference distribution).

Instruments take the model and tokens as arguments. The model is a ``lmsci.models.gpt.GPT`` (or anything with
its hook names ``blocks.{i}.attn.pattern [B, n_heads, q, k]`` and ``blocks.{i}.attn.z [B, T, n_heads, d_head]``
and a ``hooks`` context manager); :func:`gpt_head_weights` reads the GPT weight layout.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lmsci.errors import ConfigError


@torch.no_grad()
def attention_patterns(model, tokens: Tensor) -> Tensor:
    """All layers' attention patterns for ``tokens [B, T]``: ``[n_layers, B, n_heads, T, T]`` (float32, on the
    model's device; rows are queries, columns keys, each row sums to 1), read from the hook points
    ``blocks.{i}.attn.pattern`` of an lmsci GPT. For a Hugging Face model use ``HFModel.attention_patterns`` (a list
    of ``[B, n_heads, T, T]``; ``torch.stack`` it). Source of the analyses that use it: Olsson et al. 2022, arXiv
    2209.11895; Elhage et al. 2021.

    Raises:
        UnknownNameError: the model has no ``blocks.*.attn.pattern`` hook points."""
    n_layers = len(model.blocks)
    with model.hooks(cache="blocks.*.attn.pattern") as cache:
        model(tokens)
    return torch.stack([cache[f"blocks.{i}.attn.pattern"].float() for i in range(n_layers)])


def argmax_match_accuracy(patterns: Tensor, query_mask: Tensor, target: Tensor) -> Tensor:
    """Per head, the share of queries whose most-attended key is the target position.

    Args:
        patterns: ``[n_layers, B, n_heads, T, T]``.
        query_mask: ``[B, T]`` bool: which query positions count.
        target: ``[B, T]`` long: the expected key position per query (only read where ``query_mask``).

    Returns:
        ``[n_layers, n_heads]`` accuracies in [0, 1] (NaN when no query counts).
    """
    am = patterns.argmax(-1)  # [L, B, H, T]
    hit = (am == target.to(am.device)[None, :, None, :]) & query_mask.to(am.device)[None, :, None, :]
    n = query_mask.sum()
    return (hit.sum(dim=(1, 3)).float() / n.clamp(min=1)).masked_fill(n == 0, float("nan"))


def rule_match_accuracy(pred_key: np.ndarray, query_mask: np.ndarray, target: np.ndarray) -> float:
    """The same accuracy for a rule that names one key per query (``pred_key [B, T]``), e.g. "the most recent
    opening bracket": the share of counted queries where ``pred_key == target``."""
    m = query_mask.astype(bool)
    return float((pred_key[m] == target[m]).mean()) if m.any() else float("nan")


def prefix_matching_scores(patterns: Tensor, target: Tensor) -> Tensor:
    """Olsson et al.'s prefix-matching score per head: the mean attention weight on the induction target.

    Args:
        patterns: ``[n_layers, B, n_heads, T, T]`` on sequences of repeated random tokens.
        target: ``[T]`` or ``[B, T]`` long: for each query the key right after the previous occurrence of the
            query's token; -1 where there is none (not counted).

    Returns:
        ``[n_layers, n_heads]`` scores in [0, 1].

    Raises:
        ConfigError: no query position has a target.
    """
    L, B, H, T, _ = patterns.shape
    tgt = target.to(patterns.device).long()
    if tgt.dim() == 1:
        tgt = tgt.expand(B, T)
    ok = tgt >= 0
    if not bool(ok.any()):
        raise ConfigError("target", "all -1", "at least one query position with an induction target")
    w = patterns.gather(-1, tgt.clamp(min=0)[None, :, None, :, None].expand(L, B, H, T, 1)).squeeze(-1)
    return (w * ok[None, :, None, :]).sum(dim=(1, 3)) / ok.sum()


def gpt_head_weights(model, layer: int) -> dict[str, Tensor]:
    """The per-head value/output weights of an lmsci GPT layer and its embedding/unembedding, in row-vector
    convention (``x @ W``): ``W_E [vocab, d_model]``, ``W_V [n_heads, d_model, d_head]``,
    ``W_O [n_heads, d_head, d_model]``, ``W_U [d_model, vocab]``.

    Norms are folded as TransformerLens's ``fold_ln`` does (Nanda & Bloom, TransformerLens): the gain of the
    layer's ``ln1`` into ``W_V``, the final norm's gain into ``W_U``, and for LayerNorm the mean-centring
    (``x -> x - mean(x)``) of ``ln1``'s input into ``W_E`` and of the final norm's input into ``W_O``; the per-token rescaling (a positive scalar) is dropped, so the
    circuit is exact for ``norm="none"`` and exact up to a positive per-token factor otherwise."""
    attn = model.blocks[layer].attn
    H, D = attn.n_heads, attn.d_head
    inner = H * D
    w = attn.qkv.weight  # [3*inner, d_model] (or [inner, d_model] for value-only variants)
    W_V = w[-inner:].view(H, D, -1).transpose(1, 2)  # [H, d_model, D]
    W_O = attn.proj.weight.T.reshape(H, D, -1)  # [H, D, d_model]
    W_E, W_U = model.wte.weight, model.lm_head.weight.T
    ln1, lnf = model.blocks[layer].ln1, model.ln_f
    if getattr(ln1, "weight", None) is not None:
        W_V = ln1.weight[None, :, None] * W_V
    if getattr(lnf, "weight", None) is not None:
        W_U = lnf.weight[:, None] * W_U
    if isinstance(ln1, torch.nn.LayerNorm):
        W_E = W_E - W_E.mean(-1, keepdim=True)
        W_O = W_O - W_O.mean(-1, keepdim=True)  # the final LayerNorm centres the head's output
    return {"W_E": W_E, "W_V": W_V, "W_O": W_O, "W_U": W_U}


@torch.no_grad()
def ov_copying_scores(W_E: Tensor, W_V: Tensor, W_O: Tensor, W_U: Tensor) -> Tensor:
    """Elhage et al.'s copying score of each head's direct-path OV circuit ``W_E W_V^h W_O^h W_U`` (``[vocab,
    vocab]``): ``sum(lambda) / sum(|lambda|)`` over its eigenvalues (computed from the ``[d_head, d_head]``
    matrix ``W_V^h W_O^h W_U W_E``, which has the same nonzero eigenvalues). Shapes as :func:`gpt_head_weights`;
    returns ``[n_heads]`` in [-1, 1] (1: a pure copying head)."""
    out = []
    for h in range(W_V.shape[0]):
        m = (W_V[h].T.double() @ W_E.T.double()).T  # [vocab, D] = W_E W_V
        small = (W_O[h].double() @ W_U.double()) @ m  # [D, D] = W_O W_U W_E W_V
        lam = torch.linalg.eigvals(small)
        out.append(float(lam.real.sum() / lam.abs().sum().clamp(min=1e-12)))
    return torch.tensor(out)


@torch.no_grad()
def head_mean_z(model, tokens: Tensor, layer: int) -> Tensor:
    """Mean of ``blocks.{layer}.attn.z`` over the batch, per position: ``[T, n_heads, d_head]`` (the reference
    value of mean-ablation)."""
    name = f"blocks.{layer}.attn.z"
    with model.hooks(cache=name) as cache:
        model(tokens)
    return cache[name].mean(0)


@torch.no_grad()
def token_nll(model, tokens: Tensor, targets: Tensor, ablate: tuple[int, int, Tensor] | None = None) -> Tensor:
    """Per-token next-token NLL (nats) ``[B, T]`` (0 where ``targets == -100``), optionally with head ``h`` of
    layer ``l`` mean-ablated: ``ablate = (l, h, mean_z)``, ``mean_z [T, n_heads, d_head]`` from
    :func:`head_mean_z` (its ``[:, h]`` replaces the head's output at every position)."""
    hooks = []
    if ablate is not None:
        layer, head, mz = ablate

        def patch(z: Tensor, hook) -> Tensor:
            z = z.clone()
            z[:, :, head] = mz[: z.shape[1], head].to(z.dtype)
            return z

        hooks = [(f"blocks.{layer}.attn.z", patch)]
    with model.hooks(hooks):
        logits = model(tokens)
    nll = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100, reduction="none")
    return nll.view(targets.shape)
