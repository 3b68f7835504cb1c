"""Two controlled sentence-pair classification tasks over one vocabulary: one whose label is fixed by which words
occur (order-redundant) and one whose label needs the word order (order-critical), plus derangements.

Sources: Sinha, Parthasarathi, Pineau, Williams, "UnNatural Language Inference", arXiv 2101.00010 (ACL 2021),
sec. 3 (permute the words of premise and hypothesis, no word left in its place); Pham, Bui, Mai, Nguyen, "Out of
Order", arXiv 2012.15180 (word-overlap tasks survive shuffling, order-dependent ones do not). CPU design:
impossibility_and_theory.md sec. 6 ("CPU demo for 6a/6b").

Layout (fixed length, no padding): ``premise (P tokens) SEP hypothesis (H tokens) ASK``; the label is a token
(``YES`` / ``NO``) predicted at the ``ASK`` position, so a causal LM classifies with its own head.

* ``overlap`` (order-redundant): the premise holds two distinct names and fillers, the hypothesis one name and
  fillers; YES iff the hypothesis's name occurs in the premise (a word-overlap label, like QQP/MRPC/RTE cues).
* ``taller`` (order-critical): premise ``X is taller than Y`` with fillers inserted (the five core words keep
  their order), hypothesis ``Z is taller than W`` with fillers, ``(Z, W) = (X, Y)`` (YES) or ``(Y, X)`` (NO).
  Both segments hold the same bag of words whatever the label, so a shuffled input carries no signal: chance
  is exactly 0.5.

Labels are balanced (probability 1/2 each) in both tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmsci.errors import ConfigError

TASKS = ("overlap", "taller")


@dataclass(frozen=True)
class WordOrderVocab:
    """Token ids: names, the relation words ``is taller than``, fillers, and ``SEP ASK YES NO``."""

    n_names: int = 12
    n_fillers: int = 20

    @property
    def names(self) -> np.ndarray:
        return np.arange(self.n_names)

    @property
    def IS(self) -> int:
        return self.n_names

    @property
    def TALLER(self) -> int:
        return self.n_names + 1

    @property
    def THAN(self) -> int:
        return self.n_names + 2

    @property
    def fillers(self) -> np.ndarray:
        return np.arange(self.n_names + 3, self.n_names + 3 + self.n_fillers)

    @property
    def SEP(self) -> int:
        return self.n_names + 3 + self.n_fillers

    @property
    def ASK(self) -> int:
        return self.SEP + 1

    @property
    def YES(self) -> int:
        return self.SEP + 2

    @property
    def NO(self) -> int:
        return self.SEP + 3

    @property
    def vocab_size(self) -> int:
        return self.SEP + 4


@dataclass
class WordOrderTask:
    """Sampler of one task.

    Args:
        task: ``"overlap"`` or ``"taller"``.
        premise_len, hyp_len: segment lengths (``taller`` needs >= 5 each).
        vocab: the shared vocabulary.

    Raises:
        ConfigError: unknown task or segments too short.
    """

    task: str
    premise_len: int = 8
    hyp_len: int = 6
    vocab: WordOrderVocab = WordOrderVocab()

    def __post_init__(self):
        if self.task not in TASKS:
            raise ConfigError("task", self.task, ", ".join(TASKS))
        need = 5 if self.task == "taller" else 2
        if self.premise_len < need or self.hyp_len < (5 if self.task == "taller" else 1):
            raise ConfigError("premise_len", (self.premise_len, self.hyp_len), f">= {need} words per segment for {self.task}")

    @property
    def seq_len(self) -> int:
        """``premise_len + hyp_len + 2`` (SEP and ASK)."""
        return self.premise_len + self.hyp_len + 2

    def segments(self) -> list[tuple[int, int]]:
        """``[(start, end)]`` of the premise and hypothesis in a sequence (what a derangement permutes)."""
        P = self.premise_len
        return [(0, P), (P + 1, P + 1 + self.hyp_len)]

    def _with_fillers(self, core: list[int], length: int, rng: np.random.Generator) -> list[int]:
        out = list(rng.choice(self.vocab.fillers, size=length))
        pos = np.sort(rng.choice(length, size=len(core), replace=False))
        for p, w in zip(pos, core):
            out[p] = int(w)
        return out

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` examples: token ids ``[n, seq_len]`` int64 (ending with ASK) and labels ``[n]`` (1 = YES)."""
        v = self.vocab
        x = np.zeros((n, self.seq_len), np.int64)
        y = rng.integers(0, 2, size=n)
        for i in range(n):
            if self.task == "overlap":
                a, b, c = rng.choice(v.names, size=3, replace=False)
                h = a if y[i] else c
                prem = self._with_fillers([a, b], self.premise_len, rng)
                hyp = self._with_fillers([h], self.hyp_len, rng)
            else:
                a, b = rng.choice(v.names, size=2, replace=False)
                prem = self._with_fillers([a, v.IS, v.TALLER, v.THAN, b], self.premise_len, rng)
                z, w = (a, b) if y[i] else (b, a)
                hyp = self._with_fillers([z, v.IS, v.TALLER, v.THAN, w], self.hyp_len, rng)
            x[i] = prem + [v.SEP] + hyp + [v.ASK]
        return x, y.astype(np.int64)


def derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` with no fixed point (rejection sampling; ``n >= 2``)."""
    if n < 2:
        raise ConfigError("n", n, ">= 2 (a single word cannot be moved)")
    while True:
        p = rng.permutation(n)
        if (p != np.arange(n)).all():
            return p


def derange(x: np.ndarray, segments: list[tuple[int, int]], q: int, rng: np.random.Generator) -> np.ndarray:
    """``q`` derangements of every example: each segment's words permuted with no word left at its position and
    the segment's token sequence changed (repeated words could otherwise give back the original; UNLI's filter).

    Args:
        x: ``[n, T]`` token ids.
        segments: ``[(start, end)]`` ranges permuted independently (the rest stays in place).
        q: derangements per example.

    Returns:
        ``[n, q, T]``.
    """
    out = np.repeat(x[:, None, :], q, axis=1).copy()
    for i in range(x.shape[0]):
        for k in range(q):
            for s, e in segments:
                seg = x[i, s:e]
                for _ in range(100):
                    p = derangement(e - s, rng)
                    if not np.array_equal(seg[p], seg):
                        break
                out[i, k, s:e] = seg[p]
    return out
