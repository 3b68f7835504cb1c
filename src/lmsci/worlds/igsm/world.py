"""The iGSM world: hidden category structure, dependency graph, problems and detailed solutions.

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

import hashlib
import math
import random
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Literal, Optional

import numpy as np

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.worlds.igsm.names import CHAINS, POOLS

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


# ----------------------------------------------------------------------------------------------------
# definitions and expressions


@dataclass(frozen=True)
class Definition:
    """How an instance parameter is defined in the problem text.

    ``parents`` empty: the constant ``c``. Otherwise ``base`` = the parent (one), the sum of the
    parents (``op="sum"``, 2-4) or ``p0 - p1`` (``op="diff"``); then ``mod_op`` ``"add"`` gives
    ``c + base``, ``"mul"`` gives ``c * base``, ``None`` gives ``base``.
    """

    parents: tuple = ()
    op: Optional[str] = None
    mod_op: Optional[str] = None
    c: int = 0

    @property
    def cost(self) -> int:
        """Operations this definition costs in the solution: 1 for a copy or constant (at most one parent), else
        (number of parents - 1) plus 1 for a modifier (arXiv 2407.20311, Section 2, the official ``op`` count)."""
        k = len(self.parents)
        if k <= 1:
            return 1
        return (k - 1) + (1 if self.mod_op else 0)

    def evaluate(self, vals, mod: int = 23) -> int:
        """The value given the parents' values (``vals[p]`` for every parent)."""
        if not self.parents:
            return self.c % mod
        if self.op == "diff":
            base = vals[self.parents[0]] - vals[self.parents[1]]
        else:
            base = sum(vals[p] for p in self.parents)
        if self.mod_op == "add":
            base = self.c + base
        elif self.mod_op == "mul":
            base = self.c * base
        return base % mod


def _left_sum(terms: list):
    e = terms[0]
    for t in terms[1:]:
        e = ("bin", "+", e, t)
    return e


def inst_expr(d: Definition):
    """Expression tree of an instance parameter (``("num", v) | ("ref", p) | ("bin", op, l, r)``),
    binarised left to right as the official ``Expression.binarify``."""
    if not d.parents:
        return ("num", d.c)
    refs = [("ref", p) for p in d.parents]
    if len(refs) == 1:
        base = refs[0]
    elif d.op == "diff":
        base = ("bin", "-", refs[0], refs[1])
    else:
        base = _left_sum(refs)
    if d.mod_op == "add":
        return ("bin", "+", ("num", d.c), base)
    if d.mod_op == "mul":
        return ("bin", "*", ("num", d.c), base)
    return base


# ----------------------------------------------------------------------------------------------------
# the problem


