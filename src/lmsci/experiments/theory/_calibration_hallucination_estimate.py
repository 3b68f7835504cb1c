"""The H100 time of ``calibration-hallucination``'s gpu preset (session 52: every gpu preset within 10 minutes of one
H100).

Per run (Zipf point x seed; both arms share the world, the documents and the scoring): the generators are scored on
every factoid of ``Y`` on the host (``HOST_S_PER_FACTOID``: the quick run, 2026-12-06, took 179.5 s for 15 runs at
|Y| = 4e6 on one thread of the 2-core Xeon, its small CPU training included: 3.0 us per factoid, an upper bound of
the scoring's share; the GPU machine's host is assumed no faster), plus the transformer's training and held-out
evaluations at :mod:`lmsci.train.estimate`'s per-step overhead (4-token documents: the FLOPs are negligible).
"""

from __future__ import annotations

import math
from typing import Any

from lmsci.train.estimate import STEP_OVERHEAD_S

HOST_S_PER_FACTOID = 179.5 / (15 * 4e6)


def estimate_h100_seconds(cfg: Any) -> dict[str, float]:
    """Estimated seconds of a run of ``cfg`` (a ``CalibrationConfig``) on one H100: ``host`` (scoring every factoid),
    ``train`` (training steps and held-out evaluations) and ``total``, over every Zipf point and seed."""
    runs = len(cfg.zipfs) * cfg.n_seeds
    step = STEP_OVERHEAD_S[0] + STEP_OVERHEAD_S[1] * cfg.model.n_layers
    host = runs * math.prod(cfg.slots) * HOST_S_PER_FACTOID
    train = runs * (cfg.train.steps + cfg.train.steps / cfg.eval_every) * step
    return {"host": host, "train": train, "total": host + train}
