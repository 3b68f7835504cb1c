"""Associative-memory transformers of Nichani, Lee & Bietti (arXiv 2412.06538).

Two models:

* :class:`OneLayerTransformer`: the paper's one-layer transformer (definitions of ``attn``, ``F_MHSA``, ``F_TF``; official
  ``model.py: TF_one_layer``): frozen random embeddings and unembeddings (rows ~ N(0, 1/d)), H
  attention heads of dimension d_h computed only for the last query position, no positional
  encoding, output ``x = F_MHSA(X) + V^T relu(W F_MHSA(X))`` (the MLP is optional; without it the
  model is attention-only), logits over the answer classes ``u_a^T x``. The parameter count is the
  paper's ``4 * H * d_h * d + 2 * m * d`` (embeddings and the MLP bias not counted).
* :class:`LinearAttentionModel`: the model of the optimisation-dynamics result (
  ``F_lin(X) = W_OV X^T X W_KQ x_T``, Theorem 6; notebook ``sequential-learning.ipynb``) with
  orthogonal (one-hot) embeddings, weights initialised to a small constant.

Implementation note. Without positional encodings and with a single query (the last position),
attention depends on the input only through the token counts ``C [batch, vocab_size]`` and the
last token: ``softmax_t(s(z_t)) `` over positions equals ``softmax_z(s(z) + log C_z)`` over the
vocabulary, and the value sum is ``sum_z C_z exp(s(z)) v(z) / sum_z C_z exp(s(z))``. Both models are
computed in this exact bag-of-tokens form, which turns the per-position projections into dense
matmuls against ``[vocab_size, ...]`` tables. :class:`OneLayerTransformer` also holds a *stack*
of M independent models (the leading dimension of every weight) so that many tiny models of a
sweep train as one batched computation; models of different sizes share one stack by padding
(heads, head dimensions, MLP units and answer classes beyond a model's own size are masked, get
zero gradient and stay zero, so each member computes exactly its own smaller model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from lmsci.errors import ConfigError


@dataclass(frozen=True)
class OneLayerSpec:
    """Size of one member of a :class:`OneLayerTransformer` stack.

    Attributes:
        n_heads: H >= 1.
        d_head: d_h >= 1.
        d_mlp: MLP width m >= 0 (0 = attention-only).
        n_answers: active answer classes (None = all of the stack's ``n_answers``).
        vocab_size: the member's input vocabulary (None = the stack's ``vocab_size``).
    """

    n_heads: int
    d_head: int
    d_mlp: int = 0
    n_answers: int | None = None
    vocab_size: int | None = None

    def num_params(self, d_model: int) -> int:
        """The paper's count ``4 * H * d_h * d + 2 * m * d`` (arXiv 2412.06538, model set-up)."""
        return 4 * self.n_heads * self.d_head * d_model + 2 * self.d_mlp * d_model


