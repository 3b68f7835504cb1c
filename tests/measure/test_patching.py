"""lmsci.measure.patching.path_patching / path_patching_scan: path patching into the queries, keys or values of receiver
heads on small GPTs the tests build (Wang et al., arXiv 2211.00593, secs. 3.2-3.3): no corruption changes nothing; a
sender whose output the receiver's values never read changes nothing on the value side; all senders of a layer equal
the paper's 5-step algorithm run literally with hooks; bad input is refused.
"""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.measure import patching as P
from lmsci.models.gpt import GPT, GPTConfig

V, T, N = 20, 10, 16


def _model(seed=0, **kw):
    cfg = dict(vocab_size=V, seq_len=T, n_layers=2, n_heads=2, d_model=16)
    cfg.update(kw)
    m = GPT(GPTConfig(**cfg), seed=seed).eval()
    with torch.no_grad():  # GPT-2's init (std 0.02) leaves a random model's attention almost uniform: sharpen it
        for n, p in m.named_parameters():
            if p.ndim == 2 and "wpe" not in n:
                p.mul_(8.0)
    return m


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, V, (N, T), generator=g)
    corrupt = clean.clone()
    corrupt[:, 2:5] = torch.randint(0, V, (N, 3), generator=g)  # three tokens differ, as in an ABC prompt
    end = torch.full((N,), T - 1)
    io, s = torch.randint(0, V, (N,), generator=g), torch.randint(0, V, (N,), generator=g)
    return clean, corrupt, end, io, s


def test_no_corruption_and_no_sender_change_nothing():
    m, (c, x, e, io, s) = _model(), _data()
    for inp in ("q", "k", "v", ("q", "k", "v")):
        d = P.path_patching(m, c, c, e, io, s, [(0, 0), (0, 1)], [(1, 0)], inp)
        assert d.shape == (N,) and torch.allclose(d, torch.zeros(N), atol=1e-5)
    assert torch.allclose(P.path_patching(m, c, x, e, io, s, [], [(1, 0), (1, 1)]), torch.zeros(N), atol=1e-5)
    assert P.path_patching(m, c, x, e, io, s, [(0, 0)], [(1, 0)], "v").abs().max() > 1e-4


def test_a_sender_the_receiver_values_never_read_changes_nothing():
    # no norm: the residual is a plain sum; sender (0, 0) writes only into dims 8..15, receiver (1, 0) reads its
    # values only from dims 0..7; sender (0, 1) writes everywhere
    m, (c, x, e, io, s) = _model(3, norm="none"), _data(1)
    D = m.cfg.head_dim
    assert P.path_patching(m, c, x, e, io, s, [(0, 0)], [(1, 0)], "v").abs().max() > 1e-4  # before the surgery
    with torch.no_grad():
        m.blocks[0].attn.proj.weight[:8, :D] = 0.0
        v0 = 2 * m.cfg.n_heads * D  # first value row in the fused qkv
        m.blocks[1].attn.qkv.weight[v0:v0 + D, 8:] = 0.0
    assert torch.allclose(P.path_patching(m, c, x, e, io, s, [(0, 0)], [(1, 0)], "v"), torch.zeros(N), atol=1e-6)
    assert P.path_patching(m, c, x, e, io, s, [(0, 1)], [(1, 0)], "v").abs().max() > 1e-4


def test_a_receiver_without_keys_ignores_key_side_patching():
    m, (c, x, e, io, s) = _model(4), _data(2)
    D, H = m.cfg.head_dim, m.cfg.n_heads
    with torch.no_grad():  # head (1, 0) attends uniformly whatever its keys' input
        m.blocks[1].attn.qkv.weight[H * D:H * D + D] = 0.0
        m.blocks[1].attn.qkv.bias[H * D:H * D + D] = 0.0
    assert torch.allclose(P.path_patching(m, c, x, e, io, s, [(0, 0), (0, 1)], [(1, 0)], "k"), torch.zeros(N),
                          atol=1e-6)
    assert P.path_patching(m, c, x, e, io, s, [(0, 0), (0, 1)], [(1, 0)], "v").abs().max() > 1e-4


