"""LM-Steer training from cached final hidden states (methods/lm_steer_cached.py) equals train_steer on a tied tiny
Llama, and a model whose logits are not lm_head(h) is refused."""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.methods.lm_steer import train_steer
from lmsci.methods.lm_steer_cached import cached_loss, check_cache, final_hidden_states, train_steer_cached
from lmsci.methods.steerable import mean_nll, pad_batch
from lmsci.methods.steering import steering


def _tied_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmsci.models.hf import HFModel

    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HFModel(LlamaForCausalLM(cfg).eval())


def _data(n=40):
    g = torch.Generator().manual_seed(0)
    data = [torch.randint(1, 64, (int(torch.randint(2, 12, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]
    return data, torch.tensor([1.0 if i % 2 else -1.0 for i in range(n)])


def test_cached_training_equals_train_steer_on_a_tied_llama():
    m = _tied_llama()
    assert m.model.get_output_embeddings().weight is m.model.get_input_embeddings().weight
    data, y = _data()
    a = train_steer(m, data, y, steps=15, batch_size=8, epsilon=0.1, lr=0.05, seed=3)
    cache = final_hidden_states(m, data, batch_size=16)
    assert check_cache(m, cache) < 1e-4
    b = train_steer_cached(m, cache, y, steps=15, batch_size=8, epsilon=0.1, lr=0.05, seed=3)
    assert torch.allclose(torch.tensor(a.history), torch.tensor(b.history), atol=1e-5)
    # atol 1e-4 on parameters of size ~0.7: Adam's normalised steps carry the two paths' float rounding into the
    # parameters (1.6e-5 apart after 15 steps on an AMD AVX2 host, S54; under 1e-5 on the Intel AVX-512 hosts)
    assert torch.allclose(a.P1, b.P1, atol=1e-4) and torch.allclose(a.P2, b.P2, atol=1e-4)
    assert all(p.grad is None for p in m.parameters())
    # cached_loss is the objective: the same as the model's own steered NLL over all the texts
    ids, mask = pad_batch(data, 0)
    vals = b.values(batch=len(data))
    vals[:, b.index("attr")] = y
    with steering(m, b, vals), torch.no_grad():
        ref = float(mean_nll(m, ids, mask))
    assert abs(cached_loss(m, cache, b, y) - ref) < 1e-4
    assert cached_loss(m, cache, b, y) < cached_loss(m, cache, None, y)  # it learned its data


def test_bad_input_and_a_model_with_transformed_logits():
    m = _tied_llama()
    data, y = _data(8)
    cache = final_hidden_states(m, data)
    with pytest.raises(ConfigError):
        train_steer_cached(m, cache, y[:5])
    with pytest.raises(ConfigError):
        train_steer_cached(m, cache, y, steps=0)
    h = m.model.get_output_embeddings().register_forward_hook(lambda mod, args, out: 2.0 * out)
    try:
        with pytest.raises(ConfigError):
            check_cache(m, cache)
    finally:
        h.remove()


def test_on_the_real_tied_smollm2_the_cached_path_is_the_hooked_steer(smollm2):
    """SmolLM2-135M (a tied LlamaForCausalLM): the LMSteer pre-hook on lm_head and the cached path give one loss."""
    from lmsci.methods.lm_steer import LMSteer

    tok = smollm2.tokenizer
    lines = ["\nO happy dagger, this is thy sheath.", "\nGood night, good night!", "\nThou art a villain."]
    data = [tok.encode(s, add_special_tokens=False) for s in lines]
    y = torch.tensor([1.0, 1.0, -1.0])
    cache = final_hidden_states(smollm2, data, pad_id=tok.pad_token_id)
    assert cache.h.shape[-1] == 576 and check_cache(smollm2, cache, n=3) < 1e-2
    steer = LMSteer(576, rank=8, epsilon=1e-3, init_std=0.5, seed=0)
    ids, mask = pad_batch(data, tok.pad_token_id)
    vals = steer.values(batch=3)
    vals[:, steer.index("attr")] = y
    with steering(smollm2, steer, vals), torch.no_grad():
        ref = float(mean_nll(smollm2, ids, mask))
    assert abs(cached_loss(smollm2, cache, steer, y) - ref) < 1e-3
    assert abs(cached_loss(smollm2, cache, steer, y) - cached_loss(smollm2, cache, None, y)) > 1e-4  # it acts
