"""Laws: scaling laws (Kaplan, Chinchilla), their refits, and language-model training on real text.

The registry imports every module of this family package (:mod:`lmsci.experiments.registry`);
no module here imports another family's modules."""
