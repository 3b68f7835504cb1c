"""lmsci.methods: interventions on models (lmsci GPTs and Hugging Face models of the architecture map).

- attention policies (:mod:`lmsci.methods.lm_infinite`, Han et al. 2023, arXiv 2308.16137; Xiao et al. 2023,
  arXiv 2309.17453): :func:`lm_infinite` (a context manager), :func:`apply_lm_infinite`,
  :func:`lm_infinite_policy`, :func:`sliding_window_policy`, :func:`attention_sinks_policy`, :func:`full_policy`,
  :class:`AttentionPolicy`, :class:`AttentionPatch`;
- ROME (:mod:`lmsci.methods.rome`, Meng et al. 2022, arXiv 2202.05262): :func:`compute_rome`, :func:`edited`,
  :class:`RomeHParams`, :class:`RomeEdit`;
- steering (:mod:`lmsci.methods.steering`, :mod:`lmsci.methods.lm_steer`, Han et al. 2024, arXiv 2305.12798):
  :func:`steering`, :class:`LMSteer`, :func:`train_steer`, :class:`ActAdd`, :class:`LogitOffset`;
- watermarks (:mod:`lmsci.methods.watermark`, Kirchenbauer et al. 2023, arXiv 2301.10226):
  :func:`watermarking_config`, :func:`detect`.

Names are imported lazily on first use (:mod:`lmsci._api`), but for :func:`lm_infinite` and :func:`steering`,
which share their module's name.
"""

from lmsci._api import lazy_exports

_EXPORTS = {
    "lm_infinite": "lmsci.methods.lm_infinite",
    "apply_lm_infinite": "lmsci.methods.lm_infinite",
    "lm_infinite_policy": "lmsci.methods.lm_infinite",
    "sliding_window_policy": "lmsci.methods.lm_infinite",
    "attention_sinks_policy": "lmsci.methods.lm_infinite",
    "full_policy": "lmsci.methods.lm_infinite",
    "AttentionPolicy": "lmsci.methods.lm_infinite",
    "AttentionPatch": "lmsci.methods.lm_infinite",
    "compute_rome": "lmsci.methods.rome",
    "edited": "lmsci.methods.rome",
    "RomeHParams": "lmsci.methods.rome",
    "RomeEdit": "lmsci.methods.rome",
    "steering": "lmsci.methods.steering",
    "LMSteer": "lmsci.methods.lm_steer",
    "train_steer": "lmsci.methods.lm_steer",
    "ActAdd": "lmsci.methods.steering",
    "LogitOffset": "lmsci.methods.steering",
    "watermarking_config": "lmsci.methods.watermark",
    "detect": "lmsci.methods.watermark",
}
__all__ = list(_EXPORTS)
# public names that are also submodules' names: bound eagerly (see lmsci._api)
from lmsci.methods.lm_infinite import lm_infinite  # noqa: E402
from lmsci.methods.steering import steering  # noqa: E402

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
