"""The transformer block of lmsci's GPT (:mod:`lmsci.models.gpt`): pre-norm, causal self-attention, MLP.

Split out of ``gpt.py`` (issue 44 item 6) with no change of behaviour (the same operations in the same order).
:class:`Block` is ``x + attn(ln1 x)``, then ``+ mlp(ln2 x)``; :class:`Attention` is multi-head causal
self-attention whose position scheme (``cfg.pos``) comes from :mod:`lmsci.models.positions`, the MLP from
:mod:`lmsci.models.mlp`, the norm from :func:`make_norm`. ``cfg`` is a :class:`lmsci.models.gpt.GPTConfig`.

Attention uses ``torch.nn.functional.scaled_dot_product_attention`` (fused, ``is_causal=True`` when
there is no positional bias) unless a hook reads or patches ``attn.scores``/``attn.pattern`` of that
layer, in which case the explicit path (``softmax(q k^T / sqrt(d_head) + bias)``) computes them; the
two paths agree to float rounding (tested). The hook points these modules own (``blocks.{i}.*``) are listed
in :mod:`lmsci.models.gpt`'s docstring.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmsci.models.hooks import HookPoint
from lmsci.models.mlp import make_mlp
from lmsci.models.positions import CONTENT_FREE, add_position_params, fixed_scores, position_bias, rotate_qk

NORM_EPS = 1e-5
"""Epsilon of the pre-norms (LayerNorm, and RMSNorm of Zhang & Sennrich 2019, arXiv 1910.07467)."""


def make_norm(cfg: Any) -> nn.Module:
    """The pre-norm of ``cfg.norm`` over ``d_model``: ``nn.LayerNorm`` (eps :data:`NORM_EPS`, bias iff ``cfg.bias``),
    ``nn.RMSNorm`` (eps :data:`NORM_EPS`) or ``nn.Identity`` for ``"none"``."""
    if cfg.norm == "none":
        return nn.Identity()
    if cfg.norm == "layernorm":
        return nn.LayerNorm(cfg.d_model, eps=NORM_EPS, bias=cfg.bias)
    return nn.RMSNorm(cfg.d_model, eps=NORM_EPS)


class Attention(nn.Module):
    """Multi-head causal self-attention with a pluggable positional scheme.

    Weights: ``qkv`` (fused ``[3 * n_heads * d_head, d_model]``; only values for ``pos="uni"``) and
    ``proj`` (``[d_model, n_heads * d_head]``). ``rel_bias`` (``[n_heads, REL_BUCKETS]``) for ``"relative"``.
    """

    def __init__(self, cfg: Any, layer: int):
        super().__init__()
        self.cfg = cfg
        self.n_heads, self.d_head = cfg.n_heads, cfg.head_dim
        inner = self.n_heads * self.d_head
        self.pos = cfg.pos
        self.qkv = nn.Linear(cfg.d_model, inner if cfg.pos in CONTENT_FREE else 3 * inner, bias=cfg.bias)
        self.proj = nn.Linear(inner, cfg.d_model, bias=cfg.bias)
        self.dropout = cfg.dropout
        # True: attention as explicit matmul/softmax instead of fused scaled_dot_product_attention (same values to
        # rounding). torch.func.vmap has no batching rule for CPU SDPA and loops over the members there; the
        # explicit path batches (set by lmsci.train.stacked for stacked training).
        self.explicit = False
        add_position_params(self, cfg.pos, cfg.n_heads, cfg.seq_len)
        p = f"blocks.{layer}.attn."
        self.hook_scores = HookPoint(p + "scores")
        self.hook_pattern = HookPoint(p + "pattern")
        self.hook_z = HookPoint(p + "z")
        self.hook_out = HookPoint(p + "out")

    # -- positional pieces -------------------------------------------------------------------
    def position_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Additive logit bias ``[n_heads, q, k]`` (or ``[B, n_heads, q, k]``), or None (no bias); see
        :func:`lmsci.models.positions.position_bias`."""
        return position_bias(self, self.pos, q_pos, k_pos)

    def attend(self, q: Tensor | None, k: Tensor | None, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Positional encoding + causal attention.

        Args:
            q, k: ``[batch, n_heads, q|k, d_head]`` before any rotation (``None`` for ``pos="uni"``).
            v: ``[batch, n_heads, k, d_head]``.
            q_pos, k_pos: long absolute positions, ``[q]``/``[k]`` or ``[batch, q]``/``[batch, k]``.
                A key is visible to a query iff ``k_pos <= q_pos``. Passing the *same tensor object*
                for both (as ``GPT.forward`` does) means the plain causal mask and enables the fused path.

        Returns:
            ``[batch, n_heads, q, d_head]``.
        """
        same = q_pos is k_pos
        need_explicit = self.explicit or self.hook_scores.active or self.hook_pattern.active
        drop = self.dropout if self.training else 0.0
        if self.pos in CONTENT_FREE:
            scores = fixed_scores(self, self.pos, q_pos, k_pos, v.dtype, v.device)
            scores = self.hook_scores(scores.expand(v.shape[0], -1, -1, -1))
            pattern = self.hook_pattern(torch.softmax(scores, dim=-1))
            if drop:
                pattern = F.dropout(pattern, drop)
            return pattern @ v
        assert q is not None and k is not None
        if self.pos == "rope":
            q, k = rotate_qk(q, k, q_pos, k_pos, self.d_head, self.cfg.rope_base)
        bias = self.position_bias(q_pos, k_pos)
        if not need_explicit:
            if bias is None and same:
                return F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=True)
            mask = self._mask(q_pos, k_pos, bias, q.dtype)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d_head))
        scores = scores + self._mask(q_pos, k_pos, bias, q.dtype)
        scores = self.hook_scores(scores)
        pattern = self.hook_pattern(torch.softmax(scores, dim=-1))
        if drop:
            pattern = F.dropout(pattern, drop)
        return pattern @ v

    @staticmethod
    def _mask(q_pos: Tensor, k_pos: Tensor, bias: Tensor | None, dtype: torch.dtype) -> Tensor:
        """Additive mask: ``bias`` where ``k_pos <= q_pos``, ``-inf`` elsewhere; ``[.., q, k]``."""
        visible = k_pos[..., None, :] <= q_pos[..., :, None]  # [q, k] or [B, q, k]
        if visible.dim() == 3:
            visible = visible[:, None]
        m = torch.zeros(visible.shape, dtype=dtype, device=q_pos.device).masked_fill(~visible, float("-inf"))
        return m if bias is None else m + bias.to(dtype)

    def forward(self, x: Tensor, pos: Tensor, cache: dict[str, Tensor] | None = None) -> Tensor:
        """``x [B, T, d_model]``, ``pos [T]`` long -> ``[B, T, d_model]``.

        ``cache``: this layer's key/value cache (``{"k", "v", "pos"}``, keys un-rotated), extended in place;
        the new queries attend to the cached keys and their own (used by ``GPT.generate``).
        """
        B, T, _ = x.shape
        H, D = self.n_heads, self.d_head
        if self.pos in CONTENT_FREE:
            q = k = None
            v = self.qkv(x).view(B, T, H, D).transpose(1, 2)
        else:
            q, k, v = self.qkv(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)
        k_pos = pos
        if cache is not None:
            if "v" in cache:
                k = torch.cat([cache["k"], k], dim=2) if k is not None else None
                v = torch.cat([cache["v"], v], dim=2)
                k_pos = torch.cat([cache["pos"], pos])
            if k is not None:
                cache["k"] = k
            cache["v"], cache["pos"] = v, k_pos
        z = self.attend(q, k, v, pos, k_pos)  # [B, H, T, D]
        z = self.hook_z(z.transpose(1, 2))  # [B, T, H, D]
        out = self.proj(z.reshape(B, T, H * D))
        if self.dropout and self.training:
            out = F.dropout(out, self.dropout)
        return self.hook_out(out)


class Block(nn.Module):
    """Pre-norm block: ``x + attn(ln1 x)``, then ``+ mlp(ln2 x)`` (no MLP when ``mlp="none"``)."""

    def __init__(self, cfg: Any, layer: int):
        super().__init__()
        self.ln1 = make_norm(cfg)
        self.attn = Attention(cfg, layer)
        self.has_mlp = cfg.mlp != "none"
        if self.has_mlp:
            self.ln2 = make_norm(cfg)
            self.mlp = make_mlp(cfg, layer)
        p = f"blocks.{layer}."
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = (
            HookPoint(p + "resid_pre"), HookPoint(p + "resid_mid"), HookPoint(p + "resid_post"))

    @property
    def hook_list(self) -> list[HookPoint]:
        """This block's hook points in forward order (``resid_mid`` and the MLP's only with an MLP)."""
        hp = [self.hook_resid_pre, self.attn.hook_scores, self.attn.hook_pattern, self.attn.hook_z, self.attn.hook_out]
        if self.has_mlp:
            hp += [self.hook_resid_mid, *self.mlp.hook_list]
        hp.append(self.hook_resid_post)
        return hp

    def forward(self, x: Tensor, pos: Tensor, cache: dict[str, Tensor] | None = None) -> Tensor:
        x = self.hook_resid_pre(x)
        x = x + self.attn(self.ln1(x), pos, cache)
        if self.has_mlp:
            x = self.hook_resid_mid(x)
            x = x + self.mlp(self.ln2(x))
        return self.hook_resid_post(x)
