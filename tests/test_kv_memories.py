"""Tests for the MLP-neuron hook names on Hugging Face models (``blocks.{i}.mlp.pre`` / ``mlp.post`` through the
architecture map) and for :mod:`lmsci.measure.kv_memories` (Geva et al., arXiv 2012.14913)."""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.models.arch import arch_of
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import HFModel, to_hf

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
