"""The iGSM generator (:class:`IGSMWorld`): hidden category structure, dependency graph, problems and detailed
solutions. Its configuration is :mod:`~lmsci.worlds.igsm.config`, one attempt's steps
:mod:`~lmsci.worlds.igsm.structure`, the problem and its text :mod:`~lmsci.worlds.igsm.problem`.

Source: Ye, Xu, Li, Allen-Zhu, "Physics of Language Models: Part 2.1, Grade-School Math and the Hidden
Reasoning Process", arXiv 2407.20311, Section 2 and App. B-C (official generator
``facebookresearch/iGSM``: ``math_gen/problem_gen.py``, ``data_gen/prototype/id_gen.py``); spec in
``shared/research/physics_of_lms.md`` section 2. This is our own implementation of that generator
(own names, own sampler), with the same objects and text format:

* **Structure graph**: one chain of categories (:data:`~lmsci.worlds.igsm.names.CHAINS`), a window of
  ``d`` in {2, 3, 4} adjacent levels, ``l_i`` in [w0, w1] items per level (w0 <= w1 in {2, 3, 4}) from
  one name sub-pool per level, and ``e`` edges between adjacent levels (``e = min`` of two
  U[(d-1) w0, max_edge], at most (d-1) w1^2). Every item below the top has a parent; an item above the
  bottom may have no child (as in the official generator: its abstract parameters are 0, "Define Goat
  Cheese's Ingredient as a; so a = 0").
* **Parameters**: instance ``(0, i, j, x)`` = "each item(i,j)'s item(i+1,x)", one per edge (``ip``
  of them, <= max_edge); abstract ``(1, i, j, k)`` = "each item(i,j)'s category k" for k > i,
  computed by summing products along the structure graph. ``(-1, 0, 0, 0)`` is the random-number source.
* **Dependency graph** (:attr:`Problem.graph`, a ``networkx.DiGraph`` over all parameters): every
  instance parameter is a constant, or "equals X", or the sum / difference of 2, or the sum of 3-4
  parameters (instance or abstract), optionally "a more than" / "a times as much as" that.
  Arithmetic is mod 23 (constants 0..22, multipliers 1..22).
* **op**: the number of operations of the (shortest) solution = sum over the necessary parameters of
  max(1, binary operations in its sentence) = the number of ``;`` in the solution (a constant
  ``so e = 6`` and a copy ``so J = e = 6`` count 1, a sum of k terms k - 1, a modifier 1, an
  abstract parameter over c children max(1, c - 1) (or max(1, 2c - 1) when it multiplies)).

Sampler (our own code of the official forward process, ``data_gen/prototype/id_gen.py`` and
``math_gen/graph_gen.py`` of the initial release; the same distributions of op, instance parameters,
solution steps and answer at the same hyper-parameters, checked by ``tests/parity/test_igsm_parity.py``):
op is drawn *per problem* (``light``: min of two U{1..max_op}, or ``uniform``). Each attempt draws
s (the light min of two U{1..max_op}; ``s = op`` when :meth:`IGSMWorld.sample` is given ``op``, as the
official ``IdGen(op=...)``), n = max of two U{1..s}, m in U{n..s}, then d, w0, w1 (softmax over {2, 3, 4}
around (s - 1) / (max_edge - 1)), a growth probability p and e; a structure (redrawn, up to 1000 times,
until the order walk below succeeds); the necessary parameters: abstract ones taken lowest layer span
first while their operations (with the instance parameters they need) fit in n, then m - n more
instance parameters; the solution order, walked backwards from a random question, in which an
instance parameter may pick up one more dependency; then extra parents (as many operations as s asks
for and the order allows: a step at position t may use up to min(t + 1, 4) earlier steps and the
random source). The attempt is kept when its op equals the problem's op and its template hash falls in
the split (train 0..15, test 16..22). Two exact shortcuts (the kept problems' distribution is
unchanged): s is drawn given s >= op, and an attempt with s > op and min(m, e) > op is rejected
before any structure is drawn (no structure can reach op then). The hash (blake2b mod 23) is over the
solution sketch (per solution step: instance or abstract, operator, modifier kind, and the steps it
uses; no names, numbers or symbols) plus the structure's depth d and its number of instance parameters
ip; (d, ip) is our addition so that the few sketches of tiny ops (op = 1 has a single sketch) still
fall on both sides of the split, so at low op a test problem can share its solution sketch (not its
(d, ip)) with training problems. Unnecessary parameters then get random definitions as in the
official ``design_unused`` (in random order; half of them "independent": they use only other
independent unnecessary parameters, the rest any known parameter, abstract ones included once every
term is known; 1-4 terms, geometric; the random source with prob. 1/2).

Text (``detail_level = 0``): ``Define <param> as <sym>; [<sym2> = <hint> = <numbers> = <v>; ...] so
<sym> = <hint> = <numbers> = <v>.``; symbols drawn from the 52 letters a-zA-Z. The document is
``<prob> problem <sol> solution <ans> answer`` (the official ``[222] problem [223] solution [224]
answer``), ``pq`` (problem sentences, then the question) or ``qp`` (question first).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import replace
from functools import lru_cache
from typing import Optional

import numpy as np

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.worlds.igsm.config import RAND, TEST_HASHES, TRAIN_HASHES, IGSMConfig, Param, get_world_config
from lmsci.worlds.igsm.draws import _rb, _sample
from lmsci.worlds.igsm.names import CHAINS, POOLS
from lmsci.worlds.igsm.problem import Problem, _cost, nx_ancestors, render
from lmsci.worlds.igsm.structure import (_choose, _extra_parents, _necessary_defs, _Reject, _sort, _structure,
                                         _template_hash, _unnecessary_defs, _values)


@lru_cache(maxsize=None)
def _width_weights(s: int, max_edge: int) -> tuple:
    """Cumulative weights of {2, 3, 4} for depth and widths: logits -(rel - {0.2, 0.5, 0.8})^2 with
    rel = (s - 1) / (max_edge - 1) (official ``gen_param_light``)."""
    rel = (s - 1) / max(1, max_edge - 1)
    w = [math.exp(-(rel - c) ** 2) for c in (0.2, 0.5, 0.8)]
    return (w[0], w[0] + w[1], w[0] + w[1] + w[2])


def _cum_pick(rnd: random.Random, cw: tuple) -> int:
    u = rnd.random() * cw[2]
    return 2 if u < cw[0] else (3 if u < cw[1] else 4)


class IGSMWorld:
    """Sampler of iGSM problems for one :class:`IGSMConfig`.

    ``sample(seed_or_rng, op=None, split="train")`` draws one problem (op drawn from ``op_dist`` when
    None, and each attempt's s from the light distribution given s >= op; a given ``op`` is made as the
    official ``IdGen(op=...)`` makes it, with s = op); ``stream(seed, split, op=None)`` yields problems for ever, deterministic per seed, in
    constant memory. Counters ``attempts`` / ``problems`` give the rejection rate.

    Raises (from ``sample``):
        ConfigError: ``op`` above ``max_op`` for the train split, above ``max_eval_op`` for test, or < 1;
            unknown ``split``.
    """

    MAX_ATTEMPTS = 2000

    def __init__(self, cfg: IGSMConfig | str = "igsm-med"):
        self.cfg = get_world_config(cfg) if isinstance(cfg, str) else cfg
        self.attempts = 0
        self.problems = 0

    # --- public -----------------------------------------------------------------------------------
    def draw_op(self, rnd: random.Random) -> int:
        """op per problem: ``light`` min(U{1..max_op}, U{1..max_op}) (P(op=k) = (2(max_op-k)+1)/max_op^2)
        or ``uniform``."""
        m = self.cfg.max_op
        if self.cfg.op_dist == "uniform":
            return rnd.randint(1, m)
        return min(rnd.randint(1, m), rnd.randint(1, m))

    def check_op(self, op: int, split: str) -> None:
        """Refuse an operation count that ``split`` cannot ask for.

        Args:
            op: solution operations asked for. split: ``"train"`` (``op <= max_op``) or ``"test"`` (``op <= max_eval_op``).

        Raises:
            UnknownNameError: ``split`` is not train or test.
            ConfigError: ``op`` is not an integer in ``[1, max_op]`` (train) or ``[1, max_eval_op]`` (test).
        """
        if split not in ("train", "test"):
            raise UnknownNameError("split", split, ["train", "test"])
        hi = self.cfg.max_op if split == "train" else self.cfg.max_eval_op
        if not isinstance(op, (int, np.integer)) or not 1 <= op <= hi:
            raise ConfigError("op", op, f"an integer in [1, {hi}] for split={split!r} of {self.cfg.name} "
                                        f"(max_op={self.cfg.max_op}, max_eval_op={self.cfg.max_eval_op})")

    def sample(self, rng=None, *, op: Optional[int] = None, split: str = "train") -> Problem:
        """One problem; ``rng`` is a ``random.Random`` or an int seed. See the class docstring."""
        if op is not None:
            self.check_op(op, split)
        elif split not in ("train", "test"):
            raise UnknownNameError("split", split, ["train", "test"])
        rnd = rng if isinstance(rng, random.Random) else random.Random(rng)
        target = op if op is not None else self.draw_op(rnd)
        hashes = TRAIN_HASHES if split == "train" else TEST_HASHES
        for attempt in range(1, self.MAX_ATTEMPTS + 1):
            self.attempts += 1
            try:
                p = self._attempt(rnd, target, op is not None, hashes)
            except _Reject:
                continue
            p.attempts = attempt
            self.problems += 1
            return p
        raise RuntimeError(f"iGSM sampler found no op={target} problem in {self.MAX_ATTEMPTS} attempts "
                           f"({self.cfg})")

    def stream(self, seed: int, split: str = "train", op: Optional[int] = None) -> Iterator[Problem]:
        """Problems for ever (op drawn per problem unless fixed), deterministic per ``seed``.
        With ``cfg.reask`` each problem is re-asked (:meth:`reask`)."""
        rnd = random.Random(seed)
        while True:
            p = self.sample(rnd, op=op, split=split)
            if self.cfg.reask:
                r = self.reask(p, rnd)
                if r is None:
                    continue
                p = r
            yield p

    @property
    def rejections_per_problem(self) -> float:
        """Rejected attempts per accepted problem so far (the generator's rejection-sampling overhead)."""
        return (self.attempts - self.problems) / max(1, self.problems)

    # --- one attempt (the official forward process) ------------------------------------------------
    #: structure draws per attempt before the attempt is given up (the official ``try_num``)
    STRUCTURE_TRIES = 1000

    def _shape(self, rnd: random.Random, target: int, fixed: bool) -> tuple:
        """The attempt's hyper-parameters (official ``gen_param_light``): s, n, m, d, w0, w1, p, e."""
        cfg = self.cfg
        if fixed:
            s = target
        else:
            # s = min of two U{1..max_op}, drawn afresh per attempt; an attempt with s < op never reaches
            # op (op <= s), so s is drawn given s >= op: the min of two U{op..max_op}
            span = cfg.max_op - target + 1
            s = target + min(_rb(rnd, span), _rb(rnd, span))
        n = 1 + max(_rb(rnd, s), _rb(rnd, s))
        m = n + _rb(rnd, s - n + 1)
        cw = _width_weights(s, cfg.max_edge)
        d = _cum_pick(rnd, cw)
        t0, t1 = _cum_pick(rnd, cw), _cum_pick(rnd, cw)
        w0, w1 = min(t0, t1), max(t0, t1)
        p_add = rnd.random()
        lo = (d - 1) * w0
        span = max(lo, cfg.max_edge) - lo + 1
        e = min(lo + min(_rb(rnd, span), _rb(rnd, span)), (d - 1) * w1 * w1)
        return s, n, m, d, w0, w1, p_add, e

    def _structure_and_order(self, rnd: random.Random, d: int, w0: int, w1: int, e: int, p_add: float, n: int,
                             m: int) -> tuple:
        """Draw a structure graph and the necessary parameters until they have a topological order (up to
        :attr:`STRUCTURE_TRIES` tries).

        Returns:
            ``(widths, children, preds, order, n_op_min)``: items per layer, each item's children, each chosen
            parameter's predecessors, the solution order of the necessary parameters, and the operation count
            of the taken operations alone.

        Raises:
            _Reject: no try gave an order.
        """
        for _ in range(self.STRUCTURE_TRIES):
            widths, children = _structure(rnd, d, w0, w1, e, p_add)
            chosen, n_op_min = _choose(rnd, d, widths, children, e, n, m)
            preds: dict = {}
            for a in chosen:
                if a[0] == 1:
                    _, i, j, k = a
                    ch = children[i][j]
                    preds[a] = [(0, i, j, x) for x in ch] + ([(1, i + 1, x, k) for x in ch] if k > i + 1 else [])
                else:
                    preds[a] = []
            order = _sort(rnd, chosen, preds)
            if order is not None:
                return widths, children, preds, order, n_op_min
        raise _Reject

    def _attempt(self, rnd: random.Random, target: int, fixed: bool, hashes) -> Problem:
        """One try at a problem with ``target`` operations and a template hash in ``hashes``: shape, structure,
        extra parents, definitions, hash check, unnecessary parameters, values, names, rendering.

        Raises:
            _Reject: this try cannot give such a problem (the caller draws again).
        """
        cfg = self.cfg
        s, n, m, d, w0, w1, p_add, e = self._shape(rnd, target, fixed)
        if s > target and min(m, e) > target:
            # exact shortcut: op <= s, and op = s unless op = n_op_min + (extra parents the order allows)
            # with n_op_min >= min(m, e) (the taken operations cover m, or every edge); so with s > op
            # and min(m, e) > op no structure of this attempt can reach op
            raise _Reject
        chain = cfg.chains[_rb(rnd, len(cfg.chains))]
        start = rnd.randint(0, 4 - d)
        layers = tuple(CHAINS[chain][start:start + d])
        widths, children, preds, order, n_op_min = self._structure_and_order(rnd, d, w0, w1, e, p_add, n, m)
        extra = _extra_parents(rnd, order, n_op_min, s, target)
        defs = _necessary_defs(rnd, order, preds, extra)
        h = _template_hash(order, defs, preds, d, e)
        if h not in hashes:
            raise _Reject
        known, pending = _unnecessary_defs(rnd, order, defs, d, widths, children)
        # values of every parameter: known ones in the order they became known, then the rest (abstract
        # parameters nothing uses), deepest first
        values = _values(known + [a for a, _ in pending], defs, children)
        names = [_sample(rnd, POOLS[c][_rb(rnd, 5)], w) for c, w in zip(layers, widths)]
        problem_order = [p for p in defs]
        rnd.shuffle(problem_order)
        prob = Problem(chain=chain, layers=layers, names=names, children=children, defs=defs,
                       problem_order=problem_order, question_param=order[-1], necessary=order, values=values,
                       symbols={}, sentences=[], question="", solution_sentences=[], op=target, template_hash=h,
                       fmt=self.cfg.fmt)
        render(prob, rnd)
        return prob

    def reask(self, problem: Problem, rng=None, op: Optional[int] = None) -> Optional[Problem]:
        """The same problem statement asked about another parameter (Part 2.1 ``reask``): same
        structure, definitions and numbers; a different question parameter, its own necessary set,
        solution and op. ``op`` restricts to questions with that op. Returns None if none fits."""
        rnd = rng if isinstance(rng, random.Random) else random.Random(rng)
        cands = [p for p in problem.all_params if p != problem.question_param]
        rnd.shuffle(cands)
        for q in cands:
            nec = nx_ancestors(problem, q)
            o = sum(_cost(problem, p) for p in nec)
            if op is not None and o != op:
                continue
            if o > self.cfg.max_eval_op:
                continue
            return _reasked(problem, q, nec, o, rnd)
        return None


def _reasked(problem: Problem, q: Param, nec: set, op: int, rnd: random.Random) -> Problem:
    indeg = {p: 0 for p in nec}
    succ: dict = {p: [] for p in nec}
    for p in nec:
        for u in problem.preds(p):
            if u != RAND:
                indeg[p] += 1
                succ[u].append(p)
    ready = sorted(p for p in nec if indeg[p] == 0)
    sol = []
    while ready:
        p = ready.pop(_rb(rnd, len(ready)))
        sol.append(p)
        for v in succ[p]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    new = replace(problem, question_param=q, necessary=sol, symbols={}, sentences=[], question="",
                  solution_sentences=[], op=op)
    new.__dict__.pop("graph", None)
    render(new, rnd, keep_problem_order=True)
    return new
