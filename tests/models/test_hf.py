"""Tests for lmsci.models.hf_convert and lmsci.models.hf: export to GPT-2/Llama with equal logits, import back, load_hf,
hooks by module path."""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import HubUnavailableError, load_hf
from lmsci.models.hf_convert import EXPORT_ATOL, export_hf, hf_architecture, import_hf

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


def perturbed(**kw) -> GPT:
    """A tiny GPT whose norms and biases are not at their init values (so a mapping error shows)."""
    base = dict(vocab_size=61, seq_len=24, n_layers=2, n_heads=4, d_model=32)
    base.update(kw)
    m = GPT(GPTConfig(**base), seed=1)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return m.eval()


X = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(0))

CASES = {
    "gpt2": dict(pos="learned"),
    "gpt2-nobias-tied": dict(pos="learned", bias=False, tie_embeddings=True, d_mlp=48),
    "llama": dict(pos="rope", mlp="swiglu", norm="rmsnorm", bias=False),
    "llama-bias-dhead-tied": dict(pos="rope", mlp="swiglu", norm="rmsnorm", bias=True, d_head=16,
                                  tie_embeddings=True, rope_base=500.0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_export_load_same_logits_and_import_back(case, tmp_path):
    from transformers import AutoModelForCausalLM

    m = perturbed(**CASES[case])
    export_hf(m, tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    expected = "GPT2LMHeadModel" if case.startswith("gpt2") else "LlamaForCausalLM"
    assert type(hf).__name__ == expected
    with torch.no_grad():
        ours, theirs = m(X), hf(X).logits
    assert (ours - theirs).abs().max().item() < EXPORT_ATOL
    back = import_hf(hf)
    assert back.cfg == m.cfg
    with torch.no_grad():
        assert (back(X) - ours).abs().max().item() < EXPORT_ATOL


def test_rope_convention_matters():
    """Llama's split-halves RoPE: an interleaved-pairs rotation would give different logits."""
    m = perturbed(**CASES["llama"])
    from lmsci.models.hf_convert import to_hf

    hf = to_hf(m)
    # permute q/k output rows from split-halves to interleaved order: the logits must change
    d = m.cfg.head_dim
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    with torch.no_grad():
        w = hf.model.layers[0].self_attn.q_proj.weight.view(4, d, -1)
        w.copy_(w[:, perm].clone())
        w = hf.model.layers[0].self_attn.k_proj.weight.view(4, d, -1)
        w.copy_(w[:, perm].clone())
        assert (hf(X).logits - m(X)).abs().max().item() > 1e-3


@pytest.mark.parametrize("kw", [dict(pos="alibi"), dict(pos="uni"), dict(pos="rope", mlp="gelu"),
                                dict(pos="learned", norm="rmsnorm"), dict(pos="learned", d_head=16)])
def test_no_hf_equivalent_is_a_config_error(kw, tmp_path):
    with pytest.raises(ConfigError) as e:
        export_hf(perturbed(**kw), tmp_path)
    assert "GPT-2" in str(e.value) or "d_head" in str(e.value)
    assert not (tmp_path / "config.json").exists()


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=70, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    d = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(d)
    return d


def test_load_hf_local_and_hooks_by_module_path(tiny_llama_dir):
    w = load_hf(tiny_llama_dir)
    assert type(w.model).__name__ == "LlamaForCausalLM" and "model.layers.1.self_attn" in w.module_names()
    assert not w.training and w.train().training and not w.eval().training
    x = torch.randint(0, 70, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        clean = w(x)
        assert clean.shape == (2, 10, 70)
        logits, cache = w.run_with_cache(x, ["model.layers.0.self_attn", "model.layers.*.mlp", "model.norm"])
        assert torch.allclose(logits, clean)
        assert cache["model.layers.0.self_attn"].shape == (2, 10, 32)
        assert set(cache) == {"model.layers.0.self_attn", "model.layers.0.mlp", "model.layers.1.mlp", "model.norm"}
        assert torch.allclose(w.model.lm_head(cache["model.norm"]), clean, atol=1e-5)
        # patch: zero the second layer's MLP output
        with w.hooks([("model.layers.1.mlp", lambda out, hook: torch.zeros_like(out))]):
            patched = w(x)
        assert not torch.allclose(patched, clean)
        # hooks are gone afterwards, also after an exception
        assert torch.allclose(w(x), clean)
        with pytest.raises(RuntimeError, match="boom"):
            with w.hooks({"model.layers.0.self_attn": lambda out, hook: out * 0}, cache="model.norm"):
                raise RuntimeError("boom")
        assert all(len(m._forward_hooks) == 0 for m in w.model.modules())
        assert torch.allclose(w(x), clean)
        pats = w.attention_patterns(x)
        assert len(pats) == 2 and pats[0].shape == (2, 4, 10, 10)
        assert torch.allclose(pats[1].sum(-1), torch.ones(2, 4, 10), atol=1e-5) and torch.all(pats[0].triu(1) == 0)
    with pytest.raises(UnknownNameError, match="model.layers.0.self_attn"):
        with w.hooks([("model.layers.0.self_atn", lambda o, h: None)]):
            pass


def test_patch_semantics_match_between_lmsci_and_hf(tmp_path):
    """Zeroing block 1's MLP in lmsci equals zeroing model.layers.1.mlp in the exported HF model."""
    m = perturbed(**CASES["llama"])
    export_hf(m, tmp_path)
    w = load_hf(tmp_path)
    with torch.no_grad():
        with m.hooks([("blocks.1.mlp.out", lambda a, hook: torch.zeros_like(a))]):
            ours = m(X)
        with w.hooks([("model.layers.1.mlp", lambda a, hook: torch.zeros_like(a))]):
            theirs = w(X)
    assert (ours - theirs).abs().max().item() < EXPORT_ATOL
    # attention patterns agree too (lmsci hook point vs HF output_attentions)
    with torch.no_grad():
        _, cache = m.run_with_cache(X, "blocks.*.attn.pattern")
        pats = w.attention_patterns(X)
    for i in range(2):
        assert (cache[f"blocks.{i}.attn.pattern"] - pats[i]).abs().max().item() < 1e-5


def test_hub_unreachable_error_is_plain(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnavailableError) as e:
        load_hf("lmsci-test-org/definitely-not-cached-model")
    msg = str(e.value)
    assert "hub" in msg and "offline" in msg and "local directory" in msg
    with pytest.raises(ConfigError, match="existing local directory"):
        load_hf(str(tmp_path / "missing" / "model"))
    with pytest.raises(ConfigError, match="config.json"):
        load_hf(tmp_path)


def test_hf_architecture_names():
    assert hf_architecture(GPTConfig(vocab_size=5, seq_len=4, n_layers=1, n_heads=1, d_model=4)) == "gpt2"
    assert hf_architecture(GPTConfig(vocab_size=5, seq_len=4, n_layers=1, n_heads=1, d_model=4, pos="rope",
                                     mlp="swiglu", norm="rmsnorm")) == "llama"


def test_lmsci_instrument_runs_on_hf_model(tmp_path):
    """An lmsci instrument (linear-probe features) reads the same hidden states via GPT hook names
    and via HF module paths of the exported model."""
    from lmsci.measure.probes import hidden_at

    m = perturbed(**CASES["llama"])
    export_hf(m, tmp_path)
    w = load_hf(tmp_path)
    seqs, pos = [[1, 2, 3, 4], [5, 6, 7]], [3, 2]
    ours = hidden_at(m, seqs, pos, hook="blocks.1.resid_post")
    theirs = hidden_at(w, seqs, pos, hook="model.layers.1")
    assert ours.shape == (2, 32) and (ours - theirs).abs().max().item() < EXPORT_ATOL
    # the same lmsci hook names resolve on the HF model through the architecture map
    mapped = hidden_at(w, seqs, pos, hook="blocks.1.resid_post")
    assert torch.equal(mapped, theirs)
    for name in ("final", "blocks.0.mlp.out", "blocks.0.attn.out"):
        a, b = hidden_at(m, seqs, pos, hook=name), hidden_at(w, seqs, pos, hook=name)
        assert (a - b).abs().max().item() < EXPORT_ATOL, name
    assert w.arch_path("blocks.0.mlp.out") == "model.layers.0.mlp"
    with pytest.raises(UnknownNameError):
        hidden_at(w, seqs, pos, hook="blocks.9.resid_post")