@dataclass
class Problem:
    """One iGSM problem with its hidden structure and error-free solution.

    Attributes:
        chain, layers: the category chain and the ``d`` category names used (top first).
        names: ``names[i][j]`` item j of layer i.
        children: ``children[i][j]`` sorted child indices (layer i+1) of item (i, j).
        defs: instance parameter -> :class:`Definition`.
        problem_order: instance parameters in the order of the problem's sentences.
        question_param: the parameter asked for; ``necessary``: the solution's parameters in order.
        values: every parameter -> its value mod 23.
        symbols: necessary parameter -> its symbol in the solution.
        sentences / question / solution_sentences: the rendered text pieces (no final ``.``).
        op: operations of the solution; template_hash: sketch hash mod 23; attempts: sampler attempts
            (1 + rejections) spent on this problem; fmt: its default format.
    """

    chain: str
    layers: tuple
    names: list
    children: list
    defs: dict
    problem_order: list
    question_param: Param
    necessary: list
    values: dict
    symbols: dict
    sentences: list
    question: str
    solution_sentences: list
    op: int
    template_hash: int
    attempts: int = 1
    fmt: str = "pq"
    mod: int = 23

    # --- names -------------------------------------------------------------------------------------
    def mention(self, p: Param) -> str:
        """The parameter as the problem text names it (``each X's Y``)."""
        l, i, j, k = p
        return f"each {self.names[i][j]}'s {self.names[i + 1][k] if l == 0 else self.layers[k]}"

    def param_name(self, p: Param) -> str:
        """The parameter as the solution names it (``X's Y``)."""
        l, i, j, k = p
        return f"{self.names[i][j]}'s {self.names[i + 1][k] if l == 0 else self.layers[k]}"

    @cached_property
    def all_params(self) -> list:
        """Every parameter of the structure: instance ones (edges), then abstract ones."""
        d = len(self.layers)
        inst = [(0, i, j, x) for i in range(d - 1) for j in range(len(self.names[i])) for x in self.children[i][j]]
        abst = [(1, i, j, k) for i in range(d - 1) for j in range(len(self.names[i])) for k in range(i + 1, d)]
        return inst + abst

    @cached_property
    def name_to_param(self) -> dict:
        """``{English name: parameter}`` over every parameter of the problem (instance and abstract)."""
        return {self.param_name(p): p for p in self.all_params}

    # --- graph -------------------------------------------------------------------------------------
    def preds(self, p: Param) -> tuple:
        """Direct dependencies of ``p`` (the random source ``RAND`` for constants and modifiers)."""
        if p[0] == 0:
            d = self.defs[p]
            return (tuple(d.parents) + ((RAND,) if (d.mod_op or not d.parents) else ()))
        _, i, j, k = p
        ch = self.children[i][j]
        out = [(0, i, j, x) for x in ch]
        if k > i + 1:
            out += [(1, i + 1, x, k) for x in ch]
        return tuple(out)

    @cached_property
    def graph(self):
        """Dependency graph (``networkx.DiGraph``, edge u -> v: v depends on u) over every parameter
        and the random source ``(-1, 0, 0, 0)`` (the official ``whole_template``)."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_node(RAND)
        g.add_nodes_from(self.all_params)
        for p in self.all_params:
            for q in self.preds(p):
                g.add_edge(q, p)
        return g

    @cached_property
    def structure(self):
        """Structure graph (``networkx.DiGraph``) over items ``(i, j)``, edges parent -> child."""
        import networkx as nx

        g = nx.DiGraph()
        for i, row in enumerate(self.names):
            for j, n in enumerate(row):
                g.add_node((i, j), name=n, layer=self.layers[i])
        for i, row in enumerate(self.children):
            for j, ch in enumerate(row):
                for x in ch:
                    g.add_edge((i, j), (i + 1, x))
        return g

    @property
    def answer(self) -> int:
        """The question parameter's value (an integer mod 23)."""
        return self.values[self.question_param]

    @property
    def n_instance_params(self) -> int:
        """ip: the number of instance parameters (edges)."""
        return len(self.defs)

    # --- text --------------------------------------------------------------------------------------
    @property
    def solution(self) -> str:
        """The error-free solution text (leading space, every sentence ending in ``.``)."""
        return "".join(" " + s + "." for s in self.solution_sentences)

    def problem_text(self, fmt: Optional[str] = None) -> str:
        """Problem sentences and question in format ``fmt`` (``pq`` or ``qp``; default the problem's)."""
        fmt = fmt or self.fmt
        body = "".join(" " + s + "." for s in self.sentences)
        if fmt == "pq":
            return body + " " + self.question
        if fmt == "qp":
            return " " + self.question + body
        raise UnknownNameError("fmt", fmt, ["pq", "qp"])

    def prompt(self, fmt: Optional[str] = None) -> str:
        """What a model continues: ``<prob> problem <sol>``."""
        return PROB + self.problem_text(fmt) + SOL

    def text(self, fmt: Optional[str] = None, retry_rate: float = 0.0, rng=None,
             retry_weak: bool = False) -> tuple[str, np.ndarray]:
        """The training document ``<prob> problem <sol> solution <ans> answer`` and its mistake mask.

        With ``retry_rate = q > 0`` (Part 2.2, arXiv 2408.16293, ``id_retry_gen.py``) each correct
        solution sentence is preceded by wrong steps ``Define <param> as [BACK].``: one with
        probability q, a second with q^2, ... (q/(1-q) per step on average). The wrong parameter is
        one not yet computed and not yet computable (``can_next = 0``), or with ``retry_weak`` a
        future necessary one. ``rng``: a ``random.Random`` or seed (required when q > 0).

        Returns:
            ``(text, mask)``: ``mask`` bool ``[len(text)]`` is True on the characters of each mistake
            ``" Define <param> as"`` (the `` [BACK].`` that retracts it is not masked), so a trainer
            can drop the loss on mistakes (label masking) with :meth:`IGSMTokenizer.token_mask`.

        Raises:
            ConfigError: q outside [0, 1), or q > 0 without ``rng``.
        """
        q = check_retry_rate(retry_rate)
        head = self.prompt(fmt)
        if q == 0.0:
            t = head + self.solution + ANS + f" {self.answer}"
            return t, np.zeros(len(t), dtype=bool)
        if rng is None:
            raise ConfigError("rng", rng, "a random.Random or an int seed when retry_rate > 0")
        rnd = rng if isinstance(rng, random.Random) else random.Random(rng)
        parts, spans, pos = [head], [], len(head)
        known: set = set()
        nec = self.necessary
        allp = self.all_params
        for t, s in enumerate(self.solution_sentences):
            if rnd.random() < q:
                if retry_weak:
                    pool = nec[t + 1:]
                else:
                    pool = [p for p in allp if p not in known
                            and not all(u in known or u == RAND for u in self.preds(p))]
                while pool:
                    w = " Define " + self.param_name(pool[_rb(rnd, len(pool))]) + " as"
                    spans.append((pos, pos + len(w)))
                    parts.append(w + " " + BACK + ".")
                    pos += len(w) + len(BACK) + 2
                    if rnd.random() >= q:
                        break
            sent = " " + s + "."
            parts.append(sent)
            pos += len(sent)
            known.add(nec[t])
        parts.append(ANS + f" {self.answer}")
        text = "".join(parts)
        mask = np.zeros(len(text), dtype=bool)
        for a, b in spans:
            mask[a:b] = True
        return text, mask

    # --- positions for probes ---------------------------------------------------------------------
    def positions(self, fmt: Optional[str] = None) -> dict:
        """Character positions in ``text(fmt)[0]`` (a probe reads the prefix ``text[:pos]``):
        ``end_problem`` (after the problem sentences, before the question in pq), ``end_question``
        (after the question), ``sol_start`` (after ``<sol>``), ``steps[t]`` (after solution sentence
        t, t = 0..len(necessary)-1)."""
        fmt = fmt or self.fmt
        body = "".join(" " + s + "." for s in self.sentences)
        qtxt = " " + self.question
        n0 = len(PROB)
        if fmt == "pq":
            end_problem, end_question = n0 + len(body), n0 + len(body) + len(qtxt)
        else:
            end_question, end_problem = n0 + len(qtxt), n0 + len(qtxt) + len(body)
        sol_start = n0 + len(body) + len(qtxt) + len(SOL)
        steps, pos = [], sol_start
        for s in self.solution_sentences:
            pos += len(s) + 2
            steps.append(pos)
        return {"end_problem": end_problem, "end_question": end_question, "sol_start": sol_start, "steps": steps}


