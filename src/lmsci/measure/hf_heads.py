"""Per-head instruments on Hugging Face Llama-family causal LMs (grouped-query attention included).

A head's output is read and replaced at the input of the attention output projection ``self_attn.o_proj``:
``z [batch, seq, n_heads * d_head]``, viewed per head as ``[batch, seq, n_heads, d_head]``; head ``h`` writes
``z_h @ W_O[:, h*d_head:(h+1)*d_head]^T`` into the residual stream. With GQA (SmolLM2: 9 query heads, 3 key/value
heads) query head ``h`` reads key/value head ``h // (n_heads / n_kv_heads)``.

Sources:

* prefix-matching score: Olsson et al. 2022, "In-context Learning and Induction Heads", arXiv 2209.11895, sec.
  "Key concepts" (attention from a token of the repeated copy to the token after its previous occurrence);
* OV copying score ``sum(lambda) / sum(|lambda|)`` of the direct-path OV circuit ``W_E W_V W_O W_U``: Elhage et al.
  2021, "A Mathematical Framework for Transformer Circuits", sec. "Copying"; the ``[d_head, d_head]`` matrix
  ``W_O W_U W_E W_V`` has the same non-zero eigenvalues (``eig(AB) = eig(BA)``), so nothing ``[vocab, vocab]`` is
  formed; RMSNorm gains are folded into ``W_V`` (the layer's input norm) and ``W_U`` (the final norm), the
  per-token scale dropped (exact up to a positive factor per token);
* mean-ablation: Wang et al. 2022, "Interpretability in the Wild", arXiv 2211.00593, sec. 3 (a head's output
  replaced by its mean over a reference distribution);
* copy score of a head: Wang et al. 2022, sec. 3.1 (the residual stream at a name's position after the first
  layer, through the head's OV circuit, the final norm and the unembedding: is the name among the top-5 logits?).

Every function takes an :class:`lmsci.models.hf.HFModel` (or a bare ``transformers`` Llama-family causal LM) and
raises :class:`lmsci.errors.ConfigError` on a model without ``model.layers[i].self_attn.o_proj``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from lmsci.errors import ConfigError

#: ``edit(layer, z [B, T, n_heads, d_head]) -> z`` (or None to leave it)
ZEdit = Callable[[int, Tensor], "Tensor | None"]


def hf_module(model) -> nn.Module:
    """The ``transformers`` module of an HFModel (or the module itself)."""
    return getattr(model, "model", model) if not isinstance(model, nn.Module) else model


@dataclass(frozen=True)
class HeadShape:
    """``n_layers``, ``n_heads`` (query heads), ``n_kv_heads``, ``d_head``, ``d_model`` of a Llama-family model."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.n_kv_heads


def layers(model) -> list[nn.Module]:
    """The decoder layers ``model.model.layers``.

    Raises:
        ConfigError: the model has no Llama-style ``model.layers[i].self_attn.o_proj``.
    """
    m = hf_module(model)
    ls = getattr(getattr(m, "model", None), "layers", None)
    if ls is None or not len(ls) or not hasattr(getattr(ls[0], "self_attn", None), "o_proj"):
        raise ConfigError("model", type(m).__name__, "a Llama-family causal LM (model.layers[i].self_attn.o_proj)")
    return list(ls)


def head_shape(model) -> HeadShape:
    """The head geometry of ``model`` (see :class:`HeadShape`)."""
    c = hf_module(model).config
    layers(model)
    d_head = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return HeadShape(c.num_hidden_layers, c.num_attention_heads, getattr(c, "num_key_value_heads", None)
                     or c.num_attention_heads, d_head, c.hidden_size)


@contextmanager
def z_hooks(model, edit: ZEdit | None = None, cache: dict[int, Tensor] | None = None) -> Iterator[None]:
    """Read (into ``cache[layer]``, ``[B, T, n_heads, d_head]``, not detached) and/or replace every layer's head
    outputs at the ``o_proj`` input for the duration of a ``with`` block; hooks removed on exit."""
    sh = head_shape(model)
    handles = []

    def make(i: int):
        def pre(module: nn.Module, args: tuple):
            x = args[0]
            z = x.view(*x.shape[:-1], sh.n_heads, sh.d_head)
            new = edit(i, z) if edit is not None else None
            if cache is not None:
                cache[i] = z if new is None else new
            return None if new is None else (new.reshape(x.shape), *args[1:])
        return pre

    try:
        for i, layer in enumerate(layers(model)):
            handles.append(layer.self_attn.o_proj.register_forward_pre_hook(make(i)))
        yield
    finally:
        for h in handles:
            h.remove()


def logits(model, ids: Tensor, **kw) -> Tensor:
    """``ids [B, T]`` -> logits ``[B, T, vocab]`` (no KV cache)."""
    m = hf_module(model)
    return m(input_ids=ids.to(next(m.parameters()).device), use_cache=False, **kw).logits


def logits_with(model, ids: Tensor, edit: ZEdit | None = None) -> Tensor:
    """Logits ``[B, T, vocab]`` of a forward with the head edit applied (gradients kept)."""
    with z_hooks(model, edit):
        return logits(model, ids)


@torch.no_grad()
def run_z(model, ids: Tensor, edit: ZEdit | None = None) -> tuple[Tensor, Tensor]:
    """Forward with optional head edits: ``(logits [B, T, vocab], z [n_layers, B, T, n_heads, d_head])``."""
    cache: dict[int, Tensor] = {}
    with z_hooks(model, edit, cache):
        out = logits(model, ids)
    return out, torch.stack([cache[i] for i in range(len(cache))])


