"""The H100 time of ``watermark-removal-lm``'s gpu preset (session 52: every gpu preset within 10 minutes of one
H100), for the default generator SmolLM2-135M (30 layers, ~1.35e8 parameters); an upper bound, not measured.

Per prompt sample: loading the model, generating ``T`` tokens for the ``n_texts`` prompts (one forward call per
token), then two walks (``real``; ``random``, as many steps per text as the real walk made), each bounded by every
text walking ``walk_max_steps`` steps (texts stop earlier under the official stopping rule). A walk step is
``span + 2`` forward calls of the attacker (the prefix, the span's draws, the suffix; :func:`propose_span`) over the
active texts' ``prompt_len + T`` tokens: FLOPs ``2 x params x tokens`` at :data:`lmsci.train.estimate.
GPU_ACHIEVED_FLOPS` plus ``LAUNCH_PER_LAYER_S`` per layer and call (an eager Hugging Face Llama layer runs ~25-30
kernels, ~10 us each, plus ``CALL_S`` of Python per call). The real walk's detections after each acceptance (the
Python of transformers' ``WatermarkDetector``) are counted as much again as its forward passes, as the CPU pilot in
the experiment's docstring found.
"""

from __future__ import annotations

from typing import Any

from lmsci.train.estimate import GPU_ACHIEVED_FLOPS

N_LAYERS = 30
PARAMS = 1.35e8
LAUNCH_PER_LAYER_S = 0.3e-3
CALL_S = 1e-3
LOAD_S = 30.0


def estimate_h100_seconds(cfg: Any) -> dict[str, float]:
    """Estimated seconds of a run of ``cfg`` (a ``RemovalLMConfig``) on one H100 with SmolLM2-135M: ``generate``,
    ``walks`` (both walks, every text walking ``walk_max_steps`` steps: an upper bound) and ``total`` (with the model
    load), summed over ``cfg.n_seeds`` prompt samples."""
    call = LAUNCH_PER_LAYER_S * N_LAYERS + CALL_S
    L = cfg.prompt_len + cfg.T
    gen = cfg.T * call + 2 * PARAMS * cfg.n_texts * L / GPU_ACHIEVED_FLOPS
    step = (cfg.span + 2) * call + 2 * PARAMS * cfg.n_texts * L / GPU_ACHIEVED_FLOPS
    walks = cfg.walk_max_steps * (2 * step + step)  # real (forwards + as much for detection) and random
    return {"generate": cfg.n_seeds * gen, "walks": cfg.n_seeds * walks,
            "total": LOAD_S + cfg.n_seeds * (gen + walks)}
