"""lmsci.measure: instruments. Each takes the model and what it measures (tokens, spans, attribute names) as
arguments, imports no world, and runs on lmsci GPTs and, where stated, on Hugging Face models
(:class:`lmsci.models.HFModel` or a ``transformers`` causal LM).

- causal tracing (:mod:`lmsci.measure.causal_tracing`, Meng et al. 2022): :func:`causal_trace`,
  :func:`embedding_std`, :func:`average_by_category`, :class:`TraceResult`;
- heads (:mod:`lmsci.measure.heads`, Olsson et al. 2022; Elhage et al. 2021): :func:`attention_patterns`,
  :func:`prefix_matching_scores`, :func:`gpt_head_weights`, :func:`ov_copying_scores`, :func:`token_nll`;
- attention at long lengths (:mod:`lmsci.measure.attention`, Han et al. 2023): :func:`attention_profile`,
  :func:`nll_by_position`;
- probes (:mod:`lmsci.measure.probes`, :mod:`lmsci.measure.vprobe`): :func:`hidden_at`,
  :func:`fit_linear_probe` (V-probes: ``lmsci.measure.vprobe.vprobe``);
- MLP memories and neurons: :func:`key_value_memories` (Geva et al. 2021), :func:`knowledge_neurons`,
  :func:`integrated_gradients` (Dai et al. 2022);
- patching (:mod:`lmsci.measure.patching`, Wang et al. 2022): :func:`logit_diff`, :func:`head_patching`,
  :func:`path_patching`;
- losses and counts: :func:`position_nll`, :func:`count_params`; calibration (Kalai & Vempala 2023):
  :func:`monofact_rate`, :func:`miscalibration`.

Names are imported lazily on first use (:mod:`lmsci._api`).
"""

from lmsci._api import lazy_exports

_EXPORTS = {
    "causal_trace": "lmsci.measure.causal_tracing",
    "embedding_std": "lmsci.measure.causal_tracing",
    "average_by_category": "lmsci.measure.causal_tracing",
    "TraceResult": "lmsci.measure.causal_tracing",
    "attention_patterns": "lmsci.measure.heads",
    "prefix_matching_scores": "lmsci.measure.heads",
    "gpt_head_weights": "lmsci.measure.heads",
    "ov_copying_scores": "lmsci.measure.heads",
    "token_nll": "lmsci.measure.heads",
    "attention_profile": "lmsci.measure.attention",
    "nll_by_position": "lmsci.measure.attention",
    "hidden_at": "lmsci.measure.probes",
    "fit_linear_probe": "lmsci.measure.probes",
    "key_value_memories": "lmsci.measure.kv_memories",
    "knowledge_neurons": "lmsci.measure.attribution",
    "integrated_gradients": "lmsci.measure.attribution",
    "logit_diff": "lmsci.measure.patching",
    "head_patching": "lmsci.measure.patching",
    "path_patching": "lmsci.measure.patching",
    "position_nll": "lmsci.measure.position_loss",
    "count_params": "lmsci.measure.knowledge",
    "monofact_rate": "lmsci.measure.calibration",
    "miscalibration": "lmsci.measure.calibration",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
