"""ioi-circuit: the IOI world (clean / ABC prompts, the no-IOI control stream), the patching instruments on tiny GPTs,
verdicts from synthetic tables (reproduced / not reproduced / gated / null meets the rule), bad input, a smoke run.

Source: Wang et al., arXiv 2211.00593 (p_IOI, p_ABC, logit difference, path patching, copy score).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.syntax._ioi_paths import dup_by_values, sinh_heads
from lmsci.experiments.syntax.ioi_circuit import IOICircuit, IOICircuitConfig
from lmsci.measure import patching as P
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.runs import RunDir
from lmsci.worlds.ioi import IOIWorld


def test_prompts_are_aligned_pairs_with_the_paper_roles():
    w = IOIWorld()
    b = w.sample_prompts(60, np.random.default_rng(0))
    rows = torch.arange(60)
    assert b.clean.shape == b.corrupt.shape
    assert (b.clean[rows, b.io_pos] == b.io).all() and (b.clean[rows, b.s1_pos] == b.s).all()
    assert (b.clean[rows, b.s2_pos] == b.s).all() and (b.s1_pos < b.s2_pos).all() and (b.io_pos < b.s2_pos).all()
    assert all(w.vocab[int(t)] == "to" for t in b.clean[rows, b.end])
    assert 0.4 <= b.abba.float().mean() <= 0.6 and len(set(b.template.tolist())) == 15
    # ABC: the three name slots hold three distinct names, none of them IO or S; every other token unchanged
    for k in range(60):
        x, y, z = (int(b.corrupt[k, p]) for p in (b.io_pos[k], b.s1_pos[k], b.s2_pos[k]))
        assert len({x, y, z, int(b.io[k]), int(b.s[k])}) == 5
        same = b.clean[k] == b.corrupt[k]
        assert int((~same).sum()) == 3
    # ABBA names IO first, BABA names S first
    assert ((b.io_pos < b.s1_pos) == b.abba).all()


def test_the_control_stream_has_no_ioi_sentence():
    w = IOIWorld()
    names = set(w.name_ids.tolist())
    to = w.stoi["to"]
    for frac, expect in ((0.0, False), (0.5, True)):
        ids = w.stream(5000, frac, np.random.default_rng(1))
        after_to = {int(ids[i + 1]) for i in np.flatnonzero(ids[:-1] == to)}
        assert bool(after_to & names) is expect


def test_bad_input_is_refused_before_any_work():
    with pytest.raises(ConfigError, match="n_names"):
        IOIWorld(n_names=3)
    with pytest.raises(ConfigError, match="ioi_fraction"):
        IOIWorld().stream(100, 1.5, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="n_names"):
        resolve_config(IOICircuitConfig, "smoke", {"n_names": 60})
    with pytest.raises(ConfigError, match="model"):
        resolve_config(IOICircuitConfig, "smoke", {"model.d_model": 15, "model.n_heads": 2})
    cfg = resolve_config(IOICircuitConfig, "smoke", {"circuit_fraction": 1.0})
    with pytest.raises(ConfigError, match="circuit_fraction"):
        IOICircuit().validate(cfg)


def _tiny(seed=0, pos="learned"):
    w = IOIWorld()
    m = GPT(GPTConfig(vocab_size=w.vocab_size, seq_len=32, n_layers=2, n_heads=2, d_model=16, pos=pos), seed=seed).eval()
    return w, m, w.sample_prompts(10, np.random.default_rng(2))


def test_patching_is_zero_without_corruption_and_matches_a_full_swap():
    w, m, b = _tiny()
    eff = P.head_patching(m, b.clean, b.clean, b.end, b.io, b.s)
    assert eff.shape == (2, 2) and torch.allclose(eff, torch.zeros(2, 2), atol=1e-5)
    eff = P.head_patching(m, b.clean, b.corrupt, b.end, b.io, b.s)
    assert eff.abs().max() > 1e-4  # a random model still reads its inputs
    with pytest.raises(ValueError, match="outside"):
        P.patch_heads(m, b.clean, b.corrupt, b.end, b.io, b.s, [(5, 0)])
    with pytest.raises(ValueError, match="aligned"):
        P.head_patching(m, b.clean, b.corrupt[:, :-1], b.end, b.io, b.s)


def test_query_path_patching_recomputes_the_clean_attention():
    w, m, b = _tiny(1)
    d, base = P.query_path_patching(m, b.clean, b.corrupt, b.end, [(1, 0)], [b.io_pos])
    clean = P.attention_between(m, b.clean, b.end, [b.io_pos])[1, 0]
    assert base == pytest.approx(float(clean), abs=1e-5)
    assert torch.isnan(d[1]).all() and torch.isfinite(d[0]).all()
    d0, _ = P.query_path_patching(m, b.clean, b.clean, b.end, [(1, 0)], [b.io_pos])
    assert torch.allclose(d0[0], torch.zeros(2), atol=1e-6)
    _, mr, _ = _tiny(pos="rope")
    with pytest.raises(ConfigError, match="pos"):
        P.query_path_patching(mr, b.clean, b.corrupt, b.end, [(1, 0)], [b.io_pos])


def test_copy_score_finds_a_copying_head():
    w, m, b = _tiny(2)
    s = P.copy_scores(m, b.clean, b.io_pos, b.io)
    assert s.shape == (2, 2) and ((s >= 0) & (s <= 1)).all()
    # make head (1, 0) copy: identity OV on an orthogonal embedding, untied unembedding = embedding
    with torch.no_grad():
        d = m.cfg.d_model
        for blk in m.blocks:
            blk.mlp.proj.weight.zero_()
            blk.mlp.proj.bias.zero_()
            blk.attn.proj.weight.zero_()
            blk.attn.proj.bias.zero_()
            blk.attn.qkv.bias.zero_()
        emb = torch.linalg.qr(torch.randn(w.vocab_size, w.vocab_size))[0][:, :d] * 5
        m.wte.weight.copy_(emb)
        m.wpe.weight.zero_()
        m.lm_head.weight.copy_(emb)
        att = m.blocks[1].attn
        att.qkv.weight[2 * 2 * 8: 2 * 2 * 8 + 8] = torch.eye(d)[:8] * 5
        att.proj.weight[:, :8] = torch.eye(d)[:, :8]
    s = P.copy_scores(m, b.clean, b.io_pos, b.io)
    assert s[1, 0] > s[1, 1]


def test_value_side_patching_finds_the_sender_and_reads_its_s2_attention():
    w = IOIWorld()
    m = GPT(GPTConfig(vocab_size=w.vocab_size, seq_len=32, n_layers=3, n_heads=2, d_model=16), seed=1).eval()
    rng = np.random.default_rng(2)
    disc, test = w.sample_prompts(10, rng), w.sample_prompts(10, rng)
    recv = [(2, 0), (2, 1)]
    r = dup_by_values(m, disc, test, recv, 0.0)
    eff = P.path_patching_scan(m, disc.clean, disc.corrupt, disc.end, disc.io, disc.s, recv, "v")
    l, h = json.loads(r["val_head"])
    assert (l, h) == divmod(int(torch.argmin(eff[:2].flatten())), 2) and r["val_eff"] == pytest.approx(float(eff[l, h]))
    dup = P.attention_between(m, test.clean, test.s2_pos, [test.s1_pos])
    ind = P.attention_between(m, test.clean, test.s2_pos, [test.s1_pos + 1])
    assert r["val_gap"] > 0 and r["val_eff"] < 0  # this seed: found at min_frac 0
    assert r["val_max"] == pytest.approx(float(max(dup[l, h], ind[l, h])))
    assert r["random_val"] == pytest.approx(float(torch.maximum(dup, ind)[:2].mean()))
    # a threshold the change cannot meet finds nothing; the null is unchanged
    r2 = dup_by_values(m, disc, test, recv, 1e9)
    assert r2["val_max"] == 0.0 and r2["val_kind"] == "none" and r2["random_val"] == r["random_val"]
    # S-inhibition heads in layer 0 (or none) leave no sender: statistic and null 0
    for rc in ([(0, 1)], []):
        r3 = dup_by_values(m, disc, test, rc, 0.0)
        assert r3["val_max"] == 0.0 and r3["random_val"] == 0.0 and r3["val_head"] == "null"
    assert sinh_heads(torch.tensor([[0.2, float("nan")], [0.05, 0.1]]), 0.1) == [(0, 0), (1, 1)]


def _row(arm, seed, acc=0.97, ld=4.0, frac=0.85, rfrac=0.3, copy=0.95, rcopy=0.2, sinh=0.3, rsinh=0.02, dup=0.8,
         rdup=0.15, val=0.75, rval=0.2):
    return {"status": "ok", "arm": arm, "seed_index": seed, "acc": acc, "ld": ld, "ld_abc": 0.0, "k": 3,
            "circuit": json.dumps([[2, 0]]), "circuit_frac": frac, "random_frac": rfrac, "nm_copy": copy,
            "random_copy": rcopy, "name_movers": json.dumps([[2, 0]]), "n_nm": 1, "sinh_max": sinh,
            "random_sinh": rsinh, "sinh_head": json.dumps([1, 1]), "sinh_io": -0.2, "dup_max": dup, "random_dup": rdup,
            "dup_head": json.dumps([0, 1]), "dup_kind": "duplicate-token", "val_max": val, "random_val": rval,
            "sinh_set": json.dumps([[1, 1]]), "val_head": json.dumps([0, 1]), "val_kind": "duplicate-token",
            "val_eff": -0.4, "val_gap": 4.0}


def _random_row(seed, rfrac=0.3, rcopy=0.2, rsinh=0.02, rdup=0.15, rval=0.2, **_):
    """The ioi model's random heads (arm random): their five circuit statistics in the same columns."""
    return {"status": "ok", "arm": "random", "seed_index": seed, "k": 3, "circuit_frac": rfrac, "nm_copy": rcopy,
            "sinh_max": rsinh, "dup_max": rdup, "val_max": rval}


