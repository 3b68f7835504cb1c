"""train_intervention's pluggable forward (``loss_fn``) leaves its default loop unchanged, and train_steer_cached,
now a thin caller of it, gives exactly what its own copy of the loop gave: per-step losses and trained parameters
torch.equal to frozen copies of the loops as they stood before the refactor (code review: train_steer_cached
duplicated train_intervention's loop), on the same process, seed and data."""

from __future__ import annotations

import math

import pytest
import torch

from lmsci.errors import ConfigError, DivergedError
from lmsci.methods.lm_steer import LMSteer, train_steer
from lmsci.methods.lm_steer_cached import final_hidden_states, train_steer_cached
from lmsci.methods.steer_training import train_intervention
from lmsci.methods.steerable import as_steerable, as_token_lists, hidden_size, lm_head, masked_nll, mean_nll, pad_batch
from lmsci.methods.steering import LogitOffset
from lmsci.models.device import device_of
from lmsci.models.gpt import GPT, GPTConfig


# ---------------------------------------------------------------- frozen copies of the loops before the refactor
def _old_train_intervention(m, steer, data, values, *, lr, steps, batch_size, l2=0.0, seed=0, pad_id=0,
                            grad_clip=None, on_step=None, max_length=256):
    """steering.train_intervention + _steer_steps as they stood at 752ba6c (argument checks and leak check left
    out: they do not change the numbers)."""
    if isinstance(m, GPT):
        max_length = min(max_length, m.cfg.seq_len)
    seqs = as_token_lists(data, None, max_length)
    values = torch.as_tensor(values, dtype=torch.float32)
    keep = [i for i, s in enumerate(seqs) if len(s) >= 2]
    seqs, values = [seqs[i] for i in keep], values[keep]
    dev = device_of(m)
    steer.to(dev)
    flags = [p.requires_grad for p in m.parameters()]
    for p in m.parameters():
        p.requires_grad_(False)
    m.eval()
    steer.train()
    handle = steer.attach(m)
    try:
        params = [p for p in steer.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=lr)
        g = torch.Generator().manual_seed(int(seed))
        order: list[int] = []
        for step in range(int(steps)):
            if len(order) < batch_size:
                order += torch.randperm(len(seqs), generator=g).tolist()
            idx, order = order[:batch_size], order[batch_size:]
            ids, mask = pad_batch([seqs[i] for i in idx], pad_id, dev)
            steer.set_values(values[idx].to(dev))
            loss = mean_nll(m, ids, mask)
            if l2:
                loss = loss + l2 * steer.regularization()
            val = float(loss.detach())
            if not math.isfinite(val):
                raise DivergedError(step, val, "steer training loss")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            steer.history.append(val)
            if on_step is not None:
                on_step(step, val)
    finally:
        handle.remove()
        steer.set_values(None)
        for p, f in zip(m.parameters(), flags):
            p.requires_grad_(f)
        steer.eval()
    return steer


def _old_train_steer_cached(model, cache, labels, *, rank=None, epsilon=1e-3, init_std=1e-2, lr=1e-2, steps=1000,
                            batch_size=32, l2=0.0, seed=0):
    """lm_steer_cached.train_steer_cached's own loop as it stood at 752ba6c (argument checks left out)."""
    m = as_steerable(model)
    n = len(cache)
    y = torch.as_tensor(labels, dtype=torch.float32)
    keep = torch.nonzero(cache.mask.sum(1) >= 2).flatten().cpu()
    dev = device_of(m)
    steer = LMSteer(hidden_size(m), ("attr",), rank=rank, epsilon=epsilon, init_std=init_std, dummy=True, seed=seed,
                    device=dev)
    vals = steer.values(batch=n).cpu()
    vals[:, steer.index(steer.attributes[0])] = y
    vals = vals[keep].to(dev)
    h, ids, mask = (t[keep.to(t.device)] for t in (cache.h, cache.ids, cache.mask))
    head = lm_head(m)
    opt = torch.optim.Adam([p for p in steer.parameters() if p.requires_grad], lr=lr)
    g = torch.Generator().manual_seed(int(seed))
    order: list[int] = []
    steer.train()
    for step in range(int(steps)):
        if len(order) < batch_size:
            order += torch.randperm(len(keep), generator=g).tolist()
        idx, order = order[:batch_size], order[batch_size:]
        bi = torch.tensor(idx, device=ids.device)
        b_mask = mask[bi]
        T = int(b_mask.sum(1).max())
        b_h, b_ids, b_mask = h[bi, :T], ids[bi, :T], b_mask[:, :T]
        w = head.weight.detach().float()
        logits = torch.nn.functional.linear(steer.shift(b_h, vals[bi]), w)
        nll, tmask = masked_nll(logits, b_ids, b_mask)
        loss = nll.sum() / tmask.sum().clamp(min=1)
        if l2:
            loss = loss + l2 * steer.regularization()
        val = float(loss.detach())
        if not math.isfinite(val):
            raise DivergedError(step, val, "steer training loss")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steer.history.append(val)
    steer.eval()
    return steer


