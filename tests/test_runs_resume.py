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


def test_a_commit_that_looks_like_a_number_is_read_back_as_its_hex_string(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir(parents=True, exist_ok=True)
    for i, commit in enumerate(["1234e567", "0123456", "abcdef0"]):
        run.append_result(f"p{i}", {"commit": commit, "loss": 1.0})
    assert run.results()["commit"].tolist() == ["1234e567", "0123456", "abcdef0"]
