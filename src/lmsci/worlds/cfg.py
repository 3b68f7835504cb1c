"""Layered random context-free grammars (the cfg3 family), sampling with the parse tree kept, and exact
dynamic programming (membership, string probability, next-token distributions).

Source: Allen-Zhu & Li, "Physics of Language Models: Part 1, Learning Hierarchical Language Structures",
arXiv 2305.13673 (sec. 2.1 and App. A); official generator, loader and DP parser in
``facebookresearch/PhysicsLM4``, ``data-synthetic-pretrain/Lano-cfg/data_cfg.py`` (``CFG_Config``:
``build_graph``, ``read_graph``, ``generate_onedata``, ``solve_dp_noneq_fast``,
``solve_dp_prob_highprecision``). Spec: ``shared/research/physics_of_lms.md`` sec. 1.

Grammars by name (the published cfg3 tables, random draws, lmsci's small draws, a JSON path):
:func:`lmsci.worlds.cfg_grammars.get_grammar`.

Grammar. ``sizes = (1, n_1, ..., n_{L-1}, |T|)`` symbols per level, root first, terminals last
(``depth = len(sizes) - 1``, 6 for the 7-level cfg3 grammars). Every symbol of level ``l < depth`` has
rules, each a tuple of symbols of level ``l + 1`` (local indices ``0 .. sizes[l+1]-1``). Generation picks
one rule *uniformly* at every node (a PCFG with probability ``1 / #rules(A)`` per rule).

Tokens. Terminal ``j`` (local index) is token ``j + 1`` (the official ids ``1..|T|``), ``EOS = |T| + 1``
(official) and ``BOS = 0`` (added here for the language model); ``vocab_size = |T| + 2``.

Parse labels (``CFGSample``), for every token ``i`` and NT level ``l`` (``0 = root .. depth - 1``):

* ``ancestor[l, i]``: local index of the level-``l`` symbol whose subtree holds token ``i`` (the paper's
  NT-ancestor label; the paper's ``NT_{l+1}``, so its NT2..NT6 are levels 1..5 here);
* ``boundary[l, i]``: 1 when token ``i`` is the last token of that subtree (NT-end label; the paper's
  "the index at level l changes between i and i+1"; always 1 at the last token).

These are the *generation-time* labels (the grammars are ambiguous; the paper probes these).

Dynamic programming (the layered inside algorithm; CYK without binarisation, every rule of level ``l``
composed from the span relations of level ``l + 1``):

* :meth:`CFG.member` / :meth:`CFG.member_many`: membership with numba over ``uint64`` bitsets of span
  ends (``D_l[A][i]`` = the set of ``j`` with ``A =>* w[i:j]``); O(set spans x n / 64) per composition.
* :meth:`CFG.string_logprob`: ``log P(w)`` under the uniform-rule PCFG (sum over all derivations).
* :meth:`CFG.next_token_dists`: the exact next-token distribution over ``(EOS, t_1 .. t_|T|)`` after every
  prefix of a string: with inside matrices ``In_l[A][i, j] = P(A => w[i:j])`` and prefix matrices
  ``Q_l[A][j, k, t] = P(A's yield starts at j, matches w[j:k] and has token t at k)``,
  ``Q_l[A] = sum_rules p(rule) sum_r (In[B_1] ... In[B_{r-1}]) Q_{l+1}[B_r]``; then
  ``P(next = t | w[:k]) ∝ Q_0[root][0, k, t]`` and ``P(EOS | w[:k]) ∝ In_0[root][0, k]``. Float64 with a
  gauge ``exp(alpha * span length)`` so that long strings neither underflow nor overflow (the gauge cancels
  in every ratio).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from lmsci.errors import DataError

try:  # numba is a declared dependency; the pure-numpy fallback keeps imports working without it
    from numba import njit
except ImportError:  # pragma: no cover
    def njit(*a, **k):
        def deco(f):
            return f
        return deco if not (a and callable(a[0])) else a[0]


class GrammarError(DataError):
    """A rule table is malformed: levels that do not chain, a rule pointing outside the next level, an empty
    rule list, or a JSON file that is not a cfg rule table. The message names the level, symbol and rule."""


class UnknownSymbolError(DataError):
    """A string holds a token that is not a terminal of the grammar (nor EOS where EOS is allowed)."""


@dataclass
class CFGSample:
    """One generated string with its generation-time parse labels.

    Attributes:
        tokens: ``[n]`` int64 token ids (terminals ``1..|T|``; no BOS/EOS).
        ancestor: ``[depth, n]`` int64: local index of the level-``l`` NT ancestor of each token (row 0 = root,
            always 0).
        boundary: ``[depth, n]`` bool: token ``i`` ends its level-``l`` subtree.
    """

    tokens: np.ndarray
    ancestor: np.ndarray
    boundary: np.ndarray


@dataclass
class CFG:
    """A layered CFG; see the module docstring.

    Attributes:
        sizes: symbols per level, root (1) first, terminals last.
        rules: ``rules[l][a]`` = list of rules (tuples of level-``l+1`` local indices) of symbol ``a`` of level
            ``l``, for ``l < depth``.
        name: a label for reports.

    Raises:
        GrammarError: on construction, a table whose levels do not chain (``len(rules) != depth``, a level
            with the wrong number of symbols, an empty rule list or rule, a symbol outside the next level).
    """

    sizes: tuple[int, ...]
    rules: list[list[list[tuple[int, ...]]]]
    name: str = "cfg"
    _flat: tuple = field(default=None, init=False, repr=False)

    def __post_init__(self):
        self.sizes = tuple(int(s) for s in self.sizes)
        if len(self.sizes) < 2 or self.sizes[0] != 1 or min(self.sizes) < 1:
            raise GrammarError(f"{self.name}: sizes {self.sizes} must start with 1 (the root) and have >= 2 levels "
                               "of >= 1 symbol")
        if len(self.rules) != self.depth:
            raise GrammarError(f"{self.name}: {len(self.rules)} rule levels for depth {self.depth} "
                               f"(sizes {self.sizes}): the levels do not chain")
        for l, level in enumerate(self.rules):
            if len(level) != self.sizes[l]:
                raise GrammarError(f"{self.name}: level {l} has {len(level)} symbols with rules, sizes says "
                                   f"{self.sizes[l]}")
            for a, rs in enumerate(level):
                if not rs:
                    raise GrammarError(f"{self.name}: level {l} symbol {a} has no rule")
                for r in rs:
                    if len(r) == 0 or any((not isinstance(s, (int, np.integer))) or s < 0 or s >= self.sizes[l + 1]
                                          for s in r):
                        raise GrammarError(f"{self.name}: level {l} symbol {a} rule {list(r)} must be a non-empty "
                                           f"list of level-{l + 1} indices in [0, {self.sizes[l + 1]})")
        self.rules = [[[tuple(int(s) for s in r) for r in rs] for rs in level] for level in self.rules]
        self._build_flat()

    # -- shape ---------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Index of the terminal level (``len(sizes) - 1``)."""
        return len(self.sizes) - 1

    @property
    def n_terminals(self) -> int:
        return self.sizes[-1]

    @property
    def bos(self) -> int:
        return 0

    @property
    def eos(self) -> int:
        """EOS token id, ``|T| + 1`` (official)."""
        return self.n_terminals + 1

    @property
    def vocab_size(self) -> int:
        """``|T| + 2`` (BOS, terminals, EOS)."""
        return self.n_terminals + 2

    def length_range(self) -> tuple[int, int]:
        """Shortest and longest string the grammar can generate (exact, by DP over levels)."""
        lo = np.ones(self.n_terminals, dtype=np.int64)
        hi = np.ones(self.n_terminals, dtype=np.int64)
        for l in range(self.depth - 1, -1, -1):
            lo = np.array([min(sum(int(lo[s]) for s in r) for r in rs) for rs in self.rules[l]])
            hi = np.array([max(sum(int(hi[s]) for s in r) for r in rs) for rs in self.rules[l]])
        return int(lo[0]), int(hi[0])

    def _build_flat(self) -> None:
        maxlen = max(len(r) for level in self.rules for rs in level for r in rs)
        owner, lens, syms, ptr = [], [], [], [0]
        for l in range(self.depth):
            for a, rs in enumerate(self.rules[l]):
                for r in rs:
                    owner.append(a)
                    lens.append(len(r))
                    syms.append(list(r) + [0] * (maxlen - len(r)))
            ptr.append(len(owner))
        self._flat = (np.asarray(ptr, np.int64), np.asarray(owner, np.int64), np.asarray(lens, np.int64),
                      np.asarray(syms, np.int64).reshape(len(owner), maxlen), np.asarray(self.sizes, np.int64))
        # padded per-level rule tables for the vectorised sampler
        self._tables = []
        for l in range(self.depth):
            nr = np.array([len(rs) for rs in self.rules[l]], np.int64)
            tab = np.zeros((self.sizes[l], int(nr.max()), maxlen), np.int64)
            ln = np.zeros((self.sizes[l], int(nr.max())), np.int64)
            for a, rs in enumerate(self.rules[l]):
                for k, r in enumerate(rs):
                    tab[a, k, :len(r)] = r
                    ln[a, k] = len(r)
            self._tables.append((nr, tab, ln))

    # -- sampling -----------------------------------------------------------------------------
    def sample(self, rng: np.random.Generator) -> CFGSample:
        """One string by uniform rule choice at every node (level by level, equivalent in law to the official
        depth-first ``CFG_Node.generate``), with its parse labels (see :class:`CFGSample`)."""
        syms = np.zeros(1, np.int64)
        parents = []  # parents[l][m] = index (within level l) of the parent of node m of level l+1
        level_syms = [syms]
        for l in range(self.depth):
            nr, tab, ln = self._tables[l]
            k = (rng.random(len(syms)) * nr[syms]).astype(np.int64)
            lens = ln[syms, k]
            rows = tab[syms, k]  # [m, maxlen]
            mask = np.arange(rows.shape[1])[None, :] < lens[:, None]
            syms = rows[mask]
            parents.append(np.repeat(np.arange(len(lens)), lens))
            level_syms.append(syms)
        n = len(syms)
        node = np.arange(n)
        anc = np.zeros((self.depth, n), np.int64)
        bnd = np.zeros((self.depth, n), bool)
        for l in range(self.depth - 1, -1, -1):
            node = parents[l][node]  # node index at level l of each token
            anc[l] = level_syms[l][node]
            bnd[l, :-1] = node[1:] != node[:-1]
            bnd[l, -1] = True
        return CFGSample(tokens=syms + 1, ancestor=anc, boundary=bnd)

    def sample_stream(self, m: int, rng: np.random.Generator) -> np.ndarray:
        """``m`` independent strings, each followed by EOS, concatenated: ``[sum(len_i + 1)]`` int64.

        All ``m`` trees are expanded together level by level (the same law as :meth:`sample`, without labels);
        this is the fresh-sample training stream (physics_of_lms.md sec. 1.3: "always fresh samples")."""
        syms = np.zeros(m, np.int64)
        root = np.arange(m)
        for l in range(self.depth):
            nr, tab, ln = self._tables[l]
            k = (rng.random(len(syms)) * nr[syms]).astype(np.int64)
            lens = ln[syms, k]
            rows = tab[syms, k]
            mask = np.arange(rows.shape[1])[None, :] < lens[:, None]
            syms = rows[mask]
            root = np.repeat(root, lens)
        ends = np.flatnonzero(np.r_[root[1:] != root[:-1], True])  # last token of each string
        return np.insert(syms + 1, ends + 1, self.eos)

    def sample_many(self, n: int, rng: np.random.Generator) -> list[CFGSample]:
        """``n`` independent samples (see :meth:`sample`)."""
        return [self.sample(rng) for _ in range(n)]

    # -- checks -------------------------------------------------------------------------------
    def _terminal_index(self, tokens: Sequence[int] | np.ndarray, allow_eos: bool = True) -> np.ndarray:
        w = np.asarray(tokens, dtype=np.int64).ravel()
        if allow_eos and len(w) and w[-1] == self.eos:
            w = w[:-1]
        bad = (w < 1) | (w > self.n_terminals)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise UnknownSymbolError(f"{self.name}: token {int(w[i])} at position {i} is not a terminal (ids 1..."
                                     f"{self.n_terminals}; EOS={self.eos} only at the end)")
        return w - 1

    # -- membership (numba, bitsets) ----------------------------------------------------------
    def member(self, tokens: Sequence[int] | np.ndarray) -> bool:
        """Whether the string (terminal ids, optionally ending with EOS) is in the language.

        Raises:
            UnknownSymbolError: a token that is no terminal (EOS anywhere but at the end included).
        """
        w = self._terminal_index(tokens)
        if len(w) == 0:
            return False
        ptr, owner, lens, syms, sizes = self._flat
        return bool(_member_bitset(w, ptr, owner, lens, syms, sizes))

    def member_many(self, strings: Sequence[Sequence[int]]) -> np.ndarray:
        """:meth:`member` of each string; ``[len(strings)]`` bool."""
        return np.array([self.member(s) for s in strings], dtype=bool)

    # -- probabilities (numpy float64) --------------------------------------------------------
    def gauge(self) -> float:
        """``alpha``: the expected negative log-probability of the derivation per token under uniform rule
        choice (ignoring ambiguity); the DP multiplies each span by ``exp(alpha * length)``."""
        nodes_per_tok, a = 1.0, 0.0
        for l in range(self.depth - 1, -1, -1):
            mean_len = np.mean([np.mean([len(r) for r in rs]) for rs in self.rules[l]])
            nodes_per_tok /= mean_len
            a += nodes_per_tok * float(np.mean([math.log(len(rs)) for rs in self.rules[l]]))
        return a

    def _inside(self, w: np.ndarray, alpha: float, want_all: bool):
        """Inside matrices per level: list (by level) of ``[sizes[l], n+1, n+1]`` arrays (gauged)."""
        n = len(w)
        cur = np.zeros((self.n_terminals, n + 1, n + 1))
        cur[w, np.arange(n), np.arange(n) + 1] = math.exp(alpha)
        levels = [None] * (self.depth + 1)
        levels[self.depth] = cur
        for l in range(self.depth - 1, -1, -1):
            nxt = np.zeros((self.sizes[l], n + 1, n + 1))
            for a, rs in enumerate(self.rules[l]):
                p = 1.0 / len(rs)
                for r in rs:
                    m = cur[r[0]]
                    for s in r[1:]:
                        m = m @ cur[s]
                    nxt[a] += p * m
            levels[l] = nxt
            cur = nxt
        return levels

    def string_logprob(self, tokens: Sequence[int] | np.ndarray) -> float:
        """``log P(w)`` (nats) under the uniform-rule PCFG, summed over all derivations; ``-inf`` outside the
        language. Tokens as in :meth:`member`."""
        w = self._terminal_index(tokens)
        if len(w) == 0:
            return -math.inf
        alpha = self.gauge()
        ins = self._inside(w, alpha, False)
        v = ins[0][0, 0, len(w)]
        return math.log(v) - alpha * len(w) if v > 0 else -math.inf

    def next_token_dists(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        """Exact next-token distributions after every prefix of ``tokens``.

        Args:
            tokens: a string of terminal ids (optionally ending with EOS), length ``n``.

        Returns:
            ``[n + 1, |T| + 1]`` float64: row ``k`` is ``P(. | w[:k])`` over ``(EOS, t_1, ..., t_|T|)``
            (column 0 = EOS, column ``j`` = token id ``j``); a row whose prefix has probability 0 (the string
            left the language) is all NaN.

        Raises:
            UnknownSymbolError: as :meth:`member`.
        """
        w = self._terminal_index(tokens)
        n, T = len(w), self.n_terminals
        alpha = self.gauge()
        # terminal level: In[t][i, i+1] = [w_i = t] e^alpha; Q[t'][k, k, t] = [t = t'] (zero matched tokens)
        ins = np.zeros((T, n + 1, n + 1))
        ins[w, np.arange(n), np.arange(n) + 1] = math.exp(alpha)
        q = np.zeros((T, n + 1, n + 1, T))
        idx = np.arange(n + 1)
        for t in range(T):
            q[t, idx, idx, t] = 1.0
        for l in range(self.depth - 1, -1, -1):
            S = self.sizes[l + 1]
            rows = 1 if l == 0 else n + 1
            nin = np.zeros((self.sizes[l], rows, n + 1))
            nq = np.zeros((self.sizes[l], rows, n + 1, T))
            qs = q.reshape(S * (n + 1), (n + 1) * T)  # Q of the child level, stacked by symbol
            for a, rs in enumerate(self.rules[l]):
                p = 1.0 / len(rs)
                M = np.zeros((rows, S, n + 1))  # M[:, s] = sum over (rule, r: B_r = s) of p * In[B_1..B_{r-1}]
                for r in rs:
                    pre = None
                    for s in r:
                        if pre is None:
                            M[np.arange(rows), s, np.arange(rows)] += p
                            pre = ins[s][:rows]
                        else:
                            M[:, s] += p * pre
                            pre = pre @ ins[s]
                    nin[a] += p * pre
                nq[a] = (M.reshape(rows, S * (n + 1)) @ qs).reshape(rows, n + 1, T)
            ins, q = nin, nq
        cont = q[0, 0]  # [n+1 (k), T]
        eos = ins[0, 0]  # [n+1 (k)]
        out = np.concatenate([eos[:, None], cont], axis=1)
        z = out.sum(1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(z > 0, out / np.where(z > 0, z, 1.0), np.nan)
        return out

    # -- serialisation ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"name": self.name, "sizes": list(self.sizes),
                "rules": [[[list(r) for r in rs] for rs in level] for level in self.rules]}


@njit(cache=True)
def _member_bitset(w, ptr, owner, lens, syms, sizes):  # pragma: no cover (compiled)
    n = w.shape[0]
    nw = (n + 1 + 63) // 64
    depth = sizes.shape[0] - 1
    one = np.uint64(1)
    cur = np.zeros((sizes[depth], n + 1, nw), np.uint64)
    for i in range(n):
        j = i + 1
        cur[w[i], i, j >> 6] |= one << np.uint64(j & 63)
    for l in range(depth - 1, -1, -1):
        nxt = np.zeros((sizes[l], n + 1, nw), np.uint64)
        rows = 1 if l == 0 else n + 1
        acc = np.zeros((rows, nw), np.uint64)
        tmp = np.zeros((rows, nw), np.uint64)
        for r in range(ptr[l], ptr[l + 1]):
            a = owner[r]
            for i in range(rows):
                for x in range(nw):
                    acc[i, x] = cur[syms[r, 0], i, x]
            for m in range(1, lens[r]):
                b = syms[r, m]
                for i in range(rows):
                    for x in range(nw):
                        tmp[i, x] = 0
                    for x in range(nw):
                        word = acc[i, x]
                        if word == 0:
                            continue
                        for bit in range(64):
                            if (word >> np.uint64(bit)) & one:
                                j = x * 64 + bit
                                for y in range(nw):
                                    tmp[i, y] |= cur[b, j, y]
                for i in range(rows):
                    for x in range(nw):
                        acc[i, x] = tmp[i, x]
            for i in range(rows):
                for x in range(nw):
                    nxt[a, i, x] |= acc[i, x]
        cur = nxt
    return (cur[0, 0, n >> 6] >> np.uint64(n & 63)) & one


# -- language-model data ---------------------------------------------------------------------------------
def pack_stream(samples: Sequence[CFGSample], eos: int) -> np.ndarray:
    """The training stream: samples concatenated, each followed by EOS (physics_of_lms.md sec. 1.3: the packing
    is not pinned down by the sources; we use EOS-separated concatenation and prepend BOS per window)."""
    parts = []
    for s in samples:
        parts.append(s.tokens)
        parts.append(np.array([eos], np.int64))
    return np.concatenate(parts)


def kl_true_model(p_true: np.ndarray, q_model: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Per-position ``KL(p || q)`` (nats) with both distributions smoothed by ``eps`` and renormalised
    (``demo2_advanced_dp.py``). Args ``[n, K]`` each; returns ``[n]``; rows of ``p_true`` with NaN give NaN."""
    p = (p_true + eps) / (p_true + eps).sum(1, keepdims=True)
    q = (q_model + eps) / (q_model + eps).sum(1, keepdims=True)
    return (p * (np.log(p) - np.log(q))).sum(1)
