"""The H100 time of the values-only ``gpu`` presets of ``igsm-retry``, ``igsm-depth``, ``igsm-ood`` and
``retry-finetune`` (session 52: every ``gpu`` preset within one H100 for 10 minutes).

Their claims need the learned-model gates (in-distribution accuracy >= 0.5 or >= 0.9), which the old ``gpu`` presets
bought with 3 seeds x 2,500-5,000 steps x 96 x 768 tokens of a 6-12 layer GPT (60-209 minutes estimated): that does
not fit 10 minutes, so the claims are decided at ``paper`` only and the ``gpu`` presets are values-only runs at a
larger scale than ``quick`` (reported, not decided).

The estimate of one run, in seconds, is the sum of three parts, all estimated, none measured on a GPU:

* training compute: :func:`lmsci.experiments.reasoning.igsm_common.estimate_gpu_train_seconds`
  (:mod:`lmsci.train.estimate`: 24 TFLOP/s achieved plus a per-step launch overhead);
* host data: the trainer draws each batch serially (no prefetch) by generating and packing fresh iGSM problems in
  Python, ``HOST_DATA_S_PER_TOKEN`` seconds per training token (measured on this project's CPU machine,
  :data:`HOST_DATA_PILOT`; the GPU machine's host is assumed no faster);
* decoding: :func:`decode_seconds`, one forward per generated token per batch at the per-step overhead of
  :mod:`lmsci.train.estimate` plus its FLOPs, up to ``max_new_tokens`` (0: ``seq_len``) tokens per batch (an upper
  bound: a batch stops when every row wrote ``<eos>``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lmsci.experiments.reasoning.igsm_common import IGSMCommonConfig, estimate_gpu_train_seconds, tokenizer_of, world_of
from lmsci.train.estimate import GPU_ACHIEVED_FLOPS, STEP_OVERHEAD_S, flops_per_token

#: seconds of host time per training token (generating and packing fresh iGSM problems)
HOST_DATA_S_PER_TOKEN = 6.0e-6
HOST_DATA_PILOT = ("0.127 s (error-free) and 0.149 s (retry data, q = 0.5) per 32 x 768-token batch of igsm-small "
                   "problems (get_batch_fn, master seed 1000001, one thread on the loaded 2-core Xeon, 2026-12-06; "
                   "timing only): ~6 us per token")
#: the seconds a values-only gpu preset may take (9 minutes: a margin under the 10-minute budget)
BUDGET_S = 9 * 60


def host_data_seconds(cfg: IGSMCommonConfig, n_models: int, steps: int | None = None,
                      batch_size: int | None = None) -> float:
    """Host seconds to draw the training batches of ``n_models`` models (per seed: multiplied by ``cfg.n_seeds``) of
    ``steps`` steps of ``batch_size x cfg.seq_len`` tokens (default: ``cfg.train``'s)."""
    steps = cfg.train.steps if steps is None else steps
    batch_size = cfg.train.batch_size if batch_size is None else batch_size
    return cfg.n_seeds * n_models * steps * batch_size * cfg.seq_len * HOST_DATA_S_PER_TOKEN


def decode_seconds(cfg: IGSMCommonConfig, shape: tuple[int, int, int], n_buckets: int, beam: int = 1) -> float:
    """Seconds on one H100 to decode ``n_buckets`` buckets of ``cfg.n_eval`` prompts with one model of ``shape``
    (``(n_layers, n_heads, d_model)``) greedily (``beam <= 1``) or with beam search of width ``beam``: batches of
    ``cfg.eval_batch`` prompts (``eval_batch // beam`` with beams), each at most ``max_new_tokens`` (0: ``seq_len``)
    steps of one forward of ``rows`` tokens at :mod:`lmsci.train.estimate`'s per-step overhead and FLOP rate."""
    L, _, D = shape
    V = tokenizer_of(cfg, world_of(cfg)).vocab_size
    per_batch = cfg.eval_batch if beam <= 1 else max(1, cfg.eval_batch // beam)
    rows = per_batch * max(beam, 1)
    batches = math.ceil(cfg.n_eval / per_batch)
    steps = cfg.max_new_tokens or cfg.seq_len
    step_s = (STEP_OVERHEAD_S[0] + STEP_OVERHEAD_S[1] * L
              + rows * flops_per_token(D, L, V, cfg.seq_len, train=False) / GPU_ACHIEVED_FLOPS)
    return n_buckets * batches * steps * step_s


def run_seconds(cfg: IGSMCommonConfig, shapes: Sequence[tuple[int, int, int]],
                decodes: Sequence[tuple[tuple[int, int, int], int, int]]) -> dict[str, float]:
    """The estimate of one run: ``train`` (compute of one model of each of ``shapes`` per seed), ``data`` (host
    batches of those models), ``decode`` (per seed, each ``(shape, n_buckets, beam)`` of ``decodes``) and ``total``,
    in seconds."""
    train = estimate_gpu_train_seconds(cfg, shapes)
    data = host_data_seconds(cfg, len(shapes))
    dec = cfg.n_seeds * sum(decode_seconds(cfg, s, n, b) for s, n, b in decodes)
    return {"train": train, "data": data, "decode": dec, "total": train + data + dec}


def time_text(minutes: int, what: str) -> str:
    """The documented time of a values-only iGSM ``gpu`` preset of ``minutes`` (a test checks it against
    the experiment's ``estimate_gpu_seconds``)."""
    return (f"~{minutes} min on one H100, estimated by lmsci.experiments.reasoning._igsm_gpu_budget (training at "
            "lmsci.train.estimate's 24 TFLOP/s + step overhead, host data generation at ~6 us/token measured on the "
            f"CPU machine, decoding at the step overhead); not measured: no GPU in the session ({what}); values "
            "only: the claims are decided at paper")
