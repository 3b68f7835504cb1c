"""The architecture map: where each causal-LM family keeps its parts, so interventions never guess.

Every intervention that reaches inside a model (attention policies and streaming decode in
:mod:`lmsci.models.attention_harness`, and any later hook-based method) asks :func:`arch_of` for a
:class:`ModelArch`: the family's embedding, blocks, attention modules, projections (separate or fused
q/k/v), per-head or full-width q/k norms, rotary embedding (full or partial, per layer type), attention
logit soft-capping, per-layer sliding windows, MLPs, final norm and LM head, each named by its module
path. A model whose family is not in :data:`FAMILIES` is refused with a
:class:`~lmsci.errors.ConfigError` naming the family and the supported list; so is a ``transformers``
version outside :data:`TRANSFORMERS_RANGE`.

Families (the ``transformers`` ``model_type``; each has a float64 parity test in
``tests/models/test_arch_parity.py``: a no-op policy reproduces the unpatched logits, streaming decode
reproduces the full-sequence patched logits, batch 1 equals batch 4):

=============  ==========================  ===============  ==========================================
family         attention                   positions        family-specific semantics kept
=============  ==========================  ===============  ==========================================
llama          q/k/v/o_proj, GQA           RoPE             rope scaling tables (``attention_scaling``)
mistral        q/k/v/o_proj, GQA           RoPE             ``config.sliding_window`` on every layer
mixtral        q/k/v/o_proj, GQA, MoE MLP  RoPE             ``config.sliding_window`` on every layer
qwen2          q/k/v/o_proj (bias), GQA    RoPE             per-layer sliding windows (``layer_types``)
qwen3          + per-head q_norm/k_norm    RoPE             per-layer sliding windows
gemma          q/k/v/o_proj, MQA/GQA       RoPE             embedding scaled by sqrt(d_model)
gemma2         q/k/v/o_proj                RoPE             logit soft-cap; alternating sliding windows
gemma3_text    + per-head q_norm/k_norm    RoPE per type    local/global rope bases; sliding windows
olmo2          + full-width q_norm/k_norm  RoPE             norms before the head split
phi3           fused ``qkv_proj``          partial RoPE     ``config.sliding_window``
gpt_neox       fused ``query_key_value``   partial RoPE     parallel residual
gpt2           fused ``c_attn`` (Conv1D)   absolute (wpe)   no distance ceiling (no relative distance)
lmsci-gpt      fused ``qkv``               RoPE / ALiBi     lmsci's own attention (``attend``)
=============  ==========================  ===============  ==========================================

The patched attention receives the queries and keys after the family's own norms and rotary
embedding (``transformers.AttentionInterface``), with its soft-cap and sliding window as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor, nn

from lmsci.errors import ConfigError

TRANSFORMERS_RANGE = (">=5.0.0", "<5.24")
"""The ``transformers`` versions the map is written for: the attention modules dispatch through
``AttentionInterface`` with ``sliding_window``/``softcap`` arguments and the rotary embedding returns
``(cos, sin)`` tables (Gemma 3: per layer type). Lower bound from the 5.0 module layout, upper bound
the newest release the parity suite ran on (5.23)."""

Positions = str  # "rope" | "absolute" | "alibi"


@dataclass(frozen=True)
class Family:
    """Where one family keeps its parts (module paths relative to the causal-LM module).

    Attributes:
        name: the family (``transformers`` ``model_type``, or ``"lmsci-gpt"``).
        embedding: token embedding path. position_embedding: absolute position table (GPT-2) or None.
        blocks: the ``nn.ModuleList`` of decoder blocks.
        attention, mlp: attribute of a block holding its attention / MLP (or MoE) module.
        q_proj, k_proj, v_proj: separate projections on the attention module (None when fused).
        qkv_proj: the fused projection (``qkv_proj``, ``query_key_value``, ``c_attn``, ``qkv``) or None.
        o_proj: the output projection.
        q_norm, k_norm: q/k norms on the attention module or None; ``qk_norm_scope`` ``"head"``
            (per head, Qwen3/Gemma 3) or ``"full"`` (over all heads before the split, OLMo 2).
        positions: ``"rope"``, ``"absolute"`` or ``"alibi"``.
        rotary: path of the rotary embedding module (None without RoPE);
            ``rotary_by_layer_type``: it takes the layer type (Gemma 3 local/global bases).
        partial_rotary: the tables may rotate only the first ``rotary_dim < head_dim`` channels.
        softcap: config attribute of the attention-logit soft-cap (Gemma 2) or None.
        window: how the per-layer sliding window is declared: ``None`` (never), ``"config"``
            (``config.sliding_window`` on every layer) or ``"layer"`` (the attention module's
            ``sliding_window`` attribute, set from ``config.layer_types``).
        final_norm, lm_head: paths of the final norm and the output head.
        max_positions: config attribute bounding positions for absolute-position models.
        softmax_fp32: the family's eager attention takes its softmax in float32 (all but GPT-2).
        mlp_in: the MLP submodule whose output is the pre-activation (``blocks.{i}.mlp.pre``: ``c_fc``,
            ``dense_h_to_4h``, the SwiGLU ``gate_proj``) or None (fused gate/up projection, MoE).
        mlp_down: the MLP's down projection, whose *input* is the neuron activations (``blocks.{i}.mlp.post``,
            ``act(gate) * up`` for SwiGLU) and whose weight holds one value vector per neuron (Geva et al.,
            arXiv 2012.14913), or None (MoE: no single down projection).
        mlp_down_conv1d: the down projection is a GPT-2 ``Conv1D`` (weight ``[d_mlp, d_model]``) rather than
            an ``nn.Linear`` (weight ``[d_model, d_mlp]``).
    """

    name: str
    embedding: str
    blocks: str
    attention: str
    mlp: str
    final_norm: str
    lm_head: str
    o_proj: str
    q_proj: str | None = "q_proj"
    k_proj: str | None = "k_proj"
    v_proj: str | None = "v_proj"
    qkv_proj: str | None = None
    q_norm: str | None = None
    k_norm: str | None = None
    qk_norm_scope: str | None = None
    positions: Positions = "rope"
    rotary: str | None = "model.rotary_emb"
    rotary_by_layer_type: bool = False
    partial_rotary: bool = False
    softcap: str | None = None
    window: str | None = None
    position_embedding: str | None = None
    max_positions: str | None = None
    softmax_fp32: bool = True
    mlp_in: str | None = "gate_proj"
    mlp_down: str | None = "down_proj"
    mlp_down_conv1d: bool = False


def _llama_like(name: str, **kw: Any) -> Family:
    base = dict(embedding="model.embed_tokens", blocks="model.layers", attention="self_attn", mlp="mlp",
                final_norm="model.norm", lm_head="lm_head", o_proj="o_proj")
    base.update(kw)
    return Family(name, **base)


FAMILIES: dict[str, Family] = {f.name: f for f in (
    _llama_like("llama"),
    _llama_like("mistral", window="config"),
    _llama_like("mixtral", window="config", mlp_in=None, mlp_down=None),
    _llama_like("qwen2", window="layer"),
    _llama_like("qwen3", window="layer", q_norm="q_norm", k_norm="k_norm", qk_norm_scope="head"),
    _llama_like("gemma"),
    _llama_like("gemma2", window="layer", softcap="attn_logit_softcapping"),
    _llama_like("gemma3_text", window="layer", q_norm="q_norm", k_norm="k_norm", qk_norm_scope="head",
                rotary_by_layer_type=True),
    _llama_like("olmo2", q_norm="q_norm", k_norm="k_norm", qk_norm_scope="full"),
    _llama_like("phi3", window="config", q_proj=None, k_proj=None, v_proj=None, qkv_proj="qkv_proj",
                partial_rotary=True, mlp_in=None),
    Family("gpt_neox", embedding="gpt_neox.embed_in", blocks="gpt_neox.layers", attention="attention",
           mlp="mlp", final_norm="gpt_neox.final_layer_norm", lm_head="lm_head", o_proj="dense",
           q_proj=None, k_proj=None, v_proj=None, qkv_proj="query_key_value", rotary="gpt_neox.rotary_emb",
           partial_rotary=True, mlp_in="dense_h_to_4h", mlp_down="dense_4h_to_h"),
    Family("gpt2", embedding="transformer.wte", position_embedding="transformer.wpe", blocks="transformer.h",
           attention="attn", mlp="mlp", final_norm="transformer.ln_f", lm_head="lm_head", o_proj="c_proj",
           q_proj=None, k_proj=None, v_proj=None, qkv_proj="c_attn", positions="absolute", rotary=None,
           max_positions="n_positions", softmax_fp32=False, mlp_in="c_fc", mlp_down="c_proj",
           mlp_down_conv1d=True),
    Family("lmsci-gpt", embedding="wte", blocks="blocks", attention="attn", mlp="mlp", final_norm="ln_f",
           lm_head="lm_head", o_proj="proj", q_proj=None, k_proj=None, v_proj=None, qkv_proj="qkv",
           rotary=None, mlp_in="fc", mlp_down="proj"),
)}
SUPPORTED = tuple(FAMILIES)

INTERVENTIONS = ("full", "lm_infinite", "lambda_mask", "sliding_window", "attention_sinks", "streaming")
"""Attention policies (and streaming decode) the map can make exact; see :meth:`ModelArch.interventions`."""


def _parse(v: str) -> tuple[int, ...]:
    out = []
    for p in v.split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
        if digits != p:
            break
    return tuple(out)


def check_transformers_version(version: str | None = None) -> str:
    """Raise unless ``transformers`` (or ``version``) lies in :data:`TRANSFORMERS_RANGE`.

    Returns:
        the version checked.

    Raises:
        ConfigError: field ``transformers``, naming the supported range.
    """
    if version is None:
        import transformers

        version = transformers.__version__
    lo, hi = _parse(TRANSFORMERS_RANGE[0].lstrip(">=")), _parse(TRANSFORMERS_RANGE[1].lstrip("<"))
    v = _parse(version)
    if not (lo <= v < hi):
        raise ConfigError("transformers", version,
                          f"a version in {','.join(TRANSFORMERS_RANGE)} (the range lmsci's architecture map "
                          "supports; install one with pip install 'transformers"
                          f"{','.join(TRANSFORMERS_RANGE)}')")
    return version


def get_module(root: nn.Module, path: str) -> nn.Module:
    """``root.a.b.c`` for ``path="a.b.c"`` (numeric parts index a ModuleList)."""
    m: Any = root
    for part in path.split("."):
        m = m[int(part)] if part.isdigit() else getattr(m, part)
    return m


def _is_lmsci_gpt(model: Any) -> bool:
    from lmsci.models.gpt import GPT

    return isinstance(model, GPT)


def family_name(model: Any) -> str:
    """The family of ``model`` (an lmsci GPT, a ``transformers`` causal LM or an :class:`HFModel`),
    whether supported or not: ``"lmsci-gpt"`` or ``config.model_type``."""
    model = getattr(model, "model", model) if type(model).__name__ == "HFModel" else model
    if _is_lmsci_gpt(model):
        return "lmsci-gpt"
    cfg = getattr(model, "config", None)
    return str(getattr(cfg, "model_type", type(model).__name__))


@dataclass
class ModelArch:
    """A model resolved against its :class:`Family` (see :func:`arch_of`).

    Attributes:
        model: the causal-LM module. family: its :class:`Family`. config: its config (None for lmsci).
    """

    model: nn.Module
    family: Family
    config: Any

    # ---- structure --------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The family's name (``"lmsci-gpt"`` or a ``transformers`` ``model_type`` such as ``"llama"``)."""
        return self.family.name

    @property
    def n_layers(self) -> int:
        """Number of transformer blocks."""
        return len(self.blocks())

    def module(self, path: str) -> nn.Module:
        """The submodule at dotted ``path`` under the model (:func:`get_module`; AttributeError when absent)."""
        return get_module(self.model, path)

    def blocks(self) -> nn.ModuleList:
        """The ``ModuleList`` of transformer blocks (``n_layers`` of them)."""
        return self.module(self.family.blocks)

    def block_path(self, i: int) -> str:
        """Module path of block ``i`` (e.g. ``"model.layers.3"``); not range-checked."""
        return f"{self.family.blocks}.{i}"

    def attention(self, i: int) -> nn.Module:
        """Block ``i``'s attention module (IndexError for ``i`` out of range)."""
        return getattr(self.blocks()[i], self.family.attention)

    def attention_path(self, i: int) -> str:
        """Module path of block ``i``'s attention module; not range-checked."""
        return f"{self.block_path(i)}.{self.family.attention}"

    def mlp(self, i: int) -> nn.Module:
        """Block ``i``'s MLP module (input and output ``[B, T, d_model]``; IndexError for ``i`` out of range)."""
        return getattr(self.blocks()[i], self.family.mlp)

    def _lmsci_moe(self, i: int) -> bool:
        """Block ``i`` of an lmsci GPT has a mixture of experts (``mlp="moe"``: no single pre-activation or down
        projection)."""
        block = self.blocks()[i]
        return self.family.name == "lmsci-gpt" and getattr(getattr(block, self.family.mlp, None), "kind", None) == "moe"

    def mlp_path(self, i: int) -> str:
        """Module path of block ``i``'s MLP module; not range-checked."""
        return f"{self.block_path(i)}.{self.family.mlp}"

    def mlp_in_path(self, i: int) -> str:
        """Module path whose output is layer ``i``'s MLP pre-activation ``[B, T, d_mlp]`` (``blocks.{i}.mlp.pre``;
        the gate projection for SwiGLU).

        Raises:
            ConfigError: the family has no separate pre-activation module (fused gate/up, MoE); a layer
                index out of range (names the range).
        """
        self._check_layer(i)
        name = self.family.mlp_in
        if self.family.name == "lmsci-gpt" and not hasattr(self.mlp(i), "fc"):
            name = None if self._lmsci_moe(i) else "gate"
        if name is None:
            raise ConfigError("hook", f"blocks.{i}.mlp.pre", f"a family with a separate MLP pre-activation "
                              f"module ({self.name} fuses it or routes experts); blocks.{{i}}.mlp.post and "
                              "blocks.{i}.mlp.out exist")
        return f"{self.mlp_path(i)}.{name}"

    def mlp_down_path(self, i: int) -> str:
        """Module path of layer ``i``'s MLP down projection; its *input* is the neuron activations
        ``[B, T, d_mlp]`` (``blocks.{i}.mlp.post``).

        Raises:
            ConfigError: the family has no single down projection (MoE); a layer index out of range.
        """
        self._check_layer(i)
        if self.family.mlp_down is None or self._lmsci_moe(i):
            raise ConfigError("hook", f"blocks.{i}.mlp.post", f"a family with one MLP down projection per layer "
                              f"({self.name} routes tokens to experts); blocks.{{i}}.mlp.out exists")
        return f"{self.mlp_path(i)}.{self.family.mlp_down}"

    def mlp_down(self, i: int) -> nn.Module:
        """Layer ``i``'s MLP down projection (``d_mlp -> d_model``).

        Raises:
            ConfigError: as :meth:`mlp_down_path`.
        """
        return self.module(self.mlp_down_path(i))

    def mlp_values(self, i: int) -> Tensor:
        """Layer ``i``'s value vectors, ``[d_mlp, d_model]``: row ``k`` is what neuron ``k`` adds to the residual
        stream per unit of activation (the ``k``-th column of the down projection ``W_out``; Geva et al.,
        arXiv 2012.14913, Sec. 2). A view of the weight (Linear: its transpose; GPT-2 Conv1D: the weight
        itself), so an in-place edit of it edits the model.

        Raises:
            ConfigError: as :meth:`mlp_down_path`.
        """
        w = self.mlp_down(i).weight
        return w if self.family.mlp_down_conv1d else w.t()

    def _check_layer(self, i: int) -> None:
        n = self.n_layers
        if not (isinstance(i, int) and 0 <= i < n):
            raise ConfigError("layer", i, f"an integer in [0, {n - 1}] ({n} layers)")

    def embedding(self) -> nn.Module:
        """The token embedding module (weight ``[vocab_size, d_model]``)."""
        return self.module(self.family.embedding)

    def final_norm(self) -> nn.Module:
        """The norm applied to the residual stream before the output head."""
        return self.module(self.family.final_norm)

    def lm_head(self) -> nn.Module:
        """The output head (its ``weight`` is ``[vocab_size, d_model]``); the model's own
        ``get_output_embeddings()`` when the family's path is absent (a renamed attribute)."""
        try:
            return self.module(self.family.lm_head)
        except AttributeError:
            head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
            if head is None:
                raise
            return head

    def projections(self, i: int) -> dict[str, nn.Module]:
        """The attention projections of layer ``i``: ``{"q","k","v","o"}`` or ``{"qkv","o"}`` (fused)."""
        a = self.attention(i)
        f = self.family
        out = {"o": getattr(a, f.o_proj)}
        if f.qkv_proj:
            out["qkv"] = getattr(a, f.qkv_proj)
        else:
            out.update(q=getattr(a, f.q_proj), k=getattr(a, f.k_proj), v=getattr(a, f.v_proj))
        return out

    def qk_norms(self, i: int) -> tuple[nn.Module, nn.Module] | None:
        """Layer ``i``'s ``(q_norm, k_norm)`` or None (families without q/k norms)."""
        if not self.family.q_norm:
            return None
        a = self.attention(i)
        return getattr(a, self.family.q_norm), getattr(a, self.family.k_norm)

    # ---- attention semantics ----------------------------------------------------------------
    @property
    def positions(self) -> Positions:
        """The position encoding: ``"rope"``, ``"absolute"`` or ``"alibi"`` for Hugging Face families; an lmsci GPT's
        ``cfg.pos`` (``"learned"``, ``"rope"``, ``"relative"``, ``"alibi"``, ``"nope"``, ...)."""
        if self.family.name == "lmsci-gpt":
            return {"rope": "rope", "alibi": "alibi"}.get(self.model.cfg.pos, self.model.cfg.pos)
        return self.family.positions

    @property
    def max_positions(self) -> int | None:
        """Largest number of positions an absolute-position model has (None for relative encodings)."""
        if self.family.max_positions:
            return int(getattr(self.config, self.family.max_positions))
        if self.family.name == "lmsci-gpt" and self.positions == "learned":
            return int(self.model.cfg.seq_len)
        return None

    def sliding_window(self, i: int) -> int | None:
        """The model's own sliding window at layer ``i`` (a query sees keys with ``i - j < window``), or None."""
        how = self.family.window
        if how is None:
            return None
        if how == "config":
            w = getattr(self.config, "sliding_window", None)
        else:
            w = getattr(self.attention(i), "sliding_window", None)
        return int(w) if w else None

    def softcap(self, i: int) -> float | None:
        """The attention-logit soft-cap of layer ``i`` (``cap * tanh(logit / cap)``) or None."""
        if not self.family.softcap:
            return None
        c = getattr(self.config, self.family.softcap, None)
        return float(c) if c else None

    def rotary_module(self) -> nn.Module | None:
        """The model's rotary-embedding module, or None for families without RoPE."""
        return self.module(self.family.rotary) if self.family.rotary else None

    def rotary_tables(self, i: int) -> Callable[[Tensor], tuple[Tensor, Tensor]] | None:
        """``positions [n] long -> (cos, sin)``, each ``[n, rotary_dim]``, the exact tables layer ``i``
        uses (the model's own rotary module, its scaling and, for Gemma 3, its layer type); None without
        RoPE (GPT-2, lmsci GPT: the lmsci harness has its own scorers)."""
        rot = self.rotary_module()
        if rot is None:
            return None
        dummy = next(self.attention(i).parameters())
        layer_type = self.config.layer_types[i] if self.family.rotary_by_layer_type else None

        def tables(pos: Tensor) -> tuple[Tensor, Tensor]:
            p = pos.to(dummy.device)[None, :]
            cos, sin = rot(dummy, p, layer_type) if layer_type is not None else rot(dummy, p)
            return cos[0], sin[0]

        return tables

    def interventions(self) -> tuple[str, ...]:
        """The interventions this model supports exactly (absolute positions: no distance ceiling and no
        re-assigned sink positions)."""
        if self.positions == "absolute" or self.positions == "learned":
            return ("full", "lambda_mask", "sliding_window", "streaming")
        if self.family.name == "lmsci-gpt" and self.positions not in ("rope", "alibi"):
            return ()
        return INTERVENTIONS

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary (``lmsci check-model``)."""
        n = self.n_layers
        return {
            "family": self.name, "class": type(self.model).__name__, "n_layers": n, "positions": self.positions,
            "embedding": self.family.embedding, "blocks": self.family.blocks,
            "attention": self.attention_path(0).replace(".0.", ".{i}."),
            "projections": sorted(self.projections(0)), "qk_norm": self.family.qk_norm_scope,
            "rotary": self.family.rotary, "partial_rotary": self.family.partial_rotary,
            "sliding_windows": [self.sliding_window(i) for i in range(n)],
            "softcap": [self.softcap(i) for i in range(n)] if self.family.softcap else None,
            "mlp": self.mlp_path(0).replace(".0.", ".{i}."),
            "mlp_down": self.family.mlp_down, "final_norm": self.family.final_norm,
            "max_positions": self.max_positions, "interventions": list(self.interventions()),
        }


def arch_of(model: Any) -> ModelArch:
    """Resolve ``model`` (lmsci GPT, ``transformers`` causal LM, or :class:`~lmsci.models.hf.HFModel`).

    Raises:
        ConfigError: field ``model`` for a family not in :data:`SUPPORTED` (names the family and the
            supported list); field ``transformers`` for a version outside :data:`TRANSFORMERS_RANGE`;
            field ``model`` for a base model without its LM head or a layout the family does not have.
    """
    if type(model).__name__ == "HFModel":
        model = model.model
    name = family_name(model)
    if name not in FAMILIES:
        raise ConfigError("model", f"family {name!r} ({type(model).__name__})",
                          "a model of a supported family: " + ", ".join(SUPPORTED))
    fam = FAMILIES[name]
    if name != "lmsci-gpt":
        check_transformers_version()
    arch = ModelArch(model, fam, None if name == "lmsci-gpt" else model.config)
    try:
        arch.blocks()
        arch.projections(0)
    except (AttributeError, IndexError, TypeError) as err:
        raise ConfigError("model", type(model).__name__,
                          f"the {name} causal-LM layout ({fam.blocks}[i].{fam.attention}; {err})") from err
    return arch


__all__ = ["Family", "FAMILIES", "SUPPORTED", "INTERVENTIONS", "TRANSFORMERS_RANGE", "ModelArch", "arch_of",
           "family_name", "check_transformers_version", "get_module"]
