"""lmsci.methods: interventions on models (lmsci GPTs and Hugging Face models of the architecture map).

- attention policies (:mod:`lmsci.methods.lm_infinite`, Han et al. 2023, arXiv 2308.16137; Xiao et al. 2023,
  arXiv 2309.17453): :func:`apply_lm_infinite` (the context manager is ``lmsci.methods.lm_infinite.lm_infinite``),
  :func:`lm_infinite_policy`, :func:`sliding_window_policy`, :func:`attention_sinks_policy`, :func:`full_policy`,
  :class:`AttentionPolicy`, :class:`AttentionPatch`;
- ROME (:mod:`lmsci.methods.rome`, Meng et al. 2022, arXiv 2202.05262): :func:`compute_rome`, :func:`edited`,
  :class:`RomeHParams`, :class:`RomeEdit`;
- steering (:mod:`lmsci.methods.steering`, :mod:`lmsci.methods.lm_steer`, Han et al. 2024, arXiv 2305.12798):
  :class:`LMSteer`, :func:`train_steer`, :class:`ActAdd`, :class:`LogitOffset` (the context manager is
  ``lmsci.methods.steering.steering``);
- watermarks (:mod:`lmsci.methods.watermark`, Kirchenbauer et al. 2023, arXiv 2301.10226):
  :func:`watermarking_config`, :func:`detect`.

Names are imported lazily on first use (:mod:`lmsci._api`). A function that shares its module's name
(``lm_infinite``, ``steering``) is not re-exported: the package attribute stays the submodule.
"""

from lmsci._api import lazy_exports

_EXPORTS = {
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
    "LMSteer": "lmsci.methods.lm_steer",
    "train_steer": "lmsci.methods.lm_steer",
    "ActAdd": "lmsci.methods.steering",
    "LogitOffset": "lmsci.methods.steering",
    "watermarking_config": "lmsci.methods.watermark",
    "detect": "lmsci.methods.watermark",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
