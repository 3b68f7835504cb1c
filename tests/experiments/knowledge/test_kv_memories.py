"""Tests for the MLP-neuron hook names on Hugging Face models (``blocks.{i}.mlp.pre`` / ``mlp.post`` through the
architecture map) and for :mod:`lmsci.measure.kv_memories` (Geva et al., arXiv 2012.14913)."""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.models.arch import arch_of
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import HFModel
from lmsci.models.hf_convert import to_hf

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

V, T = 53, 9


def tiny_hf(family: str) -> HFModel:
    """A tiny random HF causal LM of ``family`` built in the test (no download)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if family == "gpt2":
            cfg = transformers.GPT2Config(vocab_size=V, n_positions=16, n_embd=32, n_layer=2, n_head=4, n_inner=48)
            m = transformers.GPT2LMHeadModel(cfg)
        elif family == "gpt_neox":
            cfg = transformers.GPTNeoXConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=40, max_position_embeddings=16)
            m = transformers.GPTNeoXForCausalLM(cfg)
        else:
            cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                           num_key_value_heads=2, intermediate_size=44, max_position_embeddings=16)
            m = transformers.LlamaForCausalLM(cfg)
    return HFModel(m.eval())


def manual_mlp(w: HFModel, family: str, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pre, post) of ``layer`` computed by hand from the MLP's input (read with a plain forward hook)."""
    mlp = arch_of(w).mlp(layer)
    seen = {}
    h = mlp.register_forward_hook(lambda mod, args, out: seen.__setitem__("x", args[0].detach()))
    try:
        with torch.no_grad():
            w(x)
    finally:
        h.remove()
    xin = seen["x"]
    with torch.no_grad():
        if family == "gpt2":
            pre = xin @ mlp.c_fc.weight + mlp.c_fc.bias
            post = mlp.act(pre)
        elif family == "gpt_neox":
            pre = xin @ mlp.dense_h_to_4h.weight.T + mlp.dense_h_to_4h.bias
            post = mlp.act(pre)
        else:
            pre = xin @ mlp.gate_proj.weight.T
            post = mlp.act_fn(pre) * (xin @ mlp.up_proj.weight.T)
    return pre, post


