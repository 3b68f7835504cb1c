"""The brute-force solution of an iGSM problem: every parameter the problem defines, not only the necessary ones.

Source: Ye, Xu, Li, Allen-Zhu, "Physics of Language Models: Part 2.1", arXiv 2407.20311, Section 4 (Result 3): a
solution that computes every parameter it can ("level-0" reasoning, brute force) is correct but not the shortest;
the paper's model instead writes the shortest solution ("level-1": it plans which parameters are necessary).

:func:`brute_force_order` -- the parameters such a solution computes: every instance parameter that does not
depend on the question parameter, every abstract parameter one of them (or the question) needs, and the
necessary parameters, in a random topological order (each parameter after everything it uses), the question
parameter last (the full-solution checker reads the answer from the last step). Instance parameters that depend
on the question cannot precede it and are left out. :func:`brute_force_text` renders the training document
``<prob> problem question <sol> solution <ans> answer`` of that solution in the world's step format
(:func:`~lmsci.worlds.igsm.problem.solution_steps`); :func:`~lmsci.worlds.igsm.checker.check_solution` accepts it
(``correct``, with every parameter beyond the necessary ones counted as unneeded).
"""

from __future__ import annotations

import random

from lmsci.worlds.igsm.config import ANS, RAND, SYMBOLS
from lmsci.worlds.igsm.problem import Problem, _cost, nx_ancestors, solution_steps


def brute_force_order(problem: Problem, rnd: random.Random) -> list:
    """The parameters of ``problem``'s brute-force solution, in solution order (see the module docstring).

    Args:
        problem: an iGSM problem.
        rnd: the random order among the parameters ready at each step (uniform among them).

    Returns:
        A list of parameters: a topological order of the problem's dependency graph restricted to them, a
        superset of ``problem.necessary``, ending with ``problem.question_param``.
    """
    q = problem.question_param
    after_q = {p for p in problem.defs if q in nx_ancestors(problem, p)}  # q itself included
    want = set(nx_ancestors(problem, q))
    for p in problem.defs:
        if p not in after_q:
            want |= nx_ancestors(problem, p)
    want.discard(q)
    preds = {p: [u for u in problem.preds(p) if u != RAND] for p in want}  # all in want (ancestor-closed)
    succ: dict = {p: [] for p in want}
    left = {p: len(preds[p]) for p in want}
    for p in sorted(want):
        for u in preds[p]:
            succ[u].append(p)
    out: list = []
    ready = sorted(p for p in want if not left[p])
    while ready:
        p = ready.pop(rnd.randrange(len(ready)))
        out.append(p)
        for x in succ[p]:
            left[x] -= 1
            if not left[x]:
                ready.append(x)
    assert len(out) == len(want), "the dependency graph has a cycle"
    return out + [q]


def brute_force_symbols(problem: Problem, order: list) -> int:
    """Symbols a solution computing ``order`` writes (one per operation: a step's own plus its intermediates)."""
    return sum(_cost(problem, p) for p in order)


def brute_force_text(problem: Problem, rnd: random.Random) -> str | None:
    """The training document of ``problem``'s brute-force solution: ``problem.prompt()``, one step sentence per
    parameter of :func:`brute_force_order` (the world's format, true values), ``<ans>`` and the answer.

    Returns:
        The text, or None when the solution needs more distinct symbols than the format has (``len(SYMBOLS)`` =
        52; the shortest solutions of the named worlds need at most ``max_eval_op`` <= 52).
    """
    order = brute_force_order(problem, rnd)
    n = brute_force_symbols(problem, order)
    if n > len(SYMBOLS):
        return None
    syms = rnd.sample(SYMBOLS, n)
    _, out = solution_steps(problem, syms, problem.values, params=order)
    return problem.prompt() + "".join(" " + x + "." for x in out) + ANS + f" {problem.answer}"
