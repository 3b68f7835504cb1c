"""Emergence as a metric effect (Schaeffer, Miranda & Koyejo 2023, arXiv 2304.15004): the metrics on model outputs,
and the law fits: a smooth per-token power law makes exact match sharp (a sigmoid in log compute fits it better)
while the continuous metric of the same outputs follows the power law."""

import numpy as np
import pytest
import torch

from lmsci.errors import ConfigError, DataError
from lmsci.laws.emergence import compare_metric_laws, fit_metric_law, predict, predict_interval
from lmsci.measure.emergence import (answer_metrics, edit_distance_from_token_accuracy,
                                     exact_match_from_token_accuracy, teacher_forced, token_edit_distance)
from lmsci.models.gpt import GPT, GPTConfig

V = 12


class Successor(torch.nn.Module):
    """Predicts token (t + 1) mod V after token t with probability ~0.99."""

    def forward(self, ids):
        return 6.0 * torch.nn.functional.one_hot((ids + 1) % V, V).float()


def test_edit_distance_and_closed_forms():
    assert token_edit_distance([1, 2, 3], [1, 2, 3]) == 0
    assert token_edit_distance([1, 2, 3], [1, 9, 3]) == 1
    assert token_edit_distance([1, 2, 3], [2, 3]) == 1 and token_edit_distance([], [4, 5]) == 2
    assert exact_match_from_token_accuracy(0.9, 10) == pytest.approx(0.9 ** 10)
    assert edit_distance_from_token_accuracy(0.9, 10) == pytest.approx(1.0)


def test_answer_metrics_on_a_known_model():
    prompts, answers = [[3, 4], [3, 4], [7]], [[5, 6, 7], [5, 9, 7], [8, 9]]
    m = answer_metrics(Successor(), prompts, answers)
    assert m["exact_match"].tolist() == [1.0, 0.0, 1.0]
    assert m["token_edit_distance"].tolist() == [0.0, 1.0, 0.0]
    assert m["generated"][1] == [5, 6, 7]
    np.testing.assert_allclose(m["token_accuracy"], [1.0, 1 / 3, 1.0])
    lp_right = float(torch.log_softmax(torch.tensor([6.0] + [0.0] * (V - 1)), 0)[0])
    assert m["token_logprob"][0] == pytest.approx(lp_right, abs=1e-5) and m["answer_logprob"][1] < 3 * lp_right
    with pytest.raises(ConfigError):
        answer_metrics(Successor(), [[1]], [[]])


def test_teacher_forced_matches_a_gpt_forward():
    gpt = GPT(GPTConfig(vocab_size=V, seq_len=16, n_layers=1, n_heads=2, d_model=16), seed=0).eval()
    prompts, answers = [[1, 2, 3], [4, 5], [6, 7, 8, 9]], [[4, 5], [6, 7, 8], [1]]
    tf = teacher_forced(gpt, prompts, answers, batch_size=2)
    with torch.no_grad():
        lp = torch.log_softmax(gpt(torch.tensor([[4, 5, 6, 7, 8]])), -1)[0]
    assert tf["answer_logprob"][1] == pytest.approx(float(lp[1, 6] + lp[2, 7] + lp[3, 8]), abs=1e-5)
    m = answer_metrics(gpt, prompts, answers)
    assert all(len(g) == len(a) for g, a in zip(m["generated"], answers))


def _curves(noise=0.0, seed=0, length=10):
    """Per-token loss a power law in compute, L(C) = (C / C_c)^-0.33; per-token accuracy p = exp(-L)."""
    rng = np.random.default_rng(seed)
    C = np.logspace(17, 23, 13)
    loss = (C / 8e17) ** -0.33
    em = exact_match_from_token_accuracy(np.exp(-loss), length) + rng.normal(0, noise, C.size)
    logprob = -loss + rng.normal(0, noise, C.size)
    return C, em, logprob


def test_smooth_per_token_law_gives_sharp_exact_match():
    C, em, logprob = _curves(noise=0.005)
    r_em = compare_metric_laws(C, em, n_heldout=2, n_boot=100)
    r_lp = compare_metric_laws(C, logprob, n_heldout=2, n_boot=100)
    # exact match: the sigmoid in log compute fits far better, in-sample and on the two largest models
    assert r_em["best_aic"] == "logistic_c" and r_em["delta_aic"] > 10
    assert r_em["heldout_ratio"] > 1.5
    assert r_em["laws"]["logistic_c"]["rmse"] < 0.3 * r_em["laws"]["power_c"]["rmse"]
    # the continuous metric of the same outputs: the power law fits to the noise level, with fewer parameters
    assert r_lp["best_aic"] == "power_c" and r_lp["laws"]["power_c"]["rmse"] < 0.01
    assert r_lp["laws"]["power_c"]["params"]["alpha"] == pytest.approx(0.33, abs=0.05)
    ho = r_lp["laws"]["power_c"]["heldout"]
    assert ho["lo"].shape == (2,) and (ho["lo"] <= ho["pred"]).all() and (ho["pred"] <= ho["hi"]).all()
    assert np.abs(ho["pred"] - ho["y"]).max() < 0.03


def test_fit_helpers_predict_and_refuse():
    C, em, _ = _curves()
    res = fit_metric_law("logistic_c", C, em, n_boot=50)
    np.testing.assert_allclose(predict(res, C), em, atol=0.05)
    iv = predict_interval(res, [1e24], level=0.8)
    assert iv["lo"][0] <= iv["pred"][0] <= iv["hi"][0]
    with pytest.raises(ConfigError):
        fit_metric_law("cubic", C, em)
    with pytest.raises(ConfigError):
        predict_interval(fit_metric_law("power_c", C, em), [1e24])
    with pytest.raises(DataError):
        compare_metric_laws(C[:5], em[:5], n_heldout=2)
    with pytest.raises(DataError):
        fit_metric_law("power_c", -C, em)