def _verdicts(tmp_path, ioi_kw, ctl_kw=None):
    rows = [_row("ioi", s, **ioi_kw) for s in range(3)] + [_random_row(s, **ioi_kw) for s in range(3)]
    rows += [_row("no-ioi", s, **(ctl_kw or {"acc": 0.5, "ld": 0.1})) for s in range(3)]
    cfg = resolve_config(IOICircuitConfig, "gpu", {})
    return {v.claim_id: v.outcome for v in IOICircuit().verdicts(cfg, pd.DataFrame(rows), RunDir(tmp_path))}


def test_verdicts_pass_fail_gate_and_null(tmp_path):
    ids = ("logit-diff", "circuit-concentration", "name-mover-copy", "s-inhibition", "duplicate-induction",
           "dup-induction-values")
    assert _verdicts(tmp_path, {}) == {c: "reproduced" for c in ids}
    bad = _verdicts(tmp_path, {"ld": 1.0, "frac": 0.5, "copy": 0.5, "sinh": 0.01, "dup": 0.3, "val": 0.3})
    assert bad == {c: "not reproduced" for c in ids}
    gated = _verdicts(tmp_path, {"acc": 0.6})
    assert gated["logit-diff"] == "reproduced" and all(gated[c] == "inconclusive" for c in ids[1:])
    nulls = _verdicts(tmp_path, {"rfrac": 0.8, "rcopy": 0.95, "rsinh": 0.2, "rdup": 0.6, "rval": 0.55},
                      {"acc": 0.95, "ld": 3.0})
    assert nulls == {c: "inconclusive" for c in ids}
    # the value-side claim alone: its attention below the rule, the others unchanged
    only = _verdicts(tmp_path, {"val": 0.49})
    assert only["dup-induction-values"] == "not reproduced" and only["duplicate-induction"] == "reproduced"


def test_smoke_run(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(IOICircuitConfig, "smoke", {"threads": 1})
    run = run_experiment(IOICircuit(), cfg, tmp_path / "run", progress=False, log=lambda *a, **k: None)
    res = run.results()
    assert set(res["arm"]) == {"ioi", "no-ioi", "random"} and (res["status"] == "ok").all()
    ioi = res[res["arm"] == "ioi"]
    assert np.asarray(json.loads(ioi["patch"].iloc[0])).shape == (2, 2)
    # the random arm is the ioi model's random heads (one training): its values are the ioi rows' random_* columns
    rnd = res[res["arm"] == "random"].set_index("seed_index")
    assert rnd["circuit_frac"].tolist() == pytest.approx(ioi.set_index("seed_index")["random_frac"].tolist())
    assert (run.path / "figures" / "patching_and_attention.png").exists()
    vs = {v.claim_id: v for v in run.verdicts()}
    assert len(vs) == 6
    # the null arms are measured and, on untrained models, do not meet their rules
    for c in ("logit-diff", "name-mover-copy", "duplicate-induction", "dup-induction-values"):
        assert vs[c].null_value is not None and vs[c].null_passed is False