# ----------------------------------------------------------------------------------------------------
# the sampler


class _Reject(Exception):
    pass


def _rb(rnd: random.Random, n: int) -> int:
    """Uniform integer in [0, n) (``random()``-based: ~3x faster than ``randrange``; bias < 2^-45)."""
    return int(rnd.random() * n)


def _sample(rnd: random.Random, pop, k: int) -> list:
    """k distinct elements of ``pop`` in random order (partial Fisher-Yates with :func:`_rb`; same
    distribution as ``random.sample``, ~3x faster on the short lists here)."""
    a = list(pop)
    n = len(a)
    for i in range(k):
        j = i + int(rnd.random() * (n - i))
        a[i], a[j] = a[j], a[i]
    return a[:k]


def _pick(rnd: random.Random, weights) -> int:
    """Index drawn with probability proportional to ``weights``."""
    u = rnd.random() * sum(weights)
    for i, w in enumerate(weights):
        u -= w
        if u < 0:
            return i
    return len(weights) - 1


def _definition(rnd: random.Random, parents: tuple, use_rand: bool) -> Definition:
    """An instance parameter's definition from its parents and whether it uses the random source: a
    constant (the source alone), else the parent / sum or difference of two (1/2 each) / sum of 3-4,
    with the source "c more than" or "c times as much as" that (1/2 each; c in 1..22 for times)."""
    k = len(parents)
    if not k:
        return Definition((), None, None, _rb(rnd, 23))
    op_ = ("diff" if rnd.random() < 0.5 else "sum") if k == 2 else ("sum" if k > 2 else None)
    if not use_rand:
        return Definition(parents, op_, None, 0)
    if rnd.random() < 0.5:
        return Definition(parents, op_, "add", _rb(rnd, 23))
    return Definition(parents, op_, "mul", 1 + _rb(rnd, 22))


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

    @staticmethod
    def _structure(rnd: random.Random, d: int, w0: int, w1: int, e: int, p_add: float):
        """Widths and children (official ``Graph.init``): widths start at w0 and grow by one (a random
        layer below w1) while fewer than e edges fit, else with probability p until the lower layers alone
        need e edges; every item below the top gets one random parent, then e - (those) random extra
        edges. An item may have no child."""
        widths = [w0] * d
        while True:
            if sum(widths[i] * widths[i + 1] for i in range(d - 1)) < e:
                grow = True
            elif sum(widths) - widths[0] == e:
                break
            else:
                grow = rnd.random() < p_add
                if not grow:
                    break
            open_ = [i for i in range(d) if widths[i] < w1]
            if not open_:
                break
            widths[open_[_rb(rnd, len(open_))]] += 1
        adj = [[[] for _ in range(widths[i])] for i in range(d - 1)]
        for i in range(d - 1):
            row = adj[i]
            for x in range(widths[i + 1]):
                row[_rb(rnd, widths[i])].append(x)
        extra = e - (sum(widths) - widths[0])
        if extra > 0:
            free = [(i, j, x) for i in range(d - 1) for j in range(widths[i]) for x in range(widths[i + 1])
                    if x not in adj[i][j]]
            for i, j, x in _sample(rnd, free, extra):
                adj[i][j].append(x)
        return widths, [[sorted(ch) for ch in row] for row in adj]

    @staticmethod
    def _choose(rnd: random.Random, d: int, widths: list, children: list, e: int, n: int, m: int):
        """The necessary parameters before the dependency design (official ``choose_param``): abstract
        parameters are taken, lowest layer span first, while their operations (with the instance
        parameters they need) fit in n; then m - n more instance parameters at random. Returns the
        taken parameters and their operations (``n_op_min``)."""
        # abstract parameters not taken, by layer span k - i (dicts as ordered sets)
        inter = [{} for _ in range(d)]
        remain = {}
        total = e
        for i in range(d - 1):
            for j, ch in enumerate(children[i]):
                for k in range(i + 1, d):
                    inter[k - i][(1, i, j, k)] = None
                for x in ch:
                    remain[(0, i, j, x)] = None
                c = len(ch)
                total += max(2 * c - 1, 0) * (d - i - 2) + (c - 1 if c > 1 else c)
        n = min(n, total)
        n_fix = m - n
        chosen: list = []

        def take(a, ti: set, te: set) -> int:
            _, i, j, k = a
            ti.add(a)
            ch = children[i][j]
            cnt = 0
            if k == i + 1:
                for x in ch:
                    q = (0, i, j, x)
                    if q in remain and q not in te:
                        te.add(q)
                        cnt += 1
                return cnt + (len(ch) - 1 if len(ch) > 1 else 1)
            below = inter[k - i - 1]
            for x in ch:
                b = (1, i + 1, x, k)
                if b in below and b not in ti:
                    cnt += take(b, ti, te)
                q = (0, i, j, x)
                if q in remain and q not in te:
                    te.add(q)
                    cnt += 1
            return cnt + max(2 * len(ch) - 1, 1)

        def apply(ti, te):
            for a in ti:
                del inter[a[3] - a[1]][a]
            for q in te:
                del remain[q]
            chosen.extend(ti)
            chosen.extend(te)

        lowest, highest = 1, d - 1
        while n > 0:
            prev = None
            for diff in range(1, d):
                ts = inter[diff]
                if not ts:
                    if diff == lowest:
                        lowest += 1
                    elif diff == highest:
                        highest -= 1
                    continue
                ti: set = set()
                te: set = set()
                ts = list(ts)
                cnt = take(ts[_rb(rnd, len(ts))], ti, te)
                if diff == lowest and cnt > n:
                    k = min(n + n_fix, len(remain))
                    chosen.extend(_sample(rnd, remain, k))
                    return chosen, m - n - n_fix + k
                if cnt <= n:
                    if diff < highest:
                        prev = (ti, te, cnt)
                    else:
                        apply(ti, te)
                        n -= cnt
                        break
                else:
                    apply(prev[0], prev[1])
                    n -= prev[2]
                    break
        k = min(n_fix, len(remain))
        chosen.extend(_sample(rnd, remain, k))
        return chosen, m - n_fix + k

    @staticmethod
    def _sort(rnd: random.Random, chosen: list, preds: dict):
        """The solution order (official ``reasonable_sort``), built backwards from the question (a random
        parameter nothing taken depends on): each next step is a parameter every later one is done with
        and that a later one uses; an instance parameter, when placed, uses (with probability p0, or when
        the walk would stop) one more not-yet-placed parameter, weighted towards abstract ones and ones
        not yet used (softmax bias p1 = |N(0, 1)|). ``preds`` gains those uses. Returns the order (question
        last) or None when the walk stops with parameters left (the attempt redraws the structure)."""
        p0 = rnd.random()
        p1 = abs(rnd.gauss(0.0, 1.0))
        wts = (1.0, math.exp(p1), math.exp(2 * p1))
        outdeg = dict.fromkeys(chosen, 0)
        for a in chosen:
            for u in preds[a]:
                outdeg[u] += 1
        zero = [a for a in chosen if outdeg[a] == 0]
        zset = set(zero)
        remain = dict.fromkeys(chosen)
        stack: list = []
        sset: set = set()
        out = []
        pool = zero
        while remain:
            if out:
                pool = [a for a in zero if a in sset]
                if not pool:
                    return None
            q = pool[_rb(rnd, len(pool))]
            out.append(q)
            del remain[q]
            zero.remove(q)
            zset.discard(q)
            for u in preds[q]:
                outdeg[u] -= 1
                if outdeg[u] == 0:
                    zero.append(u)
                    zset.add(u)
            if q in sset:
                stack.remove(q)
                sset.discard(q)
            if q[0] == 0:
                need = not any(u in zset for u in stack)
                if (rnd.random() < p0 or need) and remain:
                    src = zero if need else list(remain)
                    u = src[_pick(rnd, [wts[(u[0] == 1) + (u not in sset)] for u in src])]
                    preds[q].append(u)
                    if u not in sset:
                        stack.append(u)
                        sset.add(u)
            else:
                for u in preds[q]:
                    if u not in sset:
                        stack.append(u)
                        sset.add(u)
        out.reverse()
        return out

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
            widths, children = self._structure(rnd, d, w0, w1, e, p_add)
            chosen, n_op_min = self._choose(rnd, d, widths, children, e, n, m)
            preds: dict = {}
            for a in chosen:
                if a[0] == 1:
                    _, i, j, k = a
                    ch = children[i][j]
                    preds[a] = [(0, i, j, x) for x in ch] + ([(1, i + 1, x, k) for x in ch] if k > i + 1 else [])
                else:
                    preds[a] = []
            order = self._sort(rnd, chosen, preds)
            if order is not None:
                return widths, children, preds, order, n_op_min
        raise _Reject

    @staticmethod
    def _extra_parents(rnd: random.Random, order: list, n_op_min: int, s: int, target: int) -> list:
        """Extra parents per solution position (official ``design``): as many as ``s`` asks for and the order
        allows (an instance parameter at position t may use up to ``min(t + 1, 4)`` earlier parameters and
        the random source), so that the operation count ``op`` is ``target``.

        Raises:
            _Reject: this structure's ``op`` is not ``target``.
        """
        cap = [max(min(t + 1, 4) - 2, 0) if q[0] == 0 else 0 for t, q in enumerate(order)]
        op = n_op_min + min(max(n_op_min, s) - n_op_min, sum(cap))
        if op != target:
            raise _Reject
        extra = [0] * len(order)
        addable = [t for t, c in enumerate(cap) if c > 0]
        for _ in range(op - n_op_min):
            t = addable[_rb(rnd, len(addable))]
            extra[t] += 1
            if extra[t] == cap[t]:
                addable.remove(t)
        return extra

    @staticmethod
    def _necessary_defs(rnd: random.Random, order: list, preds: dict, extra: list) -> dict:
        """Definitions of the necessary instance parameters (``{param: Definition}``), in solution order."""
        defs: dict = {}
        for t, q in enumerate(order):
            if q[0] != 0:
                continue
            have = preds[q]  # at most one, from the order walk
            k = (1 if rnd.random() < 0.5 else 2) if extra[t] == 0 else extra[t] + 2
            k = min(k, t + 1, 4)
            if k != t + 1:
                pool = [RAND] + [u for u in order[:t] if u not in have]
                k -= len(have)
                use = list(have)
                if k > 0 and rnd.random() < 0.5:
                    k -= 1
                    use.append(RAND)
                    pool.pop(0)
                use += _sample(rnd, pool, k)
            else:
                use = list(have) + [u for u in [RAND] + order[:t] if u not in have]
            defs[q] = _definition(rnd, tuple(u for u in use if u != RAND), RAND in use)
        return defs

    @staticmethod
    def _template_hash(order: list, defs: dict, preds: dict, d: int, e: int) -> int:
        """The template hash in ``[0, 23)`` of the solution sketch (no names, numbers or symbols)."""
        idx = {p: t for t, p in enumerate(order)}
        sk = []
        for p in order:
            if p[0] == 0:
                df = defs[p]
                sk.append((0, df.op, df.mod_op, tuple(idx[u] for u in df.parents)))
            else:
                sk.append((1, p[3] - p[1], tuple(idx[u] for u in preds[p])))
        sk.append((d, e))
        return int.from_bytes(hashlib.blake2b(repr(sk).encode(), digest_size=8).digest(), "little") % 23

    @staticmethod
    def _unnecessary_defs(rnd: random.Random, order: list, defs: dict, d: int, widths: list,
                          children: list) -> tuple[list, list]:
        """Define the unnecessary instance parameters into ``defs`` (official ``design_unused``), in random
        order: with probability 1/2 "independent" (uses only earlier independent unnecessary ones), else any
        parameter already known (necessary, defined, or an abstract one whose terms are all known); 1-4 terms
        drawn geometrically (p = 1/2), one of them the random source with probability 1/2.

        Returns:
            ``(known, pending)``: parameters in the order they became known, and the abstract parameters
            never known (``(param, terms)``, deepest item first).
        """
        known = list(order)
        kset = set(order)
        pending = []  # (abstract parameter, its terms) not yet known, deepest item first
        for i in range(d - 2, -1, -1):
            for j in range(widths[i]):
                ch = children[i][j]
                for k in range(i + 1, d):
                    if (1, i, j, k) not in kset:
                        pending.append(((1, i, j, k), [(0, i, j, x) for x in ch]
                                        + ([(1, i + 1, x, k) for x in ch] if k > i + 1 else [])))

        def refresh():
            left = []
            for a, ds in pending:
                for u in ds:
                    if u not in kset:
                        left.append((a, ds))
                        break
                else:
                    known.append(a)
                    kset.add(a)
            pending[:] = left

        refresh()
        unused = [(0, i, j, x) for i in range(d - 1) for j in range(widths[i]) for x in children[i][j]
                  if (0, i, j, x) not in kset]
        rnd.shuffle(unused)
        independent: list = []
        for p in unused:
            indep = rnd.random() < 0.5
            pool = independent if indep else known
            mx = min(len(pool) + 1, 4)
            k = 1
            while k < mx and rnd.random() < 0.5:
                k += 1
            if k == len(pool) + 1:
                use_rand, use = True, tuple(pool)
            else:
                use_rand = rnd.random() < 0.5
                use = tuple(_sample(rnd, pool, k - 1 if use_rand else k))
            defs[p] = _definition(rnd, use, use_rand)
            if indep:
                independent.append(p)
            known.append(p)
            kset.add(p)
            refresh()
        return known, pending

    @staticmethod
    def _values(params: list, defs: dict, children: list) -> dict:
        """Values mod 23 of ``params`` computed in that order (each one's terms come earlier): an instance
        parameter by its definition, an abstract one as the sum over its item's children."""
        values: dict = {}
        for p in params:
            if p[0] == 0:
                values[p] = defs[p].evaluate(values)
            else:
                _, i, j, k = p
                ch = children[i][j]
                if k == i + 1:
                    values[p] = sum(values[(0, i, j, x)] for x in ch) % 23
                else:
                    values[p] = sum(values[(0, i, j, x)] * values[(1, i + 1, x, k)] for x in ch) % 23
        return values

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
        extra = self._extra_parents(rnd, order, n_op_min, s, target)
        defs = self._necessary_defs(rnd, order, preds, extra)
        h = self._template_hash(order, defs, preds, d, e)
        if h not in hashes:
            raise _Reject
        known, pending = self._unnecessary_defs(rnd, order, defs, d, widths, children)
        # values of every parameter: known ones in the order they became known, then the rest (abstract
        # parameters nothing uses), deepest first
        values = self._values(known + [a for a, _ in pending], defs, children)
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


