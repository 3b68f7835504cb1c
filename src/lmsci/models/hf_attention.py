"""Attention policies on Hugging Face models through ``transformers.AttentionInterface``.

The family's own attention module runs unchanged - projections (separate or fused), q/k norms
(per head or full width), rotary embedding (full or partial, per layer type) - and then calls the
attention function registered here as ``"lmsci_policy"``, which receives the queries and keys *after*
the family's norms and rotary embedding, together with the layer's ``scaling``, ``sliding_window`` and
``softcap``. The function computes the policy with the blockwise harness
(:func:`lmsci.models.attention_core.policy_attention`):

* RoPE families: the rotation is undone at the true positions with the layer's own tables
  (``x = (y cos - rotate_half(y) sin) / (cos^2 + sin^2)``; exact up to rounding because a RoPE rotation
  is orthogonal, and the division also undoes a table scale such as YaRN's ``attention_scaling``) and
  the harness re-applies it at the distance the policy asks for (LM-Infinite's ceiling, sink positions),
  with the same tables (:class:`~lmsci.models.attention_core.RoPEScorer`; partial rotary rotates the
  first ``rotary_dim`` channels only).
* Absolute positions (GPT-2): keys and queries already carry their positions; the harness scores
  plain dot products (Lambda mask and sliding window apply; no distance ceiling, no sink positions).
* The model's own sliding window is intersected with the policy's (a key is visible only if both allow
  it): the narrower of the two wins, and :attr:`HFPolicyBackend.windows` records each layer's window.
* Soft-capping ``cap * tanh(logit / cap)`` is applied to every logit the harness computes.
* Precision: float16/bfloat16 models are computed in float32 and cast back; the softmax runs in
  float32, or in float64 for a float64 model (Hugging Face's eager attention takes its softmax in
  float32 even then: compare float64 runs under :func:`full_precision_softmax`).
* On a model loaded with ``sdpa``, a ``full`` policy on a layer without window or soft-cap, outside a
  streaming session and without a recorder, is plain causal attention: it runs
  ``torch.nn.functional.scaled_dot_product_attention`` directly, as the model's own ``sdpa`` path does.

Source of the interface: Hugging Face transformers, "Attention Interface" documentation
(``AttentionInterface.register``), v5.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmsci.errors import ConfigError
from lmsci.models.arch import ModelArch
from lmsci.models.attention_core import RoPEScorer, policy_attention, rotate_half

ATTN_NAME = "lmsci_policy"
_OWNERS: "weakref.WeakKeyDictionary[nn.Module, tuple[HFPolicyBackend, int]]" = weakref.WeakKeyDictionary()
_REGISTERED = False


def _register() -> None:
    global _REGISTERED
    if not _REGISTERED:
        from transformers import AttentionInterface

        AttentionInterface.register(ATTN_NAME, lmsci_policy_attention)
        _REGISTERED = True


def lmsci_policy_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                           dropout: float = 0.0, scaling: float | None = None, sliding_window: int | None = None,
                           softcap: float | None = None, **kwargs: Any) -> tuple[Tensor, None]:
    """The registered attention function (``attn_implementation="lmsci_policy"``).

    Args:
        module: the family's attention module (identifies the patch and layer).
        query: ``[batch, n_heads, n, d_head]`` after the family's q norm and rotary embedding.
        key, value: ``[batch, n_kv_heads, n, d_head]`` (keys normed and rotated likewise).
        scaling: the logit scale. sliding_window: the layer's own window or None. softcap: the
            layer's logit soft-cap or None.

    Returns:
        ``(attn_output [batch, n, n_heads, d_head], None)``.

    Raises:
        ConfigError: the module belongs to no active patch (the model's config was switched to this
            implementation by hand), or keys longer than queries (a filled HF cache).
    """
    owner = _OWNERS.get(module)
    if owner is None:
        raise ConfigError("attn_implementation", ATTN_NAME,
                          "set only by lmsci.models.attention_harness.AttentionPatch (apply a policy instead)")
    backend, i = owner
    return backend.attend(i, module, query, key, value, scaling, sliding_window, softcap)


@contextlib.contextmanager
def full_precision_softmax() -> Iterator[None]:
    """Within the block, ``torch.nn.functional.softmax(x, dtype=torch.float32)`` on a float64 ``x`` stays in
    float64: the families' own eager attention then runs in float64 throughout (it otherwise rounds
    its attention logits to float32, a ~1e-7 relative error that would hide a 1e-10 parity check).
    Other inputs are untouched."""
    orig = F.softmax

    def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: torch.dtype | None = None):
        if isinstance(input, Tensor) and input.dtype == torch.float64:
            dtype = None
        return orig(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    F.softmax = softmax
    try:
        yield
    finally:
        F.softmax = orig


@dataclass
class DotScorer:
    """Absolute-position logits ``q . k * scale`` (positions already in the hidden states: GPT-2)."""

    scale: float

    def scores(self, q: Tensor, k: Tensor, qa: Tensor, ka: Tensor) -> Tensor:
        return (q @ k.transpose(-1, -2)) * self.scale


@dataclass
class SoftCapScorer:
    """``cap * tanh(logit / cap)`` on top of another scorer (Gemma 2 attention-logit soft-capping)."""

    inner: Any
    cap: float

    def scores(self, q: Tensor, k: Tensor, qa: Tensor, ka: Tensor) -> Tensor:
        return torch.tanh(self.inner.scores(q, k, qa, ka) / self.cap) * self.cap


class HFPolicyBackend:
    """Installs an :class:`~lmsci.models.attention_harness.AttentionPatch` on a Hugging Face model.

    Args:
        patch: the patch being installed (an ``AttentionPatch``: its ``policy``, ``recorder``, ``stats``, ...; typed
            ``Any`` here so that this backend imports only :mod:`lmsci.models.attention_core`, never the harness
            that constructs it).
        arch: the model's architecture map entry.

    Attributes:
        arch: the resolved :class:`~lmsci.models.arch.ModelArch`.
        windows: layer -> the model's own sliding window seen at the last call (None: none).
        positions: ``[n]`` positions of the current call (from ``position_ids`` or ``arange``).
    """

    def __init__(self, patch: Any, arch: ModelArch):
        self.patch, self.arch = patch, arch
        self.model = arch.model
        self.n_layers = arch.n_layers
        self.modules = [arch.attention(i) for i in range(self.n_layers)]
        self.tables = [arch.rotary_tables(i) for i in range(self.n_layers)]
        mod = sys.modules[type(self.modules[0]).__module__]
        self.rotate_half = getattr(mod, "rotate_half", rotate_half)
        self.windows: dict[int, int | None] = {i: arch.sliding_window(i) for i in range(self.n_layers)}
        self.positions: Tensor | None = None
        self._saved_impl: list[tuple[Any, Any]] = []
        self.original_impl = getattr(self.model.config, "_attn_implementation", None) or "eager"
        self._hook: Any = None
        self._check_policy()

    # ---- validation --------------------------------------------------------------------------
    def _check_policy(self) -> None:
        pol = self.patch.policy
        if self.arch.positions == "absolute":
            if pol.kind in ("lm_infinite", "attention_sinks"):
                what = "a distance ceiling" if pol.kind == "lm_infinite" else "sink positions re-assigned in the cache"
                raise ConfigError(
                    "policy.kind", pol.kind,
                    f"'full', 'lambda_mask' or 'sliding_window' on {self.arch.name} (absolute positions have no "
                    f"relative distance, so {what} does not apply; lambda_mask_policy() is LM-Infinite's "
                    "Lambda mask without the ceiling)")
            mp = self.arch.max_positions
            if mp is not None and pol.window is not None and pol.window > mp:
                raise ConfigError("policy.n_local", pol.n_local,
                                  f"at most the model's {mp} positions ({self.arch.name}, absolute positions)")

    # ---- install / remove --------------------------------------------------------------------
    def _configs(self) -> list[Any]:
        seen: dict[int, Any] = {id(self.model.config): self.model.config}
        for m in self.modules:
            c = getattr(m, "config", None)
            if c is not None:
                seen.setdefault(id(c), c)
        return list(seen.values())

    def apply(self) -> None:
        _register()
        for i, m in enumerate(self.modules):
            if m in _OWNERS:
                raise ConfigError("model", type(self.model).__name__,
                                  "a model without another active attention patch (remove it first)")
            _OWNERS[m] = (self, i)
        for c in self._configs():
            self._saved_impl.append((c, c._attn_implementation_internal))
            c._attn_implementation_internal = ATTN_NAME
        base = self.arch.module(self.arch.family.blocks.rsplit(".", 1)[0]) if "." in self.arch.family.blocks \
            else self.model
        self._hook = base.register_forward_pre_hook(self._pre_forward, with_kwargs=True)

    def remove(self) -> None:
        for c, impl in reversed(self._saved_impl):
            c._attn_implementation_internal = impl
        self._saved_impl.clear()
        for m in self.modules:
            if _OWNERS.get(m, (None,))[0] is self:
                del _OWNERS[m]
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self.positions = None

    # ---- per forward -------------------------------------------------------------------------
    def _pre_forward(self, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Refuse what the patched attention cannot do exactly, before any work; record positions.

        Raises:
            ConfigError: a padded ``attention_mask``; rows with different ``position_ids``; a filled
                ``past_key_values``; positions beyond an absolute-position model's table.
        """
        mask = kwargs.get("attention_mask")
        if isinstance(mask, Tensor) and mask.dim() == 2 and not bool(mask.bool().all()):
            raise ConfigError("attention_mask", "a mask with padded (zero) positions",
                              "None or all ones under an attention patch (no padding support): run sequences "
                              "of different lengths one at a time")
        pos = kwargs.get("position_ids")
        if isinstance(pos, Tensor) and pos.dim() == 2 and pos.shape[0] > 1 and not bool((pos == pos[:1]).all()):
            raise ConfigError("position_ids", "rows with different positions",
                              "the same positions for every row under an attention patch")
        pkv = kwargs.get("past_key_values")
        if pkv is not None and hasattr(pkv, "get_seq_length") and pkv.get_seq_length() > 0:
            raise ConfigError("past_key_values", "a filled HF cache",
                              "None: decode through AttentionPatch.stream() (bounded cache)")
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        n = int(ids.shape[1])
        if isinstance(pos, Tensor):
            p = pos.reshape(-1, pos.shape[-1])[0].long()
        else:
            p = torch.arange(n, device=ids.device)
        mp = self.arch.max_positions
        if mp is not None and n and int(p[-1]) >= mp:
            raise ConfigError("sequence length", int(p[-1]) + 1,
                              f"at most the model's {mp} positions ({self.arch.name}, absolute positions)")
        self.positions = p
        kwargs["use_cache"] = False
        kwargs["past_key_values"] = None
        return args, kwargs

    def _scorer(self, i: int, module: nn.Module, scaling: float, softcap: float | None) -> Any:
        tables = self.tables[i]
        if tables is None:
            sc: Any = DotScorer(scaling)
        else:
            rh = self.rotate_half

            def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
                cos, sin = cos.to(x.dtype), sin.to(x.dtype)
                r = cos.shape[-1]
                if r == x.shape[-1]:
                    return x * cos + rh(x) * sin
                xr, xp = x[..., :r], x[..., r:]
                return torch.cat([xr * cos + rh(xr) * sin, xp], dim=-1)

            sc = RoPEScorer(tables, scaling, rotate)
        return SoftCapScorer(sc, float(softcap)) if softcap else sc

    def _unrotate(self, i: int, x: Tensor, pos: Tensor) -> Tensor:
        cos, sin = self.tables[i](pos)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        r = cos.shape[-1]
        rh = self.rotate_half
        xr = x[..., :r]
        back = (xr * cos - rh(xr) * sin) / (cos * cos + sin * sin)
        return back if r == x.shape[-1] else torch.cat([back, x[..., r:]], dim=-1)

    def attend(self, i: int, module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
               scaling: float | None, sliding_window: int | None, softcap: float | None) -> tuple[Tensor, None]:
        patch, policy = self.patch, self.patch.policy
        n = query.shape[2]
        if key.shape[2] != n:
            raise ConfigError("past_key_values", f"{key.shape[2]} keys for {n} queries",
                              "no HF cache under an attention patch: decode through AttentionPatch.stream()")
        scale = float(scaling if scaling is not None else query.shape[-1] ** -0.5)
        window = int(sliding_window) if sliding_window else None
        self.windows[i] = window
        session = patch.session
        if (policy.kind == "full" and self.original_impl == "sdpa" and window is None and not softcap
                and session is None and patch.recorder is None):
            rep = query.shape[1] // key.shape[1]
            k, v = (key, value) if rep == 1 else (key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1))
            o = F.scaled_dot_product_attention(query, k, v, is_causal=n > 1, scale=scale)
            if patch.stats is not None:
                patch.stats.calls += 1
            return o.transpose(1, 2).contiguous(), None
        pos = self.positions
        if pos is None or pos.numel() != n:
            pos = torch.arange(n, device=query.device)
        pos = pos.to(query.device)
        dt = query.dtype
        work = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt
        q, k, v = query.to(work), key.to(work), value.to(work)
        sm = torch.promote_types(work, torch.float32)
        if self.tables[i] is not None:
            q, k = self._unrotate(i, q, pos), self._unrotate(i, k, pos)
        scorer = self._scorer(i, module, scale, softcap)
        if session is not None:
            o = session._attend(i, q, k, v, pos - session.offset, scorer, policy, patch.stats, patch.recorder,
                                model_window=window, softmax_dtype=sm)
        else:
            o = policy_attention(q, k, v, pos, pos, scorer, policy, i, patch.recorder, patch.stats,
                                 model_window=window, softmax_dtype=sm)
        return o.to(dt).transpose(1, 2).contiguous(), None


__all__ = ["ATTN_NAME", "HFPolicyBackend", "full_precision_softmax", "lmsci_policy_attention", "DotScorer", "SoftCapScorer"]
