"""A knowledge graph with composition rules, random-walk pretraining text and held-out triples.

Source: Wang, Amayuelas, Zhang, Pan, Chen, Wang, "Understanding the Reasoning Ability of Language Models From the
Perspective of Reasoning Paths Aggregation", ICML 2024, arXiv 2402.03268, sec. 3 (a LM pretrained from scratch on
random walks over a knowledge graph; held-out triples completed by the LM; its distribution compared with path
aggregation), and the official code WANGXinyiLinda/LM_random_walk (commit abc06a0), ``kg_reasoning/train.py``
(``random_walk_iter``: a start entity uniform over the entities with out-edges, each step a uniform choice among the
current entity's out-edges (all relations), a walk ends after ``path_len`` triples or at a dead end; each triple
rendered ``<e1> <r> <e2>`` (entities and relations as new tokens); walks joined with EOS and packed into fixed-length
chunks; ``random_iter``: the same number of triples drawn independently -- our "shuffled walks" control).
Facts carried over, not code.

World (:func:`kg_world`), a synthetic graph in place of the paper's real KGs (Countries, UMLS, Kinship, NELL-995,
FB15K-237), so that the rules are known:

* ``n_entities`` entities; ``n_base`` base relations, each a partial function: entity ``x`` has a tail under base
  relation ``b`` with probability ``edge_prob`` (uniform over the other entities); every entity gets at least one
  base edge (no dead ends);
* ``n_derived`` derived relations, each defined by one composition rule ``d(x, z) <- b_i(x, y) and b_j(y, z)``
  (``i != j`` drawn at random): all its triples are materialised;
* a ``heldout_frac`` share of the derived triples is held out (the test triples); the training graph is every base
  triple and the remaining derived triples.

Tokens: entities ``0 .. E - 1``, relations ``E .. E + n_rel - 1`` (base first), ``EOS = E + n_rel``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmsci.errors import ConfigError


@dataclass
class KGWorld:
    """The graph, its rules and split (see the module docstring).

    Attributes:
        train_triples: ``[m, 3]`` (head, relation, tail) int, relation ids ``0 .. n_rel - 1``.
        test_triples: ``[k, 3]`` held-out derived triples.
        rules: ``{derived relation: (b_i, b_j)}``.
    """

    n_entities: int
    n_base: int
    n_derived: int
    train_triples: np.ndarray
    test_triples: np.ndarray
    rules: dict[int, tuple[int, int]]

    def __post_init__(self):
        E = self.n_entities
        heads = self.train_triples[:, 0]
        self.outdeg = np.bincount(heads, minlength=E)
        order = np.argsort(heads, kind="stable")
        self._edges = self.train_triples[order]
        self._start = np.concatenate([[0], np.cumsum(self.outdeg)[:-1]])

    @property
    def n_rel(self) -> int:
        return self.n_base + self.n_derived

    @property
    def eos(self) -> int:
        return self.n_entities + self.n_rel

    @property
    def vocab_size(self) -> int:
        return self.n_entities + self.n_rel + 1

    def rel_token(self, r) -> np.ndarray:
        return self.n_entities + np.asarray(r)

    def walks(self, n_walks: int, walk_len: int, rng: np.random.Generator, shuffled: bool = False) -> np.ndarray:
        """``[n_walks, 3 * walk_len + 1]`` tokens: ``walk_len`` triples ``e r e'`` then EOS.

        A walk starts at a uniform entity and follows a uniform out-edge at each step (no dead ends here). With
        ``shuffled``, each triple is an independent uniform training edge (the official ``random_iter``: a head
        drawn with weight equal to its out-degree, then a uniform out-edge).

        Raises:
            ValueError: a walk (not ``shuffled``) on a graph with a dead end (an entity without out-edges; the official
                ``random_walk_iter`` ends the walk there, which walks of fixed length cannot; :func:`kg_world` makes
                none).
        """
        if not shuffled and (self.outdeg == 0).any():
            raise ValueError(f"walks need an out-edge at every entity: {int((self.outdeg == 0).sum())} dead end(s), "
                             f"e.g. entity {int(np.flatnonzero(self.outdeg == 0)[0])}")
        out = np.empty((n_walks, 3 * walk_len + 1), dtype=np.int64)
        cur = rng.integers(self.n_entities, size=n_walks)
        for i in range(walk_len):
            if shuffled:
                e = self.train_triples[rng.integers(len(self.train_triples), size=n_walks)]
            else:
                e = self._edges[self._start[cur] + np.floor(rng.random(n_walks) * self.outdeg[cur]).astype(np.int64)]
            out[:, 3 * i], out[:, 3 * i + 1], out[:, 3 * i + 2] = e[:, 0], self.rel_token(e[:, 1]), e[:, 2]
            cur = e[:, 2]
        out[:, -1] = self.eos
        return out

    def packed(self, batch: int, seq_len: int, walk_len: int, rng: np.random.Generator,
               shuffled: bool = False) -> np.ndarray:
        """``[batch, seq_len + 1]`` tokens: each row ``EOS`` then walks joined by ``EOS``, cut at ``seq_len + 1``.

        Every row starts at a walk boundary (the official code packs one stream from a random point), so the query
        prompt ``EOS h r`` of :meth:`queries` sits at positions 0-2, where training rows start a triple.
        """
        w = 3 * walk_len + 1
        per_row = seq_len // w + 1
        walks = self.walks(batch * per_row, walk_len, rng, shuffled).reshape(batch, per_row * w)
        rows = np.concatenate([np.full((batch, 1), self.eos, dtype=np.int64), walks], 1)
        return rows[:, : seq_len + 1]

    def queries(self, triples: np.ndarray) -> tuple[np.ndarray, list[set[int]]]:
        """Unique (head, relation) of ``triples`` with their tails: ``([q, 2], [set of tails])``."""
        tails: dict[tuple[int, int], set[int]] = {}
        for h, r, t in triples:
            tails.setdefault((int(h), int(r)), set()).add(int(t))
        keys = sorted(tails)
        return np.asarray(keys, dtype=np.int64).reshape(-1, 2), [tails[k] for k in keys]

    def seen_tails(self, hr: np.ndarray) -> list[set[int]]:
        """Training tails of each (head, relation) in ``hr [q, 2]``."""
        tails: dict[tuple[int, int], set[int]] = {}
        for h, r, t in self.train_triples:
            tails.setdefault((int(h), int(r)), set()).add(int(t))
        return [tails.get((int(h), int(r)), set()) for h, r in hr]


def kg_world(n_entities: int, n_base: int, n_derived: int, edge_prob: float, heldout_frac: float,
             seed: int) -> KGWorld:
    """Build the graph (module docstring).

    Raises:
        ConfigError: a field out of range (named), or too few derived triples for a held-out set.
    """
    if n_entities < 4:
        raise ConfigError("n_entities", n_entities, ">= 4")
    if n_base < 2:
        raise ConfigError("n_base", n_base, ">= 2 (a composition rule joins two base relations)")
    if n_derived < 1:
        raise ConfigError("n_derived", n_derived, ">= 1")
    if not 0 < edge_prob <= 1:
        raise ConfigError("edge_prob", edge_prob, "in (0, 1]")
    if not 0 < heldout_frac < 1:
        raise ConfigError("heldout_frac", heldout_frac, "in (0, 1)")
    rng = np.random.default_rng(seed)
    E = n_entities
    tail = np.full((n_base, E), -1, dtype=np.int64)
    for b in range(n_base):
        has = rng.random(E) < edge_prob
        t = rng.integers(E - 1, size=E)
        tail[b, has] = (t + (t >= np.arange(E)))[has]  # uniform over the other entities
    for x in np.flatnonzero((tail < 0).all(0)):
        b, t = int(rng.integers(n_base)), int(rng.integers(E - 1))
        tail[b, x] = t + (t >= x)
    base = [(x, b, int(tail[b, x])) for b in range(n_base) for x in range(E) if tail[b, x] >= 0]
    rules, derived = {}, []
    for d in range(n_derived):
        i, j = (int(v) for v in rng.choice(n_base, size=2, replace=False))
        rules[n_base + d] = (i, j)
        for x in range(E):
            y = tail[i, x]
            if y >= 0 and tail[j, y] >= 0 and tail[j, y] != x:
                derived.append((x, n_base + d, int(tail[j, y])))
    derived = np.asarray(derived, dtype=np.int64).reshape(-1, 3)
    n_test = int(round(heldout_frac * len(derived)))
    if n_test < 1 or n_test >= len(derived):
        raise ConfigError("n_entities", n_entities, f"a graph with enough derived triples to hold out "
                          f"{heldout_frac:.0%} of them ({len(derived)} derived; raise n_entities or edge_prob)")
    perm = rng.permutation(len(derived))
    test, kept = derived[perm[:n_test]], derived[perm[n_test:]]
    train = np.concatenate([np.asarray(base, dtype=np.int64), kept])
    return KGWorld(E, n_base, n_derived, train, test, rules)
