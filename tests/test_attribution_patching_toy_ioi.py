"""attribution-patching (issue 40 item 5, the toy half): the smoke preset end to end (a tiny GPT trained on the IOI
world), bad input refused before any work."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.syntax.attribution_patching import AttributionPatching, AttributionPatchingConfig
from lmsci.sweep import run_experiment


def test_smoke_end_to_end(tmp_path):
    cfg = resolve_config(AttributionPatchingConfig, "smoke", {"threads": 1})
    run = run_experiment(AttributionPatching(), cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results().set_index("arm")
    assert set(res.index) == {"real", "null"} and (res["status"] == "ok").all()
    est = {a: np.array(json.loads(res.loc[a, "est_heads"])) for a in ("real", "null")}
    ex = {a: np.array(json.loads(res.loc[a, "exact_heads"])) for a in ("real", "null")}
    assert len(est["real"]) == 4 and np.allclose(ex["real"], ex["null"])  # one model, one computation per seed
    assert np.allclose(np.sort(est["real"]), np.sort(est["null"]))        # the null arm: the same values permuted
    assert np.isclose(res.loc["real", "pearson"], np.corrcoef(est["real"], ex["real"])[0, 1], atol=1e-3)
    assert res.loc["real", "time_exact_s"] > 0 and res.loc["real", "speedup"] > 0
    assert (run.path / "figures" / "attribution_vs_exact.png").is_file()
    assert {v.claim_id for v in run.verdicts()} == {"attr-pearson", "attr-top-k"}
    assert "attribution-patching-lm" in (run.path / "report.md").read_text()


def test_bad_input_refused_before_work(tmp_path):
    cfg = resolve_config(AttributionPatchingConfig, "smoke", {"threads": 1, "top_k": 4})  # 2 x 2 heads
    with pytest.raises(ConfigError) as e:
        run_experiment(AttributionPatching(), cfg, tmp_path / "never", progress=False, log=lambda m: None)
    assert e.value.field == "top_k" and not (tmp_path / "never").exists()
    cfg = resolve_config(AttributionPatchingConfig, "smoke", {"threads": 1, "stream_tokens": 100, "seq_len": 120})
    with pytest.raises(ConfigError) as e:
        run_experiment(AttributionPatching(), cfg, tmp_path / "never", progress=False, log=lambda m: None)
    assert e.value.field == "stream_tokens"
    for bad in ({"n_prompts": 1}, {"ioi_fraction": 0.0}, {"n_templates": 16}):
        with pytest.raises(Exception):
            resolve_config(AttributionPatchingConfig, "smoke", bad)


def _ap_table(pearson, top_k, null_pearson=(0.0, 0.1, -0.1), null_top_k=(0.0, 0.33, 0.0), ld=2.0):
    import pandas as pd

    rows = []
    for arm, r, t in (("real", pearson, top_k), ("null", null_pearson, null_top_k)):
        for k in range(3):
            rows.append({"arm": arm, "seed_index": k, "status": "ok", "pearson": r[k], "top_k": t[k],
                         "ld_clean": ld})
    return pd.DataFrame(rows)


def test_verdicts_on_hand_made_tables():
    """Both claims on a passing, a failing, a gated and a null-passing table."""
    exp = AttributionPatching()
    cfg = resolve_config(AttributionPatchingConfig, "quick", {})
    good = dict(pearson=(0.9, 0.92, 0.88), top_k=(1.0, 1.0, 1.0))
    v = {x.claim_id: x for x in exp.verdicts(cfg, _ap_table(**good), None)}
    assert v["attr-pearson"].outcome == "reproduced" and v["attr-top-k"].outcome == "reproduced"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _ap_table(pearson=(0.2, 0.3, 0.1), top_k=(0.33, 0.0, 0.33)),
                                             None)}
    assert v["attr-pearson"].outcome == "not reproduced" and v["attr-top-k"].outcome == "not reproduced"
    v = {x.claim_id: x for x in exp.verdicts(cfg, _ap_table(**good, ld=0.0), None)}
    assert all(x.outcome == "inconclusive" for x in v.values())  # the model did not learn IOI
    v = {x.claim_id: x for x in exp.verdicts(cfg, _ap_table(**good, null_pearson=(0.9, 0.91, 0.9)), None)}
    assert v["attr-pearson"].outcome == "inconclusive" and v["attr-pearson"].null_passed
