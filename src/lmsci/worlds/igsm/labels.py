"""V-probing labels of iGSM (Part 2.1 Section 4, arXiv 2407.20311; official ``Problem.lora_label`` and
``lora_label2``).

Each :class:`ProbeItem` says *what* to ask (``task`` about parameter ``param``, and ``param2`` for
``dep``), *where* (``position_char``: the probe reads the prefix ``text[:position_char]`` of
``problem.text(fmt)[0]``; with a tokenizer, ``IGSMTokenizer.token_index(offsets, position_char)`` gives
the token) and the label ``target``:

==============  ========================================================  =================================
task            target                                                    position
==============  ========================================================  =================================
``nece``        1 if A is needed for the answer                           end of the question (before <sol>)
``dep``         1 if A depends on B (transitive closure of the DAG)       end of the problem, before the question
``known``       1 if A was computed in the solution prefix                after ``<sol>`` (step 0) and after
``value``       A's value 0..22 if known, else 23                          each solution sentence (step t)
``can_next``    1 if A is not known and all its dependencies are known    same
``nece_next``   ``can_next(A)`` and ``nece(A)``                           same
==============  ========================================================  =================================

The V-probe (rank-8 update of the input embedding + linear head at ``[END]``) appends
``[START] A [END]`` (``[START] A [MID] B [END]`` for dep) to the prefix; ``param_text`` /
``param2_text`` are the parameters' names as the solution writes them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

from lmsci.errors import UnknownNameError
from lmsci.worlds.igsm.config import RAND
from lmsci.worlds.igsm.problem import Problem, nx_ancestors

TASKS = ("nece", "dep", "known", "value", "can_next", "nece_next")


@dataclass(frozen=True)
class ProbeItem:
    """One probing query (see the module docstring)."""

    task: str
    position_char: int
    target: int
    param: tuple
    param_text: str
    param2: Optional[tuple] = None
    param2_text: Optional[str] = None
    step: Optional[int] = None


def probe_labels(problem: Problem, tasks=TASKS, fmt: Optional[str] = None, max_per_task: Optional[int] = None,
                 rng=None) -> list[ProbeItem]:
    """Probing queries with labels for ``problem`` (all of them, or ``max_per_task`` drawn per task
    with ``rng``; the paper uses at most 10 queries per problem). ``dep`` pairs range over ordered pairs
    of distinct parameters; the step tasks over every step 0..len(necessary) and parameter.

    Raises:
        UnknownNameError: a task outside :data:`TASKS`.
    """
    for t in tasks:
        if t not in TASKS:
            raise UnknownNameError("task", t, TASKS)
    pos = problem.positions(fmt)
    allp = problem.all_params
    nece = set(problem.necessary)
    name = problem.param_name
    items: dict = {t: [] for t in tasks}
    if "nece" in tasks:
        items["nece"] = [ProbeItem("nece", pos["end_question"], int(p in nece), p, name(p)) for p in allp]
    if "dep" in tasks:
        anc = {p: nx_ancestors(problem, p) for p in allp}
        items["dep"] = [ProbeItem("dep", pos["end_problem"], int(b in anc[a]), a, name(a), b, name(b))
                        for a in allp for b in allp if a != b]
    step_tasks = [t for t in tasks if t in ("known", "value", "can_next", "nece_next")]
    if step_tasks:
        places = [pos["sol_start"]] + pos["steps"]
        preds = {p: [u for u in problem.preds(p) if u != RAND] for p in allp}
        known: set = set()
        for t, at in enumerate(places):
            if t > 0:
                known.add(problem.necessary[t - 1])
            for p in allp:
                kn = p in known
                can = (not kn) and all(u in known for u in preds[p])
                lab = {"known": int(kn), "value": problem.values[p] if kn else 23, "can_next": int(can),
                       "nece_next": int(can and p in nece)}
                for task in step_tasks:
                    items[task].append(ProbeItem(task, at, lab[task], p, name(p), step=t))
    out: list = []
    rnd = rng if isinstance(rng, random.Random) else random.Random(rng)
    for t in tasks:
        lst = items[t]
        if max_per_task is not None and len(lst) > max_per_task:
            lst = rnd.sample(lst, max_per_task)
        out.extend(lst)
    return out


def probe_query_text(problem: Problem, item: ProbeItem, fmt: Optional[str] = None) -> str:
    """The V-probe input as text: the document prefix ``text[:position_char]`` followed by
    ``[START] A [END]`` (``[START] A [MID] B [END]`` for ``dep``), A and B written as in the solution."""
    prefix = problem.text(fmt)[0][:item.position_char]
    if item.param2 is None:
        return f"{prefix}[START] {item.param_text}[END]"
    return f"{prefix}[START] {item.param_text}[MID] {item.param2_text}[END]"


def probe_inputs(problem: Problem, items: list, tokenizer, fmt: Optional[str] = None) -> list[list[int]]:
    """Token ids ``[<bos>, ..., [END]]`` of each item's V-probe query (the probe reads the hidden state at
    the last token). Built from one tokenisation of the document, so the prefix tokens are exactly those
    the language model saw when it read the document."""
    text = problem.text(fmt)[0]
    ids, offs = tokenizer.encode_with_offsets(text)
    start, mid, end = (tokenizer.token_id(t) for t in ("[START]", "[MID]", "[END]"))
    out = []
    cache: dict = {}
    for it in items:
        k = tokenizer.token_index(offs, it.position_char)
        if it.param_text not in cache:
            cache[it.param_text] = tokenizer.encode(" " + it.param_text)
        q = [start] + cache[it.param_text]
        if it.param2 is not None:
            if it.param2_text not in cache:
                cache[it.param2_text] = tokenizer.encode(" " + it.param2_text)
            q += [mid] + cache[it.param2_text]
        out.append([tokenizer.bos_id] + ids[:k + 1] + q + [end])
    return out
