"""grokking: the modular world, GPT's relu / no-norm options, Fourier measures, phase detection, verdicts from
synthetic tables, and a smoke run end to end.

Sources: Power et al., arXiv 2201.02177; Nanda et al., arXiv 2301.05217 (registered rules: issue 17).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.dynamics.grokking import TOP_SHARE, Grokking, GrokkingConfig
from lmsci.experiments.dynamics.grokking_fractions import GrokkingFractions, GrokkingFractionsConfig
from lmsci.measure.progress import detect_phases
from lmsci.models.modular import answer_logits, grokking_model
from lmsci.measure.fourier import embedding_spectrum, fourier_basis, fourier_logit_split, key_frequencies, top_share
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.runs import RunDir
from lmsci.worlds.modular import apply_op, is_prime, mod_inverse, modular_data


# ------------------------------------------------------------------------------------------ world


def test_prime_check_and_fraction_are_refused_with_the_field():
    with pytest.raises(ConfigError) as e:
        modular_data(57, "add", 0.3)
    assert e.value.field == "p"
    for bad in (0.0, 1.0, -0.2, 1.5):
        with pytest.raises(ConfigError) as e:
            modular_data(13, "add", bad)
        assert e.value.field == "train_frac"
    with pytest.raises(ConfigError):
        modular_data(13, "pow", 0.3)
    assert [n for n in range(30) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]


def test_split_sizes_and_targets():
    d = modular_data(13, "add", 0.3, seed=1)
    assert d.n_pairs == 169 and d.vocab_size == 14
    assert d.train_idx.numel() == round(0.3 * 169) and d.test_idx.numel() == 169 - round(0.3 * 169)
    assert len(set(d.train_idx.tolist()) & set(d.test_idx.tolist())) == 0
    assert (d.input_ids[:, 2] == 13).all()
    assert torch.equal(d.targets, (d.input_ids[:, 0] + d.input_ids[:, 1]) % 13)
    assert not torch.equal(d.train_idx, modular_data(13, "add", 0.3, seed=2).train_idx)
    dv = modular_data(97, "div", 0.5)
    assert dv.n_pairs == 97 * 96 and (dv.input_ids[:, 1] != 0).all()
    # x / y * y == x
    assert torch.equal(dv.targets * dv.input_ids[:, 1] % 97, dv.input_ids[:, 0])


def test_mod_inverse():
    y = torch.arange(1, 97)
    inv = mod_inverse(y, 97)
    assert ((y * inv) % 97 == 1).all()
    assert int(mod_inverse(torch.tensor([3]), 7)) == 5
    with pytest.raises(ValueError):
        mod_inverse(torch.tensor([0, 1]), 7)
    assert int(apply_op("div", torch.tensor([6]), torch.tensor([4]), 7)) == (6 * 2) % 7  # 4^{-1} = 2 mod 7


# ------------------------------------------------------------------------------------------ model


def test_gpt_relu_and_no_norm_options():
    cfg = GPTConfig(vocab_size=14, seq_len=3, n_layers=1, n_heads=2, d_model=16, d_mlp=32, mlp="relu", norm="none")
    m = GPT(cfg)
    assert isinstance(m.ln_f, torch.nn.Identity) and isinstance(m.blocks[0].ln1, torch.nn.Identity)
    assert not any("ln" in n for n, _ in m.named_parameters())
    ids = torch.randint(0, 14, (5, 3))
    _, cache = m.run_with_cache(ids, ["blocks.0.mlp.pre", "blocks.0.mlp.post"])
    assert torch.equal(cache["blocks.0.mlp.post"], torch.relu(cache["blocks.0.mlp.pre"]))
    gelu = GPT(cfg.model_copy(update={"mlp": "gelu"}))
    gelu.load_state_dict(m.state_dict())
    assert not torch.allclose(gelu(ids), m(ids))  # the activation differs
    with pytest.raises(ConfigError):
        GPTConfig(vocab_size=14, seq_len=3, n_layers=1, n_heads=2, d_model=16, norm="batchnorm")


def test_answer_logits_equal_the_full_forward_and_nanda_init():
    m = grokking_model(13, d_model=32, n_heads=4, d_mlp=64, seed=3)
    ids = modular_data(13, "add", 0.5).input_ids
    assert torch.allclose(answer_logits(m, ids), m(ids)[:, -1], atol=1e-5)
    w = m.blocks[0].mlp.fc.weight
    assert abs(float(w.detach().std()) - 1 / math.sqrt(32)) < 0.02  # randn / sqrt(d_model), not GPT-2's 0.02
    assert float(m.blocks[0].mlp.fc.bias.detach().abs().sum()) == 0
    assert torch.equal(grokking_model(13, 32, 4, 64, seed=3).wte.weight, m.wte.weight)


# ------------------------------------------------------------------------------------------ Fourier


def test_fourier_basis_is_orthonormal():
    B = fourier_basis(13)
    assert torch.allclose(B @ B.T, torch.eye(13, dtype=B.dtype), atol=1e-10)


def test_pure_cosine_embedding_concentrates_on_its_frequency():
    p, k = 31, 7
    x = torch.arange(p, dtype=torch.float64)
    W = torch.zeros(p, 8, dtype=torch.float64)
    W[:, 0] = torch.cos(2 * math.pi * k * x / p)
    W[:, 3] = 2 * torch.sin(2 * math.pi * k * x / p + 0.3)
    shares, const = embedding_spectrum(W)
    assert shares.shape == (15,)
    assert shares[k - 1] == pytest.approx(1.0, abs=1e-9) and const == pytest.approx(0.0, abs=1e-9)
    assert key_frequencies(shares, 1) == [k]
    rnd = embedding_spectrum(torch.randn(p, 64, generator=torch.Generator().manual_seed(0)))[0]
    assert top_share(rnd, 6) < 0.6  # a random embedding is spread out


def test_restricted_and_excluded_logits():
    p, keys = 17, [3, 5]
    x = torch.arange(p)
    s = (x[:, None] + x[None, :]).double()
    c = torch.arange(p).double()
    w = lambda k: 2 * math.pi * k / p  # noqa: E731
    # the ideal logits cos(w_k (x + y - c)) summed over the key frequencies, plus noise at frequency 8
    ideal = sum(torch.cos(w(k) * (s[:, :, None] - c[None, None, :])) for k in keys)
    noise = 0.5 * torch.cos(w(8) * s)[:, :, None].expand(p, p, p)
    restricted, excluded = fourier_logit_split((ideal + noise + 2.0).float(), keys)
    assert torch.allclose(restricted.double(), ideal + 2.0, atol=1e-4)
    assert torch.allclose(excluded.double(), noise + 2.0, atol=1e-4)


# ------------------------------------------------------------------------------------------ phases


def test_phase_detection_on_synthetic_curves():
    steps = np.arange(0, 10001, 10)
    # memorised at step 300; test loss 8 until 4000, falls to 4 by step 5000, to ~0 by 7000
    test_loss = np.where(steps < 4000, 8.0, np.interp(steps, [4000, 5000, 7000], [8.0, 4.0, 0.01]))
    test_acc = np.interp(steps, [0, 4000, 6500, 7000], [0.02, 0.05, 0.99, 1.0])
    ph = detect_phases(steps, test_loss, test_acc, t_mem=300)
    assert ph["t_mem"] == 300 and ph["t_clean"] == 5000 and ph["t_gen"] == 6500
    never = detect_phases(steps, np.full(steps.shape, 8.0), np.full(steps.shape, 0.03), t_mem=300)
    assert never["t_gen"] is None and never["t_clean"] is None
    assert detect_phases(steps, test_loss, test_acc, t_mem=None)["t_clean"] is None


# ------------------------------------------------------------------------------------------ verdicts


def _rows(*, t_test=(6000, 6500, 7000), top6=(0.92, 0.88, 0.95), rr=(1.8, 1.6, 2.0), er=(5.0, 4.0, 6.0),
          control_acc=(0.12, 0.2, 0.08), init6=(0.25, 0.3, 0.22), control_rr=(None, None, None),
          control_er=(None, 1.1, None), control_t_test=(None, None, None), dense_t_test=(500, 450, 600),
          control6=(0.4, 0.45, 0.35)):
    """Main-run and wd = 0 control rows; ``init6``: the top-6 share at step 0 (reported beside fourier-sparse);
    ``control6``: the wd = 0 control's final top-6 share (the null arm of fourier-sparse); the
    control's ratios and t_test: the null arm of restricted-before-test (None: never reached); ``dense_t_test``: the
    dense arm's (training fraction 0.9, memorised at step 300) steps to test accuracy 0.99, delay's null arm."""
    rows = []
    for k, (tt, sh, r, e) in enumerate(zip(t_test, top6, rr, er)):
        rows.append({"point": "grok" + (f"__s{k}" if k else ""), "kind": "grok", "seed_index": k, "p": 59,
                     "op": "add", "train_frac": 0.3, "weight_decay": 1.0, "t_train": 400, "t_test": tt,
                     "t_clean": None if tt is None else tt - 800, "max_test_acc": 1.0 if tt else 0.1,
                     "final_test_acc": 1.0 if tt else 0.1, "top6_share": sh, "init_top6_share": init6[k],
                     "top6_freqs": "1 2 3 4 5 6",
                     "key_freqs": "1 2 3 4 5 6", "t_restricted_below_x": None if r is None else 3000,
                     "t_test_loss_below_x": None if r is None else 3000 * r, "restricted_ratio": r,
                     "excluded_at_mem": 0.5, "excluded_at_clean": None if e is None else 0.5 * e, "excluded_ratio": e,
                     "status": "ok", "arm": "real"})
        # the init arm: the same run's embedding at step 0
        rows.append({"point": "init-grok" + (f"__s{k}" if k else ""), "kind": "init", "seed_index": k,
                     "top6_share": init6[k], "status": "ok", "arm": "init"})
    for k, a in enumerate(control_acc):
        rows.append({"point": "nowd" + (f"__s{k}" if k else ""), "kind": "control", "seed_index": k, "p": 59,
                     "op": "add", "train_frac": 0.3, "weight_decay": 0.0, "t_train": 350,
                     "t_test": control_t_test[k], "max_test_acc": a, "final_test_acc": a, "top6_share": control6[k],
                     "init_top6_share": 0.25, "restricted_ratio": control_rr[k], "excluded_ratio": control_er[k],
                     "status": "ok", "arm": "nowd"})
    for k, tt in enumerate(dense_t_test):
        rows.append({"point": "dense-grok" + (f"__s{k}" if k else ""), "kind": "dense", "seed_index": k, "p": 59,
                     "op": "add", "train_frac": 0.9, "weight_decay": 1.0, "t_train": 300, "t_test": tt,
                     "max_test_acc": 0.99 if tt else 0.5, "status": "ok", "arm": "dense"})
    return pd.DataFrame(rows)


def _verdicts(df, tmp_path):
    cfg = resolve_config(GrokkingConfig, "quick")
    return {v.claim_id: v for v in Grokking().verdicts(cfg, df, RunDir(tmp_path))}


def _sweep(pairs, tmp_path, seeds=1, preset="gpu"):
    df = pd.DataFrame([{"point": f"div_p59_f{f:g}" + (f"__s{k}" if k else ""), "kind": "sweep", "seed_index": k,
                        "p": 59, "op": "div", "train_frac": f, "weight_decay": 1.0, "t_train": 300,
                        "t_test": None if t is None else t + 10 * k, "status": "ok"}
                       for k in range(seeds) for f, t in pairs])
    cfg = resolve_config(GrokkingFractionsConfig, preset)
    (v,) = GrokkingFractions().verdicts(cfg, df, RunDir(tmp_path))
    return v


def test_papers_numbers_are_reproduced(tmp_path):
    vs = _verdicts(_rows(), tmp_path)
    assert {k: v.outcome for k, v in vs.items()} == {"delay": "reproduced", "no-wd-no-grok": "passed",
                                                     "fourier-sparse": "reproduced",
                                                     "restricted-before-test": "reproduced"}
    assert vs["no-wd-no-grok"].kind == "check"
    assert all(vs[c].null_passed is False for c in ("delay", "fourier-sparse", "restricted-before-test"))
    assert vs["fourier-sparse"].null_value == pytest.approx(np.mean((0.4, 0.45, 0.35)))  # the wd = 0 control's
    assert vs["delay"].value == pytest.approx(16.25)  # the mean of 6000, 6500, 7000 over 400; the rule reads each
    assert min(vs["delay"].details["per_seed"]) == pytest.approx(15.0)
    assert vs["fourier-sparse"].value == pytest.approx(np.mean((0.92, 0.88, 0.95)))
    assert vs["no-wd-no-grok"].value == pytest.approx(0.2)  # the largest over control seeds
    # Power et al. Fig. 1 right: fewer steps with more data; 0.3 never generalises within the cap (ranked last)
    sw = _sweep(((0.3, None), (0.4, 2900), (0.5, 2000), (0.6, 1200), (0.7, 800), (0.8, 600)), tmp_path, seeds=3)
    assert sw.outcome == "reproduced" and sw.value < -0.98 and sw.n_seeds == 3
    assert sw.null_passed is False  # the fractions permuted across the runs
    # one seed, or the quick preset: inconclusive (the claim is decided at gpu and paper with >= 3 seeds)
    sw1 = _sweep(((0.3, None), (0.4, 2900), (0.5, 2000), (0.6, 1200), (0.7, 800), (0.8, 600)), tmp_path)
    assert sw1.outcome == "inconclusive" and sw1.rule_passed and any("1 seed" in r for r in sw1.reasons)
    swq = _sweep(((0.3, None), (0.4, 2900), (0.5, 2000), (0.6, 1200), (0.7, 800), (0.8, 600)), tmp_path, seeds=3,
                 preset="quick")
    assert swq.outcome == "inconclusive" and any("below the scale" in r for r in swq.reasons)


def test_clear_failures_are_not_reproduced(tmp_path):
    vs = _verdicts(_rows(t_test=(1200, 6500, 7000), top6=(0.5, 0.9, 0.9), rr=(1.0, 1.6, 2.0),
                         control_acc=(0.1, 0.97, 0.2)), tmp_path)
    assert vs["delay"].outcome == "not reproduced" and min(vs["delay"].details["per_seed"]) == pytest.approx(3.0)
    assert vs["no-wd-no-grok"].outcome == "failed"
    assert vs["fourier-sparse"].outcome == "not reproduced"
    assert vs["restricted-before-test"].outcome == "not reproduced"
    sw = _sweep(((0.4, 500), (0.5, 900), (0.6, 1500), (0.7, 2500), (0.8, None)), tmp_path, seeds=3)
    assert sw.outcome == "not reproduced" and sw.value > 0.98
    # the excluded-loss half alone also fails the claim
    vs2 = _verdicts(_rows(er=(1.1, 4.0, 6.0)), tmp_path)
    assert vs2["restricted-before-test"].outcome == "not reproduced"


def test_failed_gates_are_inconclusive(tmp_path):
    # one seed never generalises: the delay, Fourier and restricted-loss claims are gated
    vs = _verdicts(_rows(t_test=(6000, None, 7000), er=(5.0, None, 6.0), rr=(1.8, None, 2.0)), tmp_path)
    assert vs["fourier-sparse"].outcome == "inconclusive"
    assert any("generalised" in r for r in vs["fourier-sparse"].reasons)
    assert vs["restricted-before-test"].outcome == "inconclusive"
    assert vs["delay"].outcome == "inconclusive" and vs["delay"].details["per_seed"] == [15.0, 0.0, 17.5]
    # too few generalising sweep fractions
    sw = _sweep(((0.4, None), (0.5, None), (0.6, None), (0.7, 1500), (0.8, 900)), tmp_path, seeds=3)
    assert sw.outcome == "inconclusive" and any("some-generalise" in r for r in sw.reasons)
    # one seed only: every seeded claim is inconclusive even though its rule holds
    vs = _verdicts(_rows(t_test=(6000,), top6=(0.9,), rr=(1.8,), er=(5.0,)), tmp_path)
    assert vs["fourier-sparse"].outcome == "inconclusive" and vs["delay"].outcome == "inconclusive"


def test_null_arms_meeting_the_rule_or_missing_are_inconclusive(tmp_path):
    # the dense arm also generalises 5x late; the wd = 0 control shows the restricted/excluded pattern and ends
    # Fourier-sparse too
    vs = _verdicts(_rows(dense_t_test=(1500, 1800, 2000), control_rr=(1.5, 1.6, 1.7), control_er=(3.0, 3.0, 3.0),
                         control6=(0.85, 0.9, 0.95)), tmp_path)
    for c in ("delay", "fourier-sparse", "restricted-before-test"):
        assert vs[c].outcome == "inconclusive" and vs[c].rule_passed and vs[c].null_passed, c
        assert any("cannot tell" in r for r in vs[c].reasons)
    # no control runs: restricted-before-test has no null arm; no dense runs: delay has none
    df = _rows()
    vs = _verdicts(df[df["kind"] != "control"], tmp_path)
    assert vs["no-wd-no-grok"].outcome == "inconclusive" and vs["delay"].outcome == "reproduced"
    assert any("null arm not measured" in r for r in vs["restricted-before-test"].reasons)
    vs = _verdicts(df[df["kind"] != "dense"], tmp_path)
    assert vs["delay"].outcome == "inconclusive" and any("null arm not measured" in r for r in vs["delay"].reasons)
    assert vs["fourier-sparse"].outcome == "reproduced"
    # a Fourier-sparse random init decides nothing now (the init arm is reported, the control is the null)
    assert _verdicts(_rows(init6=(0.85, 0.9, 0.95)), tmp_path)["fourier-sparse"].outcome == "reproduced"
    # no control runs: fourier-sparse has no null arm either
    assert any("null arm not measured" in r for r in _verdicts(df[df["kind"] != "control"], tmp_path)[
        "fourier-sparse"].reasons)
    # steps that do not depend on the fraction (only on the seed): neither the rule nor its permuted null arm holds
    v = _sweep(((0.4, 500), (0.5, 500), (0.6, 500), (0.7, 500)), tmp_path, seeds=3)
    assert v.null_passed is False and v.outcome == "not reproduced"


def test_bad_configs_are_refused():
    exp = Grokking()
    for key, val in (("p", 57), ("train_frac", 1.0), ("train_frac", 0.0), ("n_key", 40)):
        cfg = resolve_config(GrokkingConfig, "quick", {key: val})
        with pytest.raises(ConfigError) as e:
            exp.validate(cfg)
        assert e.value.field == key
    for key, val in (("p", 91), ("train_fracs", [0.5, 1.2])):
        cfg = resolve_config(GrokkingFractionsConfig, "quick", {key: val})
        with pytest.raises(ConfigError) as e:
            GrokkingFractions().validate(cfg)
        assert e.value.field == key


# ------------------------------------------------------------------------------------------ end to end


def test_smoke_run_end_to_end(tmp_path):
    from lmsci.sweep import run_experiment

    exp = Grokking()
    cfg = resolve_config(GrokkingConfig, "smoke", {"threads": 1})
    run = run_experiment(exp, cfg, tmp_path / "run", progress=False, log=lambda *a, **k: None)
    res = pd.read_csv(run.path / "results.csv")
    assert set(res["kind"]) == {"grok", "control", "init", "dense"}
    assert set(res["arm"]) == {"real", "nowd", "init", "dense"}
    init = res[res["arm"] == "init"].iloc[0]  # the real run's embedding at step 0, nothing trained
    assert init["top6_share"] == res[res["arm"] == "real"].iloc[0]["init_top6_share"]
    assert (res["status"] == "ok").all()
    meas = pd.read_csv(run.path / "points" / "grok" / "measures.csv")
    assert {"restricted_loss", "excluded_loss", "top6_share", "weight_norm"} <= set(meas.columns)
    assert (run.path / "figures" / "progress_measures.png").exists()
    assert (run.path / "verdict.json").exists()
    # the null arms: the wd = 0 control (fourier-sparse, restricted-before-test) and the dense arm (delay)
    vs = {v.claim_id: v for v in run.verdicts()}
    ctl = res[res["kind"] == "control"].iloc[0]
    assert "restricted_ratio" in res and pd.notna(res[res["kind"] == "grok"]["init_top6_share"]).all()
    assert pd.isna(ctl["t_test"])  # 60 steps without weight decay: never generalises
    dense = res[res["arm"] == "dense"].iloc[0]  # delay's null arm: training fraction 0.9, its own stack
    assert dense["train_frac"] == 0.9 and dense["steps_run"] <= 60
    assert vs["delay"].null_passed is False
    assert vs["fourier-sparse"].null_value == pytest.approx(ctl["top6_share"])  # the control's final embedding
    assert Grokking().claims[2].arms == ("real", "nowd") and all(
        c.null_can_meet for c in Grokking().claims if c.kind == "claim")
    # restricted-before-test: smoke's control never brings its restricted or test loss below 1 nat (ratio None)
    assert vs["restricted-before-test"].null_passed is False
    assert vs["no-wd-no-grok"].kind == "check"
    cfg2 = resolve_config(GrokkingFractionsConfig, "smoke", {"threads": 1})
    run2 = run_experiment(GrokkingFractions(), cfg2, tmp_path / "run2", progress=False, log=lambda *a, **k: None)
    res2 = pd.read_csv(run2.path / "results.csv")
    assert sorted(res2["train_frac"]) == [0.5, 0.8] and (res2["steps_run"] <= 40).all()
    # two fractions: the statistic (and so its null arm) cannot be computed: not True
    (v2,) = run2.verdicts()
    assert v2.null_passed is not True and v2.outcome == "inconclusive"


# ------------------------------------------------------------------------------------------ stacked training


def test_stacked_answer_logits_equal_each_models_answer_logits():
    from lmsci.models.modular import stacked_answer_logits

    models = [grokking_model(13, d_model=32, n_heads=4, d_mlp=64, seed=s) for s in (1, 2, 3)]
    ids = torch.stack([modular_data(13, "add", 0.5, seed=s).train()[0] for s in (1, 2, 3)])  # [3, B, 3]
    P = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]) for n, _ in models[0].named_parameters()}
    out = stacked_answer_logits(P, ids, n_heads=4, query_token=13)
    ref = torch.stack([answer_logits(m, x) for m, x in zip(models, ids)]).detach()
    assert out.shape == (3, ids.shape[1], 14)
    assert torch.allclose(out, ref, atol=1e-5)


def _compare(stacked, single, rtol=1e-6):
    a, b = stacked["curve"], single["curve"]
    assert list(a["step"]) == list(b["step"]) and stacked["steps_run"] == single["steps_run"]
    assert stacked["t_mem"] == single["t_mem"]
    np.testing.assert_allclose(a["train_loss"], b["train_loss"], rtol=rtol)
    np.testing.assert_allclose(a["test_loss"], b["test_loss"], rtol=1e-5)
    np.testing.assert_allclose(a["train_acc"], b["train_acc"], atol=1e-6)
    np.testing.assert_allclose(a["weight_norm"], b["weight_norm"], rtol=1e-5)
    for (n, w1), w2 in zip(stacked["model"].named_parameters(), single["model"].parameters()):
        if n == "blocks.0.attn.qkv.bias":  # the key bias has zero gradient (it shifts every score of a query
            inner = w1.shape[0] // 3       # equally): Adam turns its rounding noise into +-lr steps; skip it
            w1, w2 = torch.cat([w1[:inner], w1[2 * inner:]]), torch.cat([w2[:inner], w2[2 * inner:]])
        assert torch.allclose(w1, w2, atol=2e-3), n  # Adam's normalised steps amplify rounding in tiny gradients


def test_stacked_training_matches_single_model_training():
    """Same seeds -> same curves: seeds with weight decay and wd = 0 controls, different training fractions (padded
    rows), all in one stack, against train_modular one model at a time."""
    from lmsci.train.modular import ModularMember, train_modular, train_modular_stacked
    from lmsci.runs import derive_seed

    cfg = resolve_config(GrokkingConfig, "smoke", {"eval_every": 1, "threads": 1})
    specs = [(0, 1.0, 0.6), (1, 0.0, 0.6), (2, 1.0, 0.4), (3, 0.5, 0.8)]
    members = [ModularMember(modular_data(13, "add", f, seed=derive_seed(s, "split")), w, derive_seed(s, "init"),
                             checkpoints=frozenset({0, 3})) for s, w, f in specs]
    res = train_modular_stacked(cfg, members, 6)
    for (s, w, f), r in zip(specs, res):
        ref = train_modular(cfg, p=13, op="add", train_frac=f, weight_decay=w, steps=6, seed=s, checkpoints=[0, 3])
        _compare(r, ref)
        assert r["diverged"] is None and sorted(r["checkpoints"]) == [0, 3]
        assert torch.equal(r["checkpoints"][0]["wte.weight"], ref["checkpoints"][0]["wte.weight"])  # the same init
    assert res[0]["curve"]["weight_norm"].iloc[-1] < res[1]["curve"]["weight_norm"].iloc[-1]  # decay acts per member


def test_members_that_stop_leave_the_stack_and_the_rest_go_on_unchanged():
    """stop_at_gen with a low threshold: members leave the stack at different steps (the stack and its padding
    shrink), each curve still equals its single-model run."""
    import lmsci.train.modular as g
    from lmsci.runs import derive_seed

    cfg = g.ModularSpec.of(resolve_config(GrokkingFractionsConfig, "smoke", {"eval_every": 5, "threads": 1}),
                           reach_acc=0.2)
    specs = [(0, 0.8), (1, 0.5), (2, 0.8), (3, 0.3)]
    members = [g.ModularMember(modular_data(7, "div", f, seed=derive_seed(s, "split")), 1.0, derive_seed(s, "init"),
                               stop_at_gen=True) for s, f in specs]
    res = g.train_modular_stacked(cfg, members, 40)
    runs = [r["steps_run"] for r in res]
    assert len(set(runs)) >= 2 and min(runs) < 40  # someone left early, someone stayed longer
    for (s, f), r in zip(specs, res):
        _compare(r, g.train_modular(cfg, p=7, op="div", train_frac=f, weight_decay=1.0, steps=40, seed=s,
                                    stop_at_gen=True))


def test_select_members_and_per_member_decay_equal_separate_adamws():
    from lmsci.train.stacked_params import decay_members, select_members

    gen = torch.Generator().manual_seed(0)
    w0 = torch.randn(3, 4, 5, generator=gen)
    grads = [torch.randn(3, 4, 5, generator=gen) for _ in range(6)]
    wds = torch.tensor([1.0, 0.0, 0.3])
    # reference: three separate AdamWs with their own weight decay
    ref = []
    for k in range(3):
        w = w0[k].clone().requires_grad_(True)
        opt = torch.optim.AdamW([w], lr=1e-2, weight_decay=float(wds[k]), betas=(0.9, 0.98))
        for g_ in grads:
            w.grad = g_[k].clone()
            opt.step()
        ref.append(w.detach())
    # stacked: AdamW(wd=0) + decay_members; member 1 leaves after 3 steps
    P = {"w": w0.clone().requires_grad_(True)}
    opt = torch.optim.AdamW(list(P.values()), lr=1e-2, weight_decay=0.0, betas=(0.9, 0.98))
    keep, wd = [0, 1, 2], wds
    for i, g_ in enumerate(grads):
        if i == 3:
            keep = [0, 2]
            P, opt = select_members(P, opt, [0, 2])
            wd = wds[keep]
        P["w"].grad = g_[keep].clone()
        decay_members(P, 1e-2, wd)
        opt.step()
    assert torch.allclose(P["w"][0], ref[0], atol=1e-6) and torch.allclose(P["w"][1], ref[2], atol=1e-6)
    with pytest.raises(ConfigError):
        select_members(P, opt, [])
