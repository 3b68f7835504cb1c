"""Pieces shared by the watermark family's experiments (:mod:`.watermark`, :mod:`.watermark_removal`)."""

from __future__ import annotations

from lmsci.contract import Point


def arms_by_seed(points: list[Point]) -> list[list[Point]]:
    """Groups of the points of one training seed (every arm of it), in order: the arms share one trained model."""
    by_seed: dict[int, list[Point]] = {}
    for p in points:
        by_seed.setdefault(p.seed_index, []).append(p)
    return list(by_seed.values())
