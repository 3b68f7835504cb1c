"""Bridge to Hugging Face ``transformers``: export lmsci GPTs, load any causal LM, hook it by module path.

* :func:`export_hf` writes an lmsci :class:`~lmsci.models.gpt.GPT` as a ``transformers`` checkpoint of the
  matching architecture, loadable with ``AutoModelForCausalLM.from_pretrained(dir)``:

  =======================================================  ======================  ====================
  lmsci configuration                                      transformers class      weight mapping
  =======================================================  ======================  ====================
  ``pos="learned", mlp="gelu", norm="layernorm"``          ``GPT2LMHeadModel``     Conv1D = Linear^T;
  (``n_heads * d_head == d_model``)                        (``activation="gelu"``) ``bias=False`` ->
                                                                                   zero biases
  ``pos="rope", mlp="swiglu", norm="rmsnorm"``             ``LlamaForCausalLM``    fused qkv split into
  (``d_model % n_heads == 0``; any ``d_head``)             (``rope_theta``         q/k/v_proj; no
                                                           = ``rope_base``)        permutation needed
  =======================================================  ======================  ====================

  lmsci RoPE uses Llama's split-halves ``rotate_half`` convention, so q/k weights are copied as they
  are. Any other combination raises :class:`~lmsci.errors.ConfigError`. Tolerance: in float32 the
  exported model's logits equal lmsci's to ``EXPORT_ATOL = 1e-4`` (max abs difference; measured
  ~1e-6 on the test models).
* :func:`import_hf` is the inverse for GPT-2 and Llama checkpoints that fit lmsci's GPT (no GQA).
* :func:`load_hf` loads any causal LM by hub name or local path and wraps the *real* HF module in
  :class:`HFModel` (no re-implementation); :meth:`HFModel.hooks` reads/replaces the outputs of modules
  addressed by their module path (``model.layers.0.self_attn``, ``transformer.h.3.mlp``) and always
  removes its hooks on exit. When the hub cannot be reached, :class:`HubUnavailableError` says so and
  suggests a local path.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from lmsci.errors import ConfigError, LmsciError, UnknownNameError
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hooks import hook_plan, select_names, transformer_lens_name

EXPORT_ATOL = 1e-4


class HubUnavailableError(LmsciError, OSError):
    """The Hugging Face hub could not be reached (offline mode or network error) for a hub model id."""


# --------------------------------------------------------------------------------------- export


def hf_architecture(cfg: GPTConfig) -> str:
    """The ``transformers`` architecture an lmsci config maps to: ``"gpt2"`` or ``"llama"``.

    Raises:
        ConfigError: the combination has no Hugging Face equivalent (names the fields and the
            supported combinations).
    """
    if cfg.mlp == "moe":
        raise ConfigError("mlp", "moe", "a dense MLP for export ('gelu' -> GPT-2, 'swiglu' -> Llama): lmsci's "
                          "mixture of experts (GELU experts, Switch routing) has no transformers equivalent")
    combo = (cfg.pos, cfg.mlp, cfg.norm)
    if combo == ("learned", "gelu", "layernorm"):
        if cfg.n_heads * cfg.head_dim != cfg.d_model:
            raise ConfigError("d_head", cfg.head_dim, f"n_heads * d_head == d_model ({cfg.d_model}) for GPT-2 export")
        return "gpt2"
    if combo == ("rope", "swiglu", "rmsnorm"):
        if cfg.d_model % cfg.n_heads != 0:
            raise ConfigError("d_model", cfg.d_model, f"a multiple of n_heads={cfg.n_heads} for Llama export")
        return "llama"
    raise ConfigError(
        "(pos, mlp, norm)", combo,
        "('learned', 'gelu', 'layernorm') -> GPT-2 or ('rope', 'swiglu', 'rmsnorm') -> Llama; "
        "other combinations have no Hugging Face transformers equivalent",
    )


def hf_config(cfg: GPTConfig):
    """The ``transformers`` config (``GPT2Config`` or ``LlamaConfig``) equivalent to ``cfg``."""
    arch = hf_architecture(cfg)
    if arch == "gpt2":
        from transformers import GPT2Config

        return GPT2Config(
            vocab_size=cfg.vocab_size, n_positions=cfg.seq_len, n_embd=cfg.d_model, n_layer=cfg.n_layers,
            n_head=cfg.n_heads, n_inner=cfg.mlp_dim, activation_function="gelu", resid_pdrop=cfg.dropout,
            embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout, layer_norm_epsilon=1e-5,
            tie_word_embeddings=cfg.tie_embeddings, bos_token_id=None, eos_token_id=None,
            architectures=["GPT2LMHeadModel"],
        )
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.mlp_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_heads,
        head_dim=cfg.head_dim, hidden_act="silu", max_position_embeddings=cfg.seq_len, rms_norm_eps=1e-5,
        tie_word_embeddings=cfg.tie_embeddings, rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base},
        attention_bias=cfg.bias, mlp_bias=cfg.bias, attention_dropout=cfg.dropout,
        bos_token_id=None, eos_token_id=None, architectures=["LlamaForCausalLM"],
    )


def _gpt2_state(model: GPT) -> dict[str, Tensor]:
    cfg, sd = model.cfg, model.state_dict()
    d = cfg.d_model

    def b(key: str, n: int) -> Tensor:
        return sd[key] if key in sd else torch.zeros(n)

    out = {"transformer.wte.weight": sd["wte.weight"], "transformer.wpe.weight": sd["wpe.weight"],
           "transformer.ln_f.weight": sd["ln_f.weight"], "transformer.ln_f.bias": b("ln_f.bias", d)}
    for i in range(cfg.n_layers):
        p, q = f"blocks.{i}.", f"transformer.h.{i}."
        out.update({
            q + "ln_1.weight": sd[p + "ln1.weight"], q + "ln_1.bias": b(p + "ln1.bias", d),
            q + "ln_2.weight": sd[p + "ln2.weight"], q + "ln_2.bias": b(p + "ln2.bias", d),
            q + "attn.c_attn.weight": sd[p + "attn.qkv.weight"].t(), q + "attn.c_attn.bias": b(p + "attn.qkv.bias", 3 * d),
            q + "attn.c_proj.weight": sd[p + "attn.proj.weight"].t(), q + "attn.c_proj.bias": b(p + "attn.proj.bias", d),
            q + "mlp.c_fc.weight": sd[p + "mlp.fc.weight"].t(), q + "mlp.c_fc.bias": b(p + "mlp.fc.bias", cfg.mlp_dim),
            q + "mlp.c_proj.weight": sd[p + "mlp.proj.weight"].t(), q + "mlp.c_proj.bias": b(p + "mlp.proj.bias", d),
        })
    out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def _llama_state(model: GPT) -> dict[str, Tensor]:
    cfg, sd = model.cfg, model.state_dict()
    inner = cfg.n_heads * cfg.head_dim
    out = {"model.embed_tokens.weight": sd["wte.weight"], "model.norm.weight": sd["ln_f.weight"],
           "lm_head.weight": sd["lm_head.weight"]}
    for i in range(cfg.n_layers):
        p, q = f"blocks.{i}.", f"model.layers.{i}."
        wq, wk, wv = sd[p + "attn.qkv.weight"].split(inner, dim=0)
        out.update({
            q + "input_layernorm.weight": sd[p + "ln1.weight"],
            q + "post_attention_layernorm.weight": sd[p + "ln2.weight"],
            q + "self_attn.q_proj.weight": wq, q + "self_attn.k_proj.weight": wk, q + "self_attn.v_proj.weight": wv,
            q + "self_attn.o_proj.weight": sd[p + "attn.proj.weight"],
            q + "mlp.gate_proj.weight": sd[p + "mlp.gate.weight"], q + "mlp.up_proj.weight": sd[p + "mlp.up.weight"],
            q + "mlp.down_proj.weight": sd[p + "mlp.proj.weight"],
        })
        if cfg.bias:
            bq, bk, bv = sd[p + "attn.qkv.bias"].split(inner, dim=0)
            out.update({
                q + "self_attn.q_proj.bias": bq, q + "self_attn.k_proj.bias": bk, q + "self_attn.v_proj.bias": bv,
                q + "self_attn.o_proj.bias": sd[p + "attn.proj.bias"], q + "mlp.gate_proj.bias": sd[p + "mlp.gate.bias"],
                q + "mlp.up_proj.bias": sd[p + "mlp.up.bias"], q + "mlp.down_proj.bias": sd[p + "mlp.proj.bias"],
            })
    return out


def to_hf(model: GPT) -> nn.Module:
    """Build the equivalent in-memory ``transformers`` model (``GPT2LMHeadModel``/``LlamaForCausalLM``), eval mode.

    Raises:
        ConfigError: no Hugging Face equivalent (see :func:`hf_architecture`).
    """
    from transformers import GPT2LMHeadModel, LlamaForCausalLM

    arch = hf_architecture(model.cfg)
    hcfg = hf_config(model.cfg)
    state = _gpt2_state(model) if arch == "gpt2" else _llama_state(model)
    with torch.random.fork_rng(devices=[]):  # HF init draws from the global RNG; keep it untouched
        hf = (GPT2LMHeadModel if arch == "gpt2" else LlamaForCausalLM)(hcfg)
    state = {k: v.detach().clone().to(torch.float32) for k, v in state.items()}
    if model.cfg.tie_embeddings:
        state.pop("lm_head.weight")
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (model.cfg.tie_embeddings and k == "lm_head.weight") and not k.endswith(".attn.bias")]
    if missing or unexpected:
        raise RuntimeError(f"internal mapping error for {arch}: missing={missing} unexpected={unexpected}")
    if model.cfg.tie_embeddings:
        hf.tie_weights()
    return hf.eval()


def export_hf(model: GPT, directory: str | Path, tokenizer: Any = None) -> Path:
    """Write ``model`` as a ``transformers`` checkpoint (config.json + model.safetensors) in ``directory``.

    ``AutoModelForCausalLM.from_pretrained(directory)`` then gives the same logits to ``EXPORT_ATOL``
    in float32. ``tokenizer``: anything with ``save_pretrained(dir)`` (a HF tokenizer), saved alongside.

    Raises:
        ConfigError: no Hugging Face equivalent (see :func:`hf_architecture`).
    """
    hf = to_hf(model)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(d))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(d))
    return d


def _unless(value: int | None, default: int) -> int | None:
    return None if value is None or value == default else int(value)


def import_hf(hf_model: nn.Module) -> GPT:
    """Convert a ``GPT2LMHeadModel`` or ``LlamaForCausalLM`` (without grouped-query attention, RoPE
    scaling or a non-"gelu"/"silu" activation) into an lmsci :class:`GPT` with the same logits.

    Raises:
        ConfigError: an architecture or option lmsci's GPT does not have.
    """
    c = hf_model.config
    sd = {k: v.detach().clone().float() for k, v in hf_model.state_dict().items()}
    tied = bool(getattr(c, "tie_word_embeddings", False))
    if c.model_type == "gpt2":
        if c.activation_function != "gelu":
            raise ConfigError("activation_function", c.activation_function, "'gelu' (lmsci uses exact GELU)")
        cfg = GPTConfig(vocab_size=c.vocab_size, seq_len=c.n_positions, n_layers=c.n_layer, n_heads=c.n_head,
                        d_model=c.n_embd, d_mlp=_unless(c.n_inner, 4 * c.n_embd), pos="learned", mlp="gelu",
                        norm="layernorm", tie_embeddings=tied, bias=True)
        # all biases exactly zero: a bias-free lmsci model exported earlier; import it bias-free
        if all(not v.any() for k, v in sd.items() if k.endswith(".bias") and k.startswith("transformer.")):
            cfg = cfg.model_copy(update={"bias": False})
        m = GPT(cfg)
        new = {"wte.weight": sd["transformer.wte.weight"], "wpe.weight": sd["transformer.wpe.weight"],
               "ln_f.weight": sd["transformer.ln_f.weight"], "ln_f.bias": sd["transformer.ln_f.bias"],
               "lm_head.weight": sd.get("lm_head.weight", sd["transformer.wte.weight"])}
        for i in range(c.n_layer):
            p, q = f"blocks.{i}.", f"transformer.h.{i}."
            new.update({
                p + "ln1.weight": sd[q + "ln_1.weight"], p + "ln1.bias": sd[q + "ln_1.bias"],
                p + "ln2.weight": sd[q + "ln_2.weight"], p + "ln2.bias": sd[q + "ln_2.bias"],
                p + "attn.qkv.weight": sd[q + "attn.c_attn.weight"].t(), p + "attn.qkv.bias": sd[q + "attn.c_attn.bias"],
                p + "attn.proj.weight": sd[q + "attn.c_proj.weight"].t(), p + "attn.proj.bias": sd[q + "attn.c_proj.bias"],
                p + "mlp.fc.weight": sd[q + "mlp.c_fc.weight"].t(), p + "mlp.fc.bias": sd[q + "mlp.c_fc.bias"],
                p + "mlp.proj.weight": sd[q + "mlp.c_proj.weight"].t(), p + "mlp.proj.bias": sd[q + "mlp.c_proj.bias"],
            })
    elif c.model_type == "llama":
        if c.num_key_value_heads != c.num_attention_heads:
            raise ConfigError("num_key_value_heads", c.num_key_value_heads, f"== num_attention_heads ({c.num_attention_heads})")
        rp = getattr(c, "rope_parameters", None) or {}
        if rp.get("rope_type", "default") != "default":
            raise ConfigError("rope_parameters.rope_type", rp.get("rope_type"), "'default'")
        if c.attention_bias != c.mlp_bias:
            raise ConfigError("mlp_bias", c.mlp_bias, f"== attention_bias ({c.attention_bias})")
        cfg = GPTConfig(vocab_size=c.vocab_size, seq_len=c.max_position_embeddings, n_layers=c.num_hidden_layers,
                        n_heads=c.num_attention_heads, d_model=c.hidden_size,
                        d_head=_unless(c.head_dim, c.hidden_size // c.num_attention_heads),
                        d_mlp=_unless(c.intermediate_size, 4 * c.hidden_size), pos="rope", mlp="swiglu", norm="rmsnorm", tie_embeddings=tied,
                        bias=bool(c.attention_bias), rope_base=float(rp.get("rope_theta", 10000.0)))
        m = GPT(cfg)
        new = {"wte.weight": sd["model.embed_tokens.weight"], "ln_f.weight": sd["model.norm.weight"],
               "lm_head.weight": sd.get("lm_head.weight", sd["model.embed_tokens.weight"])}
        for i in range(c.num_hidden_layers):
            p, q = f"blocks.{i}.", f"model.layers.{i}."
            a = q + "self_attn."
            new.update({
                p + "ln1.weight": sd[q + "input_layernorm.weight"], p + "ln2.weight": sd[q + "post_attention_layernorm.weight"],
                p + "attn.qkv.weight": torch.cat([sd[a + "q_proj.weight"], sd[a + "k_proj.weight"], sd[a + "v_proj.weight"]]),
                p + "attn.proj.weight": sd[a + "o_proj.weight"], p + "mlp.gate.weight": sd[q + "mlp.gate_proj.weight"],
                p + "mlp.up.weight": sd[q + "mlp.up_proj.weight"], p + "mlp.proj.weight": sd[q + "mlp.down_proj.weight"],
            })
            if cfg.bias:
                new.update({
                    p + "attn.qkv.bias": torch.cat([sd[a + "q_proj.bias"], sd[a + "k_proj.bias"], sd[a + "v_proj.bias"]]),
                    p + "attn.proj.bias": sd[a + "o_proj.bias"], p + "mlp.gate.bias": sd[q + "mlp.gate_proj.bias"],
                    p + "mlp.up.bias": sd[q + "mlp.up_proj.bias"], p + "mlp.proj.bias": sd[q + "mlp.down_proj.bias"],
                })
    else:
        raise ConfigError("model_type", c.model_type, "'gpt2' or 'llama' (use load_hf to wrap other models)")
    if cfg.tie_embeddings:
        new.pop("lm_head.weight")
    if not cfg.bias:
        new = {k: v for k, v in new.items() if not k.endswith(".bias")}
    m.load_state_dict(new, strict=not cfg.tie_embeddings)
    return m.eval()


# ------------------------------------------------------------------------------------- loading


@dataclass
class ModuleHook:
    """Passed to HF hook functions: ``name`` is the module path the hook is attached to."""

    name: str
    module: nn.Module


HFHookFn = Callable[[Tensor, ModuleHook], "Tensor | None"]


class HFModel:
    """A loaded Hugging Face causal LM (the real module in ``.model``) with a hook API by module path.

    Calling it maps ``input_ids [batch, seq]`` to logits ``[batch, seq, vocab_size]``. :meth:`hooks` and
    :meth:`run_with_cache` address modules by path (``model.layers.0.mlp``), by glob, or by lmsci's hook names
    (``embed``, ``blocks.{i}.resid_post`` ``[batch, seq, d_model]``, ``blocks.{i}.attn.out``, ``blocks.{i}.mlp.out``,
    ``blocks.{i}.mlp.pre``/``post`` ``[batch, seq, d_mlp]``, ``final``) through the architecture map
    (:func:`lmsci.models.arch.arch_of`), so lmsci's instruments run on it. Made by :func:`load_hf`.

    Raises:
        UnknownNameError: (from :meth:`hooks`) a path or name that matches no module, with close matches.
        ConfigError: (from the lmsci names) a family the architecture map does not support.

    Attributes:
        model: the ``transformers`` module (e.g. ``LlamaForCausalLM``), in eval mode.
        tokenizer: the checkpoint's tokenizer when one was found, else None.
        name: the hub id or path it was loaded from.
        provenance: where the weights come from (file sha256, package version, known deviations), set by
            :func:`lmsci.models.zoo.load_model`; empty when loaded otherwise.
    """

    def __init__(self, model: nn.Module, tokenizer: Any = None, name: str = ""):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.provenance: dict[str, Any] = {}

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # nn.Module-like conveniences, so instruments written for lmsci GPT (``eval()``, ``train(mode)``,
    # ``training``, ``parameters()``, ``run_with_cache``) accept an HFModel too
    @property
    def training(self) -> bool:
        return self.model.training

    def eval(self) -> HFModel:
        self.model.eval()
        return self

    def train(self, mode: bool = True) -> HFModel:
        self.model.train(mode)
        return self

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.model.parameters()

    def to(self, *args: Any, **kw: Any) -> HFModel:
        self.model.to(*args, **kw)
        return self

    def module_names(self) -> list[str]:
        """All addressable module paths (``named_modules`` order, root excluded)."""
        return [n for n, _ in self.model.named_modules() if n]

    def num_params(self) -> int:
        """Parameter count (shared tensors once)."""
        return sum(p.numel() for p in {id(p): p for p in self.model.parameters()}.values())

    def __call__(self, input_ids: Tensor, **kw: Any) -> Tensor:
        """``input_ids [batch, seq]`` -> logits ``[batch, seq, vocab_size]`` (extra kwargs go to the HF forward)."""
        return self.model(input_ids=input_ids.to(self.device), use_cache=False, **kw).logits

    def arch_path(self, name: str) -> str | None:
        """The module path of an lmsci hook name on this model, through the architecture map
        (:func:`lmsci.models.arch.arch_of`), or None when ``name`` is not one of them.

        Names: ``blocks.{i}.resid_post`` (block i's output), ``blocks.{i}.attn.out`` (the attention module's
        output), ``blocks.{i}.mlp.out`` (the MLP's output), ``blocks.{i}.mlp.pre`` (the MLP pre-activation
        ``[B, T, d_mlp]``: output of ``c_fc`` / ``dense_h_to_4h`` / the SwiGLU ``gate_proj``, as lmsci GPT's
        ``mlp.pre``), ``blocks.{i}.mlp.post`` (the neuron activations ``[B, T, d_mlp]``, ``act(pre)`` or
        ``act(gate) * up`` for SwiGLU: the *input* of the down projection, so this name returns the down
        projection's path and :meth:`hooks` attaches a forward pre-hook there; see :meth:`arch_site`),
        ``final`` (the final norm's output), ``embed`` (the token embedding's output; lmsci GPT's ``embed``
        adds learned positions, which rotary families do not have). :meth:`hooks` also takes TransformerLens's
        spellings of these (``blocks.{i}.hook_resid_post``, ``hook_attn_out``, ``hook_mlp_out``,
        ``mlp.hook_pre``, ``mlp.hook_post``, ``ln_final.hook_normalized``, ``hook_embed``; see
        :data:`lmsci.models.hooks.TRANSFORMER_LENS_ALIASES`). Instruments written with these names
        (probes, attention, knowledge, key-value-memory instruments) run on every family the map supports.

        Raises:
            ConfigError: a family the map does not support (names the family and the supported list); an
                MLP name on a family without that module (MoE, fused gate/up).
            UnknownNameError: a layer index out of range (lists the names that exist).
        """
        site = self.arch_site(name)
        return None if site is None else site[0]

    def arch_site(self, name: str) -> tuple[str, str] | None:
        """``(module path, "output" | "input")`` of an lmsci hook name on this model (see :meth:`arch_path`):
        ``"input"`` for ``blocks.{i}.mlp.post`` (the down projection's first positional input), ``"output"``
        for the others; None when ``name`` is not an lmsci hook name.

        Raises:
            ConfigError, UnknownNameError: as :meth:`arch_path`.
        """
        import re

        from lmsci.models.arch import arch_of

        m = re.fullmatch(r"blocks\.(\d+)\.(resid_post|attn\.out|mlp\.out|mlp\.pre|mlp\.post)", name)
        if m is None and name not in ("final", "embed"):
            return None
        arch = arch_of(self.model)
        if name == "final":
            return arch.family.final_norm, "output"
        if name == "embed":
            return arch.family.embedding, "output"
        i = int(m.group(1))
        if not 0 <= i < arch.n_layers:
            raise UnknownNameError("hook", name, [f"blocks.{j}.{m.group(2)}" for j in range(arch.n_layers)])
        kind = m.group(2)
        if kind == "mlp.post":
            return arch.mlp_down_path(i), "input"
        if kind == "mlp.pre":
            return arch.mlp_in_path(i), "output"
        return {"resid_post": arch.block_path(i), "attn.out": arch.attention_path(i),
                "mlp.out": arch.mlp_path(i)}[kind], "output"

    def _resolve(self, name: str | Callable[[str], bool]) -> list[tuple[str, nn.Module]]:
        mods = dict(self.model.named_modules())
        mods.pop("", None)
        if isinstance(name, str) and name not in mods:
            # an lmsci hook name, or a TransformerLens one (``blocks.0.hook_resid_post``; here ``hook_embed`` is
            # the token embedding, as in TransformerLens)
            site = self.arch_site(transformer_lens_name(name) or name)
            if site is not None:  # an lmsci hook name: the mapped module, keyed by the name asked for
                module = self.model.get_submodule(site[0])
                return [(name, _InputOf(module) if site[1] == "input" else module)]
        found = select_names(name, mods)
        if found or callable(name):
            return found
        close = difflib.get_close_matches(name, list(mods), n=8, cutoff=0.6)
        raise UnknownNameError("module path", name, close or [n for n in mods if n.count(".") <= 2])

    @contextmanager
    def hooks(
        self,
        fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HFHookFn]] | Mapping[str, HFHookFn] = (),
        cache: Iterable[str] | str | Callable[[str], bool] | None = None,
    ) -> Iterator[dict[str, Tensor]]:
        """Hook module outputs by module path for the duration of a ``with`` block.

        Args:
            fwd_hooks: ``[(path, fn), ...]`` or ``{path: fn}``; ``path`` is a module path
                (``"model.layers.0.self_attn"``), a glob (``"model.layers.*.mlp"``) or a predicate.
                ``fn(output, hook)`` gets the module's output tensor (the first element when the module
                returns a tuple, e.g. attention ``(attn_output, attn_weights)``: ``[batch, seq, d_model]``;
                the first field of a ``ModelOutput``, e.g. ``last_hidden_state`` or ``logits``)
                and returns ``None`` (read) or a same-shape tensor that replaces it.
            cache: paths/globs/predicate whose outputs (detached, first element of tuples) are recorded
                into the yielded dict keyed by path.

        Raises:
            UnknownNameError: a path matching no module, with close matches (before anything is attached).

        Hooks are plain ``register_forward_hook`` handles, all removed on exit, also on exceptions.
        """
        plan, store = hook_plan(fwd_hooks, cache, self._resolve)
        handles = []
        try:
            for (path, module), fn in plan:
                if isinstance(module, _InputOf):  # blocks.{i}.mlp.post: the down projection's input
                    handles.append(module.module.register_forward_pre_hook(_wrap_input(fn, ModuleHook(path, module.module))))
                else:
                    handles.append(module.register_forward_hook(_wrap(fn, ModuleHook(path, module))))
            yield store
        finally:
            for h in handles:
                h.remove()

    def run_with_cache(self, input_ids: Tensor, names: Iterable[str] | str | Callable[[str], bool]) -> tuple[Tensor, dict[str, Tensor]]:
        """Forward and record the outputs of ``names``: ``(logits [B, T, vocab], {path: output})``."""
        with self.hooks(cache=names) as c:
            logits = self(input_ids)
        return logits, c

    def attention_patterns(self, input_ids: Tensor) -> list[Tensor]:
        """Attention probabilities of every layer, each ``[batch, n_heads, q, k]`` (HF ``output_attentions``;
        needs ``attn_implementation="eager"``, the :func:`load_hf` default).

        Raises:
            ConfigError: the model runs a fused attention that does not return its weights.
        """
        out = self.model(input_ids=input_ids.to(self.device), use_cache=False, output_attentions=True)
        att = getattr(out, "attentions", None)
        if not att or any(a is None for a in att):
            raise ConfigError("attn_implementation", self.config._attn_implementation,
                              "'eager' to read attention weights (load_hf(..., attn_implementation='eager'))")
        return list(att)

    @torch.no_grad()
    def generate(self, input_ids: Tensor, max_new_tokens: int, **kw: Any) -> Tensor:
        """``model.generate`` (HF's own); returns ``[batch, seq + new]``."""
        return self.model.generate(input_ids.to(self.device), max_new_tokens=max_new_tokens, **kw)


@dataclass(frozen=True)
class _InputOf:
    """A hook site that is a module's first positional *input* (``blocks.{i}.mlp.post``: the down projection's)."""

    module: nn.Module


def _wrap_input(fn: HFHookFn, hook: ModuleHook):
    def pre_hook(module: nn.Module, args: tuple) -> Any:
        if not args or not isinstance(args[0], Tensor):
            raise TypeError(f"module {hook.name!r} was not called with a tensor as its first positional input")
        main = args[0]
        new = fn(main, hook)
        if new is None:
            return None
        if not isinstance(new, Tensor) or new.shape != main.shape:
            got = tuple(new.shape) if isinstance(new, Tensor) else type(new).__name__
            raise ValueError(f"hook on {hook.name!r} returned {got}; expected a tensor of shape {tuple(main.shape)}")
        return (new, *args[1:])

    return pre_hook


def _wrap(fn: HFHookFn, hook: ModuleHook):
    def forward_hook(module: nn.Module, args: Any, output: Any) -> Any:
        key = None
        if isinstance(output, tuple):
            main = output[0]
        elif hasattr(output, "to_tuple") and hasattr(output, "keys"):  # a transformers ModelOutput
            key = next(iter(output.keys()))
            main = output[key]
        else:
            main = output
        if not isinstance(main, Tensor):
            raise TypeError(f"module {hook.name!r} returned {type(main).__name__}, not a tensor; hook a submodule")
        new = fn(main, hook)
        if new is None:
            return None
        if not isinstance(new, Tensor) or new.shape != main.shape:
            got = tuple(new.shape) if isinstance(new, Tensor) else type(new).__name__
            raise ValueError(f"hook on {hook.name!r} returned {got}; expected a tensor of shape {tuple(main.shape)}")
        if isinstance(output, tuple):
            return (new, *output[1:])
        if key is not None:
            output[key] = new
            return output
        return new

    return forward_hook


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on") or \
        os.environ.get("TRANSFORMERS_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def local_model_dir(field: str, path: str | Path) -> Path:
    """``path`` as a local model directory (one holding ``config.json``), for config fields that must name a model
    on this machine (lmsci never downloads one).

    Raises:
        ConfigError: naming ``field``, when ``path`` is not a directory with a ``config.json``.
    """
    p = Path(path).expanduser()
    if not (p.is_dir() and (p / "config.json").is_file()):
        raise ConfigError(field, str(path), "a local directory with a model's config.json and weights "
                                            "(lmsci does not download models)")
    return p


def _looks_like_path(s: str) -> bool:
    """Hub ids are ``name`` or ``owner/name``; anything else is meant as a local path."""
    return s.startswith((".", "/", "~")) or s.count("/") > 1 or "\\" in s or Path(s).exists()


def load_hf(
    name_or_path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str | None = None,
    attn_implementation: str | None = "eager",
    tokenizer: bool = True,
) -> HFModel:
    """Load a Hugging Face causal LM (``AutoModelForCausalLM``) by hub id or local directory.

    Args:
        name_or_path: a hub id (``"gpt2"``, ``"meta-llama/Llama-3.2-1B"``) or a directory with
            ``config.json`` and weights (for example one written by :func:`export_hf`).
        device: where to put it. dtype: e.g. ``torch.bfloat16`` (default: the checkpoint's / float32).
        attn_implementation: ``"eager"`` (default; exact and hookable attention weights) or ``"sdpa"``.
        tokenizer: also load the tokenizer when the checkpoint has one.

    Raises:
        HubUnavailableError: a hub id while the hub cannot be reached (``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE``
            set, or a network error) and the model is not in the local cache; the message suggests a local path.
        ConfigError: a path that does not exist or has no ``config.json``; a hub id that is not a model.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    s = str(name_or_path)
    local = Path(s).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ConfigError("name_or_path", s, "a directory containing config.json and model weights")
    elif _looks_like_path(s):
        raise ConfigError("name_or_path", s, "an existing local directory or a hub model id such as 'gpt2'")
    kw: dict[str, Any] = {}
    if dtype is not None:
        kw["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if attn_implementation is not None:
        kw["attn_implementation"] = attn_implementation
    try:
        with torch.random.fork_rng(devices=[]):
            model = AutoModelForCausalLM.from_pretrained(str(local) if local.is_dir() else s, **kw)
    except OSError as err:
        msg = str(err)
        network = any(t in msg.lower() for t in ("couldn't connect", "could not connect", "offline", "connection", "resolve"))
        if not local.is_dir() and (_offline() or network):
            why = "offline mode is on (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE)" if _offline() else "the network request failed"
            raise HubUnavailableError(
                f"Cannot download {s!r} from the Hugging Face hub: {why}, and it is not in the local cache. "
                f"Pass a local directory instead, e.g. load_hf('/path/to/{s.split('/')[-1]}'), after "
                f"`huggingface-cli download {s} --local-dir /path/to/{s.split('/')[-1]}` on a machine with internet."
            ) from err
        raise ConfigError("name_or_path", s, f"a loadable causal LM ({msg.splitlines()[0]})") from err
    model = model.to(device).eval()
    tok = None
    if tokenizer:
        try:
            tok = AutoTokenizer.from_pretrained(str(local) if local.is_dir() else s)
        except (OSError, ValueError, TypeError):
            tok = None
    return HFModel(model, tok, s)
