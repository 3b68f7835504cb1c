"""One attempt of the iGSM generator, step by step: the structure graph, the necessary parameters, the solution
order, the extra parents, the definitions (necessary and unnecessary), the template hash and the values.

Source: Ye, Xu, Li, Allen-Zhu, "Physics of Language Models: Part 2.1, Grade-School Math and the Hidden Reasoning
Process", arXiv 2407.20311, Section 2 and App. B-C. Our own code of the official forward process
(``facebookresearch/iGSM``: ``data_gen/prototype/id_gen.py`` and ``math_gen/graph_gen.py`` of the initial release:
``Graph.init``, ``choose_param``, ``reasonable_sort``, ``design``, ``design_unused``); the sampler's account is in
:mod:`lmsci.worlds.igsm.world`, whose :class:`~lmsci.worlds.igsm.world.IGSMWorld` calls these in order. Each function
draws from the attempt's ``random.Random`` in a fixed order, so a seed gives the same problem.
"""

from __future__ import annotations

import hashlib
import math
import random

from lmsci.worlds.igsm.config import RAND
from lmsci.worlds.igsm.draws import _pick, _rb, _sample
from lmsci.worlds.igsm.problem import Definition


class _Reject(Exception):
    pass


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
