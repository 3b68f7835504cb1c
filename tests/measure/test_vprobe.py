"""V-probing (lmsci.measure.vprobe) on synthetic tasks: a readable label is found, a random one is not."""

import numpy as np
import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.measure.vprobe import vprobe, vprobe_with_baselines
from lmsci.models.gpt import GPT, GPTConfig


def _model(seed=0):
    return GPT(GPTConfig(vocab_size=16, seq_len=16, n_layers=2, n_heads=2, d_model=32, pos="rope"), seed=seed).eval()


def _data(n, rng, readable=True):
    seqs = [rng.integers(0, 16, size=int(rng.integers(4, 9))).tolist() for _ in range(n)]
    if readable:
        labels = [int(s[-1] >= 8) for s in seqs]          # a function of the token at the read position
    else:
        labels = rng.integers(0, 2, size=n).tolist()      # independent of the input
    return seqs, labels


def test_readable_label_beats_majority_random_label_does_not():
    rng = np.random.default_rng(0)
    m = _model()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    tr, ytr = _data(200, rng)
    te, yte = _data(200, rng)
    r = vprobe(m, tr, ytr, te, yte, 2, steps=100, seed=1)
    assert r.test_acc >= r.majority + 0.3, r
    trn, ytrn = _data(200, rng, readable=False)
    ten, yten = _data(200, rng, readable=False)
    rn = vprobe(m, trn, ytrn, ten, yten, 2, steps=100, seed=1)
    assert rn.test_acc <= rn.majority + 0.08, rn
    # frozen: the model's weights and requires_grad flags are as before
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.requires_grad for p in m.parameters())


def test_embedding_update_reads_the_prefix():
    """A label that depends on the first token is read at the last position only through attention; the rank-8
    update of the input embedding lets the probe do better than a plain linear probe (rank 0) on a random model."""
    rng = np.random.default_rng(1)
    m = _model(3)
    def data(n):
        seqs = [[int(rng.integers(0, 16))] + rng.integers(0, 16, size=3).tolist() for _ in range(n)]
        return seqs, [int(s[0] >= 8) for s in seqs]
    tr, ytr = data(400)
    te, yte = data(300)
    r8 = vprobe(m, tr, ytr, te, yte, 2, rank=8, steps=300, seed=0)
    assert r8.test_acc >= r8.majority + 0.15, r8


def test_baselines_and_errors():
    rng = np.random.default_rng(2)
    tr, ytr = _data(60, rng)
    te, yte = _data(40, rng)
    out = vprobe_with_baselines(_model(0), _model(1), tr, ytr, te, yte, 2, steps=5)
    assert set(out) >= {"acc", "random_init_acc", "majority"}
    assert 0.5 <= out["majority"] <= 1.0
    with pytest.raises(ConfigError):
        vprobe(_model(), tr, ytr, te, yte, 2, rank=-1)
    with pytest.raises(ConfigError):
        vprobe(_model(), tr, [5] * len(tr), te, yte, 2)
    with pytest.raises(ConfigError):
        vprobe(_model(), tr, ytr[:-1], te, yte, 2)


def test_hf_model():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    rng = np.random.default_rng(3)
    tr, ytr = _data(200, rng)
    te, yte = _data(200, rng)
    r = vprobe(hf, tr, ytr, te, yte, 2, steps=100, seed=0)
    assert r.test_acc >= r.majority + 0.2, r
