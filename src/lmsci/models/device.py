"""Where a model lives: the device that instruments and harnesses follow (issue 12, item 3).

Instruments in :mod:`lmsci.measure` and the evaluation helpers of the experiments take the device of the
model they are given (the device of its first parameter, else of its first buffer) instead of a fixed
``"cpu"``, so a model trained on CUDA is measured on CUDA and inputs are moved to it.
"""

from __future__ import annotations

from typing import Any

import torch


def device_of(model: Any) -> torch.device:
    """The device of ``model``'s first parameter, else of its first buffer, else ``model.device`` (Hugging
    Face models), else the CPU (a model without tensors, e.g. a closed-form baseline)."""
    for getter in ("parameters", "buffers"):
        it = getattr(model, getter, None)
        if callable(it):
            for t in it():
                return t.device
    dev = getattr(model, "device", None)
    return torch.device(dev) if dev is not None else torch.device("cpu")


def resolve_model_device(model: Any, device: str | torch.device | None) -> torch.device:
    """``device`` when given, else :func:`device_of` ``(model)``."""
    return torch.device(device) if device is not None else device_of(model)
