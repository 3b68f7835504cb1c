"""CPU seconds per phase of one ``cfg-learning`` point or one ``cfg-probing`` group (issue 46 item 3).

Runs the experiment's own ``run_point`` / ``run_group`` on its QUICK config (one seed, master seed 0's first training
seed) with ``train.steps`` cut to ``--steps`` (training costs the same per step: scale its line by
``3000 / steps``), and times with ``time.process_time`` (CPU seconds, not wall: the machine is shared) the phases the
experiment calls: training (``train_model``; the host-side batch sampling inside it is printed apart), generation
(``generate_strings``), the membership DP (``generation_accuracy``), the exact KL and the NLLs (cfg-learning), hidden
states and probe fits (cfg-probing; its group: the real, null and shuffled arms, two
trainings). Nothing is changed: the functions are wrapped, not replaced.

Usage::

    python benchmarks/bench_cfg_phases.py --which learn --arm real --steps 300
    python benchmarks/bench_cfg_phases.py --which probe --steps 300
    python benchmarks/bench_cfg_phases.py --which learn --steps 2 --set n_gen=4 --set n_kl=2   # a fast check
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from pathlib import Path

import torch

from lmsci.contract import Point
from lmsci.experiments.syntax import _common as common
from lmsci.experiments.syntax import cfg_learning, cfg_probing
from lmsci.runs import derive_seed

SECONDS: dict[str, float] = {}


def _wrap(mod, name: str, key: str) -> None:
    f = getattr(mod, name)

    @functools.wraps(f)
    def timed(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            SECONDS[key] = SECONDS.get(key, 0.0) + time.process_time() - t

    setattr(mod, name, timed)


def _wrap_batches() -> None:
    make = common.make_get_batch

    def make_timed(*a, **k):
        gb = make(*a, **k)

        def get_batch(step, gen):
            t = time.process_time()
            out = gb(step, gen)
            SECONDS["host_batches"] = SECONDS.get("host_batches", 0.0) + time.process_time() - t
            return out

        return get_batch

    common.make_get_batch = make_timed


class _Bar:
    def __getattr__(self, name):
        return lambda *a, **k: None


class _Ctx:
    """The slice of :class:`lmsci.contract.PointContext` the two experiments use."""

    def __init__(self):
        self.seed, self.device = derive_seed(0, "bench-cfg-phases"), "cpu"
        self.artifact_dir = Path(tempfile.mkdtemp(prefix="bench_cfg_"))

    def progress(self, n, desc):
        return _Bar()

    def log(self, **m):
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--which", choices=("learn", "probe"), default="learn")
    ap.add_argument("--arm", choices=("real", "shuffled", "null"), default="real", help="cfg-learning's arm")
    ap.add_argument("--steps", type=int, default=300, help="training steps (quick: 3000)")
    ap.add_argument("--set", action="append", default=[], help="another config override key=value (top level)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    _wrap_batches()
    for mod in (cfg_learning, cfg_probing):
        _wrap(mod, "train_model", "train_total")
        _wrap(mod, "generate_strings", "generation")
        _wrap(mod, "generation_accuracy", "membership_dp")
    _wrap(cfg_learning, "mean_kl", "kl_exact")
    _wrap(cfg_learning, "nll_per_token", "nll")
    _wrap(cfg_probing, "hidden_states", "probe_hidden_states")
    _wrap(cfg_probing, "probe_parse", "probe_fits")
    _wrap(cfg_probing, "fit_mixing_probe", "probe_fits_shuffled")
    over = dict(kv.split("=", 1) for kv in args.set)
    exp = cfg_learning.CFGLearning() if args.which == "learn" else cfg_probing.CFGProbing()
    base = exp.Config()
    cfg = exp.Config(**{**over, "train": {**base.train.model_dump(), "steps": args.steps}})
    ctx = _Ctx()
    t = time.process_time()
    if args.which == "learn":
        row = exp.run_point(cfg, Point("rope", {"variant": "rope"}, arm=args.arm), ctx)
    else:
        pts = [Point("rope", {"variant": "rope"}, arm="real"), Point("null-rope", {"variant": "rope"}, arm="null"),
               Point("shuffled-rope", {"variant": "rope"}, arm="shuffled")]
        row = exp.run_group(cfg, pts, [ctx, _Ctx(), _Ctx()])
    SECONDS["total"] = time.process_time() - t
    # the trainer's fixed costs (4 checkpoints, the first step's setup) are spread over the steps: use >= 300 steps
    per_step = (SECONDS.get("train_total", 0.0) - SECONDS.get("host_batches", 0.0)) / max(args.steps, 1)
    print(f"{args.which} ({args.arm if args.which == 'learn' else 'real+null+shuffled group'}), {args.steps} steps, CPU s:")
    print(json.dumps({k: round(v, 3) for k, v in SECONDS.items()}))
    print(f"training CPU per step (without host batches): {per_step * 1000:.1f} ms; "
          f"host batches per step: {SECONDS.get('host_batches', 0.0) / max(args.steps, 1) * 1000:.2f} ms")
    print("row:", row if isinstance(row, dict) else [r.get("acc_bos") for r in row])


if __name__ == "__main__":
    main()