def _cost(problem: Problem, p: Param) -> int:
    if p[0] == 0:
        return problem.defs[p].cost
    _, i, j, k = p
    c = len(problem.children[i][j])
    return max(1, c - 1) if k == i + 1 else max(1, 2 * c - 1)  # official op_num: 1 when in-degree <= 2


def nx_ancestors(problem: Problem, q: Param) -> set:
    """``q`` and every parameter it depends on (without the random source)."""
    out, stack = {q}, [q]
    while stack:
        p = stack.pop()
        for u in problem.preds(p):
            if u != RAND and u not in out:
                out.add(u)
                stack.append(u)
    return out


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


# ----------------------------------------------------------------------------------------------------
# rendering


def abstract_expr(problem: Problem, p: Param):
    """Expression tree of abstract parameter ``p``: the sum over the item's children (times each child's
    own count when ``k > i + 1``); ``("num", 0)`` for an item without children (the official generator
    and ours make such items: "Define Goat Cheese's Ingredient as a; so a = 0")."""
    _, i, j, k = p
    ch = problem.children[i][j]
    if not ch:
        return ("num", 0)
    if k == i + 1:
        terms = [("ref", (0, i, j, x)) for x in ch]
    else:
        terms = [("bin", "*", ("ref", (0, i, j, x)), ("ref", (1, i + 1, x, k))) for x in ch]
    return _left_sum(terms)


