"""Knowledge: storage and extraction of facts (Physics of LMs Part 3, bioS), its capacity, its messiness, and its physiology (where facts live: causal tracing and ROME, knowledge neurons, FFN key-value memories).

The registry imports every module of this family package (:mod:`lmsci.experiments.registry`);
no module here imports another family's modules."""
