"""MLP variants of lmsci's GPT for the knowledge-capacity factors (issue 42): attention-only, gated (SwiGLU),
mixture of experts (Switch routing, arXiv 2101.03961), and the closed-form parameter count."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from lmsci.errors import ConfigError
from lmsci.models.arch import arch_of
from lmsci.models.gpt import GPT, GPTConfig, GPTSpec
from lmsci.models.hf_convert import export_hf
from lmsci.models.sizing import count_params
from lmsci.train import trainer
from lmsci.train.trainer import TrainConfig


def _moe(top_k=1, experts=4, coef=0.01, **kw) -> GPT:
    cfg = GPTConfig(vocab_size=30, seq_len=16, n_layers=2, n_heads=2, d_model=16, mlp="moe", moe_experts=experts,
                    moe_top_k=top_k, moe_aux_coef=coef, **kw)
    return GPT(cfg, seed=0).eval()


@pytest.mark.parametrize("pos,mlp,norm,bias,tie", [
    c for c in itertools.product(["learned", "rope", "relative", "uni", "posonly"], ["gelu", "swiglu", "none", "moe"],
                                 ["layernorm", "rmsnorm", "none"], [True, False], [True, False])
    if not (c[2] != "layernorm" and c[0] in ("relative", "uni"))])  # fewer cases, every branch still covered
def test_count_params_is_the_built_models_count(pos, mlp, norm, bias, tie):
    spec = GPTSpec(n_layers=2, n_heads=2, d_model=12, d_mlp=20, pos=pos, mlp=mlp, norm=norm, bias=bias,
                   tie_embeddings=tie, moe_experts=3, moe_top_k=2)
    m = GPT(spec.gpt_config(37, 11))
    assert count_params(spec, 37, 11) == m.num_params()
    assert count_params(spec, 37, 11, non_embedding=True) == m.num_params(non_embedding=True)


def test_count_params_active_counts_the_routed_experts_only():
    spec = GPTSpec(n_layers=2, n_heads=2, d_model=16, mlp="moe", moe_experts=8, moe_top_k=1)
    dense = GPTSpec(n_layers=2, n_heads=2, d_model=16)
    total, active = count_params(spec, 50, 16), count_params(spec, 50, 16, active=True)
    # one expert active: the dense model's parameters plus the routers
    assert active == count_params(dense, 50, 16) + 2 * 16 * 8 and total > 5 * active / 2
    with pytest.raises(ConfigError):
        count_params(spec, 0, 16)


def test_moe_top1_is_switch_routing_and_top2_renormalises():
    for k in (1, 2):
        m = _moe(top_k=k)
        x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
        moe = m.blocks[0].mlp
        with torch.no_grad():
            out = moe(x)
            probs = torch.softmax(moe.router(x).float(), -1)
            top_p, top_i = probs.topk(k, -1)
            gates = top_p if k == 1 else top_p / top_p.sum(-1, keepdim=True)
            want = torch.zeros_like(x)
            for b, t, j in itertools.product(range(2), range(5), range(k)):
                e = int(top_i[b, t, j])
                h = F.gelu(x[b, t] @ moe.fc_weight[e].T + moe.fc_bias[e])
                want[b, t] += gates[b, t, j] * (h @ moe.proj_weight[e].T + moe.proj_bias[e])
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
        assert int(moe.last_counts.sum()) == 2 * 5 * k


def test_moe_hooks_and_aux_loss():
    m = _moe(top_k=2, coef=0.5)
    ids = torch.randint(0, 30, (3, 10), generator=torch.Generator().manual_seed(2))
    assert m.moe_aux_loss() is None
    logits, cache = m.run_with_cache(ids)
    assert "blocks.1.mlp.router" in cache and "blocks.1.mlp.pre" not in cache
    torch.testing.assert_close(cache["blocks.0.mlp.router"].sum(-1), torch.ones(3, 10))
    # Switch eq. 4: alpha * E * sum_i f_i P_i, with f the assignment shares and P the mean router probabilities
    moe = m.blocks[0].mlp
    f = moe.last_counts.float() / moe.last_counts.sum()
    P = cache["blocks.0.mlp.router"].reshape(-1, 4).mean(0)
    torch.testing.assert_close(moe.aux_loss.detach(), 0.5 * 4 * (f * P).sum())
    m.train()
    m(ids)
    m.moe_aux_loss().backward()
    assert m.blocks[0].mlp.router.weight.grad.abs().sum() > 0
    with pytest.raises(ConfigError, match="moe"):
        export_hf(m, "/nonexistent/never-written")
    with pytest.raises(ConfigError):
        arch_of(m).mlp_in_path(0)
    with pytest.raises(ConfigError):
        arch_of(m).mlp_down_path(0)


def test_moe_trains_with_the_balancing_loss():
    m = _moe(top_k=1, experts=4, coef=0.01)
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, 30, (64, 12), generator=g)

    def get_batch(step, gen):
        idx = torch.randint(0, 64, (16,), generator=gen)
        x = data[idx]
        return x[:, :-1], x[:, 1:]

    res = trainer.train(m, get_batch, TrainConfig(steps=40, batch_size=16, lr=3e-3, log_every=10), seed=0)
    losses = [r["loss"] for r in res.history if "loss" in r]
    assert losses[-1] < losses[0]
    counts = m.blocks[0].mlp.last_counts
    assert int((counts > 0).sum()) >= 2  # more than one expert in use


def test_moe_fields_only_in_moe_dumps_and_validated():
    assert "moe_experts" not in GPTSpec().model_dump() and "moe_top_k" not in GPTConfig(
        vocab_size=5, seq_len=4, n_layers=1, n_heads=1, d_model=4).model_dump()
    spec = GPTSpec(mlp="moe", moe_experts=6, moe_top_k=2)
    assert spec.model_dump()["moe_experts"] == 6 and spec.gpt_config(9, 8).moe_top_k == 2
    with pytest.raises(ConfigError, match="moe_top_k"):
        GPTConfig(vocab_size=5, seq_len=4, n_layers=1, n_heads=1, d_model=4, mlp="moe", moe_experts=2, moe_top_k=3)


def test_moe_save_load_round_trip(tmp_path):
    m = _moe(top_k=2, experts=3)
    ids = torch.randint(0, 30, (2, 8), generator=torch.Generator().manual_seed(3))
    m.save_pretrained(tmp_path)
    m2 = GPT.from_pretrained(tmp_path).eval()
    assert m2.cfg.moe_experts == 3 and m2.cfg.moe_top_k == 2
    with torch.no_grad():
        assert torch.equal(m(ids), m2(ids))


def test_the_trainer_adds_the_balancing_loss():
    x = torch.randint(0, 30, (4, 12), generator=torch.Generator().manual_seed(5))
    routers = {}
    for coef in (0.0, 10.0):
        m = _moe(coef=coef)
        trainer.train(m, lambda step, gen: (x[:, :-1], x[:, 1:]), TrainConfig(steps=1, batch_size=4, lr=1e-2), seed=0)
        routers[coef] = m.blocks[0].mlp.router.weight.detach().clone()
    assert not torch.allclose(routers[0.0], routers[10.0])  # only the auxiliary loss differs between the two runs


def test_a_trained_moe_can_be_copied_and_quantized():
    import copy

    from lmsci.models.quantize import fake_quantize

    m = _moe().train()
    ids = torch.randint(0, 30, (2, 8), generator=torch.Generator().manual_seed(6))
    m(ids)  # the last forward's aux loss holds its autograd graph
    assert m.moe_aux_loss().requires_grad
    c = copy.deepcopy(m)
    assert c.moe_aux_loss() is None and m.moe_aux_loss() is not None
    q, rep = fake_quantize(m, 8)
    assert rep["n_quantized"] > 0