def param_expr(problem: Problem, p: Param):
    """Expression tree of parameter ``p`` (see :func:`inst_expr`)."""
    return inst_expr(problem.defs[p]) if p[0] == 0 else abstract_expr(problem, p)


def _apply(op: str, a: int, b: int) -> int:
    return (a + b) % 23 if op == "+" else ((a - b) % 23 if op == "-" else (a * b) % 23)


def solution_steps(problem: Problem, syms: list, vals: dict,
                   intermediate: Callable[[str, int, int], int] | None = None,
                   params: list | None = None) -> tuple[dict, list]:
    """The solution's step sentences of ``problem`` (no final ``.``), one per necessary parameter in order:
    ``Define <param> as <sym>; [<tmp> = x op y = vx op vy = r; ...] so <sym> = ...``, symbols taken from ``syms``.

    Args:
        problem: the problem (its ``necessary`` order and expressions, :func:`param_expr`).
        syms: the symbols, one per step and intermediate result, in order of use.
        vals: a value per parameter of the steps, as the steps show them.
        intermediate: None (the world's solution): every result is computed mod 23 from the values shown and must
            equal ``vals`` (AssertionError otherwise); or ``intermediate(op, a, b) -> int``, an altered solution
            (a null arm's training text): intermediate results come from it, a step's result shows ``vals[p]``, and a
            copy step writes the value it copies into ``vals``.
        params: the parameters of the steps, in order, each after every parameter it uses (None: the shortest
            solution, ``problem.necessary``; :func:`lmsci.worlds.igsm.brute.brute_force_order` for the brute-force
            one).

    Returns:
        ``(symbols, sentences)``: the symbol of each step's parameter and the step sentences.
    """
    exact = intermediate is None
    combine = _apply if exact else intermediate
    si, symbols, out = 0, {}, []
    for p in (problem.necessary if params is None else params):
        s = syms[si]
        si += 1
        symbols[p] = s
        lines: list = []

        def operand(e):
            nonlocal si
            if e[0] == "num":
                return str(e[1]), e[1]
            if e[0] == "ref":
                return symbols[e[1]], vals[e[1]]
            (n1, v1), (n2, v2) = operand(e[2]), operand(e[3])
            r = combine(e[1], v1, v2)
            t = syms[si]
            si += 1
            lines.append(f"{t} = {n1} {e[1]} {n2} = {v1} {e[1]} {v2} = {r}")
            return t, r

        e = param_expr(problem, p)
        if e[0] == "num":
            final = f"so {s} = {e[1] if exact else vals[p]}"
        elif e[0] == "ref":
            final = f"so {s} = {symbols[e[1]]} = {vals[e[1]]}"
            if not exact:
                vals[p] = vals[e[1]]  # a copy step keeps the value it copies (the format says so)
        else:
            (n1, v1), (n2, v2) = operand(e[2]), operand(e[3])
            r = _apply(e[1], v1, v2) if exact else vals[p]
            assert r == vals[p], (p, r, vals[p])
            final = f"so {s} = {n1} {e[1]} {n2} = {v1} {e[1]} {v2} = {r}"
        lines.append(final)
        out.append(f"Define {problem.param_name(p)} as {s}; " + "; ".join(lines))
    return symbols, out


