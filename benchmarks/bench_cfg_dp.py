"""Membership of cfg3f-length strings per second on one core: lmsci's numba bitset DP vs a naive reference.

Issue 14's target: at least 100 strings of about 250 tokens per second on one core
(:meth:`lmsci.worlds.cfg.CFG.member`, the layered inside algorithm over ``uint64`` bitsets of span ends,
compiled by numba). The naive reference is the same layered DP written in plain Python over sets of spans
(``{(i, j)}`` per symbol, composed rule by rule); it is timed on ``--naive`` strings and the ratio of the
rates is printed. Half of the strings are grammar samples, half are the same samples with one token changed
(labelled by the parser, not by construction: physics_of_lms.md sec. 1.7), and both DPs must agree on each.

For scale: the official pure-Python ``solve_dp_noneq_fast`` was measured at 0.1-0.14 strings/s on cfg3b/cfg3f
(physics_of_lms.md sec. 1.7, [meas]).

Usage::

    python benchmarks/bench_cfg_dp.py --grammar cfg3f --n 200 --naive 4
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from lmsci.worlds.cfg_grammars import get_grammar  # noqa: E402


def naive_member(g, tokens) -> bool:
    """Plain-Python layered CYK: spans[s] = set of (i, j) with s =>* w[i:j], level by level."""
    w = [int(t) - 1 for t in tokens]
    n = len(w)
    spans = [set() for _ in range(g.n_terminals)]
    for i, t in enumerate(w):
        spans[t].add((i, i + 1))
    for l in range(g.depth - 1, -1, -1):
        new = []
        for rs in g.rules[l]:
            acc = set()
            for r in rs:
                cur = set(spans[r[0]])
                for s in r[1:]:
                    by_start: dict[int, list[int]] = {}
                    for (i, j) in spans[s]:
                        by_start.setdefault(i, []).append(j)
                    cur = {(i, k) for (i, j) in cur for k in by_start.get(j, ())}
                acc |= cur
            new.append(acc)
        spans = new
    return (0, n) in spans[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grammar", default="cfg3f", help="a grammar spec of lmsci.worlds.cfg_grammars.get_grammar: a published table (cfg3f), a draw (cfg3f-draw:0), cfg3b-small / cfg3f-small, or an official cfg3*.json path")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=200, help="strings timed with the numba DP")
    ap.add_argument("--naive", type=int, default=4, help="strings timed with the naive reference (0: skip)")
    args = ap.parse_args()

    g = get_grammar(args.grammar, args.seed)
    rng = np.random.default_rng(args.seed)
    strings = []
    for k in range(args.n):
        s = g.sample(rng).tokens.copy()
        if k % 2:
            i = int(rng.integers(len(s)))
            s[i] = 1 + (s[i] % g.n_terminals)  # another terminal
        strings.append(s)
    mean_len = float(np.mean([len(s) for s in strings]))
    g.member(strings[0])  # compile (numba cache)
    t0 = time.perf_counter()
    fast = [g.member(s) for s in strings]
    dt = time.perf_counter() - t0
    rate = len(strings) / dt
    print(f"grammar {g.name}: {len(strings)} strings, mean length {mean_len:.0f} tokens, "
          f"{sum(fast)} in the language")
    print(f"numba bitset DP: {rate:.0f} strings/s on one core (target >= 100/s): "
          f"{'met' if rate >= 100 else 'NOT met'}")
    if args.naive:
        t0 = time.perf_counter()
        slow = [naive_member(g, s) for s in strings[: args.naive]]
        dt_n = time.perf_counter() - t0
        assert slow == fast[: args.naive], "naive and numba DPs disagree"
        rate_n = args.naive / dt_n
        print(f"naive Python DP: {rate_n:.2f} strings/s; agree on {args.naive} strings; ratio {rate / rate_n:.0f}x")


if __name__ == "__main__":
    main()
