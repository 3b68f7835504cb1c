"""benchmarks/bench_cfg_phases.py runs at its smallest settings and prints every phase it promises (not timed here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_cfg_phases.py"


def test_cfg_phases_bench_prints_each_phase():
    out = subprocess.run([sys.executable, str(BENCH), "--which", "learn", "--steps", "2", "--set", "n_gen=4",
                          "--set", "n_kl=2"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seconds = json.loads(out.stdout.splitlines()[1])
    for key in ("train_total", "host_batches", "generation", "membership_dp", "kl_exact", "nll", "total"):
        assert seconds[key] >= 0.0, key
    assert seconds["total"] >= seconds["train_total"] >= seconds["host_batches"]
