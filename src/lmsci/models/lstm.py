"""An LSTM language model with lmsci's field names, the recurrent baseline of Kaplan et al. 2020.

``LSTMLM(LSTMConfig(vocab_size=V, d_model=h, n_layers=L), seed=s)``: token embedding ``[V, d_model]`` ->
``torch.nn.LSTM(d_model, d_model, n_layers, batch_first=True)`` -> LayerNorm-free linear head ``[d_model, V]``.
``forward(input_ids [batch, seq]) -> logits [batch, seq, vocab_size]``.

Parameter count: :meth:`LSTMLM.num_params` with ``non_embedding=True`` excludes the token embedding and the output
head (Kaplan et al.'s N, arXiv 2001.08361 sec. 2.1), leaving the recurrent weights:
``n_layers * 4 * (2 * d_model * d_model + 2 * d_model)`` (input and hidden matrices of the four gates, and
torch's two bias vectors), see :func:`lstm_non_embedding_params`.

Source: Hochreiter and Schmidhuber 1997 (LSTM); the comparison of Kaplan et al. 2020, arXiv 2001.08361,
sec. 3.2.1 and Fig. 7 (LSTMs against Transformers at matched non-embedding parameters).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
from pydantic import Field, ValidationError

from lmsci.config import StrictModel, validation_to_config_error


class LSTMConfig(StrictModel):
    """Architecture of an :class:`LSTMLM`.

    Attributes:
        vocab_size: number of token ids.
        d_model: embedding width = LSTM hidden width.
        n_layers: stacked LSTM layers (>= 1).
        tie_embeddings: share the token embedding with the output head.

    Raises:
        ConfigError: a field out of range (on construction).
    """

    vocab_size: int = Field(ge=1)
    d_model: int = Field(ge=1)
    n_layers: int = Field(1, ge=1)
    tie_embeddings: bool = False

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise validation_to_config_error(err, data) from None


def lstm_non_embedding_params(d_model: int, n_layers: int) -> int:
    """Non-embedding parameters of :class:`LSTMLM`: ``n_layers * (8 d_model^2 + 8 d_model)``."""
    return int(n_layers * (8 * d_model * d_model + 8 * d_model))


class LSTMLM(nn.Module):
    """Embedding -> ``torch.nn.LSTM`` -> linear head; a causal language model by construction.

    Args:
        cfg: the :class:`LSTMConfig`.
        seed: initialisation seed (a private generator; the global RNG is untouched). Embedding and head
            ``N(0, 0.02)``; LSTM weights uniform ``+-1/sqrt(d_model)`` (torch's default), forget-gate biases 1
            (Jozefowicz et al. 2015).
    """

    def __init__(self, cfg: LSTMConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        d, V = cfg.d_model, cfg.vocab_size
        self.wte = nn.Embedding(V, d)
        self.lstm = nn.LSTM(d, d, cfg.n_layers, batch_first=True)
        self.lm_head = nn.Linear(d, V, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        g = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            self.wte.weight.normal_(0.0, 0.02, generator=g)
            if not cfg.tie_embeddings:
                self.lm_head.weight.normal_(0.0, 0.02, generator=g)
            k = 1.0 / d ** 0.5
            for name, p in self.lstm.named_parameters():
                p.uniform_(-k, k, generator=g)
                if name.startswith("bias"):  # gate order i, f, g, o: forget-gate bias 1 (split over two vectors)
                    p[d:2 * d].fill_(0.5)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``input_ids [batch, seq]`` long -> logits ``[batch, seq, vocab_size]`` (position t sees tokens 0..t)."""
        h, _ = self.lstm(self.wte(input_ids))
        return self.lm_head(h)

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameters (shared tensors once); ``non_embedding`` excludes the embedding and the head (Kaplan's N)."""
        seen: set[int] = set()
        skip = {id(self.wte.weight), id(self.lm_head.weight)} if non_embedding else set()
        n = 0
        for p in self.parameters():
            if id(p) in seen or id(p) in skip:
                continue
            seen.add(id(p))
            n += p.numel()
        return n

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs per token, ``6 (N + d_model * vocab_size)`` (recurrent matmuls and the head)."""
        return 6 * (self.num_params(non_embedding=True) + self.cfg.d_model * self.cfg.vocab_size)


__all__ = ["LSTMConfig", "LSTMLM", "lstm_non_embedding_params"]
