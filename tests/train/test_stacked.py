"""Stacked training (lmsci.train.stacked): K GPTs as one computation equal K separate runs of
lmsci.train.trainer.train; and the capacity-search instrument (lmsci.measure.capacity).

Source of the technique: PyTorch "Model ensembling" tutorial (torch.func stack_module_state + vmap).
"""

from __future__ import annotations

import math

import pytest
import torch

from lmsci.errors import ConfigError, DivergedError
from lmsci.measure.capacity import search_capacity
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.train.stacked import StackedModels, StackedResult, make_stacked_optimizer, train_stacked
from lmsci.train.trainer import TrainConfig, make_optimizer, train

GC = GPTConfig(vocab_size=48, seq_len=16, n_layers=2, n_heads=2, d_model=32)


def _get_batch(step: int, g: torch.Generator):
    x = torch.randint(0, GC.vocab_size, (4, GC.seq_len + 1), generator=g)
    y = x[:, 1:].clone()
    y[:, :2] = -100  # some ignored targets
    return x[:, :-1], y


def _cfg(**kw) -> TrainConfig:
    base = dict(steps=20, batch_size=4, lr=3e-3, warmup_steps=5, weight_decay=0.1, grad_clip=0.3,
                device="cpu", eval_every=10)
    return TrainConfig(**{**base, **kw})


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), 1e-12)


@pytest.mark.parametrize("extra", [{}, {"grad_accum": 2, "grad_clip": 0.0}])
def test_stacked_equals_separate_training(extra):
    cfg = _cfg(**extra)
    seeds, inits = [3, 5, 7], [11, 12, 13]

    def eval_fn(m):
        return {"w_norm": float(m.lm_head.weight.norm())}

    alone = []
    for s, i in zip(seeds, inits):
        m = GPT(GC, seed=i)
        alone.append((m, train(m, _get_batch, cfg, seed=s, eval_fn=eval_fn)))
    models = [GPT(GC, seed=i) for i in inits]
    logged = []
    res = train_stacked(models, _get_batch, cfg, seeds=seeds, eval_fn=eval_fn, log=logged.append)
    assert not res.diverged and res.steps == cfg.steps
    for (m1, r1), m2, r2 in zip(alone, models, res.members):
        tr1 = [h for h in r1.history if "loss" in h]
        tr2 = [h for h in r2.history if "loss" in h]
        assert [h["step"] for h in tr1] == [h["step"] for h in tr2] == list(range(1, 21))
        assert max(_rel(a["loss"], b["loss"]) for a, b in zip(tr1, tr2)) < 1e-5
        assert max(_rel(a["grad_norm"], b["grad_norm"]) for a, b in zip(tr1, tr2)) < 1e-4
        assert [h["tokens_seen"] for h in tr1] == [h["tokens_seen"] for h in tr2]
        ev1 = [h["w_norm"] for h in r1.history if "w_norm" in h]
        ev2 = [h["w_norm"] for h in r2.history if "w_norm" in h]
        assert len(ev1) == len(ev2) == 2 and max(_rel(a, b) for a, b in zip(ev1, ev2)) < 1e-5
        for (n, p1), p2 in zip(m1.named_parameters(), m2.parameters()):
            if n.endswith("attn.qkv.bias"):
                # the key bias has an exactly zero gradient (softmax ignores a constant added to every key's
                # logit); Adam turns each arm's rounding noise there into lr-sized steps, so only the query and
                # value biases are comparable between two summation orders
                d = GC.n_heads * GC.head_dim
                p1, p2 = torch.cat([p1[:d], p1[2 * d:]]), torch.cat([p2[:d], p2[2 * d:]])
            assert torch.allclose(p1, p2, rtol=1e-4, atol=1e-5), n
    # the members really differ (different seeds, different batches), and the shared log names them
    assert _rel(res.members[0].final["loss"], res.members[1].final["loss"]) > 1e-5
    assert (models[0].wte.weight - models[1].wte.weight).abs().max() > 1e-2
    assert {r["member"] for r in logged} == {0, 1, 2}
    # clipping was per member: with grad_clip 0.3 the early steps are clipped in every member
    if cfg.grad_clip:
        assert all(r.history[0]["grad_norm"] > cfg.grad_clip for r in res.members)


def test_per_member_batches_and_tied_embeddings():
    gc = GC.model_copy(update={"tie_embeddings": True, "pos": "rope"})
    cfg = _cfg(steps=6, eval_every=0)

    def shifted(offset):
        def gb(step, g):
            x, y = _get_batch(step, g)
            return (x + offset) % gc.vocab_size, y
        return gb

    gbs = [shifted(0), shifted(7)]
    alone = [train(GPT(gc, seed=1), gbs[k], cfg, seed=4) for k in range(2)]
    models = [GPT(gc, seed=1) for _ in range(2)]
    res = train_stacked(models, gbs, cfg, seeds=[4, 4])
    for r1, r2 in zip(alone, res.members):
        assert _rel(r1.final["loss"], r2.final["loss"]) < 1e-5
    assert models[0].lm_head.weight is models[0].wte.weight  # still tied after write-back
    assert _rel(res.members[0].final["loss"], res.members[1].final["loss"]) > 1e-4


def test_weight_decay_groups_match_the_single_trainer():
    cfg = _cfg()
    single = make_optimizer(GPT(GC), cfg)
    stack = StackedModels([GPT(GC), GPT(GC)])
    stacked = make_stacked_optimizer(stack, cfg)
    for g1, g2 in zip(single.param_groups, stacked.param_groups):
        assert g1["weight_decay"] == g2["weight_decay"]
        assert sorted(tuple(p.shape) for p in g1["params"]) == sorted(tuple(p.shape[1:]) for p in g2["params"])
        assert all(p.shape[0] == 2 for p in g2["params"])


