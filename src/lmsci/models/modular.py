"""Nanda et al.'s one-layer modular-arithmetic transformer (the grokking model) and its answer-position logits.

The model is :class:`lmsci.models.gpt.GPT` with ``mlp="relu"``, ``norm="none"``, ``pos="learned"``,
``n_layers=1`` (its ``bias=True`` adds zero-initialised attention biases that Nanda's model lacks), re-initialised
as in Nanda's code (:func:`nanda_init`). Only the answer position is needed: :func:`answer_logits` computes the
last position's logits (attention over all three positions, the MLP and unembedding at the last one only),
equal to ``model(ids)[:, -1]`` (tested) at about half the cost. :func:`stacked_answer_logits` is the same function
for K models at once from per-token key/value/score tables (every weight with a leading member dimension), what
:func:`lmsci.train.modular.train_modular_stacked` trains through.

Source: Nanda, Chan, Lieberum, Smith, Steinhardt, "Progress measures for grokking via mechanistic
interpretability", arXiv 2301.05217 (ICLR 2023), sec. 3: a one-layer transformer (d_model 128, 4 heads of 32,
d_mlp 512, ReLU, no LayerNorm, learned positions, untied unembedding; init of ``transformers.py``: every weight
``randn / sqrt(d_model)``, the unembedding ``randn / sqrt(d_vocab)``, biases 0).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lmsci.models.gpt import GPT, GPTConfig

__all__ = ["grokking_model", "nanda_init", "answer_logits", "stacked_answer_logits"]


def grokking_model(p: int, d_model: int = 128, n_heads: int = 4, d_mlp: int = 512, seed: int = 0) -> GPT:
    """Nanda et al.'s one-layer transformer as a :class:`GPT` (vocabulary ``p + 1``, 3 positions), initialised
    by :func:`nanda_init`. Source: arXiv 2301.05217 sec. 3; ``transformers.py`` of their code."""
    cfg = GPTConfig(vocab_size=p + 1, seq_len=3, n_layers=1, n_heads=n_heads, d_model=d_model, d_mlp=d_mlp,
                    pos="learned", mlp="relu", norm="none", bias=True, tie_embeddings=False)
    model = GPT(cfg, seed=seed)
    nanda_init(model, seed)
    return model


def nanda_init(model: GPT, seed: int) -> None:
    """Re-initialise in place as Nanda et al.'s ``transformers.py``: every weight matrix (embeddings, q/k/v,
    output projection, MLP in/out) ``randn / sqrt(d_model)``, the unembedding ``randn / sqrt(vocab_size)``,
    biases zero. Deterministic in ``seed``; the global RNG is not used."""
    g = torch.Generator().manual_seed(int(seed))
    d = model.cfg.d_model
    with torch.no_grad():
        for name, w in model.named_parameters():
            if name.endswith("bias"):
                w.zero_()
                continue
            scale = 1 / math.sqrt(model.cfg.vocab_size) if name == "lm_head.weight" else 1 / math.sqrt(d)
            w.copy_(torch.randn(w.shape, generator=g) * scale)


def answer_logits(model: GPT, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits at the last position, ``[batch, vocab_size]``, for ``input_ids [batch, seq]``.

    Equals ``model(input_ids)[:, -1]`` for a one-layer GPT (tested): the attention layer runs over all positions,
    the MLP and the unembedding only at the last one. Hook points other than ``embed``/``attn.*`` do not fire.
    """
    blk = model.blocks[0] if len(model.blocks) == 1 else None
    if blk is None:
        return model(input_ids)[:, -1]
    T = input_ids.shape[1]
    pos = torch.arange(T, device=input_ids.device)
    x = model.wte(input_ids)
    if model.cfg.pos == "learned":
        x = x + model.wpe(pos)
    attn = blk.attn
    if model.cfg.pos in ("learned", "none") and not any(h.active for h in (attn.hook_scores, attn.hook_pattern,
                                                                          attn.hook_z, attn.hook_out)):
        x = x[:, -1] + _last_query_attention(attn, blk.ln1(x))
    else:
        x = (x + attn(blk.ln1(x), pos))[:, -1]
    if blk.has_mlp:
        x = x + blk.mlp(blk.ln2(x))
    return model.lm_head(model.ln_f(x))