# ---------------------------------------------------------------- models and data
def _tied_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmsci.models.hf import HFModel

    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HFModel(LlamaForCausalLM(cfg).eval())


def _gpt():
    return GPT(GPTConfig(vocab_size=64, seq_len=16, n_layers=1, n_heads=2, d_model=16), seed=1).eval()


def _data(n=33):
    """``n`` token lists of 1..11 tokens (the one-token texts are dropped by every path) and +-1 labels."""
    g = torch.Generator().manual_seed(0)
    data = [torch.randint(1, 64, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]
    assert any(len(s) == 1 for s in data)
    return data, torch.tensor([1.0 if i % 2 else -1.0 for i in range(n)])


def _same(a, b):
    assert a.history == b.history and len(a.history) > 0
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("make", [_gpt, _tied_llama], ids=["gpt", "tied-llama"])
@pytest.mark.parametrize("l2", [0.0, 0.01])
def test_train_steer_equals_the_frozen_loop(make, l2):
    m = make()
    data, y = _data()
    new = train_steer(m, data, y, steps=12, batch_size=7, epsilon=0.1, lr=0.05, seed=3, l2=l2, rank=4)
    old = LMSteer(16, ("attr",), rank=4, epsilon=0.1, init_std=1e-2, dummy=True, seed=3)
    vals = old.values(batch=len(data))
    vals[:, old.index("attr")] = y
    _old_train_intervention(m, old, data, vals, steps=12, batch_size=7, lr=0.05, seed=3, l2=l2)
    _same(new, old)
    assert all(p.grad is None for p in m.parameters())  # the LM stayed frozen


def test_train_intervention_with_clip_and_on_step_equals_the_frozen_loop():
    m = _gpt()
    data, y = _data()
    steers, calls = [], []
    for fn in (train_intervention, _old_train_intervention):
        st = LogitOffset(64, ("attr",))
        vals = st.values(batch=len(data))
        vals[:, 0] = y
        log: list[tuple[int, float]] = []
        fn(m, st, data, vals, steps=10, batch_size=6, lr=0.1, l2=1e-3, grad_clip=0.5, seed=2,
           on_step=lambda i, v, log=log: log.append((i, v)))
        steers.append(st)
        calls.append(log)
    _same(*steers)
    assert calls[0] == calls[1] and len(calls[0]) == 10


@pytest.mark.parametrize("l2", [0.0, 0.01])
def test_train_steer_cached_equals_its_frozen_loop(l2):
    m = _tied_llama()
    data, y = _data()
    cache = final_hidden_states(m, data, batch_size=16)
    kw = dict(rank=4, epsilon=0.1, lr=0.05, steps=12, batch_size=7, l2=l2, seed=3)
    new = train_steer_cached(m, cache, y, **kw)
    old = _old_train_steer_cached(m, cache, y, **kw)
    _same(new, old)
    assert not new.training and new.train_seconds > 0
    assert all(p.grad is None for p in m.parameters())


def test_loss_fn_is_called_with_the_batches_and_values_and_checked():
    m = _gpt()
    steer = LogitOffset(64, ("attr",))
    n = 10
    vals = steer.values(batch=n)
    vals[:, 0] = torch.arange(n, dtype=torch.float32)
    seen: list[list[int]] = []

    def loss_fn(idx, values):
        seen.append(list(idx))
        assert torch.equal(values[:, 0], torch.tensor(idx, dtype=torch.float32))  # each example's own values
        return ((steer.bias - 1.0) ** 2).mean()  # the bias starts at 0: loss 1

    train_intervention(m, steer, list(range(n)), vals, steps=5, batch_size=4, lr=0.1, seed=0, loss_fn=loss_fn)
    assert len(seen) == 5 and all(len(b) == 4 for b in seen)
    assert sorted(seen[0] + seen[1] + seen[2][:2]) == list(range(n))  # an epoch without replacement
    assert len(steer.history) == 5 and steer.history[0] == 1.0 and steer._values is None
    assert steer.history[-1] < steer.history[0] and not steer.training  # Adam moved the bias toward 1
    with pytest.raises(ConfigError):
        train_intervention(m, steer, list(range(n)), vals[:5], loss_fn=loss_fn)
    with pytest.raises(ConfigError):
        train_intervention(m, steer, list(range(n)), vals, steps=0, loss_fn=loss_fn)
    with pytest.raises(ConfigError):
        train_intervention(m, steer, [], vals[:0], loss_fn=loss_fn)
    with pytest.raises(DivergedError):
        train_intervention(m, steer, list(range(n)), vals, steps=2, loss_fn=lambda i, v: steer.bias.sum() * math.nan)
