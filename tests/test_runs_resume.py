"""A run directory made before an execution field existed (``compile``) still resumes; a science change does not."""

from __future__ import annotations

import pytest

from lmsci.errors import RunDirError
from lmsci.runs import RunDir

OLD = "preset: quick\nseed: 0\nthreads: 1\nsteps: 100\n"


def test_resume_ignores_execution_fields_the_run_predates(tmp_path):
    rd = RunDir(tmp_path / "r")
    assert rd.init("toy", OLD, {}) is False
    assert RunDir(tmp_path / "r").init("toy", OLD.replace("threads: 1\n", "threads: 1\ncompile: auto\n"), {}) is True
    with pytest.raises(RunDirError, match="different configuration"):
        RunDir(tmp_path / "r").init("toy", OLD.replace("steps: 100", "steps: 200"), {})
    with pytest.raises(RunDirError, match="different configuration"):  # a science field it predates still counts
        RunDir(tmp_path / "r").init("toy", OLD + "lr: 0.1\n", {})
