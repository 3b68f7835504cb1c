"""The synthetic factual-recall world of Nichani, Lee & Bietti.

Source: Nichani, Lee, Bietti, "Understanding Factual Recall in Transformers via Associative
Memories", arXiv 2412.06538 (ICLR 2025), the synthetic task and Assumption 1; the official code
``eshnich/factual-recall-iclr`` (``task.py``, ``run.py``) for the defaults (``n_noise = S + R``,
``T = 32``, answers drawn uniformly inside each relation's block).

Vocabulary layout (input tokens, ``vocab_size = S + R + n_noise + 1``)::

    [0, S)                     subjects s
    [S, S + R)                 relations r (token S + r)
    [S + R, S + R + n_noise)   noise tokens
    S + R + n_noise            EOS

Output classes are the answers, a separate space of ``n_answers = D * R`` classes: relation ``r``
owns the block ``[r * D, (r + 1) * D)`` (disjoint answer sets per relation = Assumption 1, with
``D = max_r |A_r|``). The fact table ``a*(s, r)`` maps each (subject, relation) pair to one answer
of its relation's block: uniformly at random (``facts="random"``, the paper's sweeps) or
``r * D + floor(D * s / S)`` (``facts="structured"``, the sequential-learning notebook, Fig. 5).

A sequence ``z_1..z_T`` (0-based positions ``0..T-1`` here): sample (s, r) uniformly; put ``s`` and
``r`` at two distinct uniform positions among the first ``T - 1``; fill the other positions of the
first ``T - 1`` with uniform noise tokens; put EOS at position ``T - 1``. The target
``z_{T+1} = a*(s, r)`` is predicted from the last (EOS) position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from lmsci.errors import ConfigError


@dataclass(frozen=True)
class Batch:
    """A batch of factual-recall sequences.

    Attributes:
        input_ids: ``[batch, seq_len]`` long, token ids (layout in the module docstring).
        targets: ``[batch]`` long, answer class ``a*(s, r)`` in ``[0, n_answers)``.
        subjects: ``[batch]`` long, the subject ``s`` in ``[0, S)``.
        relations: ``[batch]`` long, the relation ``r`` in ``[0, R)``.
    """

    input_ids: torch.Tensor
    targets: torch.Tensor
    subjects: torch.Tensor
    relations: torch.Tensor


class FactualRecallWorld:
    """S subjects, R relations, D answers per relation, noise tokens, EOS, sequences of length T.

    Args:
        n_subjects: S >= 1.
        n_relations: R >= 1.
        answers_per_relation: D >= 1 (size of each relation's answer block).
        n_noise: number of noise tokens (default ``S + R`` as in the official code); must be >= 1
            when ``seq_len > 3``.
        seq_len: T >= 3 (subject, relation, EOS).
        facts: ``"random"`` (uniform answer inside the relation's block) or ``"structured"``
            (``a*(s, r) = r * D + floor(D * s / S)``).
        seed: seed of the fact table (the sequences take their own ``torch.Generator``).

    Raises:
        ConfigError: a size out of range (the message names the field).

    Source: arXiv 2412.06538, the synthetic task (Fig. 2) and Assumption 1.
    """

    def __init__(
        self,
        n_subjects: int,
        n_relations: int,
        answers_per_relation: int = 8,
        n_noise: int | None = None,
        seq_len: int = 32,
        facts: Literal["random", "structured"] = "random",
        seed: int = 0,
    ):
        for name, v, lo in (("n_subjects", n_subjects, 1), ("n_relations", n_relations, 1),
                            ("answers_per_relation", answers_per_relation, 1), ("seq_len", seq_len, 3)):
            if int(v) < lo:
                raise ConfigError(name, v, f"an integer >= {lo}")
        if n_noise is None:
            n_noise = n_subjects + n_relations
        if n_noise < (1 if seq_len > 3 else 0):
            raise ConfigError("n_noise", n_noise, "an integer >= 1 (noise fills T - 3 positions)")
        if facts not in ("random", "structured"):
            raise ConfigError("facts", facts, "'random' or 'structured'")
        self.S, self.R, self.D = int(n_subjects), int(n_relations), int(answers_per_relation)
        self.n_noise, self.T, self.facts_kind, self.seed = int(n_noise), int(seq_len), facts, int(seed)
        self.subject_offset, self.relation_offset = 0, self.S
        self.noise_offset = self.S + self.R
        self.eos = self.S + self.R + self.n_noise
        self.vocab_size = self.eos + 1
        self.n_answers = self.D * self.R
        g = torch.Generator().manual_seed(self.seed)
        if facts == "random":
            within = torch.randint(0, self.D, (self.S, self.R), generator=g)
        else:
            within = (torch.arange(self.S) * self.D // self.S)[:, None].expand(self.S, self.R)
        #: ``[S, R]`` long: the fact table a*(s, r), answer class ids.
        self.fact_table = (within + self.D * torch.arange(self.R)[None, :]).contiguous()

    @property
    def n_facts(self) -> int:
        """Number of facts S * R."""
        return self.S * self.R

    def answer_block(self, r: int) -> range:
        """The answer classes A_r owned by relation ``r`` (disjoint across relations)."""
        return range(r * self.D, (r + 1) * self.D)

    def relation_entropy(self) -> float:
        """H(a* | r) in nats for uniform (s, r): the loss of predicting from the relation alone.

        Equals log D when every answer of a block is used by the same number of subjects (the
        structured table with D dividing S); smaller for unbalanced (e.g. random) tables.
        Source: arXiv 2412.06538, Theorem 6 (the model first fits p*(a | r)).
        """
        h = 0.0
        for r in range(self.R):
            p = torch.bincount(self.fact_table[:, r], minlength=self.n_answers).double() / self.S
            p = p[p > 0]
            h += float(-(p * p.log()).sum())
        return h / self.R

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        """Fresh sequences: uniform (s, r), fresh positions and noise drawn from ``generator``.

        Args:
            batch_size: number of sequences.
            generator: the only source of randomness (CPU ``torch.Generator``).

        Returns:
            a :class:`Batch` with ``input_ids [batch, T]`` and ``targets [batch]``.
        """
        B, T = int(batch_size), self.T
        s = torch.randint(0, self.S, (B,), generator=generator)
        r = torch.randint(0, self.R, (B,), generator=generator)
        i = torch.randint(0, T - 1, (B,), generator=generator)
        j = torch.randint(0, T - 2, (B,), generator=generator)
        j = j + (j >= i).long()  # distinct from i, uniform over the other T-2 positions
        x = torch.randint(0, self.n_noise, (B, T), generator=generator) + self.noise_offset
        rows = torch.arange(B)
        x[rows, i] = s + self.subject_offset
        x[rows, j] = r + self.relation_offset
        x[:, T - 1] = self.eos
        return Batch(x, self.fact_table[s, r], s, r)

    def eval_set(self, n: int, seed: int) -> Batch:
        """``n`` fresh sequences over the same facts (same fact table), from ``seed``."""
        return self.sample(n, torch.Generator().manual_seed(int(seed)))

    def __repr__(self) -> str:
        return (f"FactualRecallWorld(S={self.S}, R={self.R}, D={self.D}, n_noise={self.n_noise}, "
                f"T={self.T}, facts={self.facts_kind!r}, vocab_size={self.vocab_size}, "
                f"n_answers={self.n_answers})")


def sample_stack(worlds: list[FactualRecallWorld], batch_size: int, generator: torch.Generator) -> Batch:
    """One batch for each of several worlds at once (for training a stack of models together).

    The worlds may differ in S, R, D and ``n_noise`` but must share ``seq_len``. Sampling is the
    same as :meth:`FactualRecallWorld.sample` (uniform (s, r), two distinct positions among the
    first T - 1, uniform noise, EOS last), vectorised over the worlds.

    Returns:
        a :class:`Batch` whose tensors have a leading ``[n_worlds]`` dimension:
        ``input_ids [n_worlds, batch, T]``, ``targets/subjects/relations [n_worlds, batch]``.

    Raises:
        ConfigError: an empty list or worlds of different ``seq_len``.
    """
    if not worlds:
        raise ConfigError("worlds", worlds, "at least one FactualRecallWorld")
    T = worlds[0].T
    if any(w.T != T for w in worlds):
        raise ConfigError("worlds.seq_len", [w.T for w in worlds], "one common seq_len")
    M, B = len(worlds), int(batch_size)
    # per-world constants [M, 6]: S, R, n_noise, noise_offset, relation_offset, eos; the arithmetic is in place: the
    # same draws and the same values as the out-of-place form, in less time (session 53)
    cols = torch.tensor([[w.S, w.R, w.n_noise, w.noise_offset, w.relation_offset, w.eos] for w in worlds],
                        dtype=torch.float64)
    icols = cols.long()
    s = (torch.rand(M, B, generator=generator, dtype=torch.float64) * cols[:, 0:1]).long()
    r = (torch.rand(M, B, generator=generator, dtype=torch.float64) * cols[:, 1:2]).long()
    i = torch.randint(0, T - 1, (M, B), generator=generator)
    j = torch.randint(0, T - 2, (M, B), generator=generator)
    j += j >= i
    x = torch.rand(M, B, T, generator=generator).mul_(cols[:, 2, None, None].float()).long()
    x = torch.minimum(x, (icols[:, 2] - 1)[:, None, None]).add_(icols[:, 3, None, None])
    x.scatter_(2, i[:, :, None], s[:, :, None])
    x.scatter_(2, j[:, :, None], (r + icols[:, 4:5])[:, :, None])
    x[:, :, T - 1] = icols[:, 5:6]
    targets = torch.stack([w.fact_table[s[k], r[k]] for k, w in enumerate(worlds)])
    return Batch(x, targets, s, r)