def render(problem: Problem, rnd: random.Random, keep_problem_order: bool = False) -> None:
    """Fill ``sentences``, ``question``, ``symbols`` and ``solution_sentences`` of ``problem``."""
    m = problem.mention
    if not problem.sentences:
        sents = []
        for p in problem.problem_order:
            df = problem.defs[p]
            if not df.parents:
                sents.append(f"The number of {m(p)} equals {df.c}")
                continue
            ms = [m(u) for u in df.parents]
            if len(ms) == 1:
                base = ms[0]
            elif df.op == "diff":
                base = f"the difference of {ms[0]} and {ms[1]}"
            elif len(ms) == 2:
                base = f"the sum of {ms[0]} and {ms[1]}"
            else:
                base = "the sum of " + ", ".join(ms[:-1]) + " and " + ms[-1]
            if df.mod_op == "add":
                base = f"{df.c} more than {base}"
            elif df.mod_op == "mul":
                base = f"{df.c} times as much as {base}"
            sents.append(f"The number of {m(p)} equals {base}")
        problem.sentences = sents
    l, i, j, k = problem.question_param
    what = problem.names[i + 1][k] if l == 0 else problem.layers[k]
    problem.question = f"How many {what} does {problem.names[i][j]} have?"

    syms = rnd.sample(SYMBOLS, min(len(SYMBOLS), problem.op))
    symbols, out = solution_steps(problem, syms, problem.values)
    problem.symbols = symbols
    problem.solution_sentences = out
