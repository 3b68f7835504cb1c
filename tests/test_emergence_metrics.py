"""emergence-metrics (issue 42, part 2): the addition world, the smoke preset end to end, verdicts on hand-made
tables (a p^L exact match is sharp, a power-law NLL is smooth), bad input refused before any work."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.laws.emergence_metrics import EmergenceMetrics, EmergenceMetricsConfig
from lmsci.sweep import run_experiment
from lmsci.worlds.addition import EQ, PLUS, AdditionWorld


def test_addition_world_writes_the_reversed_sum_and_the_units_digit():
    g = torch.Generator().manual_seed(0)
    for task, L in (("multi", 4), ("single", 1)):
        w = AdditionWorld(3, task)
        x = w.sample(200, g)
        assert x.shape == (200, 8 + L) and (x[:, 3] == PLUS).all() and (x[:, 7] == EQ).all()
        a = (x[:, :3] * torch.tensor([100, 10, 1])).sum(1)
        b = (x[:, 4:7] * torch.tensor([100, 10, 1])).sum(1)
        ans = x[:, 8:]
        if task == "multi":
            assert ((ans * torch.tensor([1, 10, 100, 1000])).sum(1) == a + b).all()
        else:
            assert (ans[:, 0] == (a + b) % 10).all()
        p, q = w.split(x)
        assert len(p[0]) == 8 and len(q[0]) == L
    with pytest.raises(ConfigError):
        AdditionWorld(0)
    with pytest.raises(ConfigError):
        AdditionWorld(3, "triple")


def _table(sharp: bool, seeds=3) -> pd.DataFrame:
    rows = []
    rng = np.random.default_rng(0)
    C = np.logspace(10, 14, 9)
    for arm in ("multi", "single"):
        for k in range(seeds):
            nll = (C / 1e9) ** -0.3 * (1 + 0.01 * rng.standard_normal(len(C)))
            p = np.exp(-nll)
            em = p ** (8 if (arm == "multi" and sharp) else 1)
            for c, e, n in zip(C, em + 0.003 * rng.standard_normal(len(C)), nll):
                rows.append({"arm": arm, "seed_index": k, "compute": c, "exact_match": e, "token_nll": n,
                             "status": "ok"})
    return pd.DataFrame(rows)


def _verdicts(table, preset="quick"):
    cfg = resolve_config(EmergenceMetricsConfig, preset)
    return {v.claim_id: v for v in EmergenceMetrics().verdicts(cfg, table, None)}


def test_a_p_to_the_L_exact_match_is_sharp_and_the_single_token_null_is_not():
    v = _verdicts(_table(sharp=True))
    em = v["exact-match-sharp"]
    assert em.outcome == "reproduced", em.reasons
    assert em.null_passed is False
    cs = v["continuous-smooth"]  # the null (single-token NLL) is smooth too: inconclusive by construction
    assert cs.outcome == "inconclusive" and cs.null_passed


def test_no_sharpening_is_not_reproduced_and_smoke_is_below_scale():
    v = _verdicts(_table(sharp=False))
    assert v["exact-match-sharp"].outcome == "not reproduced"
    v = _verdicts(_table(sharp=True), preset="smoke")
    assert all(x.outcome == "inconclusive" for x in v.values())


def test_smoke_runs_end_to_end(tmp_path):
    cfg = resolve_config(EmergenceMetricsConfig, "smoke", {"threads": 1, "n_seeds": 1, "n_eval": 16,
                                                           "train.steps": 5})
    run = run_experiment(EmergenceMetrics(), cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results()
    assert (res["status"] == "ok").all() and len(res) == 14 and set(res["arm"]) == {"multi", "single"}
    assert (res[res["arm"] == "single"]["answer_len"] == 1).all()
    assert res.groupby("arm")["compute"].apply(lambda s: s.is_monotonic_increasing).all()
    assert ((res["exact_match"] >= 0) & (res["exact_match"] <= 1)).all() and (res["token_nll"] > 0).all()
    assert (run.path / "figures" / "metrics_over_compute.png").is_file()
    assert "sigmoid" in (run.path / run.REPORT).read_text()


@pytest.mark.parametrize("over", [{"widths": [8, 16, 24]}, {"widths": [8, 8, 16, 24, 32, 48, 64]},
                                  {"widths": [9, 16, 24, 32, 48, 64, 96]}, {"digits": 0}, {"n_eval": 2}])
def test_bad_input_is_refused_before_any_work(over, tmp_path):
    with pytest.raises(ConfigError):
        cfg = resolve_config(EmergenceMetricsConfig, "quick", over)
        run_experiment(EmergenceMetrics(), cfg, tmp_path / "r", progress=False, log=lambda m: None)
    assert not (tmp_path / "r" / "results.csv").exists()
