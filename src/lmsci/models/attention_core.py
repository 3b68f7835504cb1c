"""The core of the blockwise attention harness: attention policies, positional scorers and
:func:`policy_attention`, the one function that computes attention under a policy block by block.

Both :mod:`lmsci.models.attention_harness` (sessions and patches on lmsci GPT and Hugging Face models) and
:mod:`lmsci.models.hf_attention` (the Hugging Face backend) import this module; it imports neither, so the
two run one way (the harness imports the backend, the backend only this core). The harness re-exports every
name defined here; see its module docstring for the policies' position treatment.

Source: Han, Wang, Peng, Xiong, Chen, Ji, Wang, "LM-Infinite: Zero-Shot Extreme Length Generalization
for Large Language Models", NAACL 2024, arXiv 2308.16137, Section 4 (Lambda-shaped mask, distance
ceiling), Section 5.3 / Appendix A (top-k middle tokens); Xiao et al., "Efficient Streaming Language
Models with Attention Sinks", ICLR 2024, arXiv 2309.17453, Section 3.2 (positions re-assigned within
the cache); Su et al., arXiv 2104.09864 (RoPE); Press et al., arXiv 2108.12409 (ALiBi).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Protocol

import torch
from torch import Tensor

from lmsci.errors import ConfigError

PolicyKind = Literal["full", "lm_infinite", "lambda_mask", "sliding_window", "attention_sinks"]
POLICY_KINDS = ("full", "lm_infinite", "lambda_mask", "sliding_window", "attention_sinks")


# --------------------------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionPolicy:
    """Which keys a query sees and at which distance.

    Attributes:
        kind: ``"full"`` (causal, true distances), ``"lm_infinite"`` (Lambda mask + distance ceiling),
            ``"lambda_mask"`` (the Lambda mask without the distance ceiling: for absolute-position
            models such as GPT-2), ``"sliding_window"`` (last ``n_local`` keys, no starting tokens) or
            ``"attention_sinks"``
            (StreamingLLM: ``n_global`` sinks + ``n_local - n_global`` recent keys, positions
            re-assigned within the cache of ``n_local`` entries).
        n_local: local window in tokens (LM-Infinite: L_pretrain; a query sees keys with
            ``0 <= i - j < n_local``). Required except for ``full``.
        n_global: starting tokens always visible (LM-Infinite ``n_global``/"n_starting"; sinks).
        d_max: distance ceiling (LM-Infinite; default ``n_local``). Distances ``>= d_max`` are scored
            at exactly ``d_max``.
        top_k: number of middle tokens re-attended by the last query (0 = off).
        top_k_from_layer: top-k is used in layers with index ``>= top_k_from_layer`` (paper's h).
        top_k_distance: the distance at which middle keys are scored (paper: L/2; default
            ``n_local // 2``).
        block_size: queries per block in the long path (default ``n_local`` clipped to [32, 128]; 256 for
            ``full``); the long path scores ``n_global + n_local + block_size`` keys per query at most.
    """

    kind: PolicyKind = "full"
    n_local: int | None = None
    n_global: int = 0
    d_max: int | None = None
    top_k: int = 0
    top_k_from_layer: int = 0
    top_k_distance: int | None = None
    block_size: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in POLICY_KINDS:
            raise ConfigError("policy.kind", self.kind, ", ".join(POLICY_KINDS))
        if self.kind != "full" and (self.n_local is None or self.n_local < 1):
            raise ConfigError("policy.n_local", self.n_local, f"an integer >= 1 for kind={self.kind!r}")
        if self.n_global < 0:
            raise ConfigError("policy.n_global", self.n_global, "an integer >= 0")
        if self.kind == "attention_sinks" and self.n_global >= (self.n_local or 0):
            raise ConfigError("policy.n_global", self.n_global,
                              f"fewer sinks than the cache size n_local={self.n_local}")
        if self.d_max is not None and self.d_max < 1:
            raise ConfigError("policy.d_max", self.d_max, "an integer >= 1 or None")
        if self.top_k < 0:
            raise ConfigError("policy.top_k", self.top_k, "an integer >= 0")
        if self.top_k and self.kind != "lm_infinite":
            raise ConfigError("policy.top_k", self.top_k, "0 unless kind='lm_infinite'")
        if self.block_size is not None and self.block_size < 1:
            raise ConfigError("policy.block_size", self.block_size, "an integer >= 1 or None")

    # derived quantities --------------------------------------------------------------------
    @property
    def window(self) -> int | None:
        """Keys with ``i - j < window`` are in the local branch (None = unbounded)."""
        if self.kind == "full":
            return None
        if self.kind == "attention_sinks":
            return self.n_local - self.n_global  # recent part of the cache
        return self.n_local

    @property
    def n_start(self) -> int:
        """Starting positions always visible (0 for full/sliding window)."""
        return self.n_global if self.kind in ("lm_infinite", "lambda_mask", "attention_sinks") else 0

    @property
    def ceiling(self) -> int | None:
        if self.kind != "lm_infinite":
            return None
        return self.d_max if self.d_max is not None else self.n_local

    @property
    def mid_distance(self) -> int:
        return self.top_k_distance if self.top_k_distance is not None else max(1, (self.n_local or 2) // 2)

    @property
    def block(self) -> int:
        if self.block_size is not None:
            return self.block_size
        return 256 if self.kind == "full" else max(32, min(self.n_local, 128))

    def cache_budget(self) -> int | None:
        """Max KV entries a streaming cache needs (None = unbounded: full attention or top-k)."""
        if self.kind == "full" or self.top_k:
            return None
        return self.n_start + self.window

    def label(self) -> str:
        if self.kind == "full":
            return "full"
        s = f"{self.kind}(L={self.n_local},G={self.n_start}"
        if self.kind == "lm_infinite":
            s += f",dmax={self.ceiling}"
            if self.top_k:
                s += f",topk={self.top_k}@{self.mid_distance}>=l{self.top_k_from_layer}"
        return s + ")"


def full_policy(block_size: int | None = None) -> AttentionPolicy:
    """Plain causal attention with true distances: the harness's reference, equal to the model's own attention
    (to float tolerance), computed block by block (``block_size`` queries at a time; None = the default).

    Raises:
        ConfigError: a ``block_size`` below 1."""
    return AttentionPolicy("full", block_size=block_size)


def lm_infinite_policy(n_local: int, n_global: int = 10, d_max: int | None = None, top_k: int = 0,
                       top_k_from_layer: int = 4, top_k_distance: int | None = None,
                       block_size: int | None = None) -> AttentionPolicy:
    """LM-Infinite (Han et al. 2023, arXiv 2308.16137, Sec. 4; top-k: Sec. 5.3 / App. A) as an attention policy.

    Each query sees the first ``n_global`` tokens and its last ``n_local`` keys (the Lambda-shaped mask); keys
    farther than ``d_max`` (default ``n_local``, the pretraining length L) are scored as if at distance ``d_max``
    (the distance ceiling). With ``top_k > 0``, from layer ``top_k_from_layer`` on, the last query also attends to
    the ``top_k`` highest-scoring masked middle keys, scored at distance ``top_k_distance`` (the paper: k = 5,
    from layer 5, d = L/2). Install it with :func:`lmsci.methods.lm_infinite` or pass it to the instruments of
    :mod:`lmsci.measure.attention`; a long input costs O(n_global + n_local) score elements per query.

    Raises:
        ConfigError: ``n_local < 1``, ``n_global < 0``, ``d_max < 1``, ``top_k < 0`` (naming the field)."""
    return AttentionPolicy("lm_infinite", n_local, n_global, d_max, top_k, top_k_from_layer,
                           top_k_distance, block_size)


def lambda_mask_policy(n_local: int, n_global: int = 10, block_size: int | None = None) -> AttentionPolicy:
    """LM-Infinite's Lambda-shaped mask (arXiv 2308.16137 Sec. 4) without the distance ceiling: each query
    sees the first ``n_global`` tokens and its last ``n_local`` keys at their true positions. The form of
    LM-Infinite that applies to absolute-position models (GPT-2), where there is no distance to clip."""
    return AttentionPolicy("lambda_mask", n_local, n_global, block_size=block_size)


def sliding_window_policy(n_local: int, block_size: int | None = None) -> AttentionPolicy:
    """A sliding window: each query sees its last ``n_local`` keys (itself included) at their true distances, no
    starting tokens (the baseline LM-Infinite and StreamingLLM improve on; Han et al. 2023, arXiv 2308.16137,
    Table 1).

    Raises:
        ConfigError: ``n_local < 1``."""
    return AttentionPolicy("sliding_window", n_local, 0, block_size=block_size)


def attention_sinks_policy(n_local: int, n_sink: int = 4, block_size: int | None = None) -> AttentionPolicy:
    """StreamingLLM's attention sinks (Xiao et al. 2023, arXiv 2309.17453, Sec. 3.2): the cache holds the
    ``n_sink`` first tokens and the ``n_local - n_sink`` most recent ones; positions are the indices within the
    cache (``0 .. n_local - 1``), so no query sees a distance beyond ``n_local``.

    Raises:
        ConfigError: ``n_local < 1`` or ``n_sink`` negative or not below ``n_local``."""
    return AttentionPolicy("attention_sinks", n_local, n_sink, block_size=block_size)


# --------------------------------------------------------------------------------------------
# Positional scorers
# --------------------------------------------------------------------------------------------


class Scorer(Protocol):
    """Scores queries placed at positions ``qa`` against keys placed at positions ``ka``."""

    def scores(self, q: Tensor, k: Tensor, qa: Tensor, ka: Tensor) -> Tensor:
        """q ``[batch, n_heads, nq, d_head]``, k ``[batch, n_heads, nk, d_head]`` (un-rotated),
        qa ``[nq]``, ka ``[nk]`` (long) -> logits ``[batch, n_heads, nq, nk]`` (scaled)."""


def rotate_half(x: Tensor) -> Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last dimension (the HF / GPT-NeoX RoPE convention)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


@dataclass
class RoPEScorer:
    """RoPE logits ``<R_a q, R_b k> * scale`` (depends on a - b only).

    Attributes:
        cos_sin: ``positions [n] long -> (cos, sin)``, each ``[n, d_head]`` (or broadcastable), giving
            the rotation ``x * cos + rotate_half(x) * sin``.
        scale: logit scale (usually ``d_head ** -0.5``).
        rotate: the rotation function (default :func:`rotate_half` convention).
    """

    cos_sin: Callable[[Tensor], tuple[Tensor, Tensor]]
    scale: float
    rotate: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None

    def place(self, x: Tensor, pos: Tensor) -> Tensor:
        cos, sin = self.cos_sin(pos)
        if self.rotate is not None:
            return self.rotate(x, cos, sin)
        return x * cos + rotate_half(x) * sin

    def scores(self, q: Tensor, k: Tensor, qa: Tensor, ka: Tensor) -> Tensor:
        return (self.place(q, qa) @ self.place(k, ka).transpose(-1, -2)) * self.scale


def rope_cos_sin(d_head: int, base: float = 10000.0) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    """The standard RoPE tables (Su et al. 2021, arXiv 2104.09864, Eq. 34) in the half-split layout."""
    inv_freq = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float32) / d_head))

    def f(pos: Tensor) -> tuple[Tensor, Tensor]:
        ang = pos.to(torch.float32)[:, None] * inv_freq.to(pos.device)[None, :]
        emb = torch.cat((ang, ang), dim=-1)
        return emb.cos(), emb.sin()

    return f


@dataclass
class ALiBiScorer:
    """ALiBi logits ``q.k * scale - m_h * (a - b)`` (Press et al. 2022, arXiv 2108.12409).

    Attributes:
        slopes: ``[n_heads]`` head slopes m_h.
        scale: logit scale.
    """

    slopes: Tensor
    scale: float

    def scores(self, q: Tensor, k: Tensor, qa: Tensor, ka: Tensor) -> Tensor:
        dist = (qa[:, None] - ka[None, :]).to(q.dtype)
        return (q @ k.transpose(-1, -2)) * self.scale - self.slopes.to(q.device, q.dtype)[:, None, None] * dist


def alibi_slopes(n_heads: int) -> Tensor:
    """Geometric ALiBi slopes ``2^(-8 i / n_heads)``, i = 1..n_heads (arXiv 2108.12409 Sec. 3)."""
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / n_heads) for i in range(n_heads)])


# --------------------------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------------------------

Recorder = Callable[[int, Tensor, Tensor, Tensor, Tensor], None]
"""``recorder(layer_idx, q_pos [nq], k_pos [nk], logits [batch, n_heads, nq, nk] (-inf where masked),
probs [batch, n_heads, nq, nk])`` called once per query block; used by :mod:`lmsci.measure.attention`."""


@dataclass
class AttentionStats:
    """Counters of the work the harness did (for the linear-cost tests and the benchmark)."""

    score_elements: int = 0  # logits computed (batch x heads x queries x keys, summed)
    calls: int = 0

    def reset(self) -> None:
        self.score_elements = 0
        self.calls = 0


def _repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    if n_rep == 1:
        return x
    return x.repeat_interleave(n_rep, dim=1)


def policy_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    scorer: Scorer,
    policy: AttentionPolicy,
    layer_idx: int = 0,
    recorder: Recorder | None = None,
    stats: AttentionStats | None = None,
    top_k_query: bool = True,
    model_window: int | None = None,
    softmax_dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Attention under ``policy``, computed block by block without an n x n mask.

    Args:
        q: ``[batch, n_heads, nq, d_head]`` un-rotated queries.
        k, v: ``[batch, n_kv_heads, nk, d_head]`` un-rotated keys and values (``n_heads`` must be a
            multiple of ``n_kv_heads``: grouped-query attention).
        q_pos: ``[nq]`` absolute positions, ascending. k_pos: ``[nk]`` absolute positions, ascending;
            a query sees keys with ``k_pos <= q_pos`` that its policy allows.
        scorer: positional scorer (:class:`RoPEScorer` or :class:`ALiBiScorer`).
        policy: the attention policy.
        layer_idx: the layer (top-k middle tokens only in layers ``>= policy.top_k_from_layer``).
        recorder: optional callback receiving each block's masked logits and probabilities.
        stats: optional counters (score elements computed).
        top_k_query: whether the last query row may use top-k middle tokens.
        model_window: the model's own sliding window (Mistral, Gemma 2/3, ...): a key is visible only if
            ``q_pos - k_pos < model_window`` *and* the policy allows it (the narrower of the two wins).
        softmax_dtype: precision of the masked logits and the softmax (float32, as Hugging Face's eager
            attention; float64 to follow a float64 model whose own attention does not upcast).

    Returns:
        ``[batch, n_heads, nq, d_head]`` attention output (in ``q.dtype``; softmax in ``softmax_dtype``).

    Raises:
        ConfigError: head counts incompatible, or positions of different lengths than the tensors.
    """
    b, h, nq, d = q.shape
    k, v = _expand_kv(q, k, v, q_pos, k_pos)
    W, G = policy.window, policy.n_start
    B = policy.block
    out = q.new_empty(b, h, nq, d)
    n_g = int(torch.searchsorted(k_pos, torch.tensor(G, device=k_pos.device)).item()) if G else 0
    use_topk = policy.top_k > 0 and layer_idx >= policy.top_k_from_layer and top_k_query
    if stats is not None:
        stats.calls += 1
    for s in range(0, nq, B):
        e = min(nq, s + B)
        qp = q_pos[s:e]
        idx_parts = _block_key_ranges(k_pos, qp, W, n_g, model_window)
        kb = torch.cat([k[:, :, a:z] for a, z in idx_parts], dim=2)
        vb = torch.cat([v[:, :, a:z] for a, z in idx_parts], dim=2)
        kp = torch.cat([k_pos[a:z] for a, z in idx_parts])
        qb = q[:, :, s:e]
        dist = qp[:, None] - kp[None, :]
        logits = _block_logits(scorer, policy, qb, kb, qp, kp, dist, n_g, stats)
        valid = _visible(dist, kp, W, G, model_window)
        logits = logits.to(softmax_dtype).masked_fill(~valid, float("-inf"))
        extra = None
        if use_topk and e == nq:
            extra = _top_k_extra(q, k, v, q_pos, k_pos, scorer, policy, softmax_dtype, stats)
        o = _block_output(logits, vb, extra, recorder, layer_idx, qp, kp)
        out[:, :, s:e] = o.to(q.dtype)
    return out


def _expand_kv(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
    """Check head counts and position lengths; keys and values ``[batch, n_kv_heads, nk, d_head]`` repeated to
    ``[batch, n_heads, nk, d_head]`` (grouped-query attention). Raises ConfigError as :func:`policy_attention`."""
    h, nq = q.shape[1], q.shape[2]
    hk, nk = k.shape[1], k.shape[2]
    if h % hk:
        raise ConfigError("n_kv_heads", hk, f"a divisor of n_heads={h}")
    if q_pos.shape != (nq,) or k_pos.shape != (nk,):
        raise ConfigError("positions", (tuple(q_pos.shape), tuple(k_pos.shape)), f"([{nq}], [{nk}])")
    return _repeat_kv(k, h // hk), _repeat_kv(v, h // hk)


def _block_key_ranges(k_pos: Tensor, qp: Tensor, W: int | None, n_g: int,
                      model_window: int | None) -> list[tuple[int, int]]:
    """The key index ranges a query block ``qp [nq_block]`` may see: the ``n_g`` starting keys and the keys from
    the block's first query's window start (the policy's ``W`` and the model's own window) to its last query."""
    hi = int(torch.searchsorted(k_pos, qp[-1], right=True).item())
    lo = 0 if W is None else int(torch.searchsorted(k_pos, qp[0] - W, right=True).item())
    if model_window is not None:
        lo = max(lo, int(torch.searchsorted(k_pos, qp[0] - model_window, right=True).item()))
    if n_g > lo:
        return [(0, hi)]
    return [(0, n_g), (lo, hi)] if n_g else [(lo, hi)]


def _block_logits(scorer: Scorer, policy: AttentionPolicy, qb: Tensor, kb: Tensor, qp: Tensor, kp: Tensor,
                  dist: Tensor, n_g: int, stats: AttentionStats | None) -> Tensor:
    """Logits ``[batch, n_heads, nq_block, nk_block]`` of a block (unmasked): true distances, keys at distance
    ``>= policy.ceiling`` re-scored at the ceiling (LM-Infinite), and for attention sinks the sink keys scored
    with the query placed at most at the cache's last slot (StreamingLLM)."""
    C = policy.ceiling
    sinks = policy.kind == "attention_sinks"
    c_sink = (policy.n_local - 1) if sinks else 0
    logits = scorer.scores(qb, kb, qp, kp)
    if stats is not None:
        stats.score_elements += logits.numel()
    if C is not None:
        # keys at distance >= C form a prefix of the (ascending) key columns: score only those again
        ncol = int(torch.searchsorted(kp, qp[-1] - C, right=True).item())
        if ncol:
            alt = scorer.scores(qb, kb[:, :, :ncol], torch.full_like(qp, C), torch.zeros_like(kp[:ncol]))
            if stats is not None:
                stats.score_elements += alt.numel()
            logits = torch.cat([torch.where(dist[:, :ncol] >= C, alt, logits[..., :ncol]), logits[..., ncol:]],
                               dim=-1)
    if sinks and bool((qp > c_sink).any()) and n_g:
        ns = min(n_g, kb.shape[2])
        alt = scorer.scores(qb, kb[:, :, :ns], qp.clamp(max=c_sink), kp[:ns])
        if stats is not None:
            stats.score_elements += alt.numel()
        logits = torch.cat([alt, logits[..., ns:]], dim=-1)
    return logits


def _visible(dist: Tensor, kp: Tensor, W: int | None, G: int, model_window: int | None) -> Tensor:
    """``[nq_block, nk_block]`` bool: causal, inside the policy's window or a starting token, and inside the
    model's own window."""
    valid = dist >= 0
    if W is not None:
        valid &= (dist < W) | (kp[None, :] < G)
    if model_window is not None:
        valid &= dist < model_window
    return valid


def _top_k_extra(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, scorer: Scorer,
                 policy: AttentionPolicy, softmax_dtype: torch.dtype,
                 stats: AttentionStats | None) -> tuple[Tensor, Tensor, Tensor] | None:
    """The last query's top-k middle keys scored at distance ``policy.mid_distance`` (LM-Infinite Sec. 5.3):
    ``(logits [b, h, 1, kk], values [b, h, kk, d_head], key indices [b, h, 1, kk])``, or None without middle
    keys (keys at positions ``>= n_start`` and ``<= q_pos[-1] - window``)."""
    W, G, d = policy.window, policy.n_start, q.shape[-1]
    qi = q_pos[-1]
    mid = (k_pos >= G) & (k_pos <= qi - W)
    mid_idx = torch.nonzero(mid).flatten()
    if not mid_idx.numel():
        return None
    kk = min(policy.top_k, mid_idx.numel())
    km = k[:, :, mid_idx]
    ml = scorer.scores(q[:, :, -1:], km, torch.tensor([policy.mid_distance], device=q.device),
                       torch.zeros_like(mid_idx)).to(softmax_dtype)  # [b,h,1,n_mid]
    if stats is not None:
        stats.score_elements += ml.numel()
    top_v, top_i = ml.topk(kk, dim=-1)  # [b,h,1,kk]
    vm = v[:, :, mid_idx]
    sel_v = torch.gather(vm, 2, top_i[:, :, 0, :, None].expand(-1, -1, -1, d))  # [b,h,kk,d]
    return top_v, sel_v, mid_idx[top_i]


def _block_output(logits: Tensor, vb: Tensor, extra: tuple[Tensor, Tensor, Tensor] | None,
                  recorder: Recorder | None, layer_idx: int, qp: Tensor, kp: Tensor) -> Tensor:
    """Softmax of the masked block logits ``[b, h, nq_block, nk_block]`` times the block values; with ``extra``
    (:func:`_top_k_extra`) the last query row also attends to its top-k middle keys. Calls ``recorder``."""
    if extra is None:
        probs = torch.softmax(logits, dim=-1)
        o = probs.to(vb.dtype) @ vb
        if recorder is not None:
            recorder(layer_idx, qp, kp, logits, probs)
        return o
    top_v, sel_v, _ = extra
    o = torch.softmax(logits, dim=-1).to(vb.dtype) @ vb
    last = torch.cat([logits[:, :, -1:], top_v], dim=-1)
    pl = torch.softmax(last, dim=-1)
    nkb = vb.shape[2]
    o_last = pl[..., :nkb].to(vb.dtype) @ vb + pl[..., nkb:].to(vb.dtype) @ sel_v
    o[:, :, -1:] = o_last
    if recorder is not None:
        recorder(layer_idx, qp, kp, logits, torch.softmax(logits, dim=-1))
    return o


def top_k_middle_keys(q_last: Tensor, k: Tensor, k_pos: Tensor, q_position: int, scorer: Scorer,
                      policy: AttentionPolicy) -> Tensor:
    """Positions of the top-k middle keys chosen by the last query (LM-Infinite Sec. 5.3).

    Args:
        q_last: ``[batch, n_heads, 1, d_head]`` un-rotated last query; k: ``[batch, n_heads, nk, d_head]``.
        k_pos: ``[nk]`` positions; q_position: the query's absolute position.

    Returns:
        ``[batch, n_heads, k]`` long positions of the selected keys (highest logit first).
    """
    W, G = policy.window, policy.n_start
    mid_idx = torch.nonzero((k_pos >= G) & (k_pos <= q_position - W)).flatten()
    ml = scorer.scores(q_last, k[:, :, mid_idx], torch.tensor([policy.mid_distance], device=q_last.device),
                       torch.zeros_like(mid_idx))
    _, ti = ml[:, :, 0].topk(min(policy.top_k, mid_idx.numel()), dim=-1)
    return k_pos[mid_idx][ti]
