"""LM-Steer (methods/lm_steer.py) and the steering baselines (methods/steering.py) on tiny models built here:
a random lmsci GPT, a random Hugging Face Llama and GPT-NeoX (tied and untied output embeddings)."""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.methods.lm_steer import LMSteer, generate, steering, token_logprobs, train_steer
from lmsci.methods.steering import ActAdd, LogitOffset, as_steerable, logits_of, train_intervention
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import HFModel

V, D = 32, 16


def _gpt(seed: int = 0) -> GPT:
    return GPT(GPTConfig(vocab_size=V, seq_len=16, n_layers=1, n_heads=2, d_model=D), seed=seed).eval()


def _llama() -> HFModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HFModel(LlamaForCausalLM(cfg).eval())


def _neox(tie: bool) -> HFModel:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(vocab_size=V, hidden_size=D, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                        max_position_embeddings=32, tie_word_embeddings=tie)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HFModel(GPTNeoXForCausalLM(cfg).eval())


MODELS = {"gpt": _gpt, "llama": _llama, "neox-tied": lambda: _neox(True), "neox-untied": lambda: _neox(False)}


def _task(n: int = 48, seed: int = 0):
    """Positive texts use tokens 0..7, negative texts 8..15; labels +1 / -1."""
    g = torch.Generator().manual_seed(seed)
    pos = torch.randint(0, 8, (n, 10), generator=g)
    neg = torch.randint(8, 16, (n, 10), generator=g)
    return torch.cat([pos, neg]), torch.cat([torch.ones(n), -torch.ones(n)])


