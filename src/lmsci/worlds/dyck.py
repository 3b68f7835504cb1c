"""Dyck-k: well-nested strings over ``k`` bracket types with bounded depth, for next-token prediction.

Source: the bounded Dyck-(k, m) languages of Hewitt et al. 2020 (arXiv 2010.07515) and Yao et al. 2021,
"Self-Attention Networks Can Process Bounded Hierarchical Languages" (arXiv 2105.11115, sec. 3): the
standard generator draws, at each position, an opening bracket (of a uniform type) with probability
``p_open`` or the closing bracket of the innermost unmatched one; here the depth is bounded by ``max_depth``
and every string is complete (balanced) at its fixed length, so a forced close is taken when the open
brackets left must all be closed in the positions left.

Tokens: ``BOS = 0``; opening bracket of type ``i`` = ``1 + i``; closing bracket of type ``i`` = ``1 + k + i``;
``vocab_size = 1 + 2k``. A sample is ``[BOS, b_1, ..., b_n]`` (``n`` even).

Labels (computed from the string alone): ``match[j]`` = position of the bracket matched with position ``j``
(-1 at BOS); ``recent_unmatched_open[j]`` = position of the innermost unmatched opening bracket after reading
positions ``0..j`` (-1 when none: depth 0); ``recent_open[j]`` = position of the most recent opening bracket at
or before ``j`` (-1 when none).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmsci.errors import ConfigError

BOS = 0


@dataclass(frozen=True)
class Dyck:
    """Bounded Dyck-k world.

    Attributes:
        k: number of bracket types (>= 1).
        length: brackets per string ``n`` (even, >= 2).
        max_depth: maximum nesting depth (>= 1).
        p_open: probability of opening when both moves are allowed.

    Raises:
        ConfigError: on construction, naming the bad field.
    """

    k: int = 4
    length: int = 40
    max_depth: int = 6
    p_open: float = 0.5

    def __post_init__(self):
        if self.k < 1:
            raise ConfigError("dyck_k", self.k, "an integer >= 1")
        if self.length < 2 or self.length % 2:
            raise ConfigError("dyck_length", self.length, "an even integer >= 2")
        if self.max_depth < 1:
            raise ConfigError("max_depth", self.max_depth, "an integer >= 1")
        if not 0.0 < self.p_open < 1.0:
            raise ConfigError("p_open", self.p_open, "a probability in (0, 1)")

    @property
    def vocab_size(self) -> int:
        return 1 + 2 * self.k

    @property
    def seq_len(self) -> int:
        """Tokens per sample (BOS + brackets)."""
        return self.length + 1

    def is_open(self, tok: np.ndarray) -> np.ndarray:
        return (tok >= 1) & (tok <= self.k)

    def is_close(self, tok: np.ndarray) -> np.ndarray:
        return tok > self.k

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` strings, ``[n, seq_len]`` int64 (BOS first)."""
        out = np.zeros((n, self.seq_len), dtype=np.int64)
        for b in range(n):
            stack: list[int] = []
            u = rng.random(self.length)
            types = rng.integers(0, self.k, self.length)
            for t in range(self.length):
                left = self.length - t
                d = len(stack)
                if d == 0:
                    op = True
                elif d >= left or d >= self.max_depth:
                    op = False
                else:
                    op = u[t] < self.p_open
                if op:
                    stack.append(int(types[t]))
                    out[b, t + 1] = 1 + types[t]
                else:
                    out[b, t + 1] = 1 + self.k + stack.pop()
        return out

    def labels(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """``match``, ``recent_unmatched_open`` and ``recent_open`` for ``x [n, T]`` (see the module docstring),
        each ``[n, T]`` int64 (-1 where undefined); ``depth`` after each position.

        Raises:
            ValueError: a string that is not well nested.
        """
        n, T = x.shape
        match = np.full((n, T), -1, dtype=np.int64)
        rmo = np.full((n, T), -1, dtype=np.int64)
        ro = np.full((n, T), -1, dtype=np.int64)
        depth = np.zeros((n, T), dtype=np.int64)
        for b in range(n):
            stack: list[int] = []
            last = -1
            for j in range(T):
                tok = int(x[b, j])
                if 1 <= tok <= self.k:
                    stack.append(j)
                    last = j
                elif tok > self.k:
                    if not stack or x[b, stack[-1]] != tok - self.k:
                        raise ValueError(f"string {b} is not well nested at position {j}")
                    o = stack.pop()
                    match[b, j], match[b, o] = o, j
                rmo[b, j] = stack[-1] if stack else -1
                ro[b, j] = last
                depth[b, j] = len(stack)
        return {"match": match, "recent_unmatched_open": rmo, "recent_open": ro, "depth": depth}
