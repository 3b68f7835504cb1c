"""Pieces shared by the laws experiments (``model-shape``, ``transformer-vs-lstm``): lmsci's GPT parameter count."""

from __future__ import annotations


def gpt_non_embedding_params(n_layers: int, d_model: int, n_heads: int, d_head: int, d_mlp: int | None = None) -> int:
    """Non-embedding parameters of lmsci's GPT (learned positions, GELU MLP of ``d_mlp`` (default 4 d_model),
    LayerNorm, biases): per block ``2d + (3 d Hk + 3 Hk) + (Hk d + d) + 2d + (d m + m) + (m d + d)`` with
    ``Hk = n_heads * d_head`` and ``m = d_mlp``, plus the final LayerNorm ``2d`` (equals
    ``GPT.num_params(non_embedding=True)``; tested)."""
    d, hk = d_model, n_heads * d_head
    m = 4 * d if d_mlp is None else d_mlp
    block = 2 * d + 3 * d * hk + 3 * hk + hk * d + d + 2 * d + 2 * d * m + m + d
    return n_layers * block + 2 * d