def count_tokens(input_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Token counts: ``input_ids [..., seq]`` long -> ``[..., vocab_size]`` float."""
    c = torch.zeros(*input_ids.shape[:-1], vocab_size, dtype=torch.float32, device=input_ids.device)
    return c.scatter_add_(-1, input_ids, torch.ones_like(input_ids, dtype=torch.float32))


class OneLayerTransformer(nn.Module):
    """A stack of M one-layer transformers (the paper's ``F_TF``), trained as one computation.

    Args:
        d_model: d, the embedding dimension shared by the stack.
        vocab_size: input vocabulary size (the largest of the members' worlds).
        n_answers: number of output (answer) classes (the largest of the members').
        specs: one :class:`OneLayerSpec` per member (or a single spec for M = 1).
        seed: seeds the frozen embeddings and initial weights: one int (member i uses
            ``seed + i``) or one seed per member. Each member draws from its own
            ``torch.Generator`` at its own size, so it is the same model alone or in any stack.

    Initialisation follows the official code: Q, K, V ~ N(0, 1/d_h), O ~ N(0, 1/d), MLP
    ``W`` ~ N(0, 1/d) with zero bias, ``V_mlp`` ~ N(0, 1/m); embeddings and unembeddings ~ N(0, 1/d)
    and frozen (buffers, not parameters).

    Raises:
        ConfigError: a size < 1, an empty stack or a member larger than the stack's answers.

    Source: arXiv 2412.06538, model set-up (``attn``, ``F_MHSA``, ``F_TF``), Theorems 3-4.
    """

    def __init__(self, d_model: int, vocab_size: int, n_answers: int,
                 specs: OneLayerSpec | list[OneLayerSpec], seed: int | list[int] = 0):
        super().__init__()
        specs = [specs] if isinstance(specs, OneLayerSpec) else list(specs)
        if not specs:
            raise ConfigError("specs", specs, "at least one OneLayerSpec")
        for name, v in (("d_model", d_model), ("vocab_size", vocab_size), ("n_answers", n_answers)):
            if v < 1:
                raise ConfigError(name, v, "an integer >= 1")
        for s in specs:
            if s.n_heads < 1 or s.d_head < 1 or s.d_mlp < 0:
                raise ConfigError("spec", s, "n_heads >= 1, d_head >= 1, d_mlp >= 0")
            if s.n_answers is not None and not 1 <= s.n_answers <= n_answers:
                raise ConfigError("spec.n_answers", s.n_answers, f"1..{n_answers}")
        self.specs, self.d_model, self.vocab_size, self.n_answers = specs, d_model, vocab_size, n_answers
        M, d = len(specs), d_model
        H, dh = max(s.n_heads for s in specs), max(s.d_head for s in specs)
        m = max(s.d_mlp for s in specs)
        self.n_models, self.n_heads, self.d_head, self.d_mlp = M, H, dh, m
        seeds = [int(seed) + i for i in range(M)] if isinstance(seed, int) else [int(x) for x in seed]
        if len(seeds) != M:
            raise ConfigError("seed", seed, f"an int or a list of {M} ints (one per member)")

        head_mask = torch.zeros(M, H, dh)
        mlp_mask = torch.zeros(M, max(m, 1))
        ans_mask = torch.zeros(M, n_answers, dtype=torch.bool)
        scale = torch.empty(M)
        E, U = torch.zeros(M, vocab_size, d), torch.zeros(M, n_answers, d)
        Wq, Wk, Wv = torch.zeros(M, H, d, dh), torch.zeros(M, H, d, dh), torch.zeros(M, H, d, dh)
        Wo = torch.zeros(M, H, dh, d)
        Win, Wout = torch.zeros(M, d, max(m, 1)), torch.zeros(M, max(m, 1), d)
        for i, s in enumerate(specs):
            # each member is drawn from its own generator at its own size, so it does not depend
            # on the rest of the stack (same seed + spec = same model, alone or stacked)
            g = torch.Generator().manual_seed(seeds[i])
            h, e, a, w = s.n_heads, s.d_head, s.n_answers or n_answers, s.d_mlp
            v_i = s.vocab_size or vocab_size
            if v_i > vocab_size:
                raise ConfigError("spec.vocab_size", v_i, f"<= {vocab_size}")
            head_mask[i, :h, :e] = 1
            mlp_mask[i, :w] = 1
            ans_mask[i, :a] = True
            scale[i] = 1 / math.sqrt(e)
            E[i, :v_i] = torch.randn(v_i, d, generator=g) / math.sqrt(d)
            U[i, :a] = torch.randn(a, d, generator=g) / math.sqrt(d)
            Wq[i, :h, :, :e] = torch.randn(h, d, e, generator=g) / math.sqrt(e)
            Wk[i, :h, :, :e] = torch.randn(h, d, e, generator=g) / math.sqrt(e)
            Wv[i, :h, :, :e] = torch.randn(h, d, e, generator=g) / math.sqrt(e)
            Wo[i, :h, :e, :] = torch.randn(h, e, d, generator=g) / math.sqrt(d)
            if w > 0:
                Win[i, :, :w] = torch.randn(d, w, generator=g) / math.sqrt(d)
                Wout[i, :w, :] = torch.randn(w, d, generator=g) / math.sqrt(w)
        self.register_buffer("head_mask", head_mask)
        self.register_buffer("mlp_mask", mlp_mask)
        self.register_buffer("answer_mask", ans_mask)
        self.register_buffer("score_scale", scale.view(M, 1, 1, 1))  # 1/sqrt(d_h) per member
        # frozen random embeddings / unembeddings, [M, vocab, d] and [M, n_answers, d]
        self.register_buffer("embed", E)
        self.register_buffer("unembed", U)
        self.W_Q, self.W_K, self.W_V, self.W_O = (nn.Parameter(t) for t in (Wq, Wk, Wv, Wo))
        if m > 0:
            self.W_in, self.b_in, self.W_out = nn.Parameter(Win), nn.Parameter(torch.zeros(M, m)), nn.Parameter(Wout)
        else:
            self.W_in = self.b_in = self.W_out = None

    def keep(self, members: list[int]) -> None:
        """Keep only the given members of the stack (in place): slices every weight and buffer.

        Used to drop finished members from a batched training run. Optimiser state must be
        sliced the same way by the caller.
        """
        idx = torch.as_tensor(members, dtype=torch.long, device=self.embed.device)
        for name, p in list(self._parameters.items()):
            if p is not None:
                self._parameters[name] = nn.Parameter(p.detach()[idx].clone())
        for name, b in list(self._buffers.items()):
            self._buffers[name] = b[idx].clone()
        self.specs = [self.specs[i] for i in members]
        self.n_models = len(members)

    def num_params(self) -> list[int]:
        """Per member, the paper's count ``4 * H * d_h * d + 2 * m * d``."""
        return [s.num_params(self.d_model) for s in self.specs]

    def _stack(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, bool]:
        if input_ids.dim() == 2:
            if self.n_models != 1:
                raise ConfigError("input_ids", tuple(input_ids.shape),
                                  f"[n_models={self.n_models}, batch, seq] for a stack")
            return input_ids[None], True
        if input_ids.dim() != 3 or input_ids.shape[0] != self.n_models:
            raise ConfigError("input_ids", tuple(input_ids.shape), f"[{self.n_models}, batch, seq]")
        return input_ids, False

    def attention(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention of the last position, over the vocabulary (bag-of-tokens form).

        Args:
            input_ids: ``[n_models, batch, seq]`` (or ``[batch, seq]`` when M = 1) long.

        Returns:
            ``pattern [M, batch, H, vocab_size]`` (attention mass on each token id, summed over
            its positions) and the heads' output ``F_MHSA(X) [M, batch, d_model]``.
        """
        ids, _ = self._stack(input_ids)
        M, B, _ = ids.shape
        V = self.vocab_size
        counts = count_tokens(ids, V)  # [M, B, V]
        x_last = self.embed[torch.arange(M, device=ids.device)[:, None], ids[:, :, -1]]  # [M, B, d]
        mask = self.head_mask[:, :, None, :]
        q = torch.einsum("mbd,mhde->mhbe", x_last, self.W_Q * mask)  # [M, H, B, dh]
        k = torch.einsum("mvd,mhde->mhve", self.embed, self.W_K * mask)  # [M, H, V, dh]
        v = torch.einsum("mvd,mhde->mhve", self.embed, self.W_V * mask)  # [M, H, V, dh]
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.score_scale  # [M, H, B, V]
        scores = scores + torch.log(counts)[:, None]  # -inf for absent tokens
        pattern = torch.softmax(scores, dim=-1)  # [M, H, B, V]
        heads = torch.matmul(pattern, v)  # [M, H, B, dh]
        out = torch.einsum("mhbe,mhed->mbd", heads, self.W_O)
        return pattern.permute(0, 2, 1, 3), out

    def mhsa(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``F_MHSA(X) [M, batch, d_model]`` for ``input_ids [M, batch, seq]``.

        Fast path when every sequence of a member ends with the same token (always EOS in the
        factual-recall world): the query, hence the score of each token id, is then shared by the
        batch, and the heads reduce to two matmuls against the counts,
        ``C @ (exp(s) * v) / (C @ exp(s))``, with ``[M, batch, vocab] x [M, vocab, H * d_h]`` cost.
        Otherwise (or if the shared-max rescaling underflows) it uses :meth:`attention`.
        """
        ids, _ = self._stack(input_ids)
        M, B, _ = ids.shape
        last = ids[:, :, -1]
        if not bool((last == last[:, :1]).all()):
            return self.attention(ids)[1]
        H, dh, V = self.n_heads, self.d_head, self.vocab_size
        counts = count_tokens(ids, V)  # [M, B, V]
        mask = self.head_mask[:, :, None, :]
        x_last = self.embed[torch.arange(M, device=ids.device), last[:, 0]]  # [M, d]
        q = torch.einsum("md,mhde->mhe", x_last, self.W_Q * mask)  # [M, H, dh]
        k = torch.einsum("mvd,mhde->mhve", self.embed, self.W_K * mask)  # [M, H, V, dh]
        v = torch.einsum("mvd,mhde->mvhe", self.embed, self.W_V * mask)  # [M, V, H, dh]
        scores = torch.einsum("mhve,mhe->mvh", k, q) * self.score_scale.view(M, 1, 1)  # [M, V, H]
        w = torch.exp(scores - scores.amax(dim=1, keepdim=True))  # [M, V, H], max 1
        z = torch.bmm(counts, w)  # [M, B, H]
        if not bool((z > 1e-30).all()):
            return self.attention(ids)[1]
        num = torch.bmm(counts, (w[..., None] * v).reshape(M, V, H * dh)).view(M, B, H, dh)
        heads = num / z[..., None]  # [M, B, H, dh]
        return torch.einsum("mbhe,mhed->mbd", heads, self.W_O)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits over the answers at the last position.

        Args:
            input_ids: ``[n_models, batch, seq]`` long (``[batch, seq]`` when M = 1).

        Returns:
            ``[n_models, batch, n_answers]`` float logits (``[batch, n_answers]`` when the input
            was 2-D); answer classes beyond a member's own ``n_answers`` are ``-inf``.
        """
        ids, squeeze = self._stack(input_ids)
        x = self.mhsa(ids)
        if self.W_in is not None:
            z = torch.relu(torch.baddbmm(self.b_in[:, None, :], x, self.W_in)) * self.mlp_mask[:, None, :]
            x = x + torch.bmm(z, self.W_out)
        logits = torch.bmm(x, self.unembed.transpose(1, 2))
        logits = logits.masked_fill(~self.answer_mask[:, None, :], float("-inf"))
        return logits[0] if squeeze else logits


class LinearAttentionModel(nn.Module):
    """One linear-attention head with orthogonal (one-hot) embeddings, for Theorem 6.

    ``F_lin(X) = W_OV X^T X W_KQ x_T``: the last position scores every position ``l`` with
    ``s_l = x_T^T A x_l`` (no softmax for ``attention="linear"``), sums ``h = sum_l s_l x_l`` and
    reads out ``logits = h V`` over the answers. ``A [d, d]`` and ``V [d, n_answers]`` start at
    ``init_scale * ones`` (the notebook's ``1e-5``; the paper's Assumption 2 uses a constant
    initialisation too). ``attention="softmax"`` with ``embedding="random"`` is the model of
    Fig. 5 (right).

    Args:
        vocab_size: input vocabulary size (= d for one-hot embeddings).
        n_answers: number of output classes.
        embedding: ``"onehot"`` (orthogonal, d = vocab_size) or ``"random"`` (unit-norm rows).
        attention: ``"linear"`` or ``"softmax"``.
        d_model: d for random embeddings (ignored for one-hot).
        init_scale: the constant initial value of A and V.
        seed: seeds the random embeddings.

    Raises:
        ConfigError: an unknown ``embedding``/``attention`` or a size < 1.

    Source: arXiv 2412.06538, optimisation dynamics (``F_lin``, Assumption 2), Theorem 6, Fig. 5; notebook
    ``sequential-learning.ipynb`` of ``eshnich/factual-recall-iclr``.
    """

    def __init__(self, vocab_size: int, n_answers: int, embedding: Literal["onehot", "random"] = "onehot",
                 attention: Literal["linear", "softmax"] = "linear", d_model: int | None = None,
                 init_scale: float = 1e-5, seed: int = 0):
        super().__init__()
        if embedding not in ("onehot", "random"):
            raise ConfigError("embedding", embedding, "'onehot' or 'random'")
        if attention not in ("linear", "softmax"):
            raise ConfigError("attention", attention, "'linear' or 'softmax'")
        if vocab_size < 1 or n_answers < 1:
            raise ConfigError("vocab_size/n_answers", (vocab_size, n_answers), "integers >= 1")
        if embedding == "onehot":
            d = vocab_size
            E = torch.eye(vocab_size)
        else:
            d = int(d_model or vocab_size)
            E = torch.randn(vocab_size, d, generator=torch.Generator().manual_seed(int(seed)))
            E = E / E.norm(dim=1, keepdim=True)
        self.vocab_size, self.n_answers, self.d_model = vocab_size, n_answers, d
        self.embedding, self.attention_kind = embedding, attention
        self.register_buffer("embed", E)  # [vocab, d], frozen
        self.A = nn.Parameter(torch.full((d, d), float(init_scale)))
        self.V = nn.Parameter(torch.full((d, n_answers), float(init_scale)))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``input_ids [batch, seq]`` long -> logits ``[batch, n_answers]`` at the last position."""
        counts = count_tokens(input_ids, self.vocab_size)  # [B, vocab]
        onehot = self.embedding == "onehot"
        if onehot:  # e_z = unit vectors: s_z = A[z_T, z], and sum_z w_z e_z = w
            s = self.A[input_ids[:, -1]]  # [B, vocab]
        else:
            s = (self.embed[input_ids[:, -1]] @ self.A) @ self.embed.T  # [B, vocab]: s_z = x_T^T A e_z
        if self.attention_kind == "linear":
            w = counts * s
        else:
            w = torch.softmax(s + torch.log(counts), dim=-1)
        return (w if onehot else w @ self.embed) @ self.V
