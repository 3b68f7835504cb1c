"""Helpers shared by the length family's experiments (length-generalization, passkey-retrieval)."""

from __future__ import annotations

from lmsci.experiments.base import Point


def seed_suffix(point: Point) -> str:
    """``""`` for training seed 0, ``"__s{k}"`` for seed k (the suffix :meth:`Experiment.seeded_points` adds)."""
    return "" if point.seed_index == 0 else f"__s{point.seed_index}"
