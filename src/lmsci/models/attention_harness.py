"""The blockwise attention harness: full attention, LM-Infinite, StreamingLLM attention sinks and sliding
windows as attention policies on lmsci GPT and Hugging Face models.

It lives in ``models`` because both instruments (:mod:`lmsci.measure.attention`) and interventions
(:mod:`lmsci.methods.lm_infinite`) run models through it (docs/architecture.md: measure and methods are siblings).

Source: Han, Wang, Peng, Xiong, Chen, Ji, Wang, "LM-Infinite: Zero-Shot Extreme Length Generalization
for Large Language Models", NAACL 2024, arXiv 2308.16137, Section 4 (Lambda-shaped mask, distance
ceiling), Section 5.3 / Appendix A (top-k middle tokens); Xiao et al., "Efficient Streaming Language
Models with Attention Sinks", ICLR 2024, arXiv 2309.17453, Section 3.2 (positions re-assigned within
the cache).

The policies, the positional scorers and :func:`policy_attention` live in :mod:`lmsci.models.attention_core`
(re-exported here), which the Hugging Face backend :mod:`lmsci.models.hf_attention` imports; this module adds
the streaming sessions and the patches, and imports the backend (imports run one way).

The harness is one function, :func:`policy_attention`, that takes *un-rotated* queries, keys and values
with their absolute positions and an :class:`AttentionPolicy` and computes attention block by block:
each block of ``block_size`` queries scores only the keys its policy can see (the first ``n_global``
positions and the recent window), so a long input costs O(n_global + n_local + block_size) score
elements per query and no n x n mask is ever built. A positional encoder (:class:`RoPEScorer`,
:class:`ALiBiScorer`) scores a query "as if at position a" against a key "as if at position b", which
expresses every policy's position treatment:

* full attention: a = i, b = j (true distance i - j);
* LM-Infinite distance ceiling: keys with i - j >= d_max are scored with a = d_max, b = 0, i.e. the
  query rotated to the fixed distance d_max against the un-rotated key (RoPE), or the bias clipped at
  ``-m * d_max`` (ALiBi) - exactly the public code's ``stationary_query_states``;
* top-k middle tokens: the last query is scored against every masked middle key with a = d_mid, b = 0;
  the ``top_k`` largest logits per head join the softmax (layers >= ``top_k_from_layer``);
* attention sinks: positions re-assigned within a cache of ``n_local`` entries: a sink key j is seen
  from the query at position min(i, n_local - 1), recent keys keep their true distance.

Patches (:class:`AttentionPatch`) install the harness on an lmsci GPT (``blocks[i].attn.attend``,
RoPE or ALiBi) or on any family of the architecture map :mod:`lmsci.models.arch` (Llama, Mistral,
Mixtral, Qwen2/3, Gemma 1/2/3, OLMo 2, Phi-3, GPT-NeoX, GPT-2) through ``transformers.AttentionInterface``
(:mod:`lmsci.models.hf_attention`): the family's own attention module runs, with its norms, rotary
embedding, soft-cap and sliding window, and hands its queries and keys to the harness.
:meth:`AttentionPatch.remove` restores the original attention, so outputs are bit-identical afterwards.
:meth:`AttentionPatch.stream` opens a streaming session whose KV cache (un-rotated keys, absolute
positions) is trimmed to ``n_global + n_local`` entries after every call (and to the model's own
window), so memory stays bounded for any stream length (unless top-k needs the middle keys).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import torch
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.models.attention_core import (  # the core, re-exported (policies, scorers, policy_attention)
    POLICY_KINDS, ALiBiScorer, AttentionPolicy, AttentionStats, PolicyKind, Recorder, RoPEScorer, Scorer, alibi_slopes,
    attention_sinks_policy, full_policy, lambda_mask_policy, lm_infinite_policy, policy_attention, rope_cos_sin,
    rotate_half, sliding_window_policy, top_k_middle_keys,
)

# --------------------------------------------------------------------------------------------
# Streaming (bounded KV cache)
# --------------------------------------------------------------------------------------------


@dataclass
class LayerCache:
    """One layer's cache: un-rotated keys/values ``[batch, n_kv_heads, m, d_head]`` and positions ``[m]``."""

    k: Tensor
    v: Tensor
    pos: Tensor


