"""Time estimates of training runs on one GPU: what the ``gpu`` presets' documented times come from.

A training step of lmsci's eager GPT costs ``tokens * flops_per_token / GPU_ACHIEVED_FLOPS`` plus a fixed
``STEP_OVERHEAD_S[0] + STEP_OVERHEAD_S[1] * n_layers`` seconds of kernel launches and Python per optimizer step
(~40 launches per layer forward + backward, ~60 more for embedding, loss, clipping and the fused AdamW, at ~10 us
each; the loss and grad-norm reads synchronise every step, so nothing overlaps).

The throughput is measured, not assumed: the first point of ``celebrity-helps-minority``'s gpu preset ran at 0.85M
tokens/s once it had the GPU to itself (H200, bf16 autocast, d_model 256 x 4 layers, 11.4k tokens a step): 13.4 ms
a step, of which the step overhead is 2.5 ms, leaves 2.6e11 FLOPs in 10.9 ms, i.e. 24 TFLOP/s, ~2.5% of the dense
bf16 peak. The 100 TFLOP/s assumed before was ~4x too high for models this small; an H100 is not faster at this
size. Wider models with more tokens a step run larger matmuls and may run faster than this rate, so for them the
estimates are upper bounds until measured.

FLOPs per token follow Kaplan et al. 2020 (arXiv 2001.08361, Table 1).
"""

from __future__ import annotations

GPU_ACHIEVED_FLOPS = 24e12
STEP_OVERHEAD_S = (0.5e-3, 0.5e-3)
GPU_BUDGET_S = 30 * 60
GPU_ASSUMPTIONS = ("24 TFLOP/s achieved in bf16, measured on an H200 on 2026-11-26 (celebrity-helps-minority's gpu "
                   "preset: 0.85M tokens/s at d_model 256 x 4 layers, batch 24 x 512), + (0.5 + 0.5 x layers) ms per "
                   "optimizer step (lmsci.train.estimate)")


def flops_per_token(d_model: int, n_layers: int, vocab_size: int, seq_len: int, train: bool = True) -> float:
    """FLOPs per token of a GPT: forward ``2 * (12 * n_layers * d_model^2 + vocab_size * d_model) +
    2 * n_layers * seq_len * d_model`` (matmul parameters including the unembedding, plus attention scores and
    values); training 3x the forward."""
    fwd = 2 * (12 * n_layers * d_model ** 2 + vocab_size * d_model) + 2 * n_layers * seq_len * d_model
    return float(3 * fwd if train else fwd)


def gpu_seconds(d_model: int, n_layers: int, vocab_size: int, seq_len: int, *, tokens: float, steps: float,
                eval_tokens: float = 0.0) -> float:
    """Estimated wall seconds on one H100 for ``tokens`` training tokens in ``steps`` optimizer steps plus
    ``eval_tokens`` of forward-only evaluation (the module's assumptions; host data work not included)."""
    compute = (tokens * flops_per_token(d_model, n_layers, vocab_size, seq_len)
               + eval_tokens * flops_per_token(d_model, n_layers, vocab_size, seq_len, train=False)) / GPU_ACHIEVED_FLOPS
    return float(compute + steps * (STEP_OVERHEAD_S[0] + STEP_OVERHEAD_S[1] * n_layers))
