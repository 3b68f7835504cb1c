"""An iGSM problem: its definitions and expression trees, the :class:`Problem` (hidden structure, dependency graph,
text, probe positions) and the rendering of its sentences and detailed solution.

Source: Ye, Xu, Li, Allen-Zhu, "Physics of Language Models: Part 2.1, Grade-School Math and the Hidden Reasoning
Process", arXiv 2407.20311, Section 2 and App. B-C (official generator ``facebookresearch/iGSM``; text format
``detail_level = 0``) and the retry data of Part 2.2 (arXiv 2408.16293, ``id_retry_gen.py``). The generator that
draws problems is :mod:`lmsci.worlds.igsm.world`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.worlds.igsm.config import ANS, BACK, PROB, RAND, SOL, SYMBOLS, Param, check_retry_rate
from lmsci.worlds.igsm.draws import _rb

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
