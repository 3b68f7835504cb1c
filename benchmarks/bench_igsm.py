"""iGSM generator speed: problems per second on one core, rejections per problem, constant memory.

Streams ``--n`` problems of a named world (default iGSM-med, op drawn per problem from the paper's
``light`` distribution, train hash split) through :meth:`lmsci.worlds.igsm.IGSMWorld.stream` and
prints problems/s (process CPU time, the figure to trust on a shared machine, and wall time), sampler
rejections per problem (attempts that missed the op or fell outside the split's template hashes), and
the peak traced memory (``tracemalloc``) after ``n`` and after ``4 n`` problems (a stream holds one
problem at a time, so the two agree). Also: a fixed OOD op on the test split, the full document
rendering + word-level tokenisation + packing into windows (:func:`lmsci.worlds.igsm.tokenizer.packed_windows`),
and the checker on every generated solution.

Target (issue 13): at least 1,000 iGSM-med problems per second on one core including rejections.
The official generator (facebookresearch/iGSM at 6855c77) does ~28 problems/s at 15.9 attempts per
problem (shared/research/physics_of_lms.md section 2.9, [meas]).

Measured 2026-11-27 on the shared 2-core machine (a background test suite running, load average ~3),
``--n 4000 --windows 100``, two runs each, alternating, the sampler that follows the official forward
process (issue 30: items without children, official choose / order walk / design, exact op by rejection)
against the previous sampler (backwards design with an exact op budget, commit 80a78ff) in the same runs:

==========================================  ======================  ======================  ====================
arm                                         official process        previous sampler        rejections/problem
==========================================  ======================  ======================  ====================
igsm-med, light op drawn per problem, train 3,147 - 3,289 problems  4,215 - 4,236 problems  6.78 (before 0.93)
igsm-med, op = 20, test split               823 - 857 problems      957 - 988 problems      3.01 (before 6.15)
render + tokenise (word) + pack, seq 768    766,000 - 774,000 tok.  1,004,000 - 1,034,000  (2,700 problems/s)
checker on generated solutions              2,738 - 2,772           3,369 - 3,403           (800/800 correct)
==========================================  ======================  ======================  ====================

So the official process costs ~1.3x on the main arm (per s, CPU, one core). Most rejections are cheap:
an attempt whose s exceeds op while min(m, e) > op is dropped before any structure is drawn (exact:
such an attempt can never reach op); the rest redraw a structure when the order walk stops early
(~0.3 of structure draws) or miss op after it (the official generator keeps ~1 attempt in 16).
Memory: ~0.01 MB retained after 1,000 and after 4,000 problems (the stream's state; measured with the
last problem dropped and cyclic garbage collected); peak 0.5 MB (the largest problem in flight).
numba was not used: the sampler is branchy set/dict code over ~30 parameters; profiling shows the
time spread over the structure draw, the choice of necessary parameters, the order walk, ``random``
draws and rendering, with no numeric loop to compile.

Usage::

    nice -n 19 python benchmarks/bench_igsm.py
    python benchmarks/bench_igsm.py --n 200 --windows 4        # smallest (used by tests)
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from lmsci.worlds.igsm import IGSMWorld  # noqa: E402
from lmsci.worlds.igsm.checker import check_solution  # noqa: E402
from lmsci.worlds.igsm.tokenizer import IGSMTokenizer, packed_windows  # noqa: E402


def _rate(world_name: str, n: int, seed: int, op=None, split="train"):
    w = IGSMWorld(world_name)
    it = w.stream(seed, split=split, op=op)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        next(it)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return n / cpu, n / wall, w.rejections_per_problem


def _memory(world_name: str, n: int, seed: int) -> tuple[float, float, float]:
    """Traced memory (MB) retained after n // 4 and after n problems of one stream (the last problem
    dropped and cyclic garbage collected), and the peak."""
    w = IGSMWorld(world_name)
    it = w.stream(seed)
    tracemalloc.start()
    out = []
    for m in (n // 4, n - n // 4):
        for _ in range(m):
            p = next(it)
        del p
        gc.collect()
        out.append(tracemalloc.get_traced_memory()[0])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out[0] / 2 ** 20, out[1] / 2 ** 20, peak / 2 ** 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", default="igsm-med")
    ap.add_argument("--n", type=int, default=5000, help="problems per arm")
    ap.add_argument("--ood-op", type=int, default=20)
    ap.add_argument("--windows", type=int, default=200, help="packed windows (batch 1) for the pipeline arm")
    ap.add_argument("--seq-len", type=int, default=768)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)

    cpu, wall, rej = _rate(a.world, a.n, a.seed)
    print(f"{a.world} light op, train: {cpu:,.0f} problems/s CPU ({wall:,.0f} wall), "
          f"{rej:.2f} rejections/problem")
    cpu2, wall2, rej2 = _rate(a.world, max(1, a.n // 5), a.seed, op=a.ood_op, split="test")
    print(f"{a.world} op={a.ood_op}, test: {cpu2:,.0f} problems/s CPU ({wall2:,.0f} wall), "
          f"{rej2:.2f} rejections/problem")

    m1, m2, pk = _memory(a.world, a.n, a.seed)
    print(f"memory: {m1:.3f} MB retained after {a.n // 4:,} problems, {m2:.3f} MB after {a.n:,}; "
          f"peak memory: {pk:.2f} MB (one problem in flight)")

    w = IGSMWorld(a.world)
    tok = IGSMTokenizer()
    it = packed_windows(w, tok, seq_len=a.seq_len, batch_size=1, seed=a.seed)
    c0 = time.process_time()
    for _ in range(a.windows):
        next(it)
    cpu_w = time.process_time() - c0
    print(f"render + tokenise + pack: {a.windows * a.seq_len / cpu_w:,.0f} tokens/s CPU, "
          f"{w.problems / cpu_w:,.0f} problems/s CPU ({a.windows} windows of {a.seq_len})")

    it = IGSMWorld(a.world).stream(a.seed + 1)
    c0 = time.process_time()
    ok = 0
    for _ in range(max(1, a.n // 5)):
        p = next(it)
        ok += check_solution(p, p.text()[0]).correct
    print(f"checker: {max(1, a.n // 5) / (time.process_time() - c0):,.0f} solutions/s CPU, "
          f"{ok}/{max(1, a.n // 5)} generated solutions correct")


if __name__ == "__main__":
    main()
