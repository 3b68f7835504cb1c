"""Parameter counts of lmsci's GPT from its configuration, without building it.

:func:`count_params` is the closed form of ``GPT(spec.gpt_config(V, T)).num_params()`` (tested equal over every
``pos`` x ``mlp`` x ``norm`` x ``bias`` x ``tie_embeddings``), so an experiment can match parameter counts across
architectures (attention-only vs MLP, MoE vs dense; Physics of LMs Part 3.3, arXiv 2404.05405, compares
capacity at equal parameters) by searching widths or depths without allocating models.
"""

from __future__ import annotations

from typing import Any

from lmsci.errors import ConfigError
from lmsci.models.positions import REL_BUCKETS


def _norm_params(spec: Any) -> int:
    if spec.norm == "none":
        return 0
    if spec.norm == "layernorm":
        return spec.d_model * (2 if spec.bias else 1)
    return spec.d_model  # rmsnorm


def _mlp_params(spec: Any, experts: int) -> int:
    d, h, b = spec.d_model, spec.mlp_dim, int(spec.bias)
    dense = d * h + h * b + h * d + d * b  # fc + proj
    if spec.mlp in ("gelu", "relu"):
        return dense
    if spec.mlp == "swiglu":
        return dense + d * h + h * b  # the extra up projection
    if spec.mlp == "moe":
        return d * spec.moe_experts + experts * dense  # router (no bias) + experts
    return 0


def count_params(spec: Any, vocab_size: int, seq_len: int, *, non_embedding: bool = False,
                 active: bool = False) -> int:
    """Parameters of ``GPT(spec.gpt_config(vocab_size, seq_len))``, shared (tied) tensors counted once.

    Args:
        spec: a :class:`~lmsci.models.gpt.GPTSpec` (or :class:`~lmsci.models.gpt.GPTConfig`).
        vocab_size, seq_len: the world's sizes (token embedding ``[V, d_model]``, learned positions
            ``[T, d_model]``, ``posonly``'s per-distance logits ``[n_heads, T]`` per layer).
        non_embedding: without the token and position embeddings and the unembedding, as
            ``GPT.num_params(non_embedding=True)`` (Kaplan et al. 2020's N, arXiv 2001.08361, sec. 2.1).
        active: for ``mlp="moe"``, count only the ``moe_top_k`` experts a token passes through (plus the router):
            the parameters used per token (Part 3.3's MoE result quotes this share); ignored otherwise.

    Returns:
        the number of parameters (int).

    Raises:
        ConfigError: ``vocab_size`` or ``seq_len`` below 1.
    """
    if vocab_size < 1:
        raise ConfigError("vocab_size", vocab_size, "an integer >= 1")
    if seq_len < 1:
        raise ConfigError("seq_len", seq_len, "an integer >= 1")
    d, H, inner, b = spec.d_model, spec.n_heads, spec.n_heads * spec.head_dim, int(spec.bias)
    content_free = spec.pos in ("uni", "posonly")
    attn = d * (inner if content_free else 3 * inner) + (inner if content_free else 3 * inner) * b
    attn += inner * d + d * b
    attn += {"relative": H * REL_BUCKETS, "posonly": H * seq_len}.get(spec.pos, 0)
    experts = (spec.moe_top_k if active else spec.moe_experts) if spec.mlp == "moe" else 1
    block = _norm_params(spec) + attn
    if spec.mlp != "none":
        block += _norm_params(spec) + _mlp_params(spec, experts)
    n = spec.n_layers * block + _norm_params(spec)
    if non_embedding:
        return n
    n += vocab_size * d + (seq_len * d if spec.pos == "learned" else 0)
    return n + (0 if spec.tie_embeddings else vocab_size * d)
