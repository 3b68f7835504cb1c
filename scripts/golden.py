"""Smoke goldens: each experiment's smoke results at master seed 0 on one thread, kept in ``results/golden/``.

    .venv/bin/python scripts/golden.py --only factual-recall,grokking      # some experiments
    .venv/bin/python scripts/golden.py --budget 600                         # as many as fit in 10 minutes
    .venv/bin/python scripts/golden.py --only grokking --verify             # compare only; exit 1 on a change

For each experiment: run its smoke preset (``seed=0``, ``threads=1``) into a temporary directory, compare the
results table with ``results/golden/<name>.csv`` within the golden's tolerance
(:func:`lmsci.table_check.compare_results`) and its verdicts with the golden json's ``verdicts``
(:func:`lmsci.table_check.verdict_diffs`; a golden without them gets them), and record it: unchanged, the run's source and library digests join
the golden's ``verified`` list (so ``lmsci suite --check`` counts a published row computed at an earlier verified
source as current); changed or new, the table is rewritten and the list restarts. Run it after a change that
should leave results alone, and commit ``results/golden/``. It prints each experiment's seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="comma-separated experiments (default: every shipped one)")
    ap.add_argument("--out", default=None, help="golden folder (default: results/golden of this checkout)")
    ap.add_argument("--budget", type=float, default=None, help="wall seconds: start no experiment after them")
    ap.add_argument("--verify", action="store_true", help="compare only: write nothing, exit 1 on a change")
    args = ap.parse_args()

    import json

    import torch

    from lmsci.config import resolve_config
    from lmsci.errors import LmsciError
    from lmsci.experiments.registry import get
    from lmsci.runs import RunDir, git_commit
    from lmsci.suite import suite_names
    from lmsci.sweep import run_experiment
    from lmsci.table_check import (as_stored, compare_results, golden_dir, outcome_columns, read_golden_csv,
                                   smoke_diffs, update_golden, verdict_summary)

    torch.set_num_threads(1)
    out = Path(args.out) if args.out else golden_dir()
    t_all, bad = time.perf_counter(), 0
    for name in suite_names(args.only):
        if args.budget is not None and time.perf_counter() - t_all >= args.budget:
            print(f"{name}: not run (budget spent)")
            continue
        cls = get(name)
        if "smoke" not in cls.Config.PRESETS:
            print(f"{name}: no smoke preset, skipped")
            continue
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            try:
                cfg = resolve_config(cls.Config, "smoke", {"seed": 0, "threads": 1})
                run_experiment(cls(), cfg, Path(tmp) / name, progress=False, log=lambda m: None)
            except LmsciError as e:
                print(f"{name}: error: {e}")
                bad += 1
                continue
            run = RunDir(Path(tmp) / name)
            res, rec = run.results(), json.loads((run.path / RunDir.PROVENANCE).read_text())
            verdicts = verdict_summary(run.verdicts())
        secs = round(time.perf_counter() - t0, 1)
        if args.verify:
            csv = out / f"{name}.csv"
            gold = json.loads((out / f"{name}.json").read_text()) if (out / f"{name}.json").is_file() else None
            diffs = smoke_diffs(name, read_golden_csv(csv), gold, as_stored(res[outcome_columns(res)]), verdicts) \
                if csv.is_file() and gold is not None else ["no golden"]
            print(f"{name}: {'unchanged' if not diffs else 'CHANGED'} ({secs} s)" + "".join(f"\n  {d}" for d in diffs[:20]))
            bad += bool(diffs)
            continue
        csv = out / f"{name}.csv"
        exact = compare_results(read_golden_csv(csv), as_stored(res[outcome_columns(res)]), 0.0, 0.0) \
            if csv.is_file() else None
        status, diffs = update_golden(name, res, rec, out, {"commit": (git_commit() or "")[:10],
                                                            "date": date.today().isoformat(), "seconds": secs},
                                      verdicts=verdicts)
        same = "" if status != "unchanged" else " (bit-identical)" if not exact else " (within tolerance)"
        print(f"{name}: {status}{same} ({secs} s)" + "".join(f"\n  {d}" for d in diffs[:20]))
    print(f"total {time.perf_counter() - t_all:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
