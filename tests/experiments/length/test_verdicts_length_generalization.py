"""length-generalization verdicts on synthetic results tables in the shape run_point writes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lmsci.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from lmsci.config import resolve_config
from lmsci.experiments.length.length_generalization import LengthGeneralization
from lmsci.runs import RunDir

METHODS = ["vanilla", "sliding_window", "attention_sinks", "lm_infinite_G0", "lm_infinite_G1", "lm_infinite_G10",
           "lm_infinite_G100", "lm_infinite_W1", "lm_infinite_W10", "lm_infinite_W100"]


def table(n_seeds: int, *, rise: float, lmi_ratio: float, sw_ratio: float, g0_penalty: float, ent_van: float,
          ent_lmi: float, thm1: float, beyond: float, n_layers: int = 2, n_k: int = 31, w_gain: float = 0.0,
          ent_sw: float = -0.2, thm1_ceiling: float = -1.0, beyond_vanilla: float = 2.0) -> pd.DataFrame:
    """Synthetic rows; the null arms: ``w_gain`` (NLL(G0) - NLL(W<G>): G recent keys instead of starting tokens),
    ``ent_sw`` (the sliding window's entropy growth), ``thm1_ceiling`` (bands under the ceiling alone),
    ``beyond_vanilla`` (vanilla's far keys minus the in-window max); vanilla within L: nll_in = ref + 0.1."""
    rows = []
    for k in range(n_seeds):
        j = 0.01 * (k - 1)  # seed-to-seed scatter
        sfx = f"__s{k}" if k else ""
        ref = 2.0 + j
        rows.append({"point": "train" + sfx, "kind": "train", "method": "", "seed_index": k, "status": "ok"})
        for m in METHODS:
            ratio = {"vanilla": (ref + rise) / ref, "sliding_window": sw_ratio, "attention_sinks": 1.0}.get(
                m, lmi_ratio + (g0_penalty / ref if m == "lm_infinite_G0" else 0.0)
                + ((g0_penalty - w_gain) / ref if m.startswith("lm_infinite_W") else 0.0))
            far = ref * (ratio + j)
            rows.append({"point": f"eval-{m}{sfx}", "kind": "eval", "method": m, "seed_index": k, "status": "ok",
                         "arm": "lm_infinite" if m == "lm_infinite_G10" else m,
                         "nll_in": ref + 0.1, "nll_in_se": 0.02, "nll_far": far, "nll_far_se": 0.02,
                         "nll_last": far, "nll_last_se": 0.02, "nll_ref_in": ref, "far_minus_ref": far - ref,
                         "far_minus_ref_se": 0.03, "far_ratio": far / ref, "far_ratio_se": 0.01,
                         "n_global": None if m in ("vanilla", "sliding_window", "attention_sinks") else int(m[13:])})
        ent = {"vanilla": ent_van, "lm_infinite": ent_lmi, "sliding_window": ent_sw, "ceiling": 0.0}
        for arm in ("vanilla", "lm_infinite", "sliding_window", "ceiling"):
            row = {"point": ("profile" if arm == "vanilla" else f"profile-{arm}") + sfx, "kind": "profile",
                   "method": "", "arm": arm, "seed_index": k, "status": "ok",
                   "entropy_far_minus_inmax_by_layer": json.dumps([ent[arm] + j] * n_layers),
                   "entropy_far_minus_inmax": ent[arm] + j, "entropy_slope_far": ent[arm] + j}
            if arm in ("vanilla", "ceiling"):
                band = thm1 if arm == "vanilla" else thm1_ceiling
                row |= {"band_minus_in": json.dumps([[band + j] * n_k] * n_layers),
                        "band_minus_in_se": json.dumps([[0.1] * n_k] * n_layers)}
            if arm in ("vanilla", "lm_infinite"):
                row |= {"n_beyond_keys": 100 if arm == "vanilla" else 10,
                        "beyond_minus_in_max": (beyond_vanilla if arm == "vanilla" else beyond) + j}
            rows.append(row)
    return pd.DataFrame(rows)


PAPER = dict(rise=2.5, lmi_ratio=1.0, sw_ratio=1.6, g0_penalty=1.0, ent_van=0.6, ent_lmi=0.0, thm1=1.5, beyond=-0.5)
FAIL = dict(rise=0.2, lmi_ratio=1.3, sw_ratio=1.0, g0_penalty=-0.2, ent_van=-0.3, ent_lmi=0.0, thm1=-1.0, beyond=0.8)


def outcomes(df, tmp_path, preset="quick"):
    exp = LengthGeneralization()
    cfg = resolve_config(LengthGeneralization.Config, preset, {})
    vs = exp.verdicts(cfg, df, RunDir(tmp_path))
    assert sorted(v.claim_id for v in vs) == sorted(c.id for c in exp.claims)
    return {v.claim_id: v for v in vs}


def test_paper_numbers_reproduce(tmp_path):
    vs = outcomes(table(3, **PAPER), tmp_path)
    assert {k: v.outcome for k, v in vs.items()} == {c.id: REPRODUCED for c in LengthGeneralization.claims}
    assert vs["vanilla-nll-rises"].n_seeds == 3 and "3 seeds" in vs["vanilla-nll-rises"].ci_kind
    assert all(v.null_passed is False for v in vs.values())
    assert len(vs["lm-infinite-flat"].details["null_per_seed"]) == 3  # vanilla far_ratio, paired by seed


def test_clear_failure_is_not_reproduced(tmp_path):
    vs = outcomes(table(3, **FAIL), tmp_path)
    want = {c.id: NOT_REPRODUCED for c in LengthGeneralization.claims}
    # LM-Infinite degrades (ratio 1.3) as much as the sliding window would need to: its null arm meets that rule
    want["sliding-window-degrades"] = INCONCLUSIVE
    assert {k: v.outcome for k, v in vs.items()} == want


def test_one_seed_or_smoke_is_inconclusive(tmp_path):
    vs = outcomes(table(1, **PAPER), tmp_path)
    assert all(v.outcome == INCONCLUSIVE and v.rule_passed for v in vs.values())
    assert any("1 seed" in r for r in vs["vanilla-nll-rises"].reasons)
    vs = outcomes(table(3, **PAPER), tmp_path, preset="smoke")
    assert all(v.outcome == INCONCLUSIVE for v in vs.values())


def test_theorem1_needs_most_k_in_most_layers(tmp_path):
    df = table(3, **PAPER)
    prof = df["kind"] == "profile"
    # layer 0 explodes at every k, layer 1 at only 10 of 31 k: one layer of two is not "most layers"
    df.loc[prof & (df["arm"] == "vanilla"), "band_minus_in"] = json.dumps([[1.5] * 31, [1.5] * 10 + [-1.0] * 21])
    assert outcomes(df, tmp_path)["theorem1-logits-explode"].outcome == NOT_REPRODUCED


def test_ceiling_bounds_without_visible_far_keys_is_not_computed(tmp_path):
    """n_global = 0: no key beyond the window is visible under LM-Infinite, the statistic is undefined (the old
    hand-written verdict called it held; the engine reports it as not computed)."""
    df = table(3, **FAIL)
    lmi = (df["kind"] == "profile") & (df["arm"] == "lm_infinite")
    df.loc[lmi, "n_beyond_keys"] = 0
    df.loc[lmi, "beyond_minus_in_max"] = float("nan")
    v = outcomes(df, tmp_path)["theorem1-ceiling-bounds"]
    assert v.outcome == INCONCLUSIVE and v.value is None and v.rule_passed is None


def test_ceiling_bounds_reports_the_mean_and_decides_on_every_seed(tmp_path):
    df = table(3, **PAPER)
    lmi = (df["kind"] == "profile") & (df["arm"] == "lm_infinite")
    df.loc[lmi & (df["seed_index"] == 2), "beyond_minus_in_max"] = 0.01  # one seed's far key above the window max
    v = outcomes(df, tmp_path)["theorem1-ceiling-bounds"]
    assert v.outcome == NOT_REPRODUCED and v.rule_passed is False


def test_null_arms_meeting_the_rule_are_inconclusive(tmp_path):
    # every null arm made to meet its claim's rule: vanilla within L rises, vanilla flat, LM-Infinite degrades,
    # recent keys help as much as starting tokens, LM-Infinite's entropy grows with the context, the ceiling's logits rise,
    # vanilla's far keys stay below the in-window max
    vs = outcomes(table(3, **(PAPER | dict(w_gain=1.0, ent_lmi=0.6, thm1_ceiling=1.5, beyond_vanilla=-0.5))), tmp_path)
    for cid in ("needs-starting-tokens", "entropy-grows", "theorem1-logits-explode", "theorem1-ceiling-bounds"):
        assert vs[cid].outcome == INCONCLUSIVE and vs[cid].rule_passed and vs[cid].null_passed, cid
        assert any("cannot tell" in r for r in vs[cid].reasons)
    df = table(3, **PAPER)
    ev = df["kind"] == "eval"
    df.loc[ev & (df["method"] == "vanilla"), "nll_in"] = df.loc[ev & (df["method"] == "vanilla"), "nll_ref_in"] + 1.0
    df.loc[ev & (df["method"] == "vanilla"), "far_ratio"] = 1.0
    df.loc[ev & (df["arm"] == "lm_infinite"), "far_ratio"] = 1.6
    vs = outcomes(df, tmp_path)
    assert vs["vanilla-nll-rises"].outcome == INCONCLUSIVE and vs["vanilla-nll-rises"].null_passed
    assert vs["lm-infinite-flat"].null_passed and vs["sliding-window-degrades"].null_passed


def test_smoke_run_end_to_end_null_arms(tmp_path):
    """Smoke (1 seed, a 3-step model): the null arms are measured; those whose rule an untrained model cannot
    meet fail it. Not asserted: lm-infinite-flat's (an untrained model is flat under vanilla attention too),
    theorem1-logits-explode's and entropy-grows' (with 1 seed the CI collapses to the mean, whose sign is chance)."""
    from lmsci.sweep import run_experiment

    cfg = resolve_config(LengthGeneralization.Config, "smoke", {"threads": 1})
    run = run_experiment(LengthGeneralization(), cfg, tmp_path / "lg", progress=False, log=lambda *a: None)
    vs = {v.claim_id: v for v in run.verdicts()}
    assert set(vs) == {c.id for c in LengthGeneralization.claims}
    assert all(v.null_value is not None for v in vs.values())
    for cid in ("vanilla-nll-rises", "sliding-window-degrades", "needs-starting-tokens", "theorem1-ceiling-bounds"):
        assert vs[cid].null_passed is False, cid
    assert all(v.outcome == INCONCLUSIVE for v in vs.values())  # smoke: below the claims' scale


def test_bad_model_spec_is_refused_before_work():
    """The nested model spec: an odd RoPE head and a model without layers are config errors naming ``model``."""

    from lmsci.errors import ConfigError

    with pytest.raises(ConfigError, match="model"):
        resolve_config(LengthGeneralization.Config, "smoke", {"model.d_model": 18, "model.n_heads": 2})
    with pytest.raises(ConfigError, match="model.n_layers"):
        LengthGeneralization().validate(resolve_config(LengthGeneralization.Config, "smoke", {"model.n_layers": 0}))
    cfg = resolve_config(LengthGeneralization.Config, "smoke", {"model.d_model": 32})
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.pos, cfg.train.steps) == (32, 1, "rope", 3)


def test_entropy_slopes_follow_ln_n_for_uniform_attention():
    """Uniform attention over every visible key has entropy ln(t + 1): slope 1 per e-fold; a fixed number of keys
    (a window) gives slope 0."""
    import numpy as np

    from lmsci.experiments.length.length_generalization import entropy_slopes

    n = 256
    uniform = np.log(np.arange(n) + 1.0)[None].repeat(2, 0)
    window = np.log(np.minimum(np.arange(n) + 1.0, 16))[None]
    assert entropy_slopes(uniform, 64) == pytest.approx([1.0, 1.0])
    assert entropy_slopes(window, 64) == pytest.approx([0.0], abs=1e-12)
    assert np.isnan(entropy_slopes(np.full((1, n), np.nan), 64)).all()