@dataclass
class StreamingSession:
    """State of a streaming run: absolute offset and per-layer caches (see :meth:`AttentionPatch.stream`).

    Attributes:
        offset: absolute position of the next token fed.
        caches: layer index -> :class:`LayerCache`.
        max_cache: the largest number of cached entries seen in any layer (memory check).
    """

    patch: AttentionPatch
    offset: int = 0
    caches: dict[int, LayerCache] = field(default_factory=dict)
    max_cache: int = 0

    def feed(self, input_ids: Tensor) -> Tensor:
        """Run ``input_ids`` ``[batch, n]`` (the continuation of the stream) and return logits
        ``[batch, n, vocab_size]``; keys/values are cached and trimmed to the policy's budget."""
        out = self.patch._call_model(input_ids)
        self.offset += input_ids.shape[1]
        return out

    def cache_len(self) -> int:
        """Entries currently cached per layer (max over layers)."""
        return max((c.pos.numel() for c in self.caches.values()), default=0)

    def _attend(self, layer_idx: int, q: Tensor, k: Tensor, v: Tensor, rel_pos: Tensor, scorer: Scorer,
                policy: AttentionPolicy, stats: AttentionStats | None, recorder: Recorder | None,
                model_window: int | None = None, softmax_dtype: torch.dtype = torch.float32) -> Tensor:
        pos = rel_pos + self.offset
        c = self.caches.get(layer_idx)
        if c is not None:
            k_all = torch.cat([c.k, k], dim=2)
            v_all = torch.cat([c.v, v], dim=2)
            p_all = torch.cat([c.pos, pos])
        else:
            k_all, v_all, p_all = k, v, pos
        if policy.kind == "attention_sinks" and c is not None:
            # StreamingLLM: positions are indices within the cache; the cache already holds exactly the
            # sinks and the recent keys (token-by-token feeding), so score with cache indices.
            if q.shape[2] != 1:
                raise ConfigError("stream chunk", q.shape[2], "1 token per call for attention_sinks")
            cache_pos = torch.arange(p_all.numel(), device=q.device)
            out = policy_attention(q, k_all, v_all, cache_pos[-q.shape[2]:], cache_pos, scorer,
                                   replace(policy, kind="full"), layer_idx, recorder, stats,
                                   softmax_dtype=softmax_dtype)
        else:
            out = policy_attention(q, k_all, v_all, pos, p_all, scorer, policy, layer_idx, recorder, stats,
                                   model_window=model_window, softmax_dtype=softmax_dtype)
        budget = policy.cache_budget()
        keep = None
        last = int(p_all[-1])
        if budget is not None:
            G, W = policy.n_start, policy.window
            keep = (p_all < G) | (p_all > last - W)
            if policy.kind == "attention_sinks":
                keep = (p_all < G) | (p_all > last - W + 1)  # leave room for the next token
        if model_window is not None and not policy.top_k:
            # the model's own window: the next query (at last + 1) sees keys with j > last + 1 - window
            inside = p_all > last - model_window + 1
            keep = inside if keep is None else keep & inside
        if keep is not None:
            k_all, v_all, p_all = k_all[:, :, keep], v_all[:, :, keep], p_all[keep]
        self.caches[layer_idx] = LayerCache(k_all, v_all, p_all)
        self.max_cache = max(self.max_cache, p_all.numel())
        return out


# --------------------------------------------------------------------------------------------
# Model adapters and patches
# --------------------------------------------------------------------------------------------


def _is_lmsci_gpt(model: Any) -> bool:
    blocks = getattr(model, "blocks", None)
    return blocks is not None and len(blocks) > 0 and hasattr(blocks[0], "attn") and hasattr(blocks[0].attn,
                                                                                              "attend")


def gpt_scorer(attn: Any, cfg: Any) -> Scorer:
    """The positional scorer of an lmsci GPT attention module (``cfg.pos`` in ``rope``/``alibi``).

    Uses the module's own RoPE tables / ALiBi slopes when it exposes them, else the standard ones.

    Raises:
        ConfigError: ``cfg.pos`` is neither ``"rope"`` nor ``"alibi"``.
    """
    d_head = cfg.d_head or cfg.d_model // cfg.n_heads
    scale = float(getattr(attn, "scale", d_head ** -0.5))
    if cfg.pos == "rope":
        own = getattr(attn, "rope", None) or getattr(attn, "rotary", None)
        if own is not None and hasattr(own, "cos_sin"):
            return RoPEScorer(own.cos_sin, scale)
        return RoPEScorer(rope_cos_sin(d_head, getattr(cfg, "rope_base", 10000.0)), scale)
    if cfg.pos == "alibi":
        slopes = getattr(attn, "slopes", None)
        if slopes is None:
            slopes = alibi_slopes(cfg.n_heads)
        return ALiBiScorer(torch.as_tensor(slopes).flatten().float(), scale)
    raise ConfigError("model.pos", cfg.pos, "'rope' or 'alibi' (relative encodings LM-Infinite patches)")