def token_nll(logit: Tensor, ids: Tensor) -> Tensor:
    """Next-token NLL ``[B, T-1]`` (nats) of ``ids [B, T]`` under ``logit [B, T, vocab]``."""
    lp = torch.log_softmax(logit[:, :-1].float(), -1)
    return -lp.gather(-1, ids[:, 1:, None].to(lp.device)).squeeze(-1)


def mean_ablate(heads: list[tuple[int, int]], means: Tensor) -> ZEdit:
    """An edit replacing each ``(layer, head)`` output by ``means[layer, head]`` (``[n_layers, n_heads, d_head]``, or
    ``[n_layers, T, n_heads, d_head]`` per position)."""
    by_layer: dict[int, list[int]] = {}
    for l, h in heads:
        by_layer.setdefault(int(l), []).append(int(h))

    def edit(i: int, z: Tensor) -> Tensor | None:
        hs = by_layer.get(i)
        if not hs:
            return None
        z = z.clone()
        m = means[i].to(z.dtype)
        z[..., hs, :] = m[..., hs, :] if m.dim() == 3 else m[hs]
        return z
    return edit


@torch.no_grad()
def attention(model, ids: Tensor) -> Tensor:
    """Attention probabilities ``[n_layers, B, n_heads, T, T]`` (float32; needs eager attention)."""
    out = hf_module(model)(input_ids=ids.to(next(hf_module(model).parameters()).device), use_cache=False,
                           output_attentions=True)
    att = getattr(out, "attentions", None)
    if not att or any(a is None for a in att):
        raise ConfigError("attn_implementation", hf_module(model).config._attn_implementation,
                          "'eager' (attention weights are read)")
    return torch.stack([a.float() for a in att])


def prefix_matching(patterns: Tensor, target: Tensor) -> Tensor:
    """Olsson et al.'s prefix-matching score per head: mean attention on ``target`` over the queries that have one.

    Args:
        patterns: ``[n_layers, B, n_heads, T, T]``.
        target: ``[T]`` long, the key position per query, -1 where none.

    Returns:
        ``[n_layers, n_heads]`` in [0, 1].
    """
    ok = target >= 0
    q = torch.nonzero(ok).squeeze(-1).to(patterns.device)
    k = target[ok].to(patterns.device)
    return patterns[:, :, :, q, k].mean(dim=(1, 3))


def _head_weights(model, sh: HeadShape, layer: int, head: int) -> tuple[Tensor, Tensor, Tensor]:
    """Row-vector ``W_V [d_model, d_head]`` (input-norm gain folded), ``W_O [d_head, d_model]``, ``W_Q [d_head,
    d_model]`` (as in ``q = W_Q @ x_normed``) of one head."""
    lay = layers(model)[layer]
    a = lay.self_attn
    kv = head // sh.group
    g = lay.input_layernorm.weight.float()
    W_V = (a.v_proj.weight[kv * sh.d_head:(kv + 1) * sh.d_head].float() * g).T
    W_O = a.o_proj.weight[:, head * sh.d_head:(head + 1) * sh.d_head].float().T
    W_Q = a.q_proj.weight[head * sh.d_head:(head + 1) * sh.d_head].float()
    return W_V, W_O, W_Q


def unembed(model) -> tuple[Tensor, Tensor, nn.Module]:
    """``(W_E [vocab, d_model], W_U [d_model, vocab] with the final norm's gain folded, final norm)``."""
    m = hf_module(model)
    W_E = m.get_input_embeddings().weight.float()
    norm = m.model.norm
    W_U = m.get_output_embeddings().weight.float().T * norm.weight.float()[:, None]
    return W_E, W_U, norm


@torch.no_grad()
def ov_copying(model) -> Tensor:
    """Elhage et al.'s OV copying score of every head, ``[n_layers, n_heads]`` in [-1, 1] (see the module doc)."""
    sh = head_shape(model)
    W_E, W_U, _ = unembed(model)
    G = W_U @ W_E  # [d_model, d_model]
    out = torch.zeros(sh.n_layers, sh.n_heads)
    for l in range(sh.n_layers):
        for h in range(sh.n_heads):
            W_V, W_O, _ = _head_weights(model, sh, l, h)
            lam = torch.linalg.eigvals((W_O @ G @ W_V).double().cpu())
            out[l, h] = float(lam.real.sum() / lam.abs().sum().clamp(min=1e-12))
    return out


@torch.no_grad()
def copy_score(model, resid: Tensor, names: Tensor, heads: list[tuple[int, int]], k: int = 5) -> Tensor:
    """Wang et al.'s copy score (sec. 3.1) of each head: the share of ``resid`` rows whose name token is among the
    top-``k`` logits after the head's OV circuit, the final norm and the unembedding.

    Args:
        resid: ``[n, d_model]`` residual stream after the first layer at the names' positions.
        names: ``[n]`` the name token at each row.
        heads: ``(layer, head)`` pairs.

    Returns:
        ``[len(heads)]`` shares in [0, 1].
    """
    sh = head_shape(model)
    _, W_U, norm = unembed(model)
    out = []
    for l, h in heads:
        W_V, W_O, _ = _head_weights(model, sh, l, h)
        x = resid.float() * torch.rsqrt(resid.float().pow(2).mean(-1, keepdim=True) + 1e-6)  # the layer's RMSNorm
        o = (x @ W_V) @ W_O
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-6)  # final RMSNorm (gain folded in W_U)
        top = (o @ W_U).topk(k, dim=-1).indices
        out.append(float((top == names[:, None].to(top.device)).any(-1).float().mean()))
    return torch.tensor(out)


def head_out(model, z: Tensor, layer: int, head: int) -> Tensor:
    """Head ``(layer, head)``'s write into the residual stream from ``z [..., n_heads, d_head]``: ``[..., d_model]``."""
    sh = head_shape(model)
    _, W_O, _ = _head_weights(model, sh, layer, head)
    return z[..., head, :].float() @ W_O
