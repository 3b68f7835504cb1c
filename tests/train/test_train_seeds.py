"""lmsci.train.seeds.train_seeds: stacked and one-after-another training of a point's seeds give the same members
(to float rounding), so ``stack_seeds`` is a performance setting (lmsci.config.NON_SCIENCE_FIELDS)."""

from __future__ import annotations

import pytest
import torch

from lmsci.config import NON_SCIENCE_FIELDS
from lmsci.errors import ConfigError
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.train.seeds import stacks, train_seeds
from lmsci.train.trainer import TrainConfig

GC = GPTConfig(vocab_size=40, seq_len=12, n_layers=1, n_heads=2, d_model=16)


def _get_batch(step: int, g: torch.Generator):
    x = torch.randint(0, GC.vocab_size, (4, GC.seq_len + 1), generator=g)
    return x[:, :-1], x[:, 1:]


def _run(stack: bool):
    cfg = TrainConfig(steps=8, batch_size=4, lr=3e-3, warmup_steps=2, device="cpu", log_every=1)
    models = [GPT(GC, seed=i) for i in (21, 22)]
    logs: list[list[dict]] = [[], []]
    res = train_seeds(models, _get_batch, cfg, seeds=[5, 6], stack=stack, log=[logs[0].append, logs[1].append])
    return models, res, logs


def test_stacked_and_sequential_members_agree_to_rounding():
    m_seq, r_seq, l_seq = _run(stack=False)
    m_st, r_st, l_st = _run(stack=True)
    assert not r_seq.diverged and not r_st.diverged and len(r_seq.members) == len(r_st.members) == 2
    for a, b in zip(r_seq.members, r_st.members):
        la = [h["loss"] for h in a.history if "loss" in h]
        lb = [h["loss"] for h in b.history if "loss" in h]
        assert len(la) == len(lb) == 8
        assert max(abs(x - y) / abs(x) for x, y in zip(la, lb)) < 1e-5
    # the two members differ (own seeds), and each log received its own member's records
    assert abs(r_seq.members[0].final["loss"] - r_seq.members[1].final["loss"]) > 1e-4
    assert len([h for h in l_seq[0] if "loss" in h]) == 8 and len([h for h in l_st[1] if "loss" in h]) == 8
    for p, q in zip(m_seq[0].parameters(), m_st[0].parameters()):
        assert torch.allclose(p, q, rtol=1e-4, atol=1e-5)


def test_stack_seeds_is_a_performance_setting_and_bad_input_is_refused():
    assert "stack_seeds" in NON_SCIENCE_FIELDS
    cfg = TrainConfig(steps=1, batch_size=4, lr=1e-3, warmup_steps=0, device="cpu")
    with pytest.raises(ConfigError, match="seeds"):
        train_seeds([GPT(GC, seed=0)], _get_batch, cfg, seeds=[1, 2], stack=False)
    with pytest.raises(ConfigError, match="log"):
        train_seeds([GPT(GC, seed=0)], _get_batch, cfg, seeds=[1], stack=True, log=[None, None])


def test_sequential_members_take_their_own_batches_and_checkpoints(tmp_path):
    cfg = TrainConfig(steps=4, batch_size=4, lr=3e-3, warmup_steps=1, device="cpu", log_every=1, checkpoint_every=2)

    def other_batch(step: int, g: torch.Generator):
        x = torch.randint(0, GC.vocab_size // 2, (4, GC.seq_len + 1), generator=g)
        return x[:, :-1], x[:, 1:]

    ref = train_seeds([GPT(GC, seed=1)], other_batch, cfg, seeds=[6], stack=False)
    res = train_seeds([GPT(GC, seed=0), GPT(GC, seed=1)], [_get_batch, other_batch], cfg, seeds=[5, 6], stack=False,
                      checkpoint_dirs=[None, tmp_path / "m1"])

    def losses(r):
        return [h["loss"] for h in r.history if "loss" in h]

    assert losses(res.members[1]) == losses(ref.members[0]) != losses(res.members[0])
    assert (tmp_path / "m1").exists()
    with pytest.raises(ConfigError, match="checkpoint_dirs"):
        train_seeds([GPT(GC, seed=0)], _get_batch, cfg, seeds=[1], stack=False, checkpoint_dirs=[None, None])
    with pytest.raises(ConfigError, match="get_batch"):
        train_seeds([GPT(GC, seed=0)], [_get_batch] * 2, cfg, seeds=[1], stack=False)


def test_stacks_says_when_the_members_train_as_one_computation():
    assert stacks("always", 1) and stacks("always", 3)
    assert not stacks(True, 1) and stacks(True, 2)
    assert not stacks(False, 1) and not stacks(False, 4)