FAMILIES = ("gpt2", "gpt_neox", "llama")
X = torch.randint(0, V, (3, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("family", FAMILIES)
def test_mlp_pre_and_post_hook_names_match_manual_computation(family):
    w = tiny_hf(family)
    names = [f"blocks.{i}.mlp.{k}" for i in range(2) for k in ("pre", "post")]
    with torch.no_grad():
        _, cache = w.run_with_cache(X, names)
    for i in range(2):
        pre, post = manual_mlp(w, family, i, X)
        assert cache[f"blocks.{i}.mlp.pre"].shape == pre.shape == post.shape
        assert torch.allclose(cache[f"blocks.{i}.mlp.pre"], pre, atol=1e-5), (family, i)
        assert torch.allclose(cache[f"blocks.{i}.mlp.post"], post, atol=1e-5), (family, i)
    # the value vectors: mlp.out == post @ values (+ bias of the down projection)
    arch = arch_of(w)
    down = arch.mlp_down(1)
    vals = arch.mlp_values(1)
    assert vals.shape == (post.shape[-1], 32)
    with torch.no_grad():
        _, c2 = w.run_with_cache(X, ["blocks.1.mlp.post", "blocks.1.mlp.out"])
        b = down.bias if getattr(down, "bias", None) is not None else 0.0
        assert torch.allclose(c2["blocks.1.mlp.post"] @ vals + b, c2["blocks.1.mlp.out"], atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_patching_mlp_post_is_a_pre_hook_on_the_down_projection(family):
    """Zeroing neuron 3 of layer 0 via ``blocks.0.mlp.post`` equals zeroing row 3 of its value vectors."""
    w = tiny_hf(family)

    def kill(a, hook):
        a = a.clone()
        a[..., 3] = 0
        return a

    with torch.no_grad():
        base = w(X)
        with w.hooks([("blocks.0.mlp.post", kill)]):
            patched = w(X)
        vals = arch_of(w).mlp_values(0)
        saved = vals[3].clone()
        vals[3] = 0
        edited = w(X)
        vals[3] = saved
        again = w(X)
    assert (patched - base).abs().max() > 1e-4
    assert torch.allclose(patched, edited, atol=1e-5)
    assert torch.equal(again, base)  # hooks removed, weights restored
    assert w.arch_path("blocks.0.mlp.post") == arch_of(w).mlp_down_path(0)


def test_lmsci_gpt_and_its_hf_export_have_the_same_neurons():
    for kw in (dict(pos="learned"), dict(pos="rope", mlp="swiglu", norm="rmsnorm")):
        m = GPT(GPTConfig(vocab_size=V, seq_len=16, n_layers=2, n_heads=4, d_model=32, **kw), seed=3).eval()
        w = HFModel(to_hf(m))
        names = ["blocks.1.mlp.pre", "blocks.1.mlp.post"]
        with torch.no_grad():
            _, ours = m.run_with_cache(X, names)
            _, theirs = w.run_with_cache(X, names)
        for n in names:
            assert (ours[n] - theirs[n]).abs().max().item() < 1e-4, (kw, n)
        assert torch.allclose(arch_of(m).mlp_values(1), arch_of(w).mlp_values(1))


def test_bad_mlp_names_are_refused_by_name():
    w = tiny_hf("llama")
    with pytest.raises(UnknownNameError, match="blocks.1.mlp.post"):
        w.arch_path("blocks.5.mlp.post")
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        arch_of(w).mlp_values(7)
    with torch.no_grad(), pytest.raises(UnknownNameError):
        w.run_with_cache(X, ["blocks.2.mlp.pre"])


# ------------------------------------------------------------------------------------ key-value memories
from lmsci.measure.kv_memories import KVMemories, key_value_memories, next_token_targets, value_logits  # noqa: E402


@pytest.mark.parametrize("which", ["gpt", "gpt_neox", "gpt2"])
def test_keys_values_and_agreement_match_brute_force(which):
    m = GPT(GPTConfig(vocab_size=V, seq_len=16, n_layers=2, n_heads=4, d_model=32), seed=4).eval() \
        if which == "gpt" else tiny_hf(which)
    x = torch.randint(0, V, (6, T), generator=torch.Generator().manual_seed(5))
    nxt = next_token_targets(x)
    kv = key_value_memories(m, x, nxt, k=3, n_top=4, batch_size=4)  # batches of 4 exercise the running top-k
    with torch.no_grad():
        _, cache = m.run_with_cache(x, ["blocks.0.mlp.post", "blocks.1.mlp.post"])
    for j in range(2):
        a = cache[f"blocks.{j}.mlp.post"][:, :-1]  # the last position has no successor
        flat = a.reshape(-1, a.shape[-1])
        top = flat.max(0)
        assert torch.allclose(kv.key_acts[j, :, 0], top.values, atol=1e-6)
        w, p = kv.key_where[j, :, 0, 0], kv.key_where[j, :, 0, 1]
        assert torch.equal(kv.key_next[j, :, 0], x[w, p + 1])
        assert (kv.key_acts[j, :, :-1] >= kv.key_acts[j, :, 1:]).all()
        lg = value_logits(m, j)
        assert torch.equal(kv.value_top[j, :, 0], lg.argmax(1))
        expect = (lg.argmax(1) == kv.key_next[j, :, 0]).float().mean()
        assert abs(float(kv.agreement()[j]) - float(expect)) < 1e-9
        ranks = (lg > lg.gather(1, kv.key_next[j, :, :1])).sum(1)
        assert torch.equal(kv.next_rank[j], ranks)
    assert kv.n_positions == 6 * (T - 1)


def test_shuffled_baseline_is_the_exact_average_over_neuron_pairs():
    g = torch.Generator().manual_seed(0)
    n = 12
    v = torch.randint(0, 4, (1, n, 1), generator=g)
    k = torch.randint(0, 4, (1, n, 1), generator=g)
    kv = KVMemories([0], torch.zeros(1, n, 1), torch.zeros(1, n, 1, 2, dtype=torch.long), k, v,
                    torch.zeros(1, n, dtype=torch.long), n)
    brute = np.mean([float(v[0, i, 0] == k[0, j, 0]) for i in range(n) for j in range(n) if i != j])
    assert abs(float(kv.shuffled_agreement()[0]) - brute) < 1e-6
    assert abs(float(kv.agreement()[0]) - float((v == k).float().mean())) < 1e-6


def test_norm_gain_and_bad_input():
    m = GPT(GPTConfig(vocab_size=V, seq_len=16, n_layers=2, n_heads=4, d_model=32), seed=4).eval()
    with torch.no_grad():
        m.ln_f.weight.mul_(torch.linspace(0.1, 3.0, 32))
    a, b = value_logits(m, 0), value_logits(m, 0, norm="gain")
    assert torch.allclose(b, (arch_of(m).mlp_values(0) * m.ln_f.weight) @ m.lm_head.weight.T, atol=1e-5)
    assert not torch.allclose(a, b)
    x = torch.randint(0, V, (2, T))
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        key_value_memories(m, x, next_token_targets(x), layers=[2])
    with pytest.raises(ConfigError, match="norm"):
        value_logits(m, 0, norm="layernorm")
    with pytest.raises(ConfigError, match="k="):
        key_value_memories(m, x, next_token_targets(x), k=10_000)
    with pytest.raises(ConfigError, match="next_tokens"):
        key_value_memories(m, x, x[:, :-1])
    with pytest.raises(ConfigError, match="d_mlp = 128"):
        value_logits(m, 0, neurons=torch.tensor([0, 128]))
    pad = next_token_targets(torch.tensor([[5, 6, 0, 0]]), pad_id=0)
    assert pad.tolist() == [[6, -1, -1, -1]]


# ------------------------------------------------------------------------------------ mlp-memories verdicts
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lmsci.config import resolve_config  # noqa: E402
from lmsci.experiments.knowledge.mlp_memories import MLPMemories, MLPMemoriesConfig, shuffled_depth_gap  # noqa: E402
from lmsci.runs import RunDir  # noqa: E402


NULL_AGREE = [[0.005, 0.004, 0.006, 0.005], [0.006, 0.005, 0.004, 0.005], [0.004, 0.006, 0.005, 0.006]]


def _mm_rows(agree: dict[str, list[list[float]]], shuffled: float = 0.005, trained: bool = True,
             null_agree: list[list[float]] = NULL_AGREE, null_shuffled: float = 0.005,
             shuffled_layers: list[float] | None = None, sametok: list[float] | None = None) -> pd.DataFrame:
    """Per arm, kind and seed rows; the null arm (the GPT at its initialisation) agrees at ``null_agree`` (default:
    at the shuffled level, no depth trend); ``shuffled_layers``: the trained GPT's shuffled baseline per layer
    (default ``shuffled`` in every layer, plus a little noise per seed), rises-with-depth's null; ``sametok``: the
    trained GPT's same-last-token shuffled agreement over the upper layers per seed (default the shuffled level plus
    a little noise), upper-exceeds-shuffled's null."""
    rows = []
    for kind, per_seed in agree.items():
        for s, layers in enumerate(per_seed):
            L = len(layers)
            for arm, lay, sh in (("real", layers, shuffled), ("null", null_agree[s % len(null_agree)], null_shuffled)):
                r = {"point": f"{arm}-{kind}" + (f"__s{s}" if s else ""), "arm": arm, "kind": kind, "seed_index": s,
                     "status": "ok", "n_layers": L}
                if arm == "real":
                    r["trained"] = trained
                up, lo = lay[L // 2:], lay[:L // 2]
                for l, a in enumerate(lay):
                    r[f"agree_L{l}"], r[f"shuffled_L{l}"] = a, sh
                    if arm == "real":
                        r[f"shuffled_L{l}"] = (shuffled_layers[l] if shuffled_layers else sh) + 1e-4 * ((s + l) % 3)
                r["agree_upper"], r["agree_lower"], r["shuffled_upper"] = np.mean(up), np.mean(lo), sh
                r["depth_gap"] = r["agree_upper"] - r["agree_lower"]
                r["upper_minus_shuffled"] = r["agree_upper"] - sh
                r["upper_ratio"] = r["agree_upper"] / sh
                t = (sametok[s % len(sametok)] if sametok else sh) + 1e-4 * (s % 3)
                r["sametok_upper"], r["sametok_minus_shuffled"], r["sametok_ratio"] = t, t - sh, t / sh
                rows.append(r)
    return pd.DataFrame(rows)


def _mm(df, tmp_path):
    cfg = resolve_config(MLPMemoriesConfig, "quick")
    return {v.claim_id: v for v in MLPMemories().verdicts(cfg, df, RunDir(tmp_path))}


def test_mlp_memories_papers_shape_is_reproduced(tmp_path):
    # Geva et al. Fig. 4: ~0 in the lower layers, a few percent in the upper ones
    up = {k: [[0.001, 0.002, 0.02, 0.035], [0.0, 0.004, 0.025, 0.03], [0.002, 0.001, 0.03, 0.04]]
          for k in ("shakespeare", "bios")}
    vs = _mm(_mm_rows(up), tmp_path)
    assert vs["rises-with-depth"].outcome == "reproduced" and vs["rises-with-depth"].n_seeds == 3
    assert vs["upper-exceeds-shuffled"].outcome == "reproduced" and vs["upper-exceeds-shuffled"].value >= 3


def test_mlp_memories_flat_or_chance_agreement_is_not_reproduced(tmp_path):
    flat = {"shakespeare": [[0.02, 0.02, 0.02, 0.02]] * 3,
            "bios": [[0.001, 0.002, 0.02, 0.035], [0.0, 0.004, 0.025, 0.03], [0.002, 0.001, 0.03, 0.04]]}
    vs = _mm(_mm_rows(flat), tmp_path)
    assert vs["rises-with-depth"].outcome == "not reproduced"
    assert vs["upper-exceeds-shuffled"].outcome == "reproduced"  # 0.02 / 0.005 = 4x on both
    vs = _mm(_mm_rows(flat, shuffled=0.015), tmp_path)
    assert vs["upper-exceeds-shuffled"].outcome == "not reproduced"  # 0.02 / 0.015 < 3


def test_mlp_memories_untrained_model_is_inconclusive(tmp_path):
    up = {k: [[0.001, 0.002, 0.02, 0.035]] * 3 for k in ("shakespeare", "bios")}
    vs = _mm(_mm_rows(up, trained=False), tmp_path)
    assert vs["rises-with-depth"].outcome == "inconclusive"
    assert any("trained" in r for r in vs["rises-with-depth"].reasons)
    one = {k: [[0.001, 0.002, 0.02, 0.035]] for k in ("shakespeare", "bios")}
    assert _mm(_mm_rows(one), tmp_path)["upper-exceeds-shuffled"].outcome == "inconclusive"  # one seed


def test_mlp_memories_null_arm_meeting_the_rule_is_inconclusive(tmp_path):
    """A trained GPT whose same-last-token shuffle agrees as often as its own keys (upper-exceeds-shuffled: values
    that only promote the likeliest successor of the trigger's last token), a trained GPT whose shuffled baseline
    rises with depth as much (rises-with-depth): the rule cannot tell memories from the null: inconclusive."""
    up = {k: [[0.001, 0.002, 0.02, 0.035], [0.0, 0.004, 0.025, 0.03], [0.002, 0.001, 0.03, 0.04]]
          for k in ("shakespeare", "bios")}
    vs = _mm(_mm_rows(up, shuffled_layers=[0.001, 0.002, 0.02, 0.035],
                      sametok=[np.mean(lay[2:]) for lay in up["bios"]]), tmp_path)
    for cid in ("rises-with-depth", "upper-exceeds-shuffled"):
        assert vs[cid].outcome == "inconclusive" and vs[cid].null_passed is True and vs[cid].rule_passed is True
        assert any("cannot tell" in r for r in vs[cid].reasons)
    vs = _mm(_mm_rows(up), tmp_path)
    assert vs["rises-with-depth"].null_passed is False and vs["upper-exceeds-shuffled"].null_passed is False
    assert vs["upper-exceeds-shuffled"].null_value < 3


def test_mlp_memories_depth_null_is_the_trained_shuffled_baseline(tmp_path):
    """rises-with-depth's null (2026-12-06): the trained GPTs' shuffled-neuron baseline, upper-half minus
    lower-half mean of the real rows' shuffled_L columns; a baseline rising with depth (token frequency, no memory)
    meets the rule and makes the claim inconclusive; the random-init GPT's depth trend decides nothing now."""
    from lmsci.experiments.knowledge.mlp_memories import shuffled_depth_gap

    up = {k: [[0.001, 0.002, 0.02, 0.035], [0.0, 0.004, 0.025, 0.03], [0.002, 0.001, 0.03, 0.04]]
          for k in ("shakespeare", "bios")}
    df = _mm_rows(up, shuffled_layers=[0.002, 0.003, 0.012, 0.015])
    real = df[df["arm"] == "real"]
    want = [np.mean([r[f"shuffled_L{l}"] for l in (2, 3)]) - np.mean([r[f"shuffled_L{l}"] for l in (0, 1)])
            for _, r in real.iterrows()]
    assert shuffled_depth_gap(real).tolist() == pytest.approx(want)
    v = _mm(df, tmp_path)["rises-with-depth"]
    assert v.outcome == "inconclusive" and v.null_passed is True
    assert v.null_value == pytest.approx(min(np.mean(want[i::2]) for i in (0, 1)), abs=1e-9)
    v = _mm(_mm_rows(up, null_agree=up["bios"]), tmp_path)["rises-with-depth"]  # random-init trend: a contrast
    assert v.outcome == "reproduced" and v.null_passed is False
    assert "random_init_depth_gap (contrast)" in v.details


def test_same_token_shuffle_is_the_exact_average_over_pairs_with_the_same_last_trigger_token():
    """upper-exceeds-shuffled's null (2026-12-06): value i against key j != i whose top-1 trigger prefix ends in the
    same token (read from the key-search windows at key_where), brute force over pairs; NaN without such a pair."""
    from lmsci.experiments.knowledge.mlp_memories import same_token_shuffled

    g = torch.Generator().manual_seed(1)
    n, N, T = 16, 5, 7
    inputs = torch.randint(0, 3, (N, T), generator=g)
    where = torch.stack([torch.randint(0, N, (2, n), generator=g), torch.randint(0, T, (2, n), generator=g)], -1)
    v, k = torch.randint(0, 4, (2, n, 1), generator=g), torch.randint(0, 4, (2, n, 1), generator=g)
    kv = KVMemories([0, 1], torch.zeros(2, n, 1), where[:, :, None, :], k, v, torch.zeros(2, n, dtype=torch.long), n)
    got = same_token_shuffled(kv, inputs)
    for j in range(2):
        last = [int(inputs[where[j, i, 0], where[j, i, 1]]) for i in range(n)]
        brute = np.mean([float(v[j, i, 0] == k[j, i2, 0]) for i in range(n) for i2 in range(n)
                         if i != i2 and last[i] == last[i2]])
        assert got[j] == pytest.approx(brute, abs=1e-12)
    # values that copy the likeliest successor of the trigger's last token: the restricted shuffle agrees as often
    # as the real pairing (1.0), the full shuffle does not
    last = inputs[where[0, :, 0], where[0, :, 1]]
    kv2 = KVMemories([0], torch.zeros(1, n, 1), where[:1, :, None, :], (last + 10)[None, :, None],
                     (last + 10)[None, :, None], torch.zeros(1, n, dtype=torch.long), n)
    assert same_token_shuffled(kv2, inputs)[0] == 1.0 and float(kv2.shuffled_agreement()[0]) < 1.0
    solo = torch.stack([torch.zeros(n, dtype=torch.long), torch.arange(n)], -1)[None, :, None, :]  # distinct tokens
    kv3 = KVMemories([0], torch.zeros(1, n, 1), solo, k[:1], v[:1], torch.zeros(1, n, dtype=torch.long), n)
    assert np.isnan(same_token_shuffled(kv3, torch.arange(n)[None, :])[0])


def test_mlp_memories_ratio_null_is_the_trained_same_token_shuffle(tmp_path):
    """upper-exceeds-shuffled's null (2026-12-06) reads the real rows' sametok_ratio / sametok_minus_shuffled, by
    the same rule; the random-init GPT's ratio is a contrast that decides nothing."""
    up = {k: [[0.001, 0.002, 0.02, 0.035], [0.0, 0.004, 0.025, 0.03], [0.002, 0.001, 0.03, 0.04]]
          for k in ("shakespeare", "bios")}
    v = _mm(_mm_rows(up, null_agree=up["bios"]), tmp_path)["upper-exceeds-shuffled"]  # random-init at the real level
    assert v.outcome == "reproduced" and v.null_passed is False
    assert v.null_value == pytest.approx(np.mean([(0.005 + 1e-4 * s) / 0.005 for s in range(3)]))
    assert "random_init_ratio (contrast)" in v.details
    v = _mm(_mm_rows(up, sametok=[0.02, 0.021, 0.019]), tmp_path)["upper-exceeds-shuffled"]  # ratio ~4 > 3
    assert v.outcome == "inconclusive" and v.null_passed is True and v.null_value >= 3
    v = _mm(_mm_rows(up, sametok=[0.012, 0.013, 0.011]), tmp_path)["upper-exceeds-shuffled"]  # ratio ~2.4 < 3
    assert v.outcome == "reproduced" and v.null_passed is False


def test_mlp_memories_smoke_end_to_end_null_arms_fail(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(MLPMemoriesConfig, "smoke")
    run = run_experiment(MLPMemories(), cfg, tmp_path / "mm", progress=False, log=lambda *a: None)
    res = run.results()
    # one training per (kind, seed), two arms with the same columns: the trained GPT and its initialisation
    assert sorted(res["arm"]) == ["null"] * 4 + ["real"] * 4 and not any(c.startswith("null_") for c in res.columns)
    assert res.groupby("arm")["depth_gap"].count().tolist() == [4, 4]
    vs = {v.claim_id: v for v in run.verdicts()}
    assert set(vs) == {"rises-with-depth", "upper-exceeds-shuffled"}
    for v in vs.values():
        assert v.outcome == "inconclusive"  # smoke: below the claims' scale, untrained models
        assert v.null_value is not None, v.claim_id
    real = res[res["arm"] == "real"]  # upper-exceeds-shuffled's null reads the trained rows' same-token shuffle
    assert {"sametok_L0", "sametok_L1", "sametok_upper", "sametok_ratio"} <= set(res.columns)
    assert (real["sametok_minus_shuffled"] == real["sametok_upper"] - real["shuffled_upper"]).all()
    r = real.groupby("kind")["sametok_ratio"].mean()
    v = vs["upper-exceeds-shuffled"]
    if np.isfinite(r).all():
        assert v.null_value == pytest.approx(float(r.min()))
    # rises-with-depth's null reads the trained rows' shuffled baseline
    gaps = shuffled_depth_gap(real).groupby(real["kind"].values).mean()
    assert vs["rises-with-depth"].null_value == pytest.approx(float(gaps.min()))


def test_mlp_memories_gpu_preset_is_estimated_within_9_minutes_and_says_so():
    """Session 52: the gpu preset fits the 10 minutes of one H100 by its estimate, which the documented time repeats."""
    import re

    from lmsci.config import resolve_config
    from lmsci.experiments.knowledge._mlp_memories_estimate import estimate_h100_seconds
    from lmsci.experiments.knowledge.mlp_memories import MLPMemories, MLPMemoriesConfig

    cfg = resolve_config(MLPMemoriesConfig, "gpu")
    est = estimate_h100_seconds(cfg)
    assert 60 < est["total"] <= 9 * 60 and est["shakespeare"] > 0 and est["bios"] > 0
    text = MLPMemories.time_estimate["gpu"]
    assert int(re.match(r"~(\d+) min", text).group(1)) == round(est["total"] / 60)
    assert f"({est['total'] / 60:.1f} min)" in text and "not measured" in text
    assert cfg.n_seeds >= 3 and cfg.shakespeare.model.n_layers >= 8 and cfg.bios.model.n_layers >= 8
    only = estimate_h100_seconds(cfg.model_copy(update={"kinds": ("bios",)}))
    assert only["shakespeare"] == 0 and only["total"] == est["bios"]