def test_a_diverging_member_is_marked_and_the_others_train_on():
    cfg = _cfg(steps=8, eval_every=0)
    models = [GPT(GC, seed=i) for i in (1, 2, 3)]
    with torch.no_grad():
        models[1].blocks[0].mlp.fc.weight.fill_(float("nan"))
    res = train_stacked(models, _get_batch, cfg, seeds=[0, 1, 2])
    assert set(res.diverged) == {1}
    assert isinstance(res.diverged[1], DivergedError) and res.diverged[1].step == 1
    assert res.members[1].history == [] and res.members[1].steps == 1
    with pytest.raises(DivergedError):
        res.raise_for(1)
    res.raise_for(0)  # a healthy member: nothing
    with pytest.raises(DivergedError) as first:
        res.raise_first()
    assert first.value is res.diverged[1]
    StackedResult(diverged={}).raise_first()  # none diverged: nothing
    two = StackedResult(diverged={2: DivergedError(5, float("nan")), 0: DivergedError(7, float("inf"))})
    with pytest.raises(DivergedError) as first:
        two.raise_first()
    assert first.value is two.diverged[0]  # the lowest index, whatever the order they diverged in
    for k, i in ((0, 1), (2, 3)):
        alone = train(GPT(GC, seed=i), _get_batch, cfg, seed=k)
        assert _rel(alone.final["loss"], res.members[k].final["loss"]) < 1e-5
        assert math.isfinite(res.members[k].final["loss"])


def test_bad_input_is_a_config_error():
    cfg = _cfg(steps=2)
    with pytest.raises(ConfigError):
        train_stacked([GPT(GC), GPT(GC)], _get_batch, cfg, seeds=[0])
    with pytest.raises(ConfigError):
        train_stacked([GPT(GC), GPT(GC.model_copy(update={"d_model": 16}))], _get_batch, cfg, seeds=[0, 1])
    with pytest.raises(ConfigError):
        train_stacked([GPT(GC.model_copy(update={"dropout": 0.1}))] * 2, _get_batch, cfg, seeds=[0, 1])
    with pytest.raises(ConfigError):
        train_stacked([GPT(GC), GPT(GC)], [_get_batch], cfg, seeds=[0, 1])


def test_capacity_search_instrument_finds_each_items_threshold():
    """Simulated learners storing up to 37 and 100 facts at level L = S*R = ceil(L/2)*floor(L/2):
    the search lands on the largest solved level of each, calling try_levels once per round."""
    cap = {"a": 37, "b": 100}
    calls = []

    def try_levels(rnd, probes):
        calls.append((rnd, probes))
        out = {}
        for key, level in probes:
            out.setdefault(key, {})[level] = ((level + 1) // 2) * (level // 2) <= cap[key]
        return out

    found = search_capacity({"a": 12, "b": 12}, try_levels, level_min=4, level_max=64, probes_per_round=3,
                            max_rounds=10)
    assert (found["a"].lo, found["a"].hi) == (12, 13)
    assert (found["b"].lo, found["b"].hi) == (20, 21)  # 10*10 = 100 stored, 11*10 not
    assert found["a"].censoring(4, 64) == "" and [r for r, _ in calls] == list(range(len(calls)))
    low = search_capacity({"x": 8}, lambda r, p: {k: {lv: False for _, lv in p} for k, _ in p},
                          level_min=4, level_max=64, probes_per_round=2, max_rounds=10)
    assert low["x"].censoring(4, 64) == "below_range"


def test_scaling_sweep_stacks_the_seeds_of_a_point_with_unchanged_results(tmp_path):
    """scaling-sweep (smoke, 2 seeds): the seeds of one (N, D) point form one group, trained stacked;
    every member's row equals the unstacked run_point row to float rounding."""
    from lmsci.config import resolve_config
    from lmsci.contract import PointContext
    from lmsci.experiments.laws.scaling_sweep import ScalingSweep, ScalingSweepConfig
    from lmsci.runs import RunDir

    exp = ScalingSweep()
    cfg = resolve_config(ScalingSweepConfig, "smoke", ["n_seeds=2", "threads=1"])
    points = exp.seeded_points(cfg)
    groups = exp.groups(cfg, points)
    assert len(groups) == len(points) // 2 and all(len(g) == 2 for g in groups)
    assert all(len({(p.params["d_model"], p.params["tokens"]) for p in g}) == 1 for g in groups)
    assert len(exp.groups(cfg.model_copy(update={"stack_seeds": False}), points)) == len(points)
    group = min(groups, key=lambda g: (g[0].params["tokens"], g[0].params["d_model"]))
    run = RunDir(tmp_path / "run")
    run.init(exp.name, "x", {})
    ctxs = [PointContext(run, p, exp.point_seed(cfg, p), "cpu", False) for p in group]
    stacked = exp.run_group(cfg, group, ctxs)
    alone = [exp.run_point(cfg, p, PointContext(RunDir(tmp_path / f"a{i}"), p, c.seed, "cpu", False))
             for i, (p, c) in enumerate(zip(group, ctxs))]
    for a, b in zip(alone, stacked):
        assert a["steps"] == b["steps"] and a["N"] == b["N"] and a["tokens_seen"] == b["tokens_seen"]
        assert _rel(a["val_nll"], b["val_nll"]) < 1e-5
        assert _rel(a["train_loss_final"], b["train_loss_final"]) < 1e-5
    assert _rel(stacked[0]["val_nll"], stacked[1]["val_nll"]) > 1e-5  # two different seeds
