"""A small decoder-only transformer (GPT) with the architectural variants the seeds compare, and hook points.

In the spirit of nanoGPT (karpathy/nanoGPT ``model.py``), with TransformerLens-style named hook points
(TransformerLensOrg/TransformerLens ``hook_points.py``). This module holds the configuration and the model (forward,
loss, hooks API, generation, save/load); its pieces live in :mod:`lmsci.models.positions` (position schemes),
:mod:`lmsci.models.blocks` (attention and the block), :mod:`lmsci.models.mlp` (MLPs, MoE) and
:mod:`lmsci.models.hooks` (hook plumbing, TransformerLens aliases).

Variants (``GPTConfig``):

* ``pos``: positional information, one of :data:`lmsci.models.positions.POS_SCHEMES`: ``"learned"``
  (absolute embedding ``wpe`` added to the token embedding, GPT-2), ``"rope"`` (RoFormer, arXiv 2104.09864),
  ``"relative"`` (T5 bias, arXiv 1910.10683 sec. 2.1), ``"alibi"`` (arXiv 2108.12409), ``"nope"`` (none,
  arXiv 2305.19466), ``"uni"`` and ``"posonly"`` (Physics of LMs Part 1's GPT_uni and GPT_pos, arXiv 2305.13673:
  content-free attention); each scheme, its parameters and its source in :mod:`lmsci.models.positions`.
* ``mlp``: one of :data:`lmsci.models.mlp.MLP_KINDS`: ``"gelu"`` (GPT-2), ``"relu"`` (Nanda et al. 2023,
  arXiv 2301.05217), ``"swiglu"`` (Shazeer 2020, arXiv 2002.05202; the Llama MLP), ``"moe"`` (GELU experts, top-k
  routing, Switch's load-balancing loss) or ``"none"`` (attention-only); each in :mod:`lmsci.models.mlp`.
* ``norm``: pre-norm ``"layernorm"`` or ``"rmsnorm"`` (Zhang & Sennrich 2019, arXiv 1910.07467), eps 1e-5, or
  ``"none"`` (no normalisation anywhere, ``ln1``/``ln2``/``ln_f`` are identities: Nanda et al. 2023's grokking
  transformer).
* ``tie_embeddings``: share the token embedding with the unembedding.
* ``bias``: biases in the linear layers and LayerNorms (the unembedding never has a bias).

Attention is fused (``scaled_dot_product_attention``) unless a hook reads or patches ``attn.scores``/``attn.pattern``
(then explicit; same values to float rounding): see :mod:`lmsci.models.blocks`.

Hook points (shapes; ``batch`` = B, ``seq`` = T, ``q``/``k`` = query/key positions):

=====================================  ==========================================================
``embed``                              token (+ learned position) embedding  ``[B, T, d_model]``
``blocks.{i}.resid_pre``               residual stream entering block i      ``[B, T, d_model]``
``blocks.{i}.attn.scores``             pre-softmax attention logits, scaled, with positional bias,
                                       causal mask applied as ``-inf``       ``[B, n_heads, q, k]``
``blocks.{i}.attn.pattern``            attention probabilities               ``[B, n_heads, q, k]``
``blocks.{i}.attn.z``                  per-head attention output before W_O  ``[B, T, n_heads, d_head]``
``blocks.{i}.attn.out``                attention sublayer output (after W_O) ``[B, T, d_model]``
``blocks.{i}.resid_mid``               residual stream after attention       ``[B, T, d_model]``
``blocks.{i}.mlp.pre``                 MLP pre-activation (gate for SwiGLU)   ``[B, T, d_mlp]``
``blocks.{i}.mlp.post``                MLP hidden after the nonlinearity     ``[B, T, d_mlp]``
``blocks.{i}.mlp.out``                 MLP sublayer output                   ``[B, T, d_model]``
``blocks.{i}.resid_post``              residual stream leaving block i       ``[B, T, d_model]``
``final``                              after the final norm                  ``[B, T, d_model]``
=====================================  ==========================================================

(``mlp.*`` and ``resid_mid`` do not exist when ``mlp="none"``; with ``mlp="moe"`` the MLP's hooks are
``blocks.{i}.mlp.router`` (router probabilities ``[B, T, moe_experts]``) and ``blocks.{i}.mlp.out``.)
TransformerLens's spellings (``blocks.{i}.hook_resid_pre``, ``blocks.{i}.attn.hook_pattern``,
``ln_final.hook_normalized``, ...; ``hook_embed`` only without learned positions) are aliases:
:data:`lmsci.models.hooks.TRANSFORMER_LENS_ALIASES`. A hook function is called as
``fn(activation, hook)`` where ``hook.name`` is the hook point's name; it returns ``None`` (read only)
or a tensor of the same shape that replaces the activation. Hooks are only attached inside
:meth:`GPT.hooks`, which always removes them on exit, also when the body raises.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, ValidationError, model_serializer, model_validator
from torch import Tensor, nn

from lmsci.config import StrictModel, validation_to_config_error
from lmsci.errors import ConfigError, UnknownNameError
from lmsci.models.blocks import Block, make_norm
from lmsci.models.decode import sample
from lmsci.models.hooks import HookFn, HookPoint, hook_plan, select_names, transformer_lens_name

MOE_FIELDS = ("moe_experts", "moe_top_k", "moe_aux_coef")
"""GPTSpec fields read only with ``mlp="moe"`` (and dumped only then)."""


class GPTSpec(StrictModel):
    """The architecture an experiment trains: every :class:`GPTConfig` field but the two its world fixes
    (``vocab_size``, ``seq_len``). Experiments that train a GPT nest one as ``model`` in their config
    (``--set model.d_model=128``); :meth:`gpt_config` adds the world's sizes.

    Attributes:
        n_layers, n_heads, d_model: depth, heads per layer, residual width.
        d_head: per-head width (default ``d_model // n_heads``; ``d_model`` must then be divisible).
        d_mlp: MLP hidden width (default ``4 * d_model``; also for SwiGLU).
        pos, mlp, norm, tie_embeddings, bias: see the module docstring.
        dropout: dropout probability on attention probabilities and sublayer outputs (training only).
        rope_base: RoPE base ``theta`` (Su et al. 2021, arXiv 2104.09864).
        moe_experts, moe_top_k, moe_aux_coef: with ``mlp="moe"`` only (:class:`lmsci.models.mlp.MoE`): the number
            of experts (each a GELU MLP of width ``d_mlp``), the experts per token (1 = Switch Transformer) and the
            weight of the load-balancing loss (Switch's alpha = 1e-2). Not written by ``model_dump`` for other
            ``mlp`` values, so adding them changed no other model's configuration or digest.

    Raises:
        ConfigError / pydantic ValidationError: a bad value (for example ``d_model`` not divisible by ``n_heads``
            without an explicit ``d_head``, an odd ``d_head`` with ``pos="rope"``, or ``moe_top_k > moe_experts``); inside an experiment config
            :func:`lmsci.config.resolve_config` reports it as ``model.<field>``.
    """

    n_layers: int = Field(2, ge=0)
    n_heads: int = Field(4, ge=1)
    d_model: int = Field(64, ge=1)
    d_head: int | None = Field(None, ge=1)
    d_mlp: int | None = Field(None, ge=1)
    pos: Literal["learned", "rope", "relative", "alibi", "nope", "uni", "posonly"] = "learned"
    mlp: Literal["gelu", "relu", "swiglu", "none", "moe"] = "gelu"
    norm: Literal["layernorm", "rmsnorm", "none"] = "layernorm"
    tie_embeddings: bool = False
    bias: bool = True
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    rope_base: float = Field(10000.0, gt=0.0)
    moe_experts: int = Field(4, ge=1)
    moe_top_k: int = Field(1, ge=1)
    moe_aux_coef: float = Field(0.01, ge=0.0)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        # the MoE fields are written only for mlp="moe": every other model's dump (config.yaml, preset digests,
        # save_pretrained) stays what it was before they existed
        out = handler(self)
        if self.mlp != "moe":
            for k in MOE_FIELDS:
                out.pop(k, None)
        return out

    @model_validator(mode="after")
    def _check(self) -> GPTSpec:
        if self.mlp == "moe" and self.moe_top_k > self.moe_experts:
            raise ValueError(f"moe_top_k={self.moe_top_k} must be <= moe_experts={self.moe_experts}")
        if self.d_head is None and self.d_model % self.n_heads != 0:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by n_heads={self.n_heads} unless d_head is given"
            )
        if self.pos == "rope" and self.head_dim % 2 != 0:
            raise ValueError(f"pos='rope' needs an even d_head, got d_head={self.head_dim}")
        return self

    @property
    def head_dim(self) -> int:
        """``d_head`` with its default applied."""
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def mlp_dim(self) -> int:
        """``d_mlp`` with its default applied."""
        return self.d_mlp if self.d_mlp is not None else 4 * self.d_model

    def spec(self) -> GPTSpec:
        """This architecture without the world's sizes (a :class:`GPTSpec`, also from a :class:`GPTConfig`)."""
        return GPTSpec(**{k: getattr(self, k) for k in GPTSpec.model_fields})

    def gpt_config(self, vocab_size: int, seq_len: int, **changes: Any) -> GPTConfig:
        """The :class:`GPTConfig` of this architecture for a world of ``vocab_size`` token ids and ``seq_len``
        positions; ``changes`` replace spec fields (for a sweep point that varies one, e.g. ``d_model``).

        Raises:
            ConfigError: the resulting configuration is invalid.
        """
        arch = {k: getattr(self, k) for k in GPTSpec.model_fields}
        return GPTConfig(**{**arch, **changes}, vocab_size=vocab_size, seq_len=seq_len)


class GPTConfig(GPTSpec):
    """Architecture of a :class:`GPT`: a :class:`GPTSpec` plus the world's ``vocab_size`` and ``seq_len``.

    Attributes:
        vocab_size: number of token ids.
        seq_len: maximum number of positions (the learned position table size; ``generate`` crops to it).
        n_layers, n_heads, d_model, d_head, d_mlp, pos, mlp, norm, tie_embeddings, bias, dropout, rope_base:
            as in :class:`GPTSpec` (here ``n_layers``, ``n_heads`` and ``d_model`` have no default).

    Raises:
        ConfigError: on construction with a bad value (for example ``d_model`` not divisible by
            ``n_heads`` without an explicit ``d_head``, or an odd ``d_head`` with ``pos="rope"``).
    """

    vocab_size: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    n_layers: int = Field(ge=0)
    n_heads: int = Field(ge=1)
    d_model: int = Field(ge=1)

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise validation_to_config_error(err, data) from None

    @classmethod
    def model_validate(cls, obj: Any, **kw: Any) -> GPTConfig:  # type: ignore[override]
        """Validate a dict; errors are :class:`ConfigError` (as for the constructor)."""
        try:
            return super().model_validate(obj, **kw)
        except ValidationError as err:
            raise validation_to_config_error(err, obj if isinstance(obj, dict) else {}) from None


class GPT(nn.Module):
    """Decoder-only transformer; see the module docstring for variants and hook points.

    Args:
        cfg: the architecture.
        seed: initialisation seed (GPT-2 init: normal(0, 0.02), residual output projections
            scaled by ``1/sqrt(2 n_layers)``); the global torch RNG is neither used nor advanced.

    Modules: ``wte`` (``[vocab_size, d_model]``), ``wpe`` (``[seq_len, d_model]``, learned only),
    ``blocks`` (``n_layers`` x :class:`lmsci.models.blocks.Block`), ``ln_f``, ``lm_head``
    (``[vocab_size, d_model]``, no bias).
    """

    def __init__(self, cfg: GPTConfig, seed: int = 0):
        super().__init__()
        if not isinstance(cfg, GPTConfig):
            raise ConfigError("cfg", type(cfg).__name__, "a lmsci.models.gpt.GPTConfig")
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):
            self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
            if cfg.pos == "learned":
                self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
            self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
            self.ln_f = make_norm(cfg)
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self.hook_embed = HookPoint("embed")
        self.hook_final = HookPoint("final")
        self._init_weights(seed)

    # -- construction ------------------------------------------------------------------------
    def _init_weights(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        std = 0.02
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias") or ".ln" in name or name.startswith("ln_f") or "rel_bias" in name:
                    if "ln" in name and name.endswith("weight"):
                        p.fill_(1.0)
                    else:
                        p.zero_()
                    continue
                residual_out = name.endswith(("proj.weight", "proj_weight"))  # proj_weight: the MoE's experts
                s = std / math.sqrt(2 * max(1, self.cfg.n_layers)) if residual_out else std
                p.copy_(torch.randn(p.shape, generator=g) * s)

    @property
    def hook_points(self) -> dict[str, HookPoint]:
        """All hook points by name, in forward order."""
        out = {"embed": self.hook_embed}
        for b in self.blocks:
            out.update((h.name, h) for h in b.hook_list)
        out["final"] = self.hook_final
        return out

    def num_params(self, non_embedding: bool = False) -> int:
        """Number of parameters (shared tensors counted once).

        ``non_embedding=True`` excludes the token and position embeddings and the unembedding
        (``lm_head``), i.e. Kaplan et al. 2020's N (arXiv 2001.08361, sec. 2.1).
        """
        seen: set[int] = set()
        excluded = {id(self.wte.weight), id(self.lm_head.weight)}
        if hasattr(self, "wpe"):
            excluded.add(id(self.wpe.weight))
        n = 0
        for p in self.parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            if non_embedding and id(p) in excluded:
                continue
            n += p.numel()
        return n

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs per token, ``6 N + 12 n_layers d_model T`` (Kaplan et al. 2020, Table 1;
        N = non-embedding params + unembedding), with ``T`` = ``seq_len`` (default ``cfg.seq_len``). For
        ``mlp="moe"`` N counts every expert, not the ``moe_top_k`` a token uses (an upper bound; see
        :func:`lmsci.models.sizing.count_params` with ``active=True``)."""
        T = seq_len or self.cfg.seq_len
        n = self.num_params(non_embedding=True) + self.lm_head.weight.numel()
        return 6 * n + 12 * self.cfg.n_layers * self.cfg.n_heads * self.cfg.head_dim * T

    def moe_aux_loss(self) -> Tensor | None:
        """The load-balancing loss of the last forward, summed over the MoE layers (``moe_aux_coef`` included;
        Switch Transformer, arXiv 2101.03961, sec. 2.2), a scalar tensor in that forward's autograd graph; None
        when the model has no MoE layer or has not run. The trainer adds it to the mean NLL of each micro-batch."""
        losses = [b.mlp.aux_loss for b in self.blocks if b.has_mlp and getattr(b.mlp, "aux_loss", None) is not None]
        return torch.stack(losses).sum() if losses else None

    # -- forward ----------------------------------------------------------------------------
    def forward(self, input_ids: Tensor, *, kv_cache: list[dict[str, Tensor]] | None = None) -> Tensor:
        """``input_ids [batch, seq]`` long -> logits ``[batch, seq, vocab_size]``.

        ``kv_cache``: optional list of ``n_layers`` dicts (start with empty dicts) holding the keys and
        values of earlier calls; ``input_ids`` then continue the cached sequence (positions start after it).

        Raises:
            ConfigError: positions beyond ``cfg.seq_len`` with learned positions.
        """
        return self.lm_head(self.final_hidden(input_ids, kv_cache=kv_cache))

    def sum_nll(self, input_ids: Tensor, targets: Tensor) -> Tensor:
        """Summed next-token cross-entropy in nats, without materialising the logits.

        Equals ``F.cross_entropy(self(input_ids).flatten(0, 1), targets.flatten(), ignore_index=-100,
        reduction="sum")`` to float rounding, computed by the fused chunked head
        :func:`lmsci.models.loss.linear_cross_entropy` (faster on CPU and far smaller in memory when
        ``vocab_size`` is large; the trainer uses it for every model that has this method). All hook
        points fire as in :meth:`forward`.

        Args:
            input_ids: ``[batch, seq]`` long.
            targets: ``[batch, seq]`` long, ``-100`` ignored.

        Returns:
            a scalar tensor (nats, summed over non-ignored targets).

        Raises:
            ValueError: a target outside ``[0, vocab_size)`` that is not ``-100``.
            ConfigError: as :meth:`forward`.
        """
        from lmsci.models.loss import linear_cross_entropy

        return linear_cross_entropy(self.final_hidden(input_ids), self.lm_head.weight, targets)

    def final_hidden(self, input_ids: Tensor, *, kv_cache: list[dict[str, Tensor]] | None = None) -> Tensor:
        """The residual stream after the final norm (hook point ``final``), ``[batch, seq, d_model]``;
        :meth:`forward` applies ``lm_head`` to it. Arguments and errors as :meth:`forward`."""
        B, T = input_ids.shape
        start = 0
        if kv_cache is not None:
            if len(kv_cache) != len(self.blocks):
                raise ConfigError("kv_cache", f"{len(kv_cache)} layers", f"a list of n_layers={len(self.blocks)} dicts")
            if kv_cache and "pos" in kv_cache[0]:
                start = int(kv_cache[0]["pos"][-1]) + 1
        if start + T > self.cfg.seq_len and self.cfg.pos == "learned":
            raise ConfigError("input_ids.shape[1]", start + T, f"at most seq_len={self.cfg.seq_len} with pos='learned'")
        pos = torch.arange(start, start + T, device=input_ids.device)
        x = self.wte(input_ids)
        if self.cfg.pos == "learned":
            x = x + self.wpe(pos)
        if self.cfg.dropout and self.training:
            x = F.dropout(x, self.cfg.dropout)
        x = self.hook_embed(x)
        for i, block in enumerate(self.blocks):
            x = block(x, pos, None if kv_cache is None else kv_cache[i])
        return self.hook_final(self.ln_f(x))

    # -- hooks -------------------------------------------------------------------------------
    def _resolve(self, name: str | Callable[[str], bool]) -> list[HookPoint]:
        points, asked = self.hook_points, name
        if isinstance(name, str) and name not in points:  # a TransformerLens spelling: its lmsci name
            name = transformer_lens_name(name, positions_in_embed=self.cfg.pos == "learned") or name
        found = select_names(name, points)
        if not found and not callable(name):
            raise UnknownNameError("hook point", asked, points.keys())
        return [h for _, h in found]

    @contextmanager
    def hooks(
        self,
        fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] | Mapping[str, HookFn] = (),
        cache: Iterable[str] | str | Callable[[str], bool] | None = None,
    ) -> Iterator[dict[str, Tensor]]:
        """Attach hook functions (and optional caching) for the duration of a ``with`` block.

        Args:
            fwd_hooks: ``[(name, fn), ...]`` or ``{name: fn}``. ``name`` is a hook point name, a glob
                (``"blocks.*.attn.pattern"``), a TransformerLens name or glob (``"blocks.0.attn.hook_pattern"``,
                :data:`lmsci.models.hooks.TRANSFORMER_LENS_ALIASES`) or a predicate on (lmsci) names. ``fn(activation, hook)`` returns
                ``None`` to read or a same-shape tensor to replace the activation.
            cache: names/globs/predicate of activations to record (detached) into the yielded dict,
                keyed by lmsci hook name (a TransformerLens name also finds its entry); ``"*"`` records everything. Recording happens after the
                ``fwd_hooks`` of the same point ran (it sees patched values).

        Yields:
            The cache dict (empty when ``cache`` is None); later forwards overwrite entries.

        Raises:
            UnknownNameError: a name that matches no hook point (before anything is attached).

        All functions are removed on exit, also when the body raises.
        """
        plan, store = hook_plan(fwd_hooks, cache, self._resolve)
        store.positions_in_embed = self.cfg.pos == "learned"
        attached: list[tuple[HookPoint, HookFn]] = []
        try:
            for h, fn in plan:
                h.fns.append(fn)
                attached.append((h, fn))
            yield store
        finally:
            for h, fn in reversed(attached):
                # remove this exact attachment (identity, not equality)
                for i in range(len(h.fns) - 1, -1, -1):
                    if h.fns[i] is fn:
                        del h.fns[i]
                        break

    def run_with_cache(self, input_ids: Tensor, names: Iterable[str] | str | Callable[[str], bool] = "*") -> tuple[Tensor, dict[str, Tensor]]:
        """Forward and record activations: returns ``(logits [B, T, vocab], {name: activation})``."""
        with self.hooks(cache=names) as cache:
            logits = self(input_ids)
        return logits, cache

    def run_with_hooks(self, input_ids: Tensor, fwd_hooks: Iterable[tuple[str, HookFn]] | Mapping[str, HookFn]) -> Tensor:
        """Forward with ``fwd_hooks`` attached (see :meth:`hooks`); returns logits ``[B, T, vocab]``."""
        with self.hooks(fwd_hooks):
            return self(input_ids)

    # -- generation --------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        input_ids: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> Tensor:
        """Sample ``max_new_tokens`` tokens after ``input_ids [batch, seq]``; returns ``[batch, seq + new]``.

        ``temperature == 0`` is greedy decoding; ``top_k`` keeps the k most likely tokens; the context is cropped to
        the last ``cfg.seq_len`` tokens; randomness only from ``generator`` (default: seeded with 0); ``use_cache``:
        a key/value cache while the sequence fits. See :func:`lmsci.models.decode.sample`.

        Raises:
            ConfigError: negative ``max_new_tokens``/``temperature`` or ``top_k < 1``.
        """
        return sample(self, input_ids, max_new_tokens, temperature, top_k, generator, use_cache)

    # -- save / load --------------------------------------------------------------------------
    def save_pretrained(self, directory: str | Path) -> Path:
        """Write ``config.json`` (GPTConfig fields + ``"lmsci_model": "gpt"``) and ``model.safetensors``."""
        from safetensors.torch import save_file

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps({"lmsci_model": "gpt", **self.cfg.model_dump()}, indent=2))
        sd = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        if self.cfg.tie_embeddings:
            sd.pop("lm_head.weight", None)
        save_file(sd, str(d / "model.safetensors"))
        return d

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device = "cpu") -> GPT:
        """Load a model written by :meth:`save_pretrained`.

        Raises:
            ConfigError: the directory lacks ``config.json``/``model.safetensors`` or the weights do not fit.
        """
        from safetensors.torch import load_file

        d = Path(directory)
        if not (d / "config.json").is_file() or not (d / "model.safetensors").is_file():
            raise ConfigError("directory", str(d), "a directory with config.json and model.safetensors (GPT.save_pretrained)")
        data = json.loads((d / "config.json").read_text())
        data.pop("lmsci_model", None)
        model = cls(GPTConfig(**data))
        sd = load_file(str(d / "model.safetensors"))
        if model.cfg.tie_embeddings:
            sd["lm_head.weight"] = sd["wte.weight"]
        missing, unexpected = model.load_state_dict(sd, strict=False)
        if missing or unexpected:
            raise ConfigError("model.safetensors", f"missing={missing} unexpected={unexpected}", "weights matching config.json")
        return model.to(device)
