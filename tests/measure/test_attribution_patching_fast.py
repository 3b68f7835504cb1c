"""exact_patching's resumed path (lmsci.models.resume: each patched run started at the patched layer from the clean
run's residual stream, the output head applied at END only) gives the full forward's values, on a tiny
``transformers`` Llama (GQA, several layers) and on tiny lmsci GPTs of several position schemes; a model without the
resumed path falls back to the full forward."""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.measure import attribution_patching as AP
from lmsci.models import resume
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import HFModel

V, T, N = 40, 9, 6


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, V, (N, T), generator=g)
    corrupt = clean.clone()
    corrupt[:, 2:5] = torch.randint(0, V, (N, 3), generator=g)
    end = torch.randint(5, T, (N,), generator=g)
    io, s = torch.randint(0, V, (N,), generator=g), torch.randint(0, V, (N,), generator=g)
    return clean, corrupt, end, io, s


def _llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # sharpen the near-uniform random init so the effects stand above rounding
        for n, p in m.named_parameters():
            if p.ndim == 2 and "embed" not in n:
                p.mul_(4.0)
    return m


def _gpt(seed=0, **kw):
    cfg = dict(vocab_size=V, seq_len=16, n_layers=3, n_heads=2, d_model=16)
    cfg.update(kw)
    m = GPT(GPTConfig(**cfg), seed=seed).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if p.ndim == 2 and "wpe" not in n:
                p.mul_(4.0)
    return m


def _both(model, data, per, monkeypatch):
    """(resumed, full forward) exact patching of one model; the resumed one must have run from a layer."""
    calls = []
    real = resume.resume_from
    monkeypatch.setattr(resume, "resume_from", lambda m, l, r: calls.append(l) or real(m, l, r))
    fast = AP.exact_patching(model, *data, per=per)
    L, H = AP.head_shape(model)
    assert sorted(set(calls)) == list(range(L)) and len(calls) == L * H * (1 if per == "head" else T)
    monkeypatch.setattr(resume, "resumable", lambda m: False)
    slow = AP.exact_patching(model, *data, per=per)
    monkeypatch.undo()
    return fast, slow


@pytest.mark.parametrize("wrap", [False, True], ids=["bare", "HFModel"])
def test_llama_resumed_equals_full_forward(wrap, monkeypatch):
    m = _llama()
    model = HFModel(m) if wrap else m
    assert resume.resumable(model)
    fast, slow = _both(model, _data(1), "head", monkeypatch)
    assert fast.shape == (3, 4) and slow.abs().max() > 1e-3
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-5)


def test_llama_resumed_per_position(monkeypatch):
    fast, slow = _both(_llama(seed=2), _data(2), "head_position", monkeypatch)
    assert fast.shape == (3, 4, T) and slow.abs().max() > 1e-3
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kw", [dict(), dict(pos="rope", mlp="swiglu", norm="rmsnorm"), dict(pos="alibi"),
                                dict(pos="relative", mlp="none")], ids=["learned", "rope", "alibi", "relative"])
def test_gpt_resumed_equals_full_forward(kw, monkeypatch):
    model = _gpt(seed=3, **kw)
    assert resume.resumable(model)
    for per in ("head", "head_position") if kw.get("pos") == "rope" else ("head",):
        fast, slow = _both(model, _data(3), per, monkeypatch)
        assert slow.abs().max() > 1e-3
        torch.testing.assert_close(fast, slow, rtol=0, atol=1e-5)


def test_block_inputs_and_resume_give_the_forward():
    m = _llama(seed=4)
    ids = _data(4)[0]
    resid, final = resume.block_inputs(m, ids)
    with torch.no_grad():
        logits = m(input_ids=ids, use_cache=False).logits
        assert len(resid) == 3 and resid[0].shape == (N, T, 32)
        torch.testing.assert_close(resume.unembed(m, final), logits, rtol=0, atol=1e-5)
        for l in range(3):
            torch.testing.assert_close(resume.resume_from(m, l, resid[l]), final, rtol=0, atol=1e-5)
    assert len(m.model.layers) == 3  # the cut layer list is put back
    with pytest.raises(ConfigError):
        resume.resume_from(m, 3, resid[0])


def test_fallback_for_a_model_without_the_resumed_path(monkeypatch):
    from transformers import GPT2Config, GPT2LMHeadModel

    from lmsci.measure import patching as P

    torch.manual_seed(5)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=16, n_embd=16, n_layer=2, n_head=2)).eval()
    train_gpt = _gpt(seed=6, dropout=0.0).train()  # training mode: not resumable either
    assert not resume.resumable(gpt2) and not resume.resumable(HFModel(gpt2)) and not resume.resumable(train_gpt)
    monkeypatch.setattr(resume, "resume_from", lambda *a: pytest.fail("resumed a model without the resumed path"))
    monkeypatch.setattr(resume, "block_inputs", lambda *a: pytest.fail("resumed a model without the resumed path"))
    data = _data(5)
    ex = AP.exact_patching(HFModel(gpt2), *data)
    assert ex.shape == (2, 2) and ex.abs().max() > 0
    ex_t = AP.exact_patching(train_gpt, *data)
    torch.testing.assert_close(ex_t, P.head_patching(train_gpt.eval(), *data), rtol=0, atol=1e-5)
    with pytest.raises(ConfigError):
        resume.unembed(gpt2, torch.zeros(1, 16))
