"""LM-Infinite, StreamingLLM attention sinks and sliding windows: interventions on a model's attention.

Source: Han, Wang, Peng, Xiong, Chen, Ji, Wang, "LM-Infinite: Zero-Shot Extreme Length Generalization
for Large Language Models", NAACL 2024, arXiv 2308.16137, Section 4 (Lambda-shaped mask, distance
ceiling), Section 5.3 / Appendix A (top-k middle tokens); Xiao et al., "Efficient Streaming Language
Models with Attention Sinks", ICLR 2024, arXiv 2309.17453, Section 3.2.

The policies and the blockwise harness that computes them live in :mod:`lmsci.models.attention_harness`
(instruments in :mod:`lmsci.measure.attention` use it too); this module re-exports them and adds the
LM-Infinite conveniences :func:`apply_lm_infinite` and :func:`lm_infinite`, and :func:`repeat_kv_heads`, the exact
rewrite of a grouped-query-attention model into multi-head attention that the official LM-Infinite code needs (it views
keys and values with the query head count).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterator

from lmsci.errors import ConfigError

from lmsci.models.attention_harness import *  # noqa: F401,F403 (re-exported: the harness and its policies)
from lmsci.models.attention_harness import (  # noqa: F401
    POLICY_KINDS,
    AttentionPatch,
    AttentionPolicy,
    _is_lmsci_gpt,
    apply_policy,
    lm_infinite_policy,
)
from lmsci.models.attention_harness import __all__ as _harness_all


def apply_lm_infinite(model: Any, n_local: int, n_global: int = 10, d_max: int | None = None,
                      top_k: int = 0, top_k_from_layer: int = 4, top_k_distance: int | None = None,
                      block_size: int | None = None) -> AttentionPatch:
    """Install LM-Infinite (Han et al. 2023, arXiv 2308.16137, Sec. 4; see :func:`lm_infinite_policy` for the
    arguments) on ``model`` (an lmsci GPT with ``pos`` rope/alibi, or a Hugging Face model of the architecture map,
    or an :class:`~lmsci.models.hf.HFModel`) and return the :class:`AttentionPatch`; ``patch.remove()`` restores
    the original attention bit for bit. The patched model maps ``[batch, seq]`` ids to ``[batch, seq, vocab]``
    logits as before.

    Raises:
        ConfigError: an unsupported model or family (naming it and the supported ones), a GPT without RoPE/ALiBi,
            a policy argument out of range."""
    return apply_policy(model, lm_infinite_policy(n_local, n_global, d_max, top_k, top_k_from_layer,
                                                  top_k_distance, block_size))


@contextlib.contextmanager
def lm_infinite(model: Any, n_local: int, n_global: int = 10, **kw: Any) -> Iterator[AttentionPatch]:
    """Context manager: LM-Infinite on ``model`` inside the ``with`` block, the original attention after (also on
    an exception). ``with lm_infinite(model, n_local=L, n_global=10): logits = model(ids)``, ``ids [batch, seq]``
    of any length, logits ``[batch, seq, vocab_size]``. Arguments as :func:`apply_lm_infinite` (``n_local``: the
    pretraining length L; ``n_global``: starting tokens kept; ``top_k``...). Source: Han et al. 2023, "LM-Infinite",
    arXiv 2308.16137, Sec. 4.

    Raises:
        ConfigError: as :func:`apply_lm_infinite`, before the block runs."""
    p = apply_lm_infinite(model, n_local, n_global, **kw)
    try:
        yield p
    finally:
        p.remove()


def repeat_kv_heads(model: Any) -> Any:
    """A copy of a Hugging Face grouped-query-attention model with every key/value head repeated to the query head
    count: ``k_proj``/``v_proj`` weights ``[n_kv_heads * d_head, d_model]`` become ``[n_heads * d_head, d_model]``,
    kv head j copied to heads ``j * n_rep .. (j + 1) * n_rep - 1`` (the order of ``transformers``' ``repeat_kv``), and
    ``num_key_value_heads = num_attention_heads``. An exact rewrite: the logits are the same up to float rounding
    (the same products, summed in the same order). Needed to run code that assumes multi-head attention, such as the
    official LM-Infinite implementation (Glaciohound/LM-Infinite), on a GQA model (SmolLM2: 3 kv heads, 9 q heads).

    Args:
        model: a ``transformers`` causal LM whose attention modules have ``k_proj``, ``v_proj`` and
            ``num_key_value_groups`` (Llama, Mistral, Qwen2, ...), or an lmsci ``HFModel`` wrapping one.

    Returns:
        The rewritten copy (the input is left unchanged); the copy of an ``HFModel``'s ``.model`` for an HFModel.

    Raises:
        ConfigError: no attention module with ``k_proj``/``v_proj``/``num_key_value_groups`` (not a supported family).
    """
    if type(model).__name__ == "HFModel":
        model = model.model
    if getattr(model, "config", None) is None:
        raise ConfigError("model", type(model).__name__, "a Hugging Face Llama-family model")
    new = copy.deepcopy(model)
    cfg = new.config.get_text_config() if hasattr(new.config, "get_text_config") else new.config
    n_heads = cfg.num_attention_heads
    d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    mods = [m for m in new.modules() if all(hasattr(m, a) for a in ("k_proj", "v_proj", "num_key_value_groups"))]
    if not mods:
        raise ConfigError("model", type(model).__name__, "a Llama-family model (attention with k_proj, v_proj and "
                                                         "num_key_value_groups)")
    for m in mods:
        n_rep = int(m.num_key_value_groups)
        for name in ("k_proj", "v_proj"):
            lin = getattr(m, name)
            w = lin.weight.data
            n_kv = w.shape[0] // d_head
            lin.weight.data = w.view(n_kv, d_head, -1).repeat_interleave(n_rep, 0).reshape(n_kv * n_rep * d_head, -1)
            if lin.bias is not None:
                lin.bias.data = lin.bias.data.view(n_kv, d_head).repeat_interleave(n_rep, 0).reshape(-1)
            lin.out_features = lin.weight.shape[0]
        m.num_key_value_groups = 1
        if hasattr(m, "num_key_value_heads"):
            m.num_key_value_heads = n_heads
    cfg.num_key_value_heads = n_heads
    return new


__all__ = [*_harness_all, "apply_lm_infinite", "lm_infinite", "repeat_kv_heads"]