def _prompt(b: int = 3, t: int = 5) -> torch.Tensor:
    return torch.randint(16, V, (b, t), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kind", list(MODELS))
def test_only_adapters_train_and_eps0_is_exact(kind):
    model = MODELS[kind]()
    if kind == "neox-tied":
        assert model.model.get_output_embeddings().weight is model.model.get_input_embeddings().weight
    before = {n: p.detach().clone() for n, p in as_steerable(model).model.named_parameters()} if kind != "gpt" \
        else {n: p.detach().clone() for n, p in model.named_parameters()}
    data, labels = _task(8)
    steer = train_steer(model, data, labels, steps=2, batch_size=4, epsilon=0.1, lr=0.05)
    params = dict(model.named_parameters()) if kind == "gpt" else dict(model.model.named_parameters())
    for n, p in params.items():
        assert torch.equal(p, before[n]), n
        assert p.grad is None, n
        assert p.requires_grad  # flags restored
    assert steer.P1.grad is not None and steer.P2.grad is not None
    assert len(steer.history) == 2
    ids = _prompt()
    base = logits_of(as_steerable(model), ids)
    with steering(model, steer, torch.zeros(steer.K)):
        same = logits_of(as_steerable(model), ids)
    with steering(model, steer, steer.values(attr=5.0)):
        moved = logits_of(as_steerable(model), ids)
    assert torch.equal(base, same)
    assert not torch.allclose(base, moved)
    assert torch.equal(base, logits_of(as_steerable(model), ids))  # detached on exit


@pytest.mark.parametrize("kind", ["gpt", "llama", "neox-tied"])
def test_steer_moves_next_token_distribution(kind):
    model = MODELS[kind]()
    data, labels = _task()
    steer = train_steer(model, data, labels, steps=40, batch_size=16, epsilon=0.1, lr=0.05)
    assert steer.history[-1] < steer.history[0]
    ids = _prompt()
    mass = {}
    for v in (1.0, -1.0):
        p = token_logprobs  # noqa: F841 (scoring API exercised below)
        with steering(model, steer, steer.values(attr=v)):
            probs = logits_of(as_steerable(model), ids)[:, -1].softmax(-1)
        mass[v] = (probs[:, :8].sum(-1).mean().item(), probs[:, 8:16].sum(-1).mean().item())
    assert mass[1.0][0] > mass[-1.0][0] + 0.1  # positive steer: more mass on the positive tokens
    assert mass[-1.0][1] > mass[1.0][1] + 0.1
    out = generate(model, ids, steer, steer.values(attr=1.0), max_new_tokens=6,
                   **({"temperature": 0.0} if kind == "gpt" else {"do_sample": False, "pad_token_id": 0}))
    assert out.shape == (3, 11)
    assert (out[:, 5:] < 8).float().mean() > 0.5


def test_shift_is_the_embedding_map_and_composes_linearly():
    """h <- h + eps h W equals logits with e_v <- (I + eps W) e_v; steers add in the hidden space."""
    model = _gpt()
    steer = LMSteer(D, names=("a", "b"), rank=4, epsilon=0.3, dummy=False, seed=3)
    h = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(0))
    E = model.lm_head.weight.detach()
    for s in ([1.0, 0.0], [0.0, 1.0]):
        W = steer.matrix(values=torch.tensor(s))
        steered = steer.shift(h, torch.tensor([s, s]))
        ref = h @ ((torch.eye(D) + 0.3 * W) @ E.T)  # l_v = h^T (I + eps W) e_v
        torch.testing.assert_close(steered @ E.T, ref, rtol=1e-5, atol=1e-5)
    c = torch.tensor([[1.0, 0.0], [2.0, 0.0]]), torch.tensor([[0.0, -1.0], [0.0, 0.5]])
    d_a, d_b = steer.shift(h, c[0]) - h, steer.shift(h, c[1]) - h
    torch.testing.assert_close(steer.shift(h, c[0] + c[1]) - h, d_a + d_b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(steer.shift(h, 3 * c[0]) - h, 3 * d_a, rtol=1e-5, atol=1e-6)
    # combining two separately made steers: exact sum, dummies renamed, ranks padded
    s1 = LMSteer(D, names=("sent",), rank=3, epsilon=0.2, seed=1)
    s2 = LMSteer(D, names=("genre",), rank=5, epsilon=0.1, seed=2)
    both = LMSteer.combine([s1, s2])
    assert both.names == ("sent", "dummy.0", "genre", "dummy.1") and both.dummies == ("dummy.0", "dummy.1")
    v1, v2 = s1.values(sent=2.0), s2.values(genre=-1.0)
    got = both.shift(h, both.values({"sent": 2.0, "genre": -1.0}).expand(2, -1)) - h
    want = (s1.shift(h, v1.expand(2, -1)) - h) + (s2.shift(h, v2.expand(2, -1)) - h)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_per_example_values_and_dummy():
    model = _gpt()
    steer = LMSteer(D, rank=D, epsilon=0.5, seed=0)
    assert steer.names == ("attr", "dummy") and steer.values(attr=5).tolist() == [5.0, 1.0]
    assert steer.values(attr=5, dummy=0).tolist() == [5.0, 0.0]
    ids = _prompt(2)
    vals = torch.tensor([[1.0, 1.0], [-1.0, 1.0]])
    with steering(model, steer, vals):
        both = model(ids)
    for i in range(2):
        with steering(model, steer, vals[i]):
            one = model(ids[i:i + 1])
        torch.testing.assert_close(both[i:i + 1], one, rtol=1e-5, atol=1e-6)
    assert LMSteer(D, rank=4).num_trainable() == 2 * 2 * D * 4


def test_named_errors():
    model = _gpt()
    with pytest.raises(ConfigError, match="rank"):
        LMSteer(D, rank=D + 1)
    steer = LMSteer(D)
    with pytest.raises(UnknownNameError, match="steer"):
        steer.values(toxicity=1.0)
    with pytest.raises(ConfigError, match="d_model"):
        LMSteer(D + 2).attach(model)
    from transformers import LlamaConfig, LlamaModel

    base = LlamaModel(LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=32, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(ConfigError, match="lm_head"):
        train_steer(base, *_task(4), steps=1)
    with pytest.raises(ConfigError, match="model"):
        as_steerable(torch.nn.Linear(3, 3))
    with pytest.raises(ConfigError, match="labels"):
        train_steer(model, *_task(4)[:1], torch.ones(3), steps=1)
    with pytest.raises(ConfigError, match="layer"):
        ActAdd(D, layer=5).attach(model)


def test_diverged():
    from lmsci.errors import DivergedError

    model = _gpt()
    steer = LMSteer(D, epsilon=1.0)
    steer.P1.data.fill_(float("nan"))
    with pytest.raises(DivergedError):
        train_steer(model, *_task(4), steer=steer, steps=2)