def _literal(m, c, x, e, io, s):
    """Wang et al.'s algorithm with hooks: run clean with layer 0's attention output from the corrupted run, record
    layer 1's head outputs, then run clean with those outputs patched in (attention-only model: nothing else sits
    between layer 0's heads and layer 1)."""
    _, cx = m.run_with_cache(x, "blocks.0.attn.out")
    with m.hooks([("blocks.0.attn.out", lambda a, hook: cx["blocks.0.attn.out"])]):
        _, rec = m.run_with_cache(c, "blocks.1.attn.z")
    z1 = rec["blocks.1.attn.z"]
    return P.logit_diff(m, c, e, io, s, [("blocks.1.attn.z", lambda z, hook: z1)]) - P.logit_diff(m, c, e, io, s)


def test_all_senders_equal_patching_the_receivers_inputs():
    m, (c, x, e, io, s) = _model(5, mlp="none"), _data(3)
    senders, receivers = [(0, 0), (0, 1)], [(1, 0), (1, 1)]
    want = _literal(m, c, x, e, io, s)
    got = P.path_patching(m, c, x, e, io, s, senders, receivers, ("q", "k", "v"))
    assert want.abs().max() > 1e-3 and torch.allclose(got, want, atol=1e-4)
    # the value side alone is not the whole effect while the receivers' patterns can move
    v_only = P.path_patching(m, c, x, e, io, s, senders, receivers, "v")
    assert not torch.allclose(v_only, want, atol=1e-4)
    # value side alone: with the receivers' queries and keys zeroed their patterns cannot move, so patching the
    # values is patching everything the receivers read
    D, H = m.cfg.head_dim, m.cfg.n_heads
    with torch.no_grad():
        m.blocks[1].attn.qkv.weight[:2 * H * D] = 0.0
        m.blocks[1].attn.qkv.bias[:2 * H * D] = 0.0
    want = _literal(m, c, x, e, io, s)
    got = P.path_patching(m, c, x, e, io, s, senders, receivers, "v")
    assert want.abs().max() > 1e-3 and torch.allclose(got, want, atol=1e-4)
    # the scan is the single-sender call, head by head
    scan = P.path_patching_scan(m, c, x, e, io, s, receivers, "v")
    assert scan.shape == (2, 2) and torch.isnan(scan[1]).all()
    for h in range(2):
        one = float(P.path_patching(m, c, x, e, io, s, [(0, h)], receivers, "v").mean())
        assert float(scan[0, h]) == pytest.approx(one, abs=1e-6)


def test_bad_input_is_refused():
    m, (c, x, e, io, s) = _model(), _data()
    with pytest.raises(ConfigError, match="receiver_input"):
        P.path_patching(m, c, x, e, io, s, [(0, 0)], [(1, 0)], "o")
    with pytest.raises(ConfigError, match="receiver_input"):
        P.path_patching_scan(m, c, x, e, io, s, [(1, 0)], [])
    with pytest.raises(ValueError, match="below"):
        P.path_patching(m, c, x, e, io, s, [(1, 1)], [(1, 0)])
    with pytest.raises(ValueError, match="receiver"):
        P.path_patching(m, c, x, e, io, s, [(0, 0)], [])
    with pytest.raises(ValueError, match="outside"):
        P.path_patching(m, c, x, e, io, s, [(0, 0)], [(2, 0)])
    with pytest.raises(ValueError, match="aligned"):
        P.path_patching(m, c, x[:, :-1], e, io, s, [(0, 0)], [(1, 0)])
    with pytest.raises(ConfigError, match="pos"):
        P.path_patching(_model(pos="rope"), c, x, e, io, s, [(0, 0)], [(1, 0)])
