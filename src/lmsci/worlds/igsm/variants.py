"""Variants of an iGSM problem for robustness evaluations (GSM-Symbolic and GSM-NoOp in the iGSM world).

* :func:`reinstantiate` (GSM-Symbolic, Mirzadeh et al. arXiv 2410.05229, Section 3: one template,
  many instantiations): the same structure, dependency design, question and solution template (same
  op and template hash), with new item names and new numbers (and so new values and symbols).
* :func:`add_noop` (GSM-NoOp, same paper, Section 4.4: "seemingly relevant but ultimately
  inconsequential" statements): new sentences that mention parameters of the problem and numbers but
  change nothing needed for the answer. They define the parameters of a new top-level item (its
  "each X's Y" counts for existing second-level items Y) in terms of existing parameters and
  constants. A new top item changes no existing item's children, so every existing parameter keeps
  its value; the question, the necessary set, the solution and the answer are unchanged (the new
  parameters are unneeded).
* :func:`add_repeats` (the null of GSM-NoOp here): ``n`` sentences that repeat sentences already in the problem,
  inserted at random places: the problem grows by as many sentences as :func:`add_noop` adds, but no new
  parameter, number or item appears (nothing irrelevant is added; the text is only longer and repeats itself).
"""

from __future__ import annotations

import random
from dataclasses import replace

from lmsci.errors import ConfigError
from lmsci.worlds.igsm.names import POOLS
from lmsci.worlds.igsm.problem import Definition, Problem, render


def _rng(rng) -> random.Random:
    return rng if isinstance(rng, random.Random) else random.Random(rng)


def compute_values(problem: Problem) -> dict:
    """Every parameter's value (mod 23) from the definitions and the structure."""
    vals: dict = {}

    def val(p):
        if p in vals:
            return vals[p]
        if p[0] == 0:
            df = problem.defs[p]
            for u in df.parents:
                val(u)
            v = df.evaluate(vals)
        else:
            _, i, j, k = p
            ch = problem.children[i][j]
            if k == i + 1:
                v = sum(val((0, i, j, x)) for x in ch) % 23
            else:
                v = sum(val((0, i, j, x)) * val((1, i + 1, x, k)) for x in ch) % 23
        vals[p] = v
        return v

    for p in problem.all_params:
        val(p)
    return vals


def reinstantiate(problem: Problem, rng=None, names: bool = True, numbers: bool = True) -> Problem:
    """The same solution template with new item names (``names``) and/or new constants (``numbers``).

    Returns a new :class:`Problem` with the same ``op``, ``template_hash``, question parameter and
    necessary parameters (in the same order); its text, values and answer are re-derived.
    """
    rnd = _rng(rng)
    new_names = problem.names
    if names:
        new_names = [rnd.sample(POOLS[c][rnd.randrange(5)], len(row)) for c, row in zip(problem.layers, problem.names)]
    defs = problem.defs
    if numbers:
        defs = {p: replace(df, c=rnd.randint(1, 22) if df.mod_op == "mul" else rnd.randint(0, 22))
                for p, df in problem.defs.items()}
    new = replace(problem, names=new_names, defs=defs, values={}, symbols={}, sentences=[], question="",
                  solution_sentences=[])
    new.values = compute_values(new)
    render(new, rnd)
    return new


def add_noop(problem: Problem, rng=None, n_sentences: int = 2) -> Problem:
    """``problem`` with ``n_sentences`` inconsequential sentences inserted at random places.

    Each sentence defines "each <new top item>'s <existing second-level item>" as a constant, a
    multiple or an offset of one to three existing parameters (see the module docstring). Raises
    ConfigError for ``n_sentences`` < 1 or when the top layer's name pool is exhausted.
    """
    if not isinstance(n_sentences, int) or n_sentences < 1:
        raise ConfigError("n_sentences", n_sentences, "an integer >= 1")
    rnd = _rng(rng)
    old_params = problem.all_params
    used = {n for row in problem.names for n in row}
    head_pool = [n for pool in POOLS[problem.layers[0]] for n in pool if n not in used]
    same = [n for n in head_pool if n.split()[-1] == problem.names[0][0].split()[-1]]
    names = [list(r) for r in problem.names]
    children = [[list(c) for c in row] for row in problem.children]
    w1 = len(names[1])
    new_edges = []
    while len(new_edges) < n_sentences:
        pool = [n for n in (same or head_pool) if n not in names[0]] or [n for n in head_pool if n not in names[0]]
        if not pool:
            raise ConfigError("n_sentences", n_sentences, "fewer no-op sentences (the top layer's names ran out)")
        j = len(names[0])
        names[0].append(pool[rnd.randrange(len(pool))])
        kids = sorted(rnd.sample(range(w1), min(w1, n_sentences - len(new_edges))))
        children[0].append(kids)
        new_edges += [(0, 0, j, x) for x in kids]
    defs = dict(problem.defs)
    for p in new_edges:
        k = rnd.choice((0, 1, 1, 2, 3))
        parents = tuple(rnd.sample(old_params, min(k, len(old_params))))
        mod_op = None if not parents or rnd.random() < 0.4 else rnd.choice(("add", "mul"))
        op_ = ("diff" if rnd.random() < 0.5 else "sum") if len(parents) == 2 else ("sum" if len(parents) > 2 else None)
        defs[p] = Definition(parents, op_, mod_op, rnd.randint(1, 22) if mod_op == "mul" else rnd.randint(0, 22))
    order = list(problem.problem_order)
    for p in new_edges:
        order.insert(rnd.randrange(len(order) + 1), p)
    new = replace(problem, names=names, children=children, defs=defs, problem_order=order, sentences=[])
    new.values = compute_values(new)
    assert all(new.values[p] == problem.values[p] for p in old_params)
    keep = (new.symbols, new.solution_sentences)
    render(new, rnd)
    new.symbols, new.solution_sentences = keep  # the solution is unchanged, symbols included
    return new


def add_repeats(problem: Problem, rng=None, n_sentences: int = 2) -> Problem:
    """``problem`` with ``n_sentences`` copies of its own sentences inserted at random places.

    The copied sentences are drawn uniformly without replacement (with replacement when the problem has fewer
    sentences); each copy goes to a uniform random place among the problem's sentences (before, between or after
    them; the question stays where it is). ``problem_order`` repeats the copied parameter at the same place, so it still lists the parameter
    of each sentence. The structure, definitions, values, question, solution and answer are unchanged.

    Raises:
        ConfigError: ``n_sentences`` < 1.
    """
    if not isinstance(n_sentences, int) or n_sentences < 1:
        raise ConfigError("n_sentences", n_sentences, "an integer >= 1")
    rnd = _rng(rng)
    n = len(problem.sentences)
    picks = rnd.sample(range(n), n_sentences) if n_sentences <= n else [rnd.randrange(n) for _ in range(n_sentences)]
    sents, order = list(problem.sentences), list(problem.problem_order)
    for t in picks:
        at = rnd.randrange(len(sents) + 1)
        sents.insert(at, problem.sentences[t])
        order.insert(at, problem.problem_order[t])
    return replace(problem, sentences=sents, problem_order=order)
