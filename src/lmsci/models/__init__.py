"""lmsci.models: the GPT family with hook points, the Hugging Face bridge, the architecture map and the fused loss.

- :class:`GPT` / :class:`GPTConfig` / :class:`GPTSpec` (:mod:`lmsci.models.gpt`): one GPT with position schemes
  (learned, RoPE, relative, ALiBi, NoPE, ...), MLP and norm variants, TransformerLens-style hook points.
- :func:`load_hf` / :class:`HFModel` (:mod:`lmsci.models.hf`): any local Hugging Face causal LM, hooked by module
  path or by lmsci's hook names; :func:`export_hf` / :func:`import_hf` (:mod:`lmsci.models.hf_convert`): lmsci GPTs
  to and from ``transformers``.
- :func:`arch_of` (:mod:`lmsci.models.arch`): the architecture map every intervention goes through.
- :func:`linear_cross_entropy` (:mod:`lmsci.models.loss`): CE of ``h W^T`` in chunks, no ``[tokens, vocab]`` logits.

Names are imported lazily on first use (:mod:`lmsci._api`).
"""

from lmsci._api import lazy_exports

_EXPORTS = {
    "GPT": "lmsci.models.gpt",
    "GPTConfig": "lmsci.models.gpt",
    "GPTSpec": "lmsci.models.gpt",
    "HFModel": "lmsci.models.hf",
    "load_hf": "lmsci.models.hf",
    "export_hf": "lmsci.models.hf_convert",
    "import_hf": "lmsci.models.hf_convert",
    "load_model": "lmsci.models.zoo",
    "model_provenance": "lmsci.models.zoo",
    "zoo_names": "lmsci.models.zoo",
    "arch_of": "lmsci.models.arch",
    "linear_cross_entropy": "lmsci.models.loss",
    "LSTMLM": "lmsci.models.lstm",
    "LSTMConfig": "lmsci.models.lstm",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
