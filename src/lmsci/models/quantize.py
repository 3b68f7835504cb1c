"""Post-training weight quantization (fake quantization) of a trained model, for capacity after quantization.

Physics of LMs Part 3.3 (Allen-Zhu & Li, arXiv 2404.05405, abstract and its quantization section) quantizes
trained models to int8 and int4 and measures the knowledge bits that remain: int8 keeps the 2 bits/param, int4
loses much of it (0.7 bits/param as summarised in ``/work/notes/capacity_paper_numbers.md``, which also says what
of the paper's quantizer could and could not be checked). This module is the quantizer lmsci uses:

* **Scheme**: symmetric round-to-nearest (RTN) weight-only quantization to signed ``bits``-bit integers in
  ``[-q, q]``, ``q = 2**(bits-1) - 1`` (127 for int8, 7 for int4; the restricted symmetric range, zero point 0),
  with one scale per output channel (row of a ``[out, in]`` weight; per (expert, row) for a MoE stack
  ``[E, out, in]``), ``scale = max|w_row| / q``; or, with ``group_size``, one scale per group of ``group_size``
  consecutive input columns of a row (the group-wise layout of GPTQ/AWQ checkpoints, e.g. 128).
* **Fake quantization**: the weights are replaced by their dequantized values ``round(w / scale) * scale`` in
  the model's float dtype, so every instrument (the bit estimator of :mod:`lmsci.measure.knowledge`) scores the
  quantized model unchanged. The rounding is PyTorch's own ``torch.fake_quantize_per_channel_affine`` (the op
  behind ``torch.ao.quantization``'s per-channel fake-quant observers; round half to even), no extra dependency.
* **What is quantized**: every floating-point parameter with two or more dimensions (linear and embedding
  matrices, the unembedding, MoE expert stacks, the routers, position tables), each shared (tied) tensor once;
  biases (also the MoE's stacked ``[E, d]`` ones) and the other one-dimensional parameters (norm weights; a
  small share of any model) stay in full precision, as in
  weight-only schemes (GPTQ, AWQ, bitsandbytes keep biases and norms in 16 bits). ``skip`` excludes more by name.

RTN is the simplest quantizer; a calibrated one (GPTQ, Frantar et al. 2022, arXiv 2210.17323) loses less at
4 bits, so capacity measured after RTN int4 is a lower bound on what a 4-bit model can keep.
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from lmsci.errors import ConfigError

MIN_BITS, MAX_BITS = 2, 8


def qmax(bits: int) -> int:
    """Largest quantized magnitude of signed symmetric ``bits``-bit integers: ``2**(bits-1) - 1``."""
    return 2 ** (bits - 1) - 1


def _check(bits: int, group_size: int | None) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int) or not MIN_BITS <= bits <= MAX_BITS:
        raise ConfigError("bits", bits, f"an integer in [{MIN_BITS}, {MAX_BITS}] (8 = int8, 4 = int4)")
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1):
        raise ConfigError("group_size", group_size, "None (per output channel) or an integer >= 1")


def quantize_tensor(w: Tensor, bits: int, group_size: int | None = None) -> tuple[Tensor, Tensor]:
    """Symmetric RTN fake quantization of a weight ``[..., out, in]`` (module docstring).

    Args:
        w: the weight; every index but the last is an output channel (``[out, in]``, or ``[E, out, in]``).
        bits: integer width in ``[2, 8]``.
        group_size: None for one scale per output channel, else one per ``group_size`` consecutive inputs
            (must divide ``in``).

    Returns:
        ``(dequantized, scale)``: the dequantized weight (same shape and dtype as ``w``) and the scales, float32
        ``[..., out]`` (per channel) or ``[..., out, in / group_size]`` (group-wise).

    Raises:
        ConfigError: bad ``bits`` or ``group_size``, a weight with fewer than 2 dimensions, or a ``group_size``
            that does not divide the input width.
    """
    _check(bits, group_size)
    if w.dim() < 2:
        raise ConfigError("w.dim()", w.dim(), ">= 2 (a [out, in] weight or a stack of them)")
    lead, n_in = tuple(w.shape[:-1]), w.shape[-1]
    if group_size is not None and n_in % group_size != 0:
        raise ConfigError("group_size", group_size, f"a divisor of the input width {n_in}")
    g = n_in if group_size is None else group_size
    rows = w.detach().float().reshape(-1, g)  # one row per scale
    q = qmax(bits)
    scale = (rows.abs().amax(dim=1) / q).clamp(min=torch.finfo(torch.float32).tiny)
    zero = torch.zeros(rows.shape[0], dtype=torch.int32, device=rows.device)
    deq = torch.fake_quantize_per_channel_affine(rows, scale, zero, 0, -q, q)
    scale_shape = lead if group_size is None else (*lead, n_in // g)
    return deq.reshape(w.shape).to(w.dtype), scale.reshape(scale_shape)


def fake_quantize(model: nn.Module, bits: int, *, group_size: int | None = None,
                  skip: Sequence[str] = ()) -> tuple[nn.Module, dict[str, Any]]:
    """A copy of ``model`` whose weights are quantized to ``bits`` bits and dequantized (module docstring).

    Args:
        model: any ``nn.Module`` (an lmsci GPT, a Hugging Face model); left unchanged.
        bits: 8 (int8), 4 (int4), or any width in ``[2, 8]``.
        group_size: None (per output channel) or the group width along the input (see :func:`quantize_tensor`);
            a weight whose input width it does not divide raises.
        skip: ``fnmatch`` globs of parameter names left in full precision (e.g. ``["wte.*", "lm_head.*"]``).

    Returns:
        ``(quantized_copy, report)``; ``report`` has ``bits``, ``group_size``, ``n_quantized`` (parameters
        quantized), ``n_params`` (all, shared tensors once), ``tensors`` (names quantized), ``max_abs_error`` and
        ``rel_rmse`` (``||w_q - w|| / ||w||`` over the quantized parameters).

    Raises:
        ConfigError: bad ``bits`` / ``group_size`` (before anything is copied).
    """
    _check(bits, group_size)
    out = copy.deepcopy(model)
    names, n_q, n_all, max_err, se, ss = [], 0, 0, 0.0, 0.0, 0.0
    with torch.no_grad():
        for name, p in out.named_parameters():  # shared (tied) tensors come once
            n_all += p.numel()
            is_bias = name.endswith("bias")  # also the MoE's stacked [E, d] biases
            if p.dim() < 2 or is_bias or not p.is_floating_point() or any(fnmatch.fnmatchcase(name, s) for s in skip):
                continue
            deq, _ = quantize_tensor(p, bits, group_size)
            err = (deq.float() - p.float())
            max_err = max(max_err, float(err.abs().max()))
            se += float((err * err).sum())
            ss += float((p.float() ** 2).sum())
            p.copy_(deq)
            names.append(name)
            n_q += p.numel()
    report = {"bits": bits, "group_size": group_size, "n_quantized": n_q, "n_params": n_all, "tensors": names,
              "max_abs_error": max_err, "rel_rmse": (se / ss) ** 0.5 if ss > 0 else 0.0}
    return out, report
