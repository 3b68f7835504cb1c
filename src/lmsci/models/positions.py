"""Position schemes of lmsci's GPT (:mod:`lmsci.models.gpt`): the tables, biases and fixed attention patterns.

Split out of ``gpt.py`` (issue 44 item 6) with no change of behaviour: the logits of seeded models are bit-identical
before and after for every scheme (checked when the split was made; ``tests/models/test_positions.py`` pins the
pieces). The schemes (``GPTConfig.pos``):

* ``"learned"``: learned absolute position embedding added to the token embedding (GPT-2; Radford et al. 2019);
  lives in ``GPT.wpe``, nothing here.
* ``"rope"``: rotary position embedding on queries and keys (Su et al. 2021, arXiv 2104.09864, eq. 34), in the
  *split-halves* convention of Hugging Face Llama (``rotate_half``: dimension ``i`` is paired with
  ``i + d_head/2``), so that Llama export needs no weight permutation (:func:`rope_cos_sin`, :func:`apply_rope`,
  :func:`rotate_qk`).
* ``"relative"``: T5-style learned relative position bias (Raffel et al. 2020, arXiv 1910.10683, sec. 2.1): the
  causal distance ``q_pos - k_pos`` is mapped to one of :data:`REL_BUCKETS` ``= 32`` buckets (exact for distances
  below 16, logarithmic up to :data:`REL_MAX_DISTANCE` ``= 128``, clipped beyond; :func:`t5_bucket`); each layer
  learns one scalar bias per (head, bucket), added to the attention logits. (Physics of LMs Part 1's GPT_rel is
  DeBERTa-style; this is the simpler T5 form.)
* ``"alibi"``: fixed linear bias ``-m_h * (q_pos - k_pos)`` with the geometric head slopes of Press et al. 2022
  (arXiv 2108.12409, sec. 3; :func:`alibi_slopes`).
* ``"nope"``: no positional information at all; the causal mask alone (Kazemnejad et al. 2023, arXiv 2305.19466).
* ``"uni"``: Physics of LMs Part 1's GPT_uni (Allen-Zhu & Li 2023, arXiv 2305.13673, sec. 5/App.): attention is
  *fixed and uniform*: head ``h`` (0-based) averages the values of the last :func:`uni_window` ``(h) = 2**(h+1) - 1``
  tokens (1, 3, 7, 15, ...; the token itself included, truncated at the start of the sequence), as in the
  reproduction ``HJXA/Physics_of_LM`` (``Part1/model/gpt2/modeling_gpt2_variants.py``, ``GPTUniAttention``:
  ``window_size = 2**(h+1) - 1``). Only the value and output projections are learned (no query or key weights;
  :meth:`lmsci.models.blocks.Attention.attend` receives ``q = k = None``; :func:`fixed_scores`).
* ``"posonly"``: Physics of LMs Part 1's GPT_pos (arXiv 2305.13673): attention logits depend *only* on the causal
  distance ``q_pos - k_pos`` (no ``q k^T`` term): each layer learns one logit per (head, distance) for distances
  ``0 .. seq_len - 1`` (``rel_bias_dist``, initialised to 0 = uniform causal attention; larger distances share
  the last entry); values are still content. As in the reproduction ``HJXA/Physics_of_LM``
  (``modeling_gpt2_variants.py``, ``GPT_Rel_Pos_Attention(mode='pos')``: a learned bias per exact relative
  position, softmax, no query/key product). Only value and output projections (:func:`fixed_scores`).

:func:`add_position_params` registers a scheme's parameters and buffers on an attention module;
:func:`position_bias` gives the additive logit bias of ``"relative"``/``"alibi"``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

REL_BUCKETS = 32
REL_MAX_DISTANCE = 128

POS_SCHEMES = ("learned", "rope", "relative", "alibi", "nope", "uni", "posonly")
"""Every value of ``GPTConfig.pos``."""
CONTENT_FREE = ("uni", "posonly")
"""Schemes whose attention pattern does not depend on content (no query or key weights)."""


def uni_window(h: int) -> int:
    """GPT_uni window of head ``h`` (0-based): ``2**(h+1) - 1`` tokens (Physics of LMs Part 1)."""
    return 2 ** (h + 1) - 1


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi head slopes ``m_h`` (Press et al. 2022, sec. 3 and their reference code).

    For a power of two ``n``: ``m_h = 2**(-8 (h+1) / n)``; otherwise the slopes of the next lower
    power of two followed by every other slope of the next higher one. Returns ``[n_heads]``.
    """

    def pow2(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        s = pow2(n_heads)
    else:
        p = 2 ** math.floor(math.log2(n_heads))
        s = pow2(p) + pow2(2 * p)[0::2][: n_heads - p]
    return torch.tensor(s, dtype=torch.float32)


def t5_bucket(distance: Tensor, num_buckets: int = REL_BUCKETS, max_distance: int = REL_MAX_DISTANCE) -> Tensor:
    """T5 causal relative-position bucket of ``distance = q_pos - k_pos >= 0`` (Raffel et al. 2020).

    Half the buckets are exact (distances ``0 .. num_buckets/2 - 1``), the rest logarithmic up to
    ``max_distance``; larger distances share the last bucket. Negative distances map to bucket 0
    (they are masked anyway). Returns a long tensor of the same shape.
    """
    d = distance.clamp(min=0)
    exact = num_buckets // 2
    is_small = d < exact
    large = exact + (
        torch.log(d.float().clamp(min=1) / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return torch.where(is_small, d, large)


def rope_cos_sin(pos: Tensor, d_head: int, base: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos/sin tables for positions ``pos`` (``[T]`` or ``[B, T]``), each ``[..., T, d_head]``.

    Split-halves convention of HF Llama: ``inv_freq_j = base**(-2j/d_head)``, tables ``cat(f, f)``.
    """
    inv_freq = 1.0 / (base ** (torch.arange(0, d_head, 2, device=pos.device, dtype=torch.float32) / d_head))
    freqs = pos.to(torch.float32)[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x [B, H, T, d_head]`` by the tables from :func:`rope_cos_sin` (``x cos + rotate_half(x) sin``)."""
    if cos.dim() == 3:  # [B, T, d] -> [B, 1, T, d]
        cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def rotate_qk(q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, d_head: int, base: float) -> tuple[Tensor, Tensor]:
    """RoPE on queries ``[B, H, q, d_head]`` and keys ``[B, H, k, d_head]`` at their absolute positions (one table
    when ``q_pos is k_pos``)."""
    if q_pos is k_pos:
        cos, sin = rope_cos_sin(q_pos, d_head, base, q.dtype)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    cq, sq = rope_cos_sin(q_pos, d_head, base, q.dtype)
    ck, sk = rope_cos_sin(k_pos, d_head, base, k.dtype)
    return apply_rope(q, cq, sq), apply_rope(k, ck, sk)


def add_position_params(attn: nn.Module, pos: str, n_heads: int, seq_len: int) -> None:
    """Register the parameters and buffers of scheme ``pos`` on ``attn``: ``rel_bias [n_heads, REL_BUCKETS]``
    (relative), the ``slopes [n_heads]`` buffer (alibi), ``rel_bias_dist [n_heads, seq_len]`` (posonly, zeros =
    uniform causal attention) or the ``windows [n_heads]`` buffer (uni). Other schemes add nothing."""
    if pos == "relative":
        attn.rel_bias = nn.Parameter(torch.zeros(n_heads, REL_BUCKETS))
    if pos == "alibi":
        attn.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)
    if pos == "posonly":
        attn.rel_bias_dist = nn.Parameter(torch.zeros(n_heads, seq_len))
    if pos == "uni":
        w = torch.tensor([uni_window(h) for h in range(n_heads)], dtype=torch.long)
        attn.register_buffer("windows", w, persistent=False)


def position_bias(attn: nn.Module, pos: str, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
    """Additive logit bias ``[n_heads, q, k]`` (or ``[B, n_heads, q, k]``) of ``"relative"``/``"alibi"`` from the
    parameters :func:`add_position_params` put on ``attn``; None for every other scheme."""
    if pos not in ("relative", "alibi"):
        return None
    dist = q_pos[..., :, None] - k_pos[..., None, :]  # [q, k] or [B, q, k]
    if pos == "alibi":
        bias = -attn.slopes.view(-1, 1, 1) * dist.unsqueeze(-3).to(attn.slopes.dtype)
    else:
        bias = attn.rel_bias[:, t5_bucket(dist)]  # [H, q, k] or [H, B, q, k]
        if dist.dim() == 3:
            bias = bias.transpose(0, 1)
    return bias


def fixed_scores(attn: nn.Module, pos: str, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype,
                 device: torch.device) -> Tensor:
    """Content-free attention logits of ``"uni"`` / ``"posonly"`` with the causal mask as ``-inf``:
    ``[1 or B, n_heads, q, k]`` (callers expand to the batch).

    ``uni``: 0 inside head h's window (:func:`uni_window`, the token itself included), ``-inf`` outside;
    ``posonly``: the learned logit of the distance ``q_pos - k_pos`` (clipped at ``seq_len - 1``).
    """
    dist = q_pos[..., :, None] - k_pos[..., None, :]  # [q, k] or [B, q, k]
    if pos == "uni":
        allowed = (dist.unsqueeze(-3) >= 0) & (dist.unsqueeze(-3) < attn.windows.view(-1, 1, 1))
        if allowed.dim() == 3:
            allowed = allowed.unsqueeze(0)
        return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, float("-inf"))
    bias = attn.rel_bias_dist[:, dist.clamp(0, attn.rel_bias_dist.shape[1] - 1)]  # [H, q, k] or [H, B, q, k]
    if dist.dim() == 3:
        bias = bias.transpose(0, 1)
    else:
        bias = bias.unsqueeze(0)
    return bias.to(dtype).masked_fill((dist < 0).unsqueeze(-3), float("-inf"))
