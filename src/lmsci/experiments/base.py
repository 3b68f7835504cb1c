"""The experiment contract: points of a sweep, one pure function per point, a verdict, figures.

An experiment is a pipeline world -> model -> trainer -> instruments -> verdict -> report run over
a sweep of points; each point is a pure function of (config, point, seed) so sweeps resume and
parallelise. See DESIGN.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from lmsci.config import ExperimentConfig
from lmsci.runs import RunDir, Verdict, derive_seed


@dataclass(frozen=True)
class Point:
    """One point of a sweep.

    Attributes:
        id: a stable, filename-safe identifier (for example ``"attn_H4_dh8_S64"``).
        params: the point's parameters (written to the results row by the experiment).
    """

    id: str
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass
class Figure:
    """A figure written under ``RUN_DIR/figures/``; ``filename`` is relative to that folder."""

    filename: str
    caption: str


def save_figure(fig: Any, run: RunDir, filename: str, caption: str, dpi: int = 110) -> Figure:
    """Lay out a matplotlib figure, write it as ``run.figures_dir / filename`` at ``dpi``, close it,
    and return its :class:`Figure` (what ``Experiment.figures`` lists)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(run.figures_dir / filename, dpi=dpi)
    plt.close(fig)
    return Figure(filename, caption)


class PointContext:
    """What ``run_point`` gets besides config and point: its seed, device, logging and progress.

    Attributes:
        point: the point being computed.
        seed: the point's seed, derived from (config seed, point id).
        device: the resolved torch device string.
        run: the run directory.
    """

    def __init__(self, run: RunDir, point: Point, seed: int, device: str, show_progress: bool = True):
        self.run, self.point, self.seed, self.device = run, point, seed, device
        self.show_progress = show_progress

    @property
    def artifact_dir(self) -> Path:
        """``RUN_DIR/points/<id>/`` for checkpoints and arrays of this point."""
        return self.run.point_dir(self.point.id)

    def log(self, **metrics: Any) -> None:
        """Append a metrics line (step, loss, lr, tokens/s, ...) for this point."""
        self.run.log_metrics(self.point.id, metrics)

    def progress(self, total: int, desc: str = "train"):
        """A tqdm progress bar over ``total`` steps (disabled when progress is off)."""
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=f"{self.point.id}:{desc}", leave=False, disable=not self.show_progress,
                    dynamic_ncols=True)


class Experiment:
    """Base class of experiments. Subclasses set the class attributes and implement the methods.

    Class attributes:
        name: registry name (``lmsci run NAME``).
        claim: the published claim tested, one sentence.
        source: paper, arXiv id, section/figure/theorem.
        Config: the pydantic config class (defaults = quick preset; ``PRESETS`` for the rest).
        time_estimate: preset -> rough wall time on the intended hardware.
    """

    name: ClassVar[str] = ""
    claim: ClassVar[str] = ""
    source: ClassVar[str] = ""
    Config: ClassVar[type[ExperimentConfig]] = ExperimentConfig
    time_estimate: ClassVar[dict[str, str]] = {}

    def validate(self, cfg: ExperimentConfig) -> None:
        """Cross-field checks; raise :class:`lmsci.errors.ConfigError` before any work starts."""

    def points(self, cfg: ExperimentConfig) -> list[Point]:
        """The sweep grid, in the order it is run."""
        raise NotImplementedError

    def groups(self, cfg: ExperimentConfig, points: list[Point]) -> list[list[Point]]:
        """How points are batched for :meth:`run_group` (default: one at a time)."""
        return [[p] for p in points]

    def run_point(self, cfg: ExperimentConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        """Train and measure one point; deterministic in (cfg, point, ctx.seed). Returns a results row."""
        raise NotImplementedError

    def run_group(
        self, cfg: ExperimentConfig, points: list[Point], ctxs: list[PointContext]
    ) -> list[dict[str, Any]]:
        """Compute several points at once (override to batch tiny models); default loops."""
        return [self.run_point(cfg, p, c) for p, c in zip(points, ctxs)]

    def verdicts(self, cfg: ExperimentConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        """The claim's verdict(s), computed from the results table."""
        raise NotImplementedError

    def figures(self, cfg: ExperimentConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        """Write PNG figures into ``run.figures_dir`` and describe them."""
        return []

    def report_sections(self, cfg: ExperimentConfig, results: pd.DataFrame, run: RunDir) -> str:
        """Extra markdown for the report (method notes, tables); default none."""
        return ""

    def point_seed(self, cfg: ExperimentConfig, point: Point) -> int:
        return derive_seed(cfg.seed, self.name, point.id)
