"""Hook points of lmsci's GPT and the hook plumbing shared with ``HFModel`` (:mod:`lmsci.models.hf`).

Split out of ``gpt.py`` (no behaviour change): :class:`HookPoint` (a named activation site, identity unless hook
functions are attached by ``GPT.hooks``), :func:`select_names` (exact name, glob or predicate),
TransformerLens's hook names as aliases (:data:`TRANSFORMER_LENS_ALIASES`, :func:`transformer_lens_name`,
:class:`HookCache`) and :func:`hook_plan` (resolve every name before anything is attached). The hook points of
the GPT and their shapes are listed in :mod:`lmsci.models.gpt`'s docstring.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from torch import Tensor

from lmsci.errors import ConfigError

HookFn = Callable[[Tensor, "HookPoint"], "Tensor | None"]
T = TypeVar("T")


# ----------------------------------------------------------------------------------------- hooks


class HookPoint:
    """A named activation site. Identity unless hook functions are attached (only via ``GPT.hooks``)."""

    __slots__ = ("name", "fns")

    def __init__(self, name: str):
        self.name = name
        self.fns: list[HookFn] = []

    @property
    def active(self) -> bool:
        return bool(self.fns)

    def __call__(self, x: Tensor) -> Tensor:
        for fn in self.fns:
            out = fn(x, self)
            if out is not None:
                if not isinstance(out, Tensor) or out.shape != x.shape:
                    got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
                    raise ValueError(f"hook on {self.name!r} returned {got}; expected a tensor of shape {tuple(x.shape)}")
                x = out
        return x

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r}, {len(self.fns)} fns)"


def select_names(name: str | Callable[[str], bool], table: Mapping[str, T]) -> list[tuple[str, T]]:
    """The entries of ``table`` that ``name`` selects: a predicate on names, an exact name, or a glob
    (``fnmatch``, when ``name`` has ``*?[``); ``[]`` when nothing matches (callers raise their own
    :class:`UnknownNameError`). Used by :meth:`GPT.hooks` (hook points) and ``HFModel.hooks`` (module paths)."""
    if callable(name):
        return [(n, v) for n, v in table.items() if name(n)]
    if name in table:
        return [(name, table[name])]
    if any(c in name for c in "*?["):
        return [(n, v) for n, v in table.items() if fnmatch.fnmatchcase(n, name)]
    return []


# TransformerLens's hook names (TransformerLensOrg/TransformerLens, ``hook_points.py`` and ``components/``:
# ``HookedTransformer.hook_embed``, ``TransformerBlock.hook_resid_pre`` ...) -> lmsci's, ``{i}`` the layer.
TRANSFORMER_LENS_ALIASES: dict[str, str] = {
    "hook_embed": "embed",                                        # token embedding (see transformer_lens_name)
    "blocks.{i}.hook_resid_pre": "blocks.{i}.resid_pre",          # [B, T, d_model]
    "blocks.{i}.attn.hook_attn_scores": "blocks.{i}.attn.scores",  # [B, n_heads, q, k], scaled, masked
    "blocks.{i}.attn.hook_pattern": "blocks.{i}.attn.pattern",    # [B, n_heads, q, k]
    "blocks.{i}.attn.hook_z": "blocks.{i}.attn.z",                # [B, T, n_heads, d_head]
    "blocks.{i}.hook_attn_out": "blocks.{i}.attn.out",            # [B, T, d_model]
    "blocks.{i}.hook_resid_mid": "blocks.{i}.resid_mid",          # [B, T, d_model]
    "blocks.{i}.mlp.hook_pre": "blocks.{i}.mlp.pre",              # [B, T, d_mlp] (the gate for SwiGLU)
    "blocks.{i}.mlp.hook_post": "blocks.{i}.mlp.post",            # [B, T, d_mlp]
    "blocks.{i}.hook_mlp_out": "blocks.{i}.mlp.out",              # [B, T, d_model]
    "blocks.{i}.hook_resid_post": "blocks.{i}.resid_post",        # [B, T, d_model]
    "ln_final.hook_normalized": "final",                          # [B, T, d_model], after weight and bias
}
"""TransformerLens's hook names (TransformerLensOrg/TransformerLens: ``HookedTransformer``, ``components/`` and
``hook_points.py``) accepted as aliases of lmsci's hook points, ``{i}`` a layer index (or a glob). Only names
with an lmsci equivalent, same tensor and shape: TransformerLens also applies its scores hook after scaling and
the causal mask, its ``hook_z`` is ``[batch, pos, head_index, d_head]``, its ``mlp.hook_pre`` of a gated MLP is
the gate, and its ``ln_final.hook_normalized`` includes the norm's weight and bias."""
_TL_PATTERNS = [(re.compile(k.replace(".", r"\.").replace("{i}", r"([0-9*?\[\]!-]+)") + "$"), v)
                for k, v in TRANSFORMER_LENS_ALIASES.items()]


