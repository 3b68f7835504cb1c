"""lmsci.train: the training loop (:func:`train`, one readable file), its specs, and stacked training.

- :func:`train` / :class:`TrainConfig` / :class:`TrainSpec` / :class:`TrainResult` (:mod:`lmsci.train.trainer`):
  fused AdamW, linear warmup and cosine decay, clipping, accumulation, bitwise resume from checkpoints.
- :func:`train_stacked` (:mod:`lmsci.train.stacked`): K same-shaped models trained as one ``torch.func`` stack.

Names are imported lazily on first use (:mod:`lmsci._api`).
"""

from lmsci._api import lazy_exports

_EXPORTS = {
    "train": "lmsci.train.trainer",
    "TrainConfig": "lmsci.train.trainer",
    "TrainSpec": "lmsci.train.trainer",
    "TrainResult": "lmsci.train.trainer",
    "train_stacked": "lmsci.train.stacked",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
