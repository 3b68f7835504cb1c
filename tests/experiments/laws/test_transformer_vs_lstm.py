"""transformer-vs-lstm (issue 35): the LSTM model and the per-position instrument, verdicts on passing, failing and
null-passing tables, bad input refused, the smoke preset end to end with its null arms measured and failing."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.laws.transformer_vs_lstm import TransformerVsLSTM, TransformerVsLSTMConfig, lstm_width_for
from lmsci.measure.position_loss import log_position_slope, position_nll
from lmsci.models.lstm import LSTMLM, LSTMConfig, lstm_non_embedding_params

R, N, I = "reproduced", "not reproduced", "inconclusive"


def test_lstm_shapes_params_and_causality():
    m = LSTMLM(LSTMConfig(vocab_size=11, d_model=12, n_layers=2), seed=3)
    x = torch.randint(0, 11, (2, 7))
    out = m(x)
    assert out.shape == (2, 7, 11)
    assert m.num_params(non_embedding=True) == lstm_non_embedding_params(12, 2)
    x2 = x.clone()
    x2[:, 4:] = (x2[:, 4:] + 1) % 11  # changing later tokens leaves earlier logits alone
    assert torch.allclose(m(x2)[:, :4], out[:, :4])
    assert torch.equal(LSTMLM(LSTMConfig(vocab_size=11, d_model=12), seed=3).wte.weight,
                       LSTMLM(LSTMConfig(vocab_size=11, d_model=12), seed=3).wte.weight)
    with pytest.raises(ConfigError):
        LSTMConfig(vocab_size=11, d_model=0)
    assert abs(lstm_non_embedding_params(lstm_width_for(100_000, 2), 2) / 100_000 - 1) < 0.02


def test_position_nll_and_slope():
    m = LSTMLM(LSTMConfig(vocab_size=5, d_model=4), seed=0)
    x = torch.randint(0, 5, (6, 9))
    c = position_nll(m, [(x[:3, :-1], x[:3, 1:]), (x[3:, :-1], x[3:, 1:])])
    ref = torch.nn.functional.cross_entropy(m(x[:, :-1]).transpose(1, 2), x[:, 1:], reduction="none").mean(0)
    assert c.shape == (8,) and np.allclose(c, ref.detach().numpy(), atol=1e-6)
    assert log_position_slope(0.3 * np.log2(np.arange(64) + 1.0)) == pytest.approx(0.3)
    assert log_position_slope(np.ones(64)) == pytest.approx(0.0, abs=1e-12)


def _table(gap_small=0.01, gap_big=0.03, null=0.0, T=256, seeds=(0, 1, 2)):
    """Per-position curves: GPT 2.5 - 0.1 log2(t+1); LSTM = GPT + gap * log2(t+1); null GPT = GPT + null * log2."""
    x = np.log2(np.arange(T) + 1.0)
    rows = []
    for k in seeds:
        rng = np.random.default_rng(k)
        for size, gap in ((0, gap_small), (1, gap_big)):
            gpt = 2.5 - 0.1 * x + (0.2 if size == 0 else 0.0)
            for arch, c in (("gpt", gpt), ("lstm", gpt + gap * x), ("gpt-null", gpt + null * x)):
                c = c + rng.normal(0, 0.002, T)
                rows.append({"status": "ok", "seed_index": k, "size": size, "arch": arch,
                             "arm": "null" if arch == "gpt-null" else "real", "largest": size == 1,
                             "smallest": size == 0, "pos_nll": json.dumps(c.tolist())})
    return pd.DataFrame(rows)


def _v(cfg, t):
    return {v.claim_id: v for v in TransformerVsLSTM().verdicts(cfg, t, None)}


def test_verdicts():
    cfg = TransformerVsLSTMConfig()
    vs = _v(cfg, _table())
    assert {k: v.outcome for k, v in vs.items()} == {"gap-grows-with-position": R, "gap-grows-with-size": R}
    assert all(v.null_passed is False and v.null_value is not None for v in vs.values())
    assert vs["gap-grows-with-position"].value == pytest.approx(0.03, abs=0.003)
    # no growth with position (gap shrinks), and a larger gap at the small size: both fail
    vs = _v(cfg, _table(gap_small=0.03, gap_big=-0.01))
    assert {k: v.outcome for k, v in vs.items()} == {"gap-grows-with-position": N, "gap-grows-with-size": N}
    # a second GPT that "grows a gap" like the LSTM: the rule cannot tell
    v = _v(cfg, _table(null=0.03))["gap-grows-with-position"]
    assert v.rule_passed and v.null_passed and v.outcome == I
    # one seed, or the smoke preset: inconclusive
    assert {v.outcome for v in _v(cfg, _table(seeds=(0,))).values()} == {I}
    assert {v.outcome for v in _v(resolve_config(TransformerVsLSTMConfig, "smoke"), _table()).values()} == {I}


@pytest.mark.parametrize("kw", [{"sizes": [(2, 48)]}, {"sizes": [(2, 96), (2, 48)]}, {"sizes": [(2, 40), (2, 96)]},
                                {"sizes": [(0, 48), (2, 96)]}, {"model.d_head": 5}])
def test_bad_config(kw):
    with pytest.raises(ConfigError):
        TransformerVsLSTM().validate(resolve_config(TransformerVsLSTMConfig, "quick", kw))


def test_matched_parameters_and_smoke_end_to_end(tmp_path):
    from lmsci.sweep import run_experiment

    run = run_experiment(TransformerVsLSTM(), resolve_config(TransformerVsLSTMConfig, "smoke", {"threads": 1}),
                         tmp_path / "run", progress=False, log=lambda *a, **k: None)
    res = pd.read_csv(run.path / "results.csv")
    assert (res["status"] == "ok").all() and len(res) == 6
    for size, g in res.groupby("size"):
        n = g.set_index("arch")["N"]
        assert n["gpt"] == n["gpt-null"] and abs(n["lstm"] / n["gpt"] - 1) < 0.1
    assert len(json.loads(res["pos_nll"].iloc[0])) == 16
    for v in run.verdicts():
        assert v.outcome == I and v.null_value is not None and v.null_passed is False
    assert (run.path / "figures" / "position_loss.png").exists()
