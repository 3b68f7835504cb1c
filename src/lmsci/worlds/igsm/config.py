"""The iGSM world's configuration: the named worlds (difficulty and text options), the document markers and the
parameter conventions shared by the generator, the checker and the probes.

Source: Ye, Xu, Li, Allen-Zhu, "Physics of Language Models: Part 2.1, Grade-School Math and the Hidden Reasoning
Process", arXiv 2407.20311, Section 2 and App. B-C (official generator ``facebookresearch/iGSM``); Part 2.2 (arXiv
2408.16293) for the retry data's ``retry_rate``. Named worlds: med and hard as in Part 2.1 App. B; tiny and small
are CPU-sized worlds of the same generator (:mod:`lmsci.worlds.igsm.world`).
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass, replace
from typing import Literal, Optional

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.worlds.igsm.names import CHAINS

RAND = (-1, 0, 0, 0)
SYMBOLS = string.ascii_lowercase + string.ascii_uppercase
TRAIN_HASHES = frozenset(range(16))
TEST_HASHES = frozenset(range(16, 23))
PROB, SOL, ANS = "<prob>", "<sol>", "<ans>"
BACK = "[BACK]"

Param = tuple  # (l, i, j, k)


@dataclass(frozen=True)
class IGSMConfig:
    """One iGSM world (difficulty and text options).

    Args:
        name: the world's name (e.g. ``"igsm-med"``).
        max_op: largest op of training problems (``min(U,U)`` / uniform over 1..max_op).
        max_edge: most instance parameters (edges of the structure graph) in a problem.
        max_eval_op: largest op that :meth:`IGSMWorld.sample` accepts for ``split="test"`` (out-of-
            distribution evaluation, e.g. med: 23, hard: 32); default ``max_op + 8``.
        op_dist: ``"light"`` (the paper's min of two uniforms) or ``"uniform"`` (balanced op).
        mod: the modulus (23; fixed by the paper's format, other values are refused).
        fmt: ``"pq"`` (problem then question) or ``"qp"``.
        reask: :meth:`IGSMWorld.stream` yields re-asked problems (same statement, another question).
        retry_rate: q in [0, 1) of the retry data (Part 2.2); 0 = error-free.
        retry_weak: wrong steps drawn from future necessary parameters ("retry_weak") instead of
            not-yet-computable ones.
        chains: category chains used (keys of :data:`~lmsci.worlds.igsm.names.CHAINS`).
        tokenizer: ``"word"`` (word level over the world's vocabulary) or ``"bpe"`` (byte-level BPE).

    Raises:
        ConfigError: any field out of range (before any work).
    """

    name: str = "igsm"
    max_op: int = 15
    max_edge: int = 20
    max_eval_op: Optional[int] = None
    op_dist: Literal["light", "uniform"] = "light"
    mod: int = 23
    fmt: Literal["pq", "qp"] = "pq"
    reask: bool = False
    retry_rate: float = 0.0
    retry_weak: bool = False
    chains: tuple[str, ...] = tuple(CHAINS)
    tokenizer: Literal["word", "bpe"] = "word"

    def __post_init__(self):
        if self.max_eval_op is None:
            object.__setattr__(self, "max_eval_op", self.max_op + 8)
        if not isinstance(self.max_op, int) or self.max_op < 1:
            raise ConfigError("max_op", self.max_op, "an integer >= 1")
        if not isinstance(self.max_edge, int) or self.max_edge < 2:
            raise ConfigError("max_edge", self.max_edge, "an integer >= 2")
        if not isinstance(self.max_eval_op, int) or not self.max_op <= self.max_eval_op <= len(SYMBOLS):
            raise ConfigError("max_eval_op", self.max_eval_op, f"an integer in [max_op={self.max_op}, {len(SYMBOLS)}]")
        need = min_edges_for_op(self.max_eval_op)
        if self.max_edge < need:
            raise ConfigError("max_edge", self.max_edge,
                              f">= {need} for op up to max_eval_op={self.max_eval_op} (max_op={self.max_op})",
                              "max_edge too small for op: raise max_edge or lower max_op / max_eval_op")
        if self.op_dist not in ("light", "uniform"):
            raise UnknownNameError("op_dist", self.op_dist, ["light", "uniform"])
        if self.mod != 23:
            raise ConfigError("mod", self.mod, "23 (the iGSM format's arithmetic)")
        if self.fmt not in ("pq", "qp"):
            raise UnknownNameError("fmt", self.fmt, ["pq", "qp"])
        check_retry_rate(self.retry_rate)
        if not self.chains:
            raise ConfigError("chains", self.chains, f"a non-empty subset of {sorted(CHAINS)}")
        for c in self.chains:
            if c not in CHAINS:
                raise UnknownNameError("chains", c, CHAINS)
        if self.tokenizer not in ("word", "bpe"):
            raise UnknownNameError("tokenizer", self.tokenizer, ["word", "bpe"])


def min_edges_for_op(op: int) -> int:
    """Smallest ``max_edge`` accepted for op up to ``op``: max(3, ceil(op / 2)) (each instance parameter
    carries at most 4 operations, abstract ones more; measured at the boundary max_edge = this, with
    max_op = op: 0.2-1.0 rejections per problem for op 1..32)."""
    return max(3, math.ceil(op / 2))


def check_retry_rate(q: float) -> float:
    """Raises ConfigError unless 0 <= q < 1."""
    if not isinstance(q, (int, float)) or not 0.0 <= float(q) < 1.0:
        raise ConfigError("retry_rate", q, "a number in [0, 1)")
    return float(q)


#: Named worlds. med and hard are the paper's (Part 2.1 App. B); tiny and small are CPU-sized
#: worlds from the same generator.
IGSM_WORLDS: dict[str, IGSMConfig] = {
    "igsm-tiny": IGSMConfig(name="igsm-tiny", max_op=6, max_edge=8, max_eval_op=10),
    "igsm-small": IGSMConfig(name="igsm-small", max_op=10, max_edge=12, max_eval_op=14),
    "igsm-med": IGSMConfig(name="igsm-med", max_op=15, max_edge=20, max_eval_op=23),
    "igsm-hard": IGSMConfig(name="igsm-hard", max_op=21, max_edge=28, max_eval_op=32),
}


def get_world_config(name: str, **overrides) -> IGSMConfig:
    """The named world's config with ``overrides`` applied. Raises UnknownNameError / ConfigError."""
    if name not in IGSM_WORLDS:
        raise UnknownNameError("world", name, IGSM_WORLDS)
    return replace(IGSM_WORLDS[name], **overrides)