def _last_query_attention(attn, h: torch.Tensor) -> torch.Tensor:
    """Causal attention output at the last position only, ``[batch, d_model]``, for ``h [batch, T, d_model]``
    (a layer without positional terms in the attention logits: learned or no positions).

    The last query sees every key, so no mask is needed; only its query and the keys/values of all positions are
    projected (about 3x fewer query and output-projection FLOPs than the full layer at T = 3), and the softmax over
    T keys is two small einsums instead of a fused-attention call whose set-up dominates at T = 3.
    """
    B, T, _ = h.shape
    H, D = attn.n_heads, attn.d_head
    inner = H * D
    w, b = attn.qkv.weight, attn.qkv.bias
    q = F.linear(h[:, -1], w[:inner], None if b is None else b[:inner]).view(B, H, D)
    k, v = F.linear(h, w[inner:], None if b is None else b[inner:]).view(B, T, 2, H, D).unbind(2)
    pattern = torch.softmax(torch.einsum("bhd,bthd->bht", q, k) * (1.0 / math.sqrt(D)), dim=-1)
    z = torch.einsum("bht,bthd->bhd", pattern, v).reshape(B, inner)
    return attn.proj(z)

def stacked_answer_logits(params: dict[str, torch.Tensor], input_ids: torch.Tensor, n_heads: int,
                          query_token: int) -> torch.Tensor:
    """Answer-position logits of K one-layer models at once, ``[K, batch, vocab_size]``.

    Args:
        params: the K models' parameters stacked, ``{GPT parameter name: [K, *shape]}`` (names and layouts of
            :func:`grokking_model`: ``wte.weight [K, V, d]``, ``wpe.weight [K, T, d]``, ``blocks.0.attn.qkv.*``,
            ``blocks.0.attn.proj.*``, ``blocks.0.mlp.fc.*``, ``blocks.0.mlp.proj.*``, ``lm_head.weight [K, V, d]``).
        input_ids: ``[K, batch, T]`` long (member k's rows are ``input_ids[k]``); the last position of every row
            holds ``query_token`` (the "=" token of :class:`~lmsci.worlds.modular.ModularData`: the caller checks).
        n_heads: attention heads.
        query_token: the token at the answer position.

    Returns:
        logits ``[K, batch, V]`` equal to ``answer_logits(model_k, input_ids[k])`` for every k (tested; float
        rounding only).

    The same function as :func:`answer_logits`, computed from per-token tables: a one-layer model's keys, values
    and attention scores at position t depend only on the token there, so they are computed once for the ``V``
    tokens at each of the T positions (``[K, T * V, .]``, independent of the batch) and gathered per example; the
    answer position's query is one vector per member (its token is always ``query_token``). Per example only
    the softmax over T keys, the value mixture, and the output projection, MLP and unembedding GEMMs remain
    (about half the FLOPs of :func:`answer_logits`). Every matmul is batched over the K members (``bmm`` /
    ``baddbmm`` on ``[K, ...]`` weights).
    """
    E, pos = params["wte.weight"], params["wpe.weight"]
    K, V, d = E.shape
    B, T = input_ids.shape[1], input_ids.shape[2]
    W, b = params["blocks.0.attn.qkv.weight"], params["blocks.0.attn.qkv.bias"]
    inner = W.shape[1] // 3
    H = n_heads
    D = inner // H
    h = E[:, None] + pos[:, :, None]                                       # [K, T, V, d]: token v at position t
    kv = torch.baddbmm(b[:, None, inner:], h.reshape(K, T * V, d), W[:, inner:].transpose(1, 2))  # [K, T*V, 2I]
    h_q = h[:, T - 1, query_token]                                         # [K, d]: the answer position's input
    q = torch.baddbmm(b[:, None, :inner], h_q[:, None], W[:, :inner].transpose(1, 2)).view(K, H, D)
    k_tab, v_tab = kv.view(K, T * V, 2, inner).unbind(2)
    scores = torch.einsum("khd,knhd->knh", q, k_tab.reshape(K, T * V, H, D)) * (1.0 / math.sqrt(D))  # [K, T*V, H]
    flat = (input_ids + torch.arange(T, device=input_ids.device) * V).reshape(K, B * T, 1)
    s = torch.gather(scores, 1, flat.expand(-1, -1, H)).view(K, B, T, H)
    pattern = torch.softmax(s, dim=2)                                      # over the T keys
    v = torch.gather(v_tab, 1, flat.expand(-1, -1, inner)).view(K, B, T, H, D)
    z = (pattern[..., None] * v).sum(2).reshape(K, B, inner)
    r = h_q[:, None] + torch.baddbmm(params["blocks.0.attn.proj.bias"][:, None], z,
                                     params["blocks.0.attn.proj.weight"].transpose(1, 2))       # residual [K, B, d]
    a = torch.relu(torch.baddbmm(params["blocks.0.mlp.fc.bias"][:, None], r,
                                 params["blocks.0.mlp.fc.weight"].transpose(1, 2)))
    r = r + torch.baddbmm(params["blocks.0.mlp.proj.bias"][:, None], a, params["blocks.0.mlp.proj.weight"].transpose(1, 2))
    return torch.bmm(r, params["lm_head.weight"].transpose(1, 2))