def hf_scorer(base: Any, attn: Any) -> Scorer:
    """RoPE scorer of a Hugging Face model (its ``rotary_emb`` tables and ``rotate_half``; partial rotary
    as in GPT-NeoX/Pythia when the tables are narrower than ``head_dim``)."""
    rot = base.rotary_emb
    mod = sys.modules[type(attn).__module__]
    rh = getattr(mod, "rotate_half", rotate_half)
    dummy = next(attn.parameters())

    def cos_sin(pos: Tensor) -> tuple[Tensor, Tensor]:
        cos, sin = rot(dummy, pos[None, :].to(dummy.device))
        return cos[0], sin[0]

    def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        r = cos.shape[-1]
        if r == x.shape[-1]:
            return x * cos + rh(x) * sin
        xr, xp = x[..., :r], x[..., r:]
        return torch.cat([xr * cos + rh(xr) * sin, xp], dim=-1)

    return RoPEScorer(cos_sin, float(attn.scaling), rotate)


class AttentionPatch:
    """An attention policy installed on a model; removable; usable as a context manager.

    Supports lmsci GPT models with ``pos in ("rope", "alibi")`` (replaces ``blocks[i].attn.attend``)
    and every family of the architecture map :mod:`lmsci.models.arch` (Llama, Mistral, Mixtral, Qwen2,
    Qwen3, Gemma, Gemma 2, Gemma 3 text, OLMo 2, Phi-3, GPT-NeoX, GPT-2): there the family's own
    attention module runs unchanged and dispatches, through ``transformers.AttentionInterface``, to the
    policy (:mod:`lmsci.models.hf_attention`), with the family's norms, rotary embedding, soft-cap and
    sliding window kept (the model's window and the policy's combine as the narrower).

    Attributes:
        model: the patched model. policy: the :class:`AttentionPolicy`.
        stats: :class:`AttentionStats` counters. recorder: optional :data:`Recorder`.
        session: the open :class:`StreamingSession` or None.
        arch: the :class:`~lmsci.models.arch.ModelArch` the patch asked.
        windows: layer -> the model's own sliding window (Hugging Face families; empty for lmsci GPT).

    Raises:
        ConfigError: unsupported family (names it and the supported list), a GPT without RoPE/ALiBi,
            a ``transformers`` version outside the supported range, a policy that does not apply to
            the family (distance ceiling or sinks on absolute positions; a window beyond an
            absolute-position model's positions); and, while a Hugging Face model is patched, a
            padded ``attention_mask``, rows of different ``position_ids``, a filled HF cache, or
            positions beyond an absolute-position model's table (all before any work).
    """

    def __init__(self, model: Any, policy: AttentionPolicy):
        from lmsci.models.arch import arch_of

        if type(model).__name__ == "HFModel":
            model = model.model
        self.model, self.policy = model, policy
        self.stats = AttentionStats()
        self.recorder: Recorder | None = None
        self.session: StreamingSession | None = None
        self._saved: list[tuple[Any, str, bool, Any]] = []
        self._backend: Any = None
        if _is_lmsci_gpt(model):
            self.kind = "gpt"
            cfg = model.cfg
            self._modules = [blk.attn for blk in model.blocks]
            self._scorers = [gpt_scorer(a, cfg) for a in self._modules]
            self.arch = None
        else:
            from lmsci.models.hf_attention import HFPolicyBackend

            self.arch = arch_of(model)
            self.kind = "hf"
            self._backend = HFPolicyBackend(self, self.arch)
            self._modules = self._backend.modules
        self.applied = False

    @property
    def windows(self) -> dict[int, int | None]:
        return dict(self._backend.windows) if self._backend is not None else {}

    # -- install / remove ---------------------------------------------------------------------
    def apply(self) -> AttentionPatch:
        """Install the policy on every attention layer (idempotent)."""
        if self.applied:
            return self
        if self.kind == "gpt":
            for i, m in enumerate(self._modules):
                had = "attend" in m.__dict__
                self._saved.append((m, "attend", had, m.__dict__.get("attend")))
                object.__setattr__(m, "attend", self._gpt_attend(i))
        else:
            self._backend.apply()
        self.applied = True
        return self

    def remove(self) -> None:
        """Restore the original attention exactly."""
        for m, name, had, orig in reversed(self._saved):
            if had:
                object.__setattr__(m, name, orig)
            else:
                m.__dict__.pop(name, None)
        self._saved.clear()
        if self._backend is not None and self.applied:
            self._backend.remove()
        self.applied = False
        self.session = None

    def __enter__(self) -> AttentionPatch:
        return self.apply()

    def __exit__(self, *exc: Any) -> None:
        self.remove()

    # -- streaming ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def stream(self) -> Iterator[StreamingSession]:
        """Open a streaming session: feed chunks with ``session.feed(ids)``; caches stay bounded by
        ``policy.cache_budget()`` entries per layer (unbounded for ``full`` or when top-k is on; a
        layer's own sliding window bounds it too)."""
        if not self.applied:
            self.apply()
        self.session = StreamingSession(self)
        try:
            yield self.session
        finally:
            self.session = None

    def _call_model(self, input_ids: Tensor) -> Tensor:
        if self.kind == "gpt":
            out = self.model(input_ids)
        else:
            n = input_ids.shape[1]
            off = self.session.offset if self.session is not None else 0
            pos = torch.arange(off, off + n, device=input_ids.device)[None].expand(input_ids.shape[0], -1)
            out = self.model(input_ids=input_ids, position_ids=pos, use_cache=False)
        return out if isinstance(out, Tensor) else out.logits

    # -- the replacement functions (lmsci GPT) ------------------------------------------------
    def _run(self, i: int, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        if self.session is not None:
            return self.session._attend(i, q, k, v, q_pos, self._scorers[i], self.policy, self.stats,
                                        self.recorder, softmax_dtype=torch.promote_types(q.dtype, torch.float32))
        return policy_attention(q, k, v, q_pos, k_pos, self._scorers[i], self.policy, i, self.recorder,
                                self.stats, softmax_dtype=torch.promote_types(q.dtype, torch.float32))

    def _gpt_attend(self, i: int) -> Callable:
        def attend(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
            return self._run(i, q, k, v, q_pos.flatten()[-q.shape[2]:], k_pos.flatten()[-k.shape[2]:])

        return attend


def apply_policy(model: Any, policy: AttentionPolicy) -> AttentionPatch:
    """Install ``policy`` on ``model`` and return the patch (call ``.remove()`` to undo)."""
    return AttentionPatch(model, policy).apply()


def remove_patch(patch: AttentionPatch) -> None:
    """Undo :func:`apply_policy` (or :func:`lmsci.methods.lm_infinite.apply_lm_infinite`)."""
    patch.remove()


@contextlib.contextmanager
def patched(model: Any, policy: AttentionPolicy) -> Iterator[AttentionPatch]:
    """Context manager installing any :class:`AttentionPolicy` (full, lm_infinite, sliding, sinks)."""
    p = apply_policy(model, policy)
    try:
        yield p
    finally:
        p.remove()


def streaming_reference_nll(patch: AttentionPatch, input_ids: Tensor, chunk: int = 1) -> Tensor:
    """Per-token NLL ``[batch, n-1]`` (nats) of feeding ``input_ids`` through a streaming session in
    chunks of ``chunk`` tokens (StreamingLLM's evaluation protocol when ``chunk == 1``)."""
    outs = []
    with patch.stream() as s:
        for a in range(0, input_ids.shape[1], chunk):
            outs.append(s.feed(input_ids[:, a:a + chunk]))
    logits = torch.cat(outs, dim=1)[:, :-1]
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2).float(), input_ids[:, 1:], reduction="none")


__all__ = [
    "AttentionPolicy", "AttentionPatch", "AttentionStats", "StreamingSession", "LayerCache", "RoPEScorer",
    "ALiBiScorer", "policy_attention", "top_k_middle_keys", "full_policy", "lm_infinite_policy",
    "sliding_window_policy", "lambda_mask_policy", "attention_sinks_policy", "apply_policy", "remove_patch", "patched", "rope_cos_sin", "alibi_slopes", "rotate_half", "gpt_scorer", "hf_scorer",
    "streaming_reference_nll",
]
