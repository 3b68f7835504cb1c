"""A factoid world for "Calibrated Language Models Must Hallucinate" (Kalai & Vempala, arXiv 2311.14648).

The plausible factoids are "W" tuples, one value per slot, e.g. ``who x what x where``
("<who> ate <what> in <where>", the paper's 5W example cut to three slots); ``Y`` is their product
(``|Y| = prod(slots)``). A small share of them are facts ``F``, drawn uniformly at random from ``Y``, so facts
are *arbitrary* (nothing about a factoid tells whether it is a fact); the rest are hallucinations
``H = Y \\ F``. The world's factoid distribution ``p`` puts Zipf(``zipf``) popularity on the facts in a
random order, ``p(f_i) ∝ (i + 1) ** -zipf`` (``zipf = 0`` is uniform); sweeping ``zipf`` moves the monofact
rate of a training set of fixed size (Kalai & Vempala sec. 4; spec ``impossibility_and_theory.md`` §3).

A document is one factoid, tokenised as ``[BOS, v_1, ..., v_k]``: ``BOS = 0`` and slot ``j``'s values take the
ids ``offset_j + 0 .. offset_j + slots[j] - 1`` with ``offset_j = 1 + sum(slots[:j])``. A factoid has the flat
index ``numpy.ravel_multi_index(values, slots)`` in ``[0, |Y|)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmsci.errors import ConfigError

BOS = 0


@dataclass
class FactoidWorld:
    """Facts among the product of ``slots`` with Zipf popularity.

    Args:
        slots: number of values of each slot (``|Y| = prod(slots)``), e.g. ``(200, 200, 100)``.
        n_facts: ``|F|``, at most ``|Y|``.
        zipf: popularity exponent >= 0 (0 = uniform over facts).
        seed: draws the facts and their popularity order.

    Attributes:
        facts: ``[n_facts]`` flat factoid indices of the facts, in popularity order (most popular first).
        p: ``[n_facts]`` probabilities of the facts (sum 1).

    Raises:
        ConfigError: no slot, a slot size below 1, ``n_facts`` below 1 or above ``|Y|``, or a negative ``zipf``.
    """

    slots: tuple[int, ...]
    n_facts: int
    zipf: float
    seed: int = 0

    def __post_init__(self):
        self.slots = tuple(int(s) for s in self.slots)
        if not self.slots or min(self.slots) < 1:
            raise ConfigError("slots", self.slots, "one or more slot sizes >= 1")
        if not 1 <= self.n_facts <= self.n_y:
            raise ConfigError("n_facts", self.n_facts, f"in [1, prod(slots) = {self.n_y}]")
        if not self.zipf >= 0:
            raise ConfigError("zipf", self.zipf, ">= 0")
        rng = np.random.default_rng(self.seed)
        self.facts = rng.choice(self.n_y, size=self.n_facts, replace=False).astype(np.int64)
        w = np.arange(1, self.n_facts + 1, dtype=np.float64) ** (-float(self.zipf))
        self.p = w / w.sum()

    # -- sizes and token ids ------------------------------------------------------------------------
    @property
    def n_y(self) -> int:
        """``|Y|``, the number of plausible factoids."""
        return int(np.prod(self.slots, dtype=np.int64))

    @property
    def n_hallucinations(self) -> int:
        """``|H| = |Y| - |F|``."""
        return self.n_y - self.n_facts

    @property
    def offsets(self) -> np.ndarray:
        """``[k]`` first token id of each slot."""
        return 1 + np.concatenate([[0], np.cumsum(self.slots)[:-1]]).astype(np.int64)

    @property
    def vocab_size(self) -> int:
        """BOS + every slot's values."""
        return 1 + sum(self.slots)

    def fact_mask(self) -> np.ndarray:
        """``[|Y|]`` bool, True on facts."""
        m = np.zeros(self.n_y, dtype=bool)
        m[self.facts] = True
        return m

    def p_dense(self) -> np.ndarray:
        """``[|Y|]`` float64, the world's factoid distribution ``p`` (0 on hallucinations)."""
        out = np.zeros(self.n_y)
        out[self.facts] = self.p
        return out

    # -- documents --------------------------------------------------------------------------------
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``[n]`` flat factoid indices of ``n`` i.i.d. documents drawn from ``p``."""
        return self.facts[rng.choice(self.n_facts, size=n, p=self.p)]

    def tokens(self, y: np.ndarray) -> np.ndarray:
        """``[n, 1 + k]`` int64 token ids ``[BOS, v_1, ..., v_k]`` of flat factoid indices ``y`` (``[n]``)."""
        vals = np.stack(np.unravel_index(np.asarray(y, dtype=np.int64), self.slots), axis=1)
        return np.concatenate([np.full((len(vals), 1), BOS, dtype=np.int64), vals + self.offsets], axis=1)

    def parse(self, tokens: np.ndarray) -> np.ndarray:
        """Flat factoid index of each row ``[BOS, t_1, ..., t_k]`` of ``tokens`` (``[n, 1 + k]``), or -1 when a
        ``t_j`` is not a value of slot ``j``: "nonsense", neither fact nor hallucination."""
        t = np.asarray(tokens, dtype=np.int64)[:, 1:] - self.offsets
        ok = np.all((t >= 0) & (t < np.asarray(self.slots)), axis=1)
        flat = np.ravel_multi_index(tuple(np.where(ok[:, None], t, 0).T), self.slots)
        return np.where(ok, flat, -1)
