"""ALPINE path-finding world: a random DAG, source-target pairs split into training and test, path sequences.

Source: Wang, Shen, Feng, Sun, Teng, Chen, "ALPINE: Unveiling the Planning Capability of Autoregressive Learning
in Language Models", NeurIPS 2024, arXiv 2405.09220, sec. 2 (path-finding as next-token prediction: a sequence
``s t s u_1 ... u_p t \\n``), sec. 3-4 (the adjacency ``A^true``, the reachability ``R^true`` with
``R^true[t, k] = 1`` iff a path ``k -> ... -> t`` exists, and the *observed* reachability ``R^obs`` the training
data reveals), sec. 5 (the random DAG: nodes in a fixed topological order, each pair ``i < j`` an edge ``i -> j``
independently with probability ``p``; a fraction of the reachable (s, t) pairs are training pairs, each with
sampled paths; the rest are test pairs; Fig. 6: accuracy falls for pairs that need paths to be concatenated).

Construction (:func:`alpine_world`):

* nodes ``0 .. n_nodes - 1`` in topological order; ``A[i, j] = 1`` (``i < j``) with probability ``edge_prob``;
* ``R[t, k] = 1`` iff ``k`` reaches ``t`` (``R[t, t] = 1``: the paper's convention of a node reaching itself);
* reachable pairs (``s < t``, ``R[t, s] = 1``) are shuffled; the first ``train_frac`` of them are training
  pairs, the rest test pairs; each training pair gets ``paths_per_pair`` paths, each a random walk from ``s``
  that at every node picks uniformly among the children that still reach ``t``;
* ``R_obs[t, k] = 1`` iff ``k`` is a *label* (a node after the source) of a training path with target ``t``:
  the pairs whose logit the cross-entropy gradient raises (sec. 4, Theorem 3: the learned reachability is the
  observed one);
* pair types of the test pairs (:meth:`AlpineWorld.pair_types`): ``observed`` when some child ``k`` of ``s``
  has ``R_obs[t, k] = 1`` (one step along an observed reachability reaches a node the model was trained to
  lead to ``t``), ``transitive`` when none does (the model must concatenate observed paths: the paper's
  failure case), ``unreachable`` for node pairs with no path (not evaluated for accuracy).

Tokens: nodes ``0 .. n - 1``, ``NEWLINE = n``, ``PAD = n + 1`` (input padding only; its targets are ignored).
The "shuffled edges" control world (:func:`shuffled_edges`) keeps the node count and the number of edges but
places the edges on random pairs ``i < j``: a DAG of the same density whose paths say nothing about ``A``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from lmsci.errors import ConfigError

IGNORE = -100


@dataclass
class AlpineWorld:
    """A random DAG with its training paths and test pairs (see the module docstring).

    Attributes:
        A: ``[n, n]`` bool, ``A[i, j]`` iff edge ``i -> j``.
        R: ``[n, n]`` bool, ``R[t, k]`` iff ``k`` reaches ``t`` (diagonal true).
        R_obs: ``[n, n]`` bool, observed reachability from the training paths.
        train_pairs, test_pairs: ``[m, 2]`` int arrays of (s, t).
        train_paths: node lists ``[s, u_1, ..., t]`` (``paths_per_pair`` per training pair).
    """

    n_nodes: int
    A: np.ndarray
    R: np.ndarray
    R_obs: np.ndarray
    train_pairs: np.ndarray
    test_pairs: np.ndarray
    train_paths: list[list[int]] = field(repr=False)

    @property
    def newline(self) -> int:
        return self.n_nodes

    @property
    def pad(self) -> int:
        return self.n_nodes + 1

    @property
    def vocab_size(self) -> int:
        return self.n_nodes + 2

    @property
    def max_len(self) -> int:
        """Length of the longest training sequence ``s t s ... t \\n`` (tokens)."""
        return max(len(p) for p in self.train_paths) + 3

    def sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All training sequences, padded: ``(input_ids [N, max_len - 1], targets [N, max_len - 1])``.

        The sequence ``s t s u_1 ... t \\n`` is shifted by one; the target of position 0 (``t`` given ``s``,
        a random draw) and padding are ``-100``.
        """
        L = self.max_len
        seq = np.full((len(self.train_paths), L), self.pad, dtype=np.int64)
        tgt = np.full((len(self.train_paths), L), IGNORE, dtype=np.int64)
        for i, p in enumerate(self.train_paths):
            row = [p[0], p[-1], *p, self.newline]
            seq[i, : len(row)] = row
            tgt[i, : len(row)] = row
        x, y = torch.from_numpy(seq[:, :-1]), torch.from_numpy(tgt[:, 1:]).clone()
        y[:, 0] = IGNORE
        return x, y

    def pair_types(self, pairs: np.ndarray) -> np.ndarray:
        """Type of each (s, t): ``"observed"``, ``"transitive"`` or ``"unreachable"`` (module docstring)."""
        out = []
        for s, t in pairs:
            if not self.R[t, s] or s == t:
                out.append("unreachable")
                continue
            kids = np.flatnonzero(self.A[s])
            out.append("observed" if bool(self.R_obs[t, kids].any()) else "transitive")
        return np.asarray(out)

    def unreachable_pairs(self) -> np.ndarray:
        """All (s, t), ``s != t``, with no path from ``s`` to ``t``: ``[m, 2]``."""
        s, t = np.nonzero(~self.R.T)
        keep = s != t
        return np.stack([s[keep], t[keep]], 1)

    def is_valid(self, s: int, t: int, nodes: list[int]) -> bool:
        """Whether ``nodes`` (the generated path after the prompt, ``s u_1 ... t``) is a path from s to t in A."""
        if len(nodes) < 2 or nodes[0] != s or nodes[-1] != t:
            return False
        return all(0 <= a < self.n_nodes and 0 <= b < self.n_nodes and self.A[a, b] for a, b in zip(nodes, nodes[1:]))


