"""The training cache (lmsci.train.cache): a hit gives the stored weights and log, any changed field or a code change
makes another key, no folder means no cache, a dead process's lock is taken over, a live one's is waited for."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
import torch

from lmsci.train import cache as tc


class Ctx:
    device = "cpu"

    def __init__(self):
        self.logged = []

    def log(self, **m):
        self.logged.append(m)


def _train_fn(model, calls):
    def train(ctx):
        calls.append(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        ctx.log(step=1, loss=2.5)
        ctx.log(step=2, loss=1.5)
        return {"loss": 1.5, "step": 2}
    return train


FIELDS = {"what": "toy", "seed": 3}
CODE = ("lmsci.train.cache",)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))


def test_a_hit_loads_the_stored_weights_and_replays_the_log(tmp_path):
    calls, ctx = [], Ctx()
    m1 = _model()
    final = tc.cached_training(m1, _train_fn(m1, calls), FIELDS, ctx, code=CODE, folder=tmp_path)
    assert final == {"loss": 1.5, "step": 2} and calls == [1]
    assert ctx.logged[-1]["cache"] == "stored" and [r.get("step") for r in ctx.logged[:2]] == [1, 2]
    ctx2, m2 = Ctx(), _model()
    assert not all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    final2 = tc.cached_training(m2, _train_fn(m2, calls), FIELDS, ctx2, code=CODE, folder=tmp_path)
    assert calls == [1] and final2 == final  # not trained again
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    assert ctx2.logged[:2] == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 1.5}]
    assert ctx2.logged[2]["cache"] == "hit"
    entry = tmp_path / ctx2.logged[2]["training_key"]
    key = json.loads((entry / "key.json").read_text())
    assert key["fields"] == FIELDS and "lmsci/train/cache.py" in key["code"] and key["threads"] >= 1
    assert not list(tmp_path.glob("*.lock")) and not list(tmp_path.glob(".*tmp*"))


def test_another_field_or_code_is_another_key_and_no_folder_no_cache(tmp_path, monkeypatch):
    k1, _ = tc.training_key(FIELDS, CODE, "cpu")
    assert tc.training_key(dict(FIELDS), CODE, "cpu")[0] == k1
    assert tc.training_key({**FIELDS, "seed": 4}, CODE, "cpu")[0] != k1
    assert tc.training_key(FIELDS, CODE, "cuda")[0] != k1
    assert tc.training_key(FIELDS, ("lmsci.train.trainer",), "cpu")[0] != k1
    monkeypatch.setattr(tc, "_code_digest", lambda code: {"lmsci/train/cache.py": "changed"})
    assert tc.training_key(FIELDS, CODE, "cpu")[0] != k1
    monkeypatch.delenv(tc.ENV, raising=False)
    assert tc.cache_dir() is None
    calls = []
    m = _model()
    tc.cached_training(m, _train_fn(m, calls), FIELDS, Ctx(), code=CODE)
    tc.cached_training(m, _train_fn(m, calls), FIELDS, Ctx(), code=CODE)
    assert calls == [1, 1]
    monkeypatch.setenv(tc.ENV, str(tmp_path / "c"))
    assert tc.cache_dir() == tmp_path / "c"


def test_a_failed_training_stores_nothing(tmp_path):
    def boom(ctx):
        raise RuntimeError("diverged")

    with pytest.raises(RuntimeError, match="diverged"):
        tc.cached_training(_model(), boom, FIELDS, Ctx(), code=CODE, folder=tmp_path)
    assert list(tmp_path.iterdir()) == []  # no entry, no lock


def test_a_dead_processes_lock_is_taken_over_a_live_ones_waited_for(tmp_path, monkeypatch):
    key, _ = tc.training_key(FIELDS, CODE, "cpu")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"{key}.lock").write_text(str(dead.pid))
    calls = []
    m = _model()
    tc.cached_training(m, _train_fn(m, calls), FIELDS, Ctx(), code=CODE, folder=tmp_path)
    assert calls == [1] and not (tmp_path / f"{key}.lock").exists()

    # a live holder (this process): the call waits until the holder's entry appears, then loads it
    other = tmp_path / "other"
    shutil.move(str(tmp_path / key), str(other))
    (tmp_path / f"{key}.lock").write_text(str(os.getpid()))
    monkeypatch.setattr(tc, "_POLL_S", 0.05)

    def finish():
        time.sleep(0.3)
        os.replace(other, tmp_path / key)
        (tmp_path / f"{key}.lock").unlink()

    t = threading.Thread(target=finish)
    t.start()
    t0 = time.perf_counter()
    m2, ctx = _model(), Ctx()
    tc.cached_training(m2, _train_fn(m2, calls), FIELDS, ctx, code=CODE, folder=tmp_path)
    t.join()
    assert calls == [1] and time.perf_counter() - t0 >= 0.25 and ctx.logged[-1]["cache"] == "hit"
    assert all(torch.equal(a, b) for a, b in zip(m.parameters(), m2.parameters()))


def test_run_training_cache_option_names_a_folder(tmp_path):
    from typer.testing import CliRunner

    from lmsci.cli import app

    f = tmp_path / "a-file"
    f.write_text("x")
    res = CliRunner().invoke(app, ["run", "cfg-learning", "--preset", "smoke", "--training-cache", str(f),
                                   "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "--training-cache" in res.output and not (tmp_path / "run").exists()


def test_using_names_the_folder_within_and_restores_after(tmp_path, monkeypatch):
    monkeypatch.delenv(tc.ENV, raising=False)
    with tc.using(tmp_path / "a"):
        assert tc.cache_dir() == (tmp_path / "a").resolve()
    assert tc.ENV not in os.environ  # restored: unset again
    monkeypatch.setenv(tc.ENV, str(tmp_path / "mine"))
    with tc.using(tmp_path / "suite", keep_set=True):  # a user's cache wins over the suite's
        assert tc.cache_dir() == tmp_path / "mine"
    with tc.using(tmp_path / "b"):  # an explicit folder wins, and the user's comes back after
        assert tc.cache_dir() == (tmp_path / "b").resolve()
    assert tc.cache_dir() == tmp_path / "mine"
