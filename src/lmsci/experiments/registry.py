"""The experiment registry: ``@register("name")`` and lookup with did-you-mean errors."""

from __future__ import annotations

import importlib

from lmsci.errors import UnknownNameError
from lmsci.experiments.base import Experiment

_REGISTRY: dict[str, type[Experiment]] = {}

# Modules that define experiments; imported on first lookup so `import lmsci` stays light.
EXPERIMENT_MODULES = [
    "lmsci.experiments.factual_recall",
    "lmsci.experiments.hallucination_stage",
    "lmsci.experiments.shakespeare_lm",
    "lmsci.experiments.length_generalization",
    "lmsci.experiments.passkey_retrieval",
    "lmsci.experiments.knowledge_extraction",
    "lmsci.experiments.celebrity",
    "lmsci.experiments.reversal_curse",
    "lmsci.experiments.knowledge_capacity",
    "lmsci.experiments.chinchilla_refit",
    "lmsci.experiments.scaling_sweep",
    "lmsci.experiments.grokking",
    "lmsci.experiments.double_descent",
    "lmsci.experiments.benign_overfitting",
    "lmsci.experiments.implicit_bias",
    "lmsci.experiments.calibration_hallucination",
    "lmsci.experiments.alignment_attack",
    "lmsci.experiments.watermark",
    "lmsci.experiments.watermark_removal",
    "lmsci.experiments.cfg_learning",
    "lmsci.experiments.cfg_probing",
    "lmsci.experiments.word_order",
    "lmsci.experiments.icl_linear_regression",
    "lmsci.experiments.icl_kernel_regression",
    "lmsci.experiments.lm_steer",
    "lmsci.experiments.knowledge_neurons",
    "lmsci.experiments.mlp_memories",
    "lmsci.experiments.causal_tracing",
    "lmsci.experiments.messy_knowledge",
    "lmsci.experiments.igsm_ood",
    "lmsci.experiments.igsm_depth",
    "lmsci.experiments.igsm_retry",
    "lmsci.experiments.igsm_probing",
    "lmsci.experiments.igsm_noop",
]

_loaded = False


def register(name: str):
    """Class decorator adding an :class:`Experiment` subclass to the catalog under ``name``."""

    def deco(cls: type[Experiment]) -> type[Experiment]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"experiment {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def _load_all() -> None:
    global _loaded
    if not _loaded:
        for mod in EXPERIMENT_MODULES:
            importlib.import_module(mod)
        _loaded = True


def get(name: str) -> type[Experiment]:
    """The experiment class registered as ``name``.

    Raises:
        UnknownNameError: no such experiment (the message suggests close names).
    """
    _load_all()
    if name not in _REGISTRY:
        raise UnknownNameError("experiment", name, _REGISTRY.keys())
    return _REGISTRY[name]


def catalog() -> dict[str, type[Experiment]]:
    """All registered experiments, by name."""
    _load_all()
    return dict(sorted(_REGISTRY.items()))


def shipped() -> dict[str, type[Experiment]]:
    """The experiments lmsci ships (defined in ``EXPERIMENT_MODULES``), by name; experiments that a test or
    a user registers elsewhere are left out (the claims snapshot, ``lmsci claims`` and the suite use this)."""
    return {n: cls for n, cls in catalog().items() if cls.__module__ in EXPERIMENT_MODULES}
