"""lmsci: a laboratory for the science of language models.

Controlled worlds, model families, a trainer, instruments, interventions on real models and
law fitting, composed into experiments that reproduce published claims end to end
(``lmsci run EXPERIMENT``).

The names a researcher imports most are re-exported here and, by area, from :mod:`lmsci.models`,
:mod:`lmsci.worlds`, :mod:`lmsci.train`, :mod:`lmsci.measure` (instruments), :mod:`lmsci.methods`
(interventions) and :mod:`lmsci.laws`; each is imported lazily on first use, so ``import lmsci`` is cheap.
The documentation site (``bash scripts/docs.sh serve``; sources under ``docs/``) has the tutorials and the
API reference.
"""

from lmsci._api import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "GPT": "lmsci.models.gpt",
    "GPTConfig": "lmsci.models.gpt",
    "GPTSpec": "lmsci.models.gpt",
    "HFModel": "lmsci.models.hf",
    "load_hf": "lmsci.models.hf",
    "export_hf": "lmsci.models.hf_convert",
    "TrainConfig": "lmsci.train.trainer",
    "TrainSpec": "lmsci.train.trainer",
    "fit": "lmsci.laws.fit",
    "get_form": "lmsci.laws.forms",
    "LmsciError": "lmsci.errors",
    "ConfigError": "lmsci.errors",
}
__all__ = ["__version__", *_EXPORTS]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
