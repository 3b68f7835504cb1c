"""The toy experiment the backend tests share (test_ray, test_process_backend): four points, each a number from its
seed; each writes an artifact and a metrics line; ``fail`` makes point "b" raise a ConfigError and ``crash`` (a marker
file) makes point "c" kill its own worker once. Not a test module: imported by them (and, in spawned workers, by
module path; Ray's workers get it by value)."""

from __future__ import annotations

import os
import random
import signal
from typing import Any, ClassVar

from lmsci.config import ExperimentConfig
from lmsci.errors import ConfigError
from lmsci.experiments.base import Experiment, Point


class ToyConfig(ExperimentConfig):
    crash: str = ""  # a marker file: point "c" kills its own worker while the file does not exist
    fail: bool = False  # point "b" raises a ConfigError
    PRESETS: ClassVar[dict] = {"smoke": {}, "quick": {}}


class ToyBase(Experiment):
    """The shared toy; subclasses set ``name`` and may add columns in :meth:`extra`."""

    Config = ToyConfig
    claims = []

    def points(self, cfg):
        return [Point(k, {"x": i}) for i, k in enumerate("abcd")]

    def extra(self) -> dict[str, Any]:
        return {}

    def run_point(self, cfg, point, ctx):
        if cfg.fail and point.id == "b":
            raise ConfigError("x", 1, "not 1 (the toy's bad point)")
        if cfg.crash and point.id == "c" and not os.path.exists(cfg.crash):
            open(cfg.crash, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-point
        (ctx.artifact_dir / "value.txt").write_text(str(point.params["x"]))
        ctx.log(step=1, loss=float(point.params["x"]))
        return {"x": point.params["x"], "value": random.Random(ctx.seed).random(), **self.extra()}

    def verdicts(self, cfg, results, run):
        return []
