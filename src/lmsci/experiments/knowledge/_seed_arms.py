"""An experiment whose arms of one training seed (or prompt sample) are measured together, once: one group per seed,
one row per arm from a single :meth:`SeedArmsExperiment._measure` (``knowledge-neurons``, ``knowledge-neurons-lm``).
"""

from __future__ import annotations

from typing import Any

from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Point, PointContext


class SeedArmsExperiment(Experiment):
    """:class:`~lmsci.contract.Experiment` whose subclasses give ``_measure(cfg, k, ctx) -> {arm: row}`` for the seed
    index ``k`` (the context of its first point: the arms share the seed); the arm ``""`` reads the ``real`` row."""

    def groups(self, cfg: ExperimentConfig, points: list[Point]) -> list[list[Point]]:
        """The arms of one seed form one group: one computation gives all their rows."""
        by_seed: dict[int, list[Point]] = {}
        for p in points:
            by_seed.setdefault(p.seed_index, []).append(p)
        return list(by_seed.values())

    def run_point(self, cfg: ExperimentConfig, point: Point, ctx: PointContext) -> dict:
        return self.run_group(cfg, [point], [ctx])[0]

    def run_group(self, cfg: ExperimentConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        rows = self._measure(cfg, points[0].seed_index, ctxs[0])
        return [rows[p.arm or "real"] for p in points]

    def _measure(self, cfg: Any, k: int, ctx: PointContext) -> dict[str, dict]:
        """``{arm: row}`` of seed index ``k`` (``ctx``: its first point's context)."""
        raise NotImplementedError
