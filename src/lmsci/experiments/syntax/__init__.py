"""Syntax: context-free grammars (Physics of LMs Part 1), word order, and the components that carry syntax.

The registry imports every module of this family package (:mod:`lmsci.experiments.registry`);
no module here imports another family's modules."""
