"""lmsci.measure.lens: the logit lens is exact at the last layer and wherever later blocks add nothing; a tuned lens
starts as the logit lens, trains to a lower KL than it at every layer, and beats its shuffled-target null; the answer
layer is found where the ground truth puts it; lmsci GPT, Hugging Face Llama and GPT-2 alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.measure import lens as LN
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import HFModel

V, T, D = 32, 12, 16


def _gpt(n_layers=3, seed=0):
    m = GPT(GPTConfig(vocab_size=V, seq_len=T, n_layers=n_layers, n_heads=2, d_model=D), seed=seed).eval()
    with torch.no_grad():  # a random GPT-2 init is nearly uniform at the output: sharpen it
        for n, p in m.named_parameters():
            if p.ndim == 2:
                p.mul_(6.0)
    return m


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=False, initializer_range=0.2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HFModel(LlamaForCausalLM(cfg).eval())


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=V, n_positions=T, n_embd=D, n_layer=3, n_head=2, initializer_range=0.2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return GPT2LMHeadModel(cfg).eval()  # a raw transformers model: wrapped by the lens


def _ids(n=16, seed=0):
    return torch.randint(0, V, (n, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("make", [_gpt, _llama, _gpt2])
def test_logit_lens_exact_at_last_layer_and_tuned_lens_starts_there(make):
    m = make()
    kl = LN.lens_kl(m, [_ids()])
    assert kl.shape == (3,) and abs(kl[-1]) < 1e-5 and (kl[:-1] > 1e-3).all()
    init = LN.TunedLens(3, D)
    assert np.allclose(LN.lens_kl(m, [_ids()], init), kl, atol=1e-6)


@pytest.mark.parametrize("make", [_gpt, _llama])
def test_tuned_lens_beats_logit_lens_and_its_shuffled_null(make):
    m = make()
    train, test = [_ids(32, 1), _ids(32, 2)], [_ids(32, 3)]
    lens, hist = LN.train_tuned_lens(m, train, steps=150, batch_tokens=256, seed=0)
    null, _ = LN.train_tuned_lens(m, train, steps=150, batch_tokens=256, seed=0, shuffle_targets=True)
    logit, tuned, shuffled = (LN.lens_kl(m, test, x) for x in (None, lens, null))
    assert hist["loss"][-1] < hist["loss"][0]
    assert (tuned[:-1] < logit[:-1]).all()
    assert (tuned[:-1] < shuffled[:-1]).all()
    assert not any(p.grad is not None for p in (m.parameters()))  # the model stayed frozen


def test_adam_option_trains_too():
    m = _gpt()
    lens, hist = LN.train_tuned_lens(m, [_ids(32, 1)], steps=60, batch_tokens=128, optimizer="adam")
    assert hist["loss"][-1] < hist["loss"][0]


def test_dead_block_ground_truth():
    # block 2 writes nothing: the residual stream after block 1 IS the final one, so the logit lens there is exact and
    # every answer is top-1 from layer 1 on
    m = _gpt()
    with torch.no_grad():
        b = m.blocks[2]
        for p in (b.attn.proj.weight, b.mlp.proj.weight):
            p.zero_()
    kl = LN.lens_kl(m, [_ids()])
    assert abs(kl[1]) < 1e-5 and kl[0] > 1e-3
    ids = _ids(20, 4)
    out = LN.answer_layers(m, ids, torch.full((20,), T - 1))
    assert (out["stays_top1"] <= 1).all() and (out["first_top1"] <= out["stays_top1"]).all()
    assert (out["answer_rank"][-1] == 0).all() and out["answer_rank"].shape == (3, 20)
    forced = LN.answer_layers(m, ids, torch.full((20,), T - 1), answers=(out["answer"] + 1) % V)
    assert (forced["stays_top1"] == 3).all()  # the model never ranks these first


def test_bad_input_refused():
    m = _gpt()
    with pytest.raises(ConfigError):
        LN.train_tuned_lens(m, [_ids()], optimizer="lbfgs")
    with pytest.raises(ConfigError):
        LN.train_tuned_lens(m, [], steps=1)
    with pytest.raises(ConfigError):
        LN.lens_kl(m, [_ids()], LN.TunedLens(2, D))
    with pytest.raises(ConfigError):
        LN.answer_layers(m, _ids(4), [1, 2])
    with pytest.raises(ConfigError):
        LN.as_lensable(object())


def test_fit_on_cached_states_of_a_layer_subset_matches_full_training():
    # the translators are independent: training layers {0, 2} on cached states gives the full lens's translator 0,
    # leaves translator 1 the identity, and states_kl equals lens_kl at those layers
    m = _gpt()
    train, test = _ids(16, 1), _ids(8, 3)
    full, _ = LN.train_tuned_lens(m, [train], steps=20, batch_tokens=64, seed=3)
    h = LN.residual_stream(m, train)[0].flatten(1, 2)
    sub, hist = LN.fit_tuned_lens(m, h[[0, 2]], [0, 2], steps=20, batch_tokens=64, seed=3)
    assert len(hist["loss"]) == 20
    assert torch.allclose(sub.translators[0].weight, full.translators[0].weight, atol=1e-5)
    assert not sub.translators[1].weight.any() and full.translators[1].weight.any()
    ht = LN.residual_stream(m, test)[0].flatten(1, 2)
    for lens in (None, sub):
        got = LN.states_kl(m, ht[[0, 2]], [0, 2], lens, chunk=17)
        assert np.allclose(got, LN.lens_kl(m, [test], lens)[[0, 2]], rtol=1e-4, atol=1e-6)
    with pytest.raises(ConfigError):
        LN.fit_tuned_lens(m, h[[0, 1]], [0, 1])            # the last layer (the target) is missing
    with pytest.raises(ConfigError):
        LN.states_kl(m, h[[0, 2]], [0, 1, 2])
