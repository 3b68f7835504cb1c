"""attribution-patching-lm (issue 40): the smoke preset end to end (tiny random Llama), verdicts on hand-made
tables, bad input refused."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.syntax.attribution_patching_lm import AttributionPatchingLM, AttributionPatchingLMConfig
from lmsci.sweep import run_experiment


def test_smoke_end_to_end(tmp_path):
    cfg = resolve_config(AttributionPatchingLMConfig, "smoke", {"threads": 1})
    run = run_experiment(AttributionPatchingLM(), cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results().set_index("arm")
    assert set(res.index) == {"real", "null"} and (res["status"] == "ok").all()
    est = {a: np.array(json.loads(res.loc[a, "est_heads"])) for a in ("real", "null")}
    ex = {a: np.array(json.loads(res.loc[a, "exact_heads"])) for a in ("real", "null")}
    assert len(est["real"]) == 6 and np.allclose(ex["real"], ex["null"])  # one computation, shared by the arms
    assert np.allclose(np.sort(est["real"]), np.sort(est["null"]))          # the null arm: the same values permuted
    assert np.isclose(res.loc["real", "pearson"], np.corrcoef(est["real"], ex["real"])[0, 1], atol=1e-3)  # 6-decimal JSON
    assert res.loc["real", "time_exact_s"] > 0 and res.loc["real", "speedup"] > 0
    assert (run.path / "figures" / "attribution_vs_exact.png").is_file()
    assert {v.claim_id for v in run.verdicts()} == {"attr-pearson", "attr-top-k"}


def _table(r, null_r, tk=(0.8, 0.9, 0.7), null_tk=(0.0, 0.1, 0.0), ld=3.0):
    return pd.DataFrame([{"arm": arm, "seed_index": k, "pearson": a, "top_k": b, "ld_clean": ld, "status": "ok"}
                         for arm, rs, tks in (("real", r, tk), ("null", null_r, null_tk))
                         for k, (a, b) in enumerate(zip(rs, tks))])


@pytest.mark.parametrize("table,outcome", [
    (_table((0.9, 0.85, 0.88), (0.01, -0.05, 0.03)), ("reproduced", "reproduced")),
    (_table((0.3, 0.2, 0.35), (0.01, -0.05, 0.03), tk=(0.2, 0.3, 0.1)), ("not reproduced", "not reproduced")),
    (_table((0.9, 0.85, 0.88), (0.9, 0.85, 0.88), null_tk=(0.8, 0.9, 0.7)), ("inconclusive", "inconclusive")),
    (_table((0.9, 0.85, 0.88), (0.01, -0.05, 0.03), ld=0.2), ("inconclusive", "inconclusive")),  # the gate
    (_table((0.9, 0.85), (0.01, -0.05)), ("inconclusive", "inconclusive")),  # two samples: below min_seeds
])
def test_verdicts_on_hand_made_tables(table, outcome):
    cfg = resolve_config(AttributionPatchingLMConfig, "quick")
    v = {x.claim_id: x for x in AttributionPatchingLM().verdicts(cfg, table, None)}
    assert (v["attr-pearson"].outcome, v["attr-top-k"].outcome) == outcome


def test_bad_input_refused_before_work(tmp_path):
    cfg = resolve_config(AttributionPatchingLMConfig, "smoke", {"threads": 1, "model": "no-such-model"})
    with pytest.raises(ConfigError) as e:
        run_experiment(AttributionPatchingLM(), cfg, tmp_path / "never", progress=False, log=lambda m: None)
    assert e.value.field == "model" and not (tmp_path / "never").exists()
    with pytest.raises(Exception):
        resolve_config(AttributionPatchingLMConfig, "smoke", {"n_templates": 16})
    # top_k above the tiny model's 6 heads: refused before any patching
    cfg = resolve_config(AttributionPatchingLMConfig, "smoke", {"threads": 1, "top_k": 7})
    with pytest.raises(ConfigError) as e:
        run_experiment(AttributionPatchingLM(), cfg, tmp_path / "run", progress=False, log=lambda m: None)
    assert e.value.field == "top_k"


def test_exact_patching_resumed_equals_the_full_forward(monkeypatch):
    """On the smoke model, the library's exact patching (each patched run started at the patched layer, output head
    at END only: lmsci.models.resume) gives the full forward's values (its fallback, forced here)."""
    import torch

    from lmsci.experiments.syntax import _ioi_lm_measures as M
    from lmsci.experiments.syntax._lm_common import load_lm
    from lmsci.measure.attribution_patching import exact_patching
    from lmsci.models import resume

    lm = load_lm("tiny-random-llama", "cpu")
    p = M.make_prompts(lm.tokenizer, 2, 3, np.random.default_rng(5))
    assert resume.resumable(lm)
    fast = exact_patching(lm, p.clean, p.abc, p.end, p.io, p.s, per="head")
    monkeypatch.setattr(resume, "resumable", lambda model: False)
    slow = exact_patching(lm, p.clean, p.abc, p.end, p.io, p.s, per="head")
    assert fast.shape == slow.shape == (2, 3) and slow.abs().max() > 0
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError):
        exact_patching(lm, p.clean, p.abc[:, :-1], p.end, p.io, p.s)
