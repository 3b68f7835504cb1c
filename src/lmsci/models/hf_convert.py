"""lmsci GPT <-> Hugging Face ``transformers`` conversion: export an lmsci GPT as a checkpoint, import one back.

* :func:`export_hf` writes an lmsci :class:`~lmsci.models.gpt.GPT` as a ``transformers`` checkpoint of the
  matching architecture, loadable with ``AutoModelForCausalLM.from_pretrained(dir)`` (or
  :func:`lmsci.models.hf.load_hf`); :func:`to_hf` builds the same model in memory:

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

Loading any causal LM by path and hooking it by module path is :mod:`lmsci.models.hf`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from lmsci.errors import ConfigError
from lmsci.models.gpt import GPT, GPTConfig

EXPORT_ATOL = 1e-4


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
