"""Batched greedy and beam decoding (lmsci.models.decode) against GPT.generate and exhaustive search."""

import itertools

import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.models.decode import beam_decode, greedy_decode
from lmsci.models.gpt import GPT, GPTConfig


def _model(pos, vocab=11, seed=0):
    return GPT(GPTConfig(vocab_size=vocab, seq_len=24, n_layers=2, n_heads=2, d_model=16, pos=pos), seed=seed).eval()


PROMPTS = [[1, 2, 3], [4], [5, 6, 7, 8, 9], [2, 2], [3, 1, 4, 1, 5, 9, 2]]


@pytest.mark.parametrize("pos", ["rope", "learned", "alibi"])
def test_greedy_matches_generate_one_by_one(pos):
    m = _model(pos)
    got = greedy_decode(m, PROMPTS, 6, eos_id=None, batch_size=3)
    for p, g in zip(PROMPTS, got):
        ref = m.generate(torch.tensor([p]), 6, temperature=0)[0, len(p):].tolist()
        assert g == ref, (pos, p)


def test_greedy_stops_at_eos_and_seq_len():
    m = _model("rope")
    free = greedy_decode(m, PROMPTS, 8, eos_id=None)
    eos = free[0][2]
    got = greedy_decode(m, PROMPTS, 8, eos_id=eos)
    for f, g in zip(free, got):
        assert g == (f[:f.index(eos)] if eos in f else f)
    long = greedy_decode(m, [[1] * 20], 100, eos_id=None)
    assert len(long[0]) == 4  # seq_len 24 - prompt 20


def test_beam1_is_greedy_and_beam_is_exact_on_a_small_tree():
    m = _model("rope", vocab=5, seed=1)
    prompts = [[t % 5 for t in p] for p in PROMPTS]
    assert beam_decode(m, prompts, 5, eos_id=None, num_beams=1) == greedy_decode(m, prompts, 5, eos_id=None)
    # num_beams = vocab over two steps explores every continuation: the best joint log-probability
    for p in prompts[:3]:
        best, arg = float("-inf"), None
        for a, b in itertools.product(range(5), repeat=2):
            ids = torch.tensor([p + [a, b]])
            with torch.no_grad():
                lp = torch.log_softmax(m(ids)[0].double(), -1)
            s = float(lp[len(p) - 1, a] + lp[len(p), b])
            if s > best:
                best, arg = s, [a, b]
        assert beam_decode(m, [p], 2, eos_id=None, num_beams=5) == [arg]


def test_beam_with_eos_and_errors():
    m = _model("rope")
    free = greedy_decode(m, PROMPTS, 6, eos_id=None)
    out = beam_decode(m, PROMPTS, 6, eos_id=free[1][1], num_beams=4, batch_size=2)
    assert len(out) == len(PROMPTS) and all(free[1][1] not in o for o in out)
    with pytest.raises(ConfigError):
        beam_decode(m, PROMPTS, 3, eos_id=None, num_beams=0)
    with pytest.raises(ConfigError):
        greedy_decode(m, [[]], 3, eos_id=None)
