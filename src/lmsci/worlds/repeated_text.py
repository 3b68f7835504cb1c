"""Natural text with a repeated passage: the induction-head measurement on a real corpus.

Source: Olsson et al. 2022, "In-context Learning and Induction Heads" (arXiv 2209.11895): induction heads
complete ``[A][B] ... [A] -> [B]`` on natural text, and their prefix-matching score is defined on repeated
token sequences. Here a passage of ``m`` consecutive tokens of a corpus (e.g. the held-out Shakespeare works,
:mod:`lmsci.worlds.shakespeare`) is written twice and followed by the text that came after it, in the layout of
:class:`lmsci.worlds.repeated_segments.RepeatedSegments`: ``[t, w, w, f]`` with ``t`` the token before the
passage (where the synthetic world has BOS), ``w`` the ``m`` passage tokens (``m`` uniform in
``[seg_min, seg_max]``) and ``f`` the natural continuation of ``w`` up to ``seq_len``. Position ``j`` of the
second copy is predictable from position ``j - m``; the induction target of query ``j`` is ``j - m + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmsci.errors import ConfigError
from lmsci.worlds.repeated_segments import RepeatedSegments


@dataclass(frozen=True)
class RepeatedText:
    """Passages of a token array written twice (see the module docstring).

    Args:
        ids: ``[N]`` token ids of the corpus (any integer dtype).
        seq_len, seg_min, seg_max: as :class:`RepeatedSegments`.

    Raises:
        ConfigError: on construction, naming the bad field (``seq_len < 1 + 2 seg_max``, bad ``seg_min``, or a
            corpus shorter than ``seq_len + 1`` tokens).
    """

    ids: np.ndarray
    seq_len: int = 128
    seg_min: int = 16
    seg_max: int = 48

    def __post_init__(self):
        RepeatedSegments(2, self.seq_len, self.seg_min, self.seg_max)  # validates the layout fields
        if len(self.ids) < self.seq_len + 1:
            raise ConfigError("seq_len", self.seq_len, f"at most {len(self.ids) - 1} (the corpus has {len(self.ids)} "
                              "tokens)")

    @property
    def _layout(self) -> RepeatedSegments:
        return RepeatedSegments(2, self.seq_len, self.seg_min, self.seg_max)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` sequences ``[n, seq_len]`` int64 and passage lengths ``m [n]``; passage starts uniform over the
        corpus."""
        T = self.seq_len
        m = rng.integers(self.seg_min, self.seg_max + 1, size=n).astype(np.int64)
        starts = rng.integers(1, len(self.ids) - T + 1, size=n)
        src = np.asarray(self.ids, dtype=np.int64)
        x = np.empty((n, T), dtype=np.int64)
        for i, (s, mi) in enumerate(zip(starts, m)):
            x[i, 0] = src[s - 1]
            x[i, 1:1 + mi] = src[s:s + mi]
            x[i, 1 + mi:1 + 2 * mi] = src[s:s + mi]
            x[i, 1 + 2 * mi:] = src[s + mi:s + mi + T - 1 - 2 * mi]
        return x, m

    def induction_targets(self, m: np.ndarray) -> np.ndarray:
        """As :meth:`RepeatedSegments.induction_targets`: ``[n, seq_len]``, ``j - m + 1`` on the second copy, -1
        elsewhere."""
        return self._layout.induction_targets(m)

    def copy_masks(self, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`RepeatedSegments.copy_masks`: (first copy, second copy) target masks ``[n, seq_len]``."""
        return self._layout.copy_masks(m)