def transformer_lens_name(name: str, positions_in_embed: bool = False) -> str | None:
    """The lmsci hook name of a TransformerLens hook name (:data:`TRANSFORMER_LENS_ALIASES`), or None when
    ``name`` is not one. Layer globs carry over (``"blocks.*.attn.hook_pattern"`` -> ``"blocks.*.attn.pattern"``).

    TransformerLens names without an lmsci hook point have no alias: ``hook_pos_embed``, ``attn.hook_q`` /
    ``hook_k`` / ``hook_v`` / ``hook_result``, ``hook_attn_in``, ``hook_mlp_in``, ``ln*.hook_scale``.

    Args:
        name: a hook name, e.g. ``"blocks.0.hook_resid_post"``.
        positions_in_embed: lmsci's ``embed`` adds learned positions (``GPTConfig.pos == "learned"``), so it is
            TransformerLens's ``blocks.0.hook_resid_pre``, not its ``hook_embed`` (the token embedding alone).

    Raises:
        ConfigError: ``hook_embed`` when ``positions_in_embed`` (the token embedding alone is not hooked).
    """
    for pat, target in _TL_PATTERNS:
        m = pat.match(name)
        if m is None:
            continue
        if name == "hook_embed" and positions_in_embed:
            raise ConfigError("hook", name, "a name lmsci hooks: this GPT's 'embed' adds learned positions "
                              "(TransformerLens's 'blocks.0.hook_resid_pre'); the token embedding alone has no hook")
        return target.replace("{i}", m.group(1)) if m.groups() else target
    return None


class HookCache(dict):
    """The dict that :meth:`GPT.hooks` and ``HFModel.hooks`` record into; a TransformerLens name missing from it
    is looked up under its lmsci name (``cache["blocks.0.hook_resid_post"]`` is ``cache["blocks.0.resid_post"]``)."""

    #: set by :meth:`GPT.hooks` for a GPT with learned positions (its ``embed`` is not TransformerLens's ``hook_embed``)
    positions_in_embed = False

    def __missing__(self, key: str) -> Tensor:
        try:
            alias = transformer_lens_name(key, self.positions_in_embed) if isinstance(key, str) else None
        except ConfigError as e:
            raise KeyError(f"{key}: {e}") from None
        if alias is not None and alias in self:
            return self[alias]
        raise KeyError(key)


def hook_plan(fwd_hooks: Iterable[tuple[Any, Callable]] | Mapping[Any, Callable],
              cache: Iterable[str] | str | Callable[[str], bool] | None,
              resolve: Callable[[Any], list[T]]) -> tuple[list[tuple[T, Callable]], HookCache]:
    """Resolve every name of ``fwd_hooks`` and ``cache`` (raising before anything is attached) into
    ``(target, fn)`` pairs, plus the dict the cache records into: the recording function stores
    ``activation.detach()`` under ``hook.name``. Shared by :meth:`GPT.hooks` and ``HFModel.hooks``."""
    items = list(fwd_hooks.items()) if isinstance(fwd_hooks, Mapping) else list(fwd_hooks)
    plan: list[tuple[T, Callable]] = [(t, fn) for name, fn in items for t in resolve(name)]
    store: dict[str, Tensor] = HookCache()
    if cache is not None:
        names = [cache] if isinstance(cache, str) or callable(cache) else list(cache)

        def record(x: Tensor, hook: Any) -> None:
            store[hook.name] = x.detach()

        plan += [(t, record) for n in names for t in resolve(n)]
    return plan, store
