"""lmsci: a laboratory for the science of language models.

Controlled worlds, model families, a trainer, instruments, interventions on real models and
law fitting, composed into experiments that reproduce published claims end to end
(``lmsci run EXPERIMENT``).
"""

__version__ = "0.1.0"
