"""bioS data pipeline: the Python path (``bio_docs`` + ``pack``) vs the streaming one (``bios_stream``).

Both arms render, tokenise and pack bioS biographies (Allen-Zhu & Li, Physics of LMs Part 3.1,
arXiv 2309.14316, Section 2; "bioS multi+permute": a fresh biography with new templates and a new
sentence order per exposure, He/She after the first sentence) into ``--seq-len`` windows with no
person twice in a window, on one core (numpy/torch one thread, numba kernels are single-threaded):

* old: :func:`lmsci.worlds.bios_datasets.bio_docs` (one epoch of N biographies) +
  :func:`lmsci.worlds.bios_datasets.pack`, materialised in RAM, as ``knowledge_common.bio_stream`` does per epoch;
* new: iterating :class:`lmsci.worlds.bios_stream.BioStream` (``fresh=True, permute=True``) over
  ``--bios`` biographies (``exposures = bios / N``), batches of ``--batch-size`` windows as LongTensors.

It prints biographies per second of each arm (wall clock and process CPU time; the CPU figure is
the one to trust on a shared machine), the peak traced memory (``tracemalloc``, numpy buffers
included) of each arm at two N values, and the ratio new/old. The memory of the new arm is
measured without the exposure counters (``count_exposures=False``; they add 16 bytes per person,
as the world's own arrays add 88).

Measured 2026-11-23 19:21 on the shared 2-core machine, under ``nice -n 19`` while it was heavily
loaded (load average 15-17 from other sessions, so this process got about a tenth of a core and the
wall figures are ~8x below the CPU ones), ``--threads 1``, default arguments (seq_len 512, batch 32):

==============================  ===============  ===============  ===========
arm, N x exposures              per s (CPU)      per s (wall)     peak memory
==============================  ===============  ===============  ===========
old, 1,000 x 1                  6,192 bios       681 bios         3.4 MB
old, 4,000 x 1                  5,433 bios       669 bios         13.8 MB
new, 10,000 x 100               372,119 bios     44,459 bios      14.4 MB
new, 1,000,000 x 1              574,435 bios     67,866 bios      14.4 MB
mixed, 10,000 x 20, QA_r 0.8    572,799 docs     68,926 docs      (QA_r 0.8000)
==============================  ===============  ===============  ===========

ratio new/old 81x (CPU time; 83x wall), 473,000 biographies/s per core (target 100,000); peak
memory of the old path x4.1 for 4x N (an epoch in RAM), of the stream x1.00 for 100x N (a chunk of
4,096 documents and one batch in flight). Earlier runs of the same day (before two kernels moved to
numba, load 14-17): 53-62x.

Usage::

    nice -n 19 python benchmarks/bench_bios_pipeline.py
    python benchmarks/bench_bios_pipeline.py --old-n 50 100 --new-n 200 2000 --bios 4000   # smallest
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lmsci.worlds.bios import BiosWorld  # noqa: E402
from lmsci.worlds.bios_datasets import bio_docs, pack  # noqa: E402
from lmsci.worlds.bios_stream import BioStream, MixedStream, QAStream  # noqa: E402


def old_arm(world: BiosWorld, seq_len: int, seed: int) -> int:
    docs = bio_docs(world, range(world.n), multiplicity=1, permute=True, fullname=False, seed=seed, epoch=1)
    packed = pack(docs, seq_len, seed=seed)
    return int(packed.input_ids.shape[0])


def new_arm(world: BiosWorld, seq_len: int, batch: int, exposures: int, seed: int, count: bool) -> int:
    s = BioStream(world, seq_len=seq_len, batch_size=batch, exposures=exposures, seed=seed, permute=True,
                  fresh=True, count_exposures=count)
    w = 0
    for b in s:
        w += int(b.input_ids.shape[0])
    if count:
        assert int(s.exposures.min()) == int(s.exposures.max()) == exposures
    return w


def mixed_arm(world: BiosWorld, seq_len: int, batch: int, exposures: int, seed: int) -> tuple[int, float]:
    """Mixed training (Part 3.1 App. C): bioS multi5+permute+fullname biographies of everyone and the
    QA of half of the people, QA at 80% of the tokens; returns (documents, QA token fraction)."""
    bio = BioStream(world, seq_len=seq_len, batch_size=batch, exposures=exposures, seed=seed, multiplicity=5,
                    permute=True, fullname=True)
    qa = QAStream(world, np.arange(0, world.n, 2), seq_len=seq_len, batch_size=batch, order_seed=seed)
    mix = MixedStream(bio, qa, qa_fraction=0.8)
    docs = sum(len(b.doc_person) for b in mix)
    return docs, mix.qa_token_fraction


def timed(fn) -> tuple[float, float, int]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def peak_mb(fn) -> float:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-n", nargs=2, type=int, default=[1000, 4000], help="two N for the old path")
    ap.add_argument("--new-n", nargs=2, type=int, default=[10_000, 1_000_000], help="two N for the stream")
    ap.add_argument("--bios", type=int, default=1_000_000, help="biographies per stream run")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    L, B = args.seq_len, args.batch_size

    # warm up both arms (imports, numba's compiled-kernel cache) on a tiny world
    tiny = BiosWorld(50, seed=1)
    old_arm(tiny, L, 0)
    new_arm(tiny, L, B, 2, 0, True)

    print(f"bioS pipeline, seq_len {L}, batch {B}, {args.threads} thread(s), load average "
          f"{os.getloadavg()[0]:.1f}; biographies rendered + tokenised + packed")
    rates_old, rates_new, mem_old, mem_new = [], [], [], []
    for n in args.old_n:
        world = BiosWorld(n, seed=args.seed)
        wall, cpu, windows = timed(lambda: old_arm(world, L, args.seed))
        mem = peak_mb(lambda: old_arm(world, L, args.seed))
        rates_old.append((n / wall, n / cpu))
        mem_old.append(mem)
        print(f"old  bio_docs+pack  N={n:>9,}  x 1 exposure  : {n / wall:>10,.0f} bios/s wall "
              f"{n / cpu:>10,.0f} bios/s CPU   peak {mem:8.1f} MB   ({windows} windows)")
    for n in args.new_n:
        world = BiosWorld(n, seed=args.seed)
        e = max(1, args.bios // n)
        wall, cpu, windows = timed(lambda: new_arm(world, L, B, e, args.seed, True))
        mem = peak_mb(lambda: new_arm(world, L, B, e, args.seed, False))
        rates_new.append((n * e / wall, n * e / cpu))
        mem_new.append(mem)
        print(f"new  BioStream      N={n:>9,}  x {e:>3} exposures: {n * e / wall:>10,.0f} bios/s wall "
              f"{n * e / cpu:>10,.0f} bios/s CPU   peak {mem:8.1f} MB   ({windows} windows)")
    n = args.new_n[0]
    world = BiosWorld(n, seed=args.seed)
    e = max(1, args.bios // n // 5)
    wall, cpu, (docs, qa_r) = timed(lambda: mixed_arm(world, L, B, e, args.seed))
    print(f"new  MixedStream    N={n:>9,}  x {e:>3} exposures: {docs / wall:>10,.0f} docs/s wall "
          f"{docs / cpu:>10,.0f} docs/s CPU   QA_r {qa_r:.4f} (target 0.8)   ({docs:,} documents)")
    old_w, old_c = np.mean([r[0] for r in rates_old]), np.mean([r[1] for r in rates_old])
    new_w, new_c = np.mean([r[0] for r in rates_new]), np.mean([r[1] for r in rates_new])
    print(f"ratio new/old: {new_w / old_w:.1f}x (wall), {new_c / old_c:.1f}x (CPU); "
          f"new {new_c:,.0f} bios/s CPU vs target 100,000")
    print(f"peak memory: old x{mem_old[1] / mem_old[0]:.2f} for N x{args.old_n[1] / args.old_n[0]:.0f}; "
          f"new x{mem_new[1] / mem_new[0]:.2f} for N x{args.new_n[1] / args.new_n[0]:.0f}")


if __name__ == "__main__":
    main()
