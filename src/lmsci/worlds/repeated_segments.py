"""Sequences of uniform random tokens in which a random segment is repeated: the induction-head world.

Source: Olsson et al. 2022, "In-context Learning and Induction Heads" (arXiv 2209.11895), whose prefix-matching
score is measured on "repeated sequences of random tokens"; Elhage et al. 2021, "A Mathematical Framework for
Transformer Circuits" (transformer-circuits.pub/2021/framework), where 2-layer attention-only models form
induction heads. Here the training data itself has that form (close to the synthetic setting of Singh et al.
2024, arXiv 2404.07129): a sample is ``[BOS, s, s, f]`` with a segment ``s`` of ``m`` tokens, ``m`` uniform in
``[seg_min, seg_max]`` per sample, and a filler ``f`` up to ``seq_len``, all tokens drawn i.i.d. uniformly from
``1 .. n_tokens`` (``BOS = 0``; ``vocab_size = n_tokens + 1``). The first copy is unpredictable (loss
``log n_tokens``); the second copy is predictable only in context. Because ``m`` varies, the copy's offset is
not a fixed distance, so a head attending a fixed number of positions back cannot predict it: the second copy
needs a previous-token head composed with an induction head (two layers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmsci.errors import ConfigError

BOS = 0


@dataclass(frozen=True)
class RepeatedSegments:
    """Random-token sequences ``[BOS, s, s, filler]`` with a repeated segment ``s`` (Olsson et al. 2022, arXiv
    2209.11895; see the module docstring): :meth:`sample` gives tokens ``[n, seq_len]`` int64 and segment lengths
    ``[n]``; :meth:`induction_targets` the key an induction head attends to per query ``[n, seq_len]`` (-1: none);
    :meth:`copy_masks` the first and second copy's target positions. Token ids ``1 .. n_tokens``, ``BOS = 0``,
    ``vocab_size = n_tokens + 1``.

    Attributes:
        n_tokens: distinct tokens (>= 2). seq_len: tokens per sample (>= 1 + 2 seg_max).
        seg_min, seg_max: the segment length range (uniform per sample).

    Raises:
        ConfigError: on construction, naming the bad field.
    """

    n_tokens: int = 64
    seq_len: int = 64
    seg_min: int = 8
    seg_max: int = 24

    def __post_init__(self):
        if self.n_tokens < 2:
            raise ConfigError("n_tokens", self.n_tokens, "an integer >= 2")
        if not 2 <= self.seg_min <= self.seg_max:
            raise ConfigError("seg_min", self.seg_min, f"an integer in [2, seg_max={self.seg_max}]")
        if 1 + 2 * self.seg_max > self.seq_len:
            raise ConfigError("seq_len", self.seq_len, f">= 1 + 2 * seg_max = {1 + 2 * self.seg_max}")

    @property
    def vocab_size(self) -> int:
        return self.n_tokens + 1

    def sample(self, n: int, rng: np.random.Generator, seg_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``n`` samples: tokens ``[n, seq_len]`` int64 and segment lengths ``m [n]``; ``seg_len`` fixes ``m``
        (Olsson et al.'s evaluation sequences)."""
        m = (np.full(n, seg_len) if seg_len is not None
             else rng.integers(self.seg_min, self.seg_max + 1, size=n)).astype(np.int64)
        x = rng.integers(1, self.n_tokens + 1, size=(n, self.seq_len)).astype(np.int64)
        x[:, 0] = BOS
        for i, mi in enumerate(m):
            x[i, 1 + mi:1 + 2 * mi] = x[i, 1:1 + mi]
        return x, m

    def induction_targets(self, m: np.ndarray) -> np.ndarray:
        """For each query position ``j`` in the second copy (``1 + m <= j <= 2m``), the key an induction head
        attends to: the position after the previous occurrence of token ``j``, ``j - m + 1``; -1 elsewhere.
        ``[n, seq_len]`` int64."""
        j = np.arange(self.seq_len)[None, :]
        mm = np.asarray(m)[:, None]
        return np.where((j >= 1 + mm) & (j <= 2 * mm), j - mm + 1, -1).astype(np.int64)

    def copy_masks(self, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Boolean ``[n, seq_len]`` masks over *target* positions (the token being predicted): ``early`` = the
        first copy but its first token (positions ``2 .. m``), ``late`` = the second copy but its first token
        (positions ``m + 2 .. 2m``). The in-context loss is the mean NLL on ``late`` minus that on ``early``."""
        j = np.arange(self.seq_len)[None, :]
        mm = np.asarray(m)[:, None]
        return (j >= 2) & (j <= mm), (j >= mm + 2) & (j <= 2 * mm)