def reachability(A: np.ndarray) -> np.ndarray:
    """``R[t, k]`` = ``k`` reaches ``t`` in the DAG ``A`` (topological order = index order); diagonal true.

    Args:
        A: ``[n, n]`` bool adjacency with edges only from lower to higher index.
    """
    n = A.shape[0]
    reach_from = np.eye(n, dtype=bool)  # reach_from[k, t]: k reaches t
    for k in range(n - 1, -1, -1):
        for j in np.flatnonzero(A[k]):
            reach_from[k] |= reach_from[j]
    return reach_from.T.copy()


def random_dag(n_nodes: int, edge_prob: float, rng: np.random.Generator) -> np.ndarray:
    """``[n, n]`` bool adjacency: each ``i < j`` an edge with probability ``edge_prob`` (ALPINE sec. 5)."""
    return np.triu(rng.random((n_nodes, n_nodes)) < edge_prob, k=1)


def shuffled_edges(A: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The same number of edges placed on random pairs ``i < j`` (the control world's adjacency)."""
    n = A.shape[0]
    iu = np.triu_indices(n, k=1)
    flat = np.zeros(len(iu[0]), dtype=bool)
    flat[rng.choice(len(flat), size=int(A.sum()), replace=False)] = True
    out = np.zeros_like(A)
    out[iu] = flat
    return out


def sample_path(A: np.ndarray, R: np.ndarray, s: int, t: int, rng: np.random.Generator) -> list[int]:
    """A random path from s to t: at each node a uniform choice among the children that still reach t."""
    path, u = [s], s
    while u != t:
        kids = np.flatnonzero(A[u] & R[t])
        u = int(kids[rng.integers(len(kids))])
        path.append(u)
    return path


def alpine_world(n_nodes: int, edge_prob: float, train_frac: float, paths_per_pair: int, seed: int,
                 adjacency: np.ndarray | None = None, min_test_pairs: int = 1) -> AlpineWorld:
    """Build the world (module docstring).

    Args:
        n_nodes: number of nodes (>= 3).
        edge_prob: probability of each edge ``i -> j``, ``i < j``, in (0, 1].
        train_frac: fraction of the reachable pairs that are training pairs, in (0, 1).
        paths_per_pair: sampled paths per training pair (>= 1).
        seed: randomness of the graph, the split and the paths.
        adjacency: use this ``[n, n]`` DAG instead of drawing one (the shuffled-edges control).
        min_test_pairs: refuse a graph with fewer reachable test pairs than this.

    Raises:
        ConfigError: a field out of range, or a graph too small for the split (names the field).
    """
    if n_nodes < 3:
        raise ConfigError("n_nodes", n_nodes, ">= 3")
    if not 0 < edge_prob <= 1:
        raise ConfigError("edge_prob", edge_prob, "in (0, 1]")
    if not 0 < train_frac < 1:
        raise ConfigError("train_frac", train_frac, "in (0, 1)")
    if paths_per_pair < 1:
        raise ConfigError("paths_per_pair", paths_per_pair, ">= 1")
    rng = np.random.default_rng(seed)
    A = random_dag(n_nodes, edge_prob, rng) if adjacency is None else adjacency.astype(bool)
    R = reachability(A)
    s, t = np.nonzero(R.T & ~np.eye(n_nodes, dtype=bool))  # R.T[s, t]: s reaches t
    pairs = np.stack([s, t], 1)
    pairs = pairs[rng.permutation(len(pairs))]
    n_train = int(round(train_frac * len(pairs)))
    if n_train < 1 or len(pairs) - n_train < min_test_pairs:
        raise ConfigError("n_nodes", n_nodes, f"a graph with enough reachable pairs for the split: {len(pairs)} "
                          f"reachable pairs, {n_train} training, need >= {min_test_pairs} test pairs (raise "
                          "n_nodes or edge_prob)")
    train, test = pairs[:n_train], pairs[n_train:]
    paths = [sample_path(A, R, int(a), int(b), rng) for a, b in train for _ in range(paths_per_pair)]
    R_obs = np.zeros_like(R)
    for p in paths:
        R_obs[p[-1], p[1:]] = True
    return AlpineWorld(n_nodes, A, R, R_obs, train, test, paths)
