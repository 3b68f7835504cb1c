"""Parity of lmsci's grokking progress measures with the official code of Nanda et al. (issue 30, item 2: grokking).

Fixtures (``fixtures/grokking/``, see ``fixtures/grokking/SOURCE.json`` and ``scripts/parity/grokking.md``):

* ``weights.safetensors``: three checkpoints (steps 0, 300, 1500) of a tiny one-layer model in lmsci's own
  architecture (:func:`lmsci.models.modular.grokking_model`, p = 31, d_model 32, 2 heads, d_mlp 128), trained
  by lmsci on (x + y) mod 31 with the attention biases held at zero (the official model has none); keys
  ``step{S}.{lmsci parameter name}``.
* ``official.json``: the split (lmsci's ``train_idx``) and, per checkpoint, what the official functions of
  ``mechanistic-interpretability-grokking/progress-measures-paper`` (``transformers.py``, ``helpers.py`` at 23d2c64)
  return on the same weights loaded into the official ``Transformer``: restricted loss (``calculate_trig_loss``),
  excluded loss (all key frequencies removed at once, and ``calculate_excluded_loss`` per frequency), full
  train/test loss (``test_logits``; ``full_loss``), the embedding's Fourier norms (``fft1d`` with
  ``make_fourier_basis``), the official key frequencies (``calculate_key_freqs``) and the sums of squared weights.
* ``official_logits.safetensors``: the official model's answer-position logits over all p**2 pairs at step 1500.

No official code is used here.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lmsci.measure.progress import progress_measures
from lmsci.models.modular import answer_logits, grokking_model
from lmsci.measure.fourier import embedding_spectrum, fourier_logit_split, key_frequencies
from lmsci.worlds.modular import ModularData, apply_op

FIX = Path(__file__).parent / "fixtures" / "grokking"

# Tolerances. Both sides run the model in float32; the official cross-entropy (``cross_entropy_high_precision``)
# is float32 too, and its Fourier basis is float32 where lmsci's is float64. Largest differences measured:
# losses 4.8e-6 absolute (excluded loss ~17, relative 3e-7; progress_measures' own columns 7.2e-7), Fourier shares
# 6.4e-8, weight norm 1.0e-6 (value ~35), logits 0.0 via answer_logits and 1.7e-5 via the full forward
# (|logit| up to 59).
LOSS_RTOL, LOSS_ATOL = 1e-5, 2e-6
SHARE_ATOL = 1e-6
LOGIT_ATOL = 1e-4


@lru_cache(maxsize=None)
def _official() -> dict:
    return json.loads((FIX / "official.json").read_text())


@lru_cache(maxsize=None)
def _weights() -> dict[int, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    flat = load_file(str(FIX / "weights.safetensors"))
    out: dict[int, dict[str, torch.Tensor]] = {}
    for k, v in flat.items():
        step, name = k.split(".", 1)
        out.setdefault(int(step[4:]), {})[name] = v
    return out


def _inputs() -> dict:
    return _official()["inputs"]


def _data() -> ModularData:
    """All (x, y) pairs x-major with the fixture's split (lmsci's ``modular_data(31, "add", 0.5, seed=2301)``)."""
    p = _inputs()["p"]
    x, y = torch.arange(p).repeat_interleave(p), torch.arange(p).repeat(p)
    ids = torch.stack([x, y, torch.full_like(x, p)], 1)
    tr = torch.tensor(sorted(_inputs()["train_idx"]))
    te = torch.tensor(sorted(set(range(p * p)) - set(tr.tolist())))
    return ModularData(p=p, op="add", input_ids=ids, targets=apply_op("add", x, y, p), train_idx=tr, test_idx=te)


def _model(step: int):
    i = _inputs()
    m = grokking_model(i["p"], i["d_model"], i["n_heads"], i["d_mlp"], seed=0)
    m.load_state_dict(_weights()[step])
    return m.eval()


@lru_cache(maxsize=None)
def _progress():
    return progress_measures(_model(0), _data(), _weights(), _official()["n_key"])


@lru_cache(maxsize=None)
def _grid_logits(step: int) -> torch.Tensor:
    """lmsci's answer-position logits over the p residue outputs, all pairs x-major ``[p*p, p]``."""
    d = _data()
    with torch.no_grad():
        return answer_logits(_model(step), d.input_ids)[:, : d.p]


def _ce(logits: torch.Tensor, idx: torch.Tensor | None = None) -> float:
    d = _data()
    if idx is None:
        return float(F.cross_entropy(logits, d.targets))
    return float(F.cross_entropy(logits[idx], d.targets[idx]))


def _close(mine, official, what: str) -> None:
    np.testing.assert_allclose(mine, official, rtol=LOSS_RTOL, atol=LOSS_ATOL, err_msg=what)


# ------------------------------------------------------------------------------------------ fixtures


def test_fixtures_are_the_official_outputs():
    src = json.loads((FIX / "SOURCE.json").read_text())
    assert src["repository"] == "mechanistic-interpretability-grokking/progress-measures-paper"
    assert src["commit"] == "23d2c64dd1f8a5ca65efaf27e15c2b2cd47dedf1"
    o = _official()
    assert o["steps"] == [0, 300, 1500] == sorted(_weights())
    assert sorted(o["checkpoints"]) == ["0", "1500", "300"]
    # the three phases the checkpoints stand for: random init, memorised, generalised
    acc = {s: (o["checkpoints"][str(s)]["train_acc"], o["checkpoints"][str(s)]["test_acc"]) for s in o["steps"]}
    assert acc[0][0] < 0.1 and acc[300][0] == 1.0 and acc[300][1] < 0.5 and acc[1500][1] > 0.95
    # the attention biases that the official model lacks are zero in every checkpoint
    for sd in _weights().values():
        assert float(sd["blocks.0.attn.qkv.bias"].abs().max()) == 0.0
        assert float(sd["blocks.0.attn.proj.bias"].abs().max()) == 0.0
    d = _data()
    assert len(d.train_idx) == int(0.5 * d.p ** 2) and len(d.test_idx) == d.p ** 2 - len(d.train_idx)


def test_split_is_lmscis_modular_data():
    """The fixture's split is what lmsci's ``modular_data`` draws (if its stream changes, the fixture still holds)."""
    from lmsci.worlds.modular import modular_data

    d = modular_data(_inputs()["p"], "add", 0.5, seed=2301)
    assert sorted(d.train_idx.tolist()) == sorted(_inputs()["train_idx"])
    assert torch.equal(d.input_ids, _data().input_ids) and torch.equal(d.targets, _data().targets)


# ------------------------------------------------------------------------------------------ the model


def test_same_weights_same_logits():
    """lmsci's model and the official ``Transformer`` (parameters mapped as in SOURCE.json) give the same logits."""
    official = _official_logits()
    d = _data()
    m = _model(1500)
    with torch.no_grad():
        fast = answer_logits(m, d.input_ids)
        full = m(d.input_ids)[:, -1]
    assert official.shape == fast.shape == (d.p ** 2, d.p + 1)
    torch.testing.assert_close(fast, official, rtol=0, atol=LOGIT_ATOL)
    torch.testing.assert_close(full, official, rtol=0, atol=LOGIT_ATOL)


@lru_cache(maxsize=None)
def _official_logits() -> torch.Tensor:
    from safetensors.torch import load_file

    return load_file(str(FIX / "official_logits.safetensors"))["step1500.logits"]


@pytest.mark.parametrize("step", [0, 300, 1500])
def test_full_losses(step):
    """Full train / test loss over the p residue logits (official ``test_logits``) and over all p + 1 outputs
    (official ``full_loss``, the training loss; lmsci's training curves use the same)."""
    o = _official()["checkpoints"][str(step)]
    row = _progress()[0].set_index("step").loc[step]
    d = _data()
    _close(row["full_test_loss"], o["full_loss_test"], "full test loss (p classes)")
    _close(row["full_train_loss"], o["full_loss_train"], "full train loss (p classes)")
    _close(_ce(_grid_logits(step)), o["full_loss_all"], "full loss, all pairs")
    with torch.no_grad():
        all_out = answer_logits(_model(step), d.input_ids)
    _close(_ce(all_out, d.test_idx), o["full_loss_test_p_plus_1"], "test loss over p + 1 outputs")
    _close(_ce(all_out, d.train_idx), o["full_loss_train_p_plus_1"], "train loss over p + 1 outputs")
    pred = _grid_logits(step).argmax(-1) == d.targets
    assert float(pred[d.test_idx].float().mean()) == pytest.approx(o["test_acc"], abs=1e-7)
    assert float(pred[d.train_idx].float().mean()) == pytest.approx(o["train_acc"], abs=1e-7)


@pytest.mark.parametrize("step", [0, 300, 1500])
def test_weight_norm(step):
    o = _official()["checkpoints"][str(step)]
    want = math.sqrt(sum(o["sum_of_squared_weights"].values()))
    _close(_progress()[0].set_index("step").loc[step, "weight_norm"], want, "weight norm")


# ------------------------------------------------------------------------------------------ Fourier norms and keys


@pytest.mark.parametrize("step", [0, 300, 1500])
def test_embedding_fourier_norms(step):
    """lmsci's per-frequency shares of W_E's norm = the official Fourier norms (``fft1d`` of ``W_E[:, :-1]``)."""
    sq = np.array(_official()["checkpoints"][str(step)]["embed_fourier_sq_norms"])
    p = _inputs()["p"]
    assert sq.shape == (p,)
    want = (sq[1::2] + sq[2::2]) / sq.sum()
    shares, const = embedding_spectrum(_model(step).wte.weight[:p])
    np.testing.assert_allclose(shares, want, rtol=0, atol=SHARE_ATOL)
    assert const == pytest.approx(sq[0] / sq.sum(), abs=SHARE_ATOL)
    row = _progress()[0].set_index("step").loc[step]
    np.testing.assert_allclose([row[f"share_k{k}"] for k in range(1, len(want) + 1)], want, rtol=0, atol=SHARE_ATOL)
    # the top n_key by norm, as lmsci picks them, are those of the official norms
    n_key = _official()["n_key"]
    assert key_frequencies(shares, n_key) == _official()["checkpoints"][str(step)]["embed_top_key_freqs"]


def test_key_frequencies_of_the_final_model():
    """progress_measures picks the final model's top-3 embedding frequencies: 14, 9, 15 on the official norms too."""
    _, keys, final_shares = _progress()
    assert keys == _official()["final_key_freqs"]["embed_top"] == [14, 9, 15]
    # the picked three hold nearly all of the norm (a grokked model is sparse in the Fourier basis)
    assert sum(final_shares[k - 1] for k in keys) > 0.8  # 0.84


@pytest.mark.xfail(strict=True, reason="known difference (tests/parity/README.md): lmsci picks the n_key frequencies with "
                   "the largest embedding norm; the official calculate_key_freqs takes every MLP neuron's best "
                   "frequency (over 1 .. p//2 - 1) and returns the set of them: [1, 2, 3, 9, 12, 14] here")
def test_key_frequencies_equal_the_official_neuron_rule():
    assert _progress()[1] == _official()["final_key_freqs"]["neuron"]


# ------------------------------------------------------------------------------------------ restricted and excluded loss


@pytest.mark.parametrize("step", [0, 300, 1500])
def test_progress_measures_restricted_and_excluded(step):
    """progress_measures' restricted loss (test pairs) and excluded loss (training pairs, every key frequency
    removed at once) = the official functions with the same key frequencies (the final model's 14, 9, 15)."""
    o = _official()["checkpoints"][str(step)]["keys"]["embed_top"]
    assert o["freqs"] == _progress()[1]
    row = _progress()[0].set_index("step").loc[step]
    _close(row["restricted_loss"], o["restricted_test"], "restricted loss (calculate_trig_loss, mode='test')")
    _close(row["excluded_loss"], o["excluded_train"], "excluded loss (all keys removed, mode='train')")


@pytest.mark.parametrize("keyset", ["embed_top", "neuron"])
@pytest.mark.parametrize("step", [0, 300, 1500])
def test_fourier_logit_split_every_mode(step, keyset):
    """fourier_logit_split = the official projection (``get_component_cos_xpy`` / ``sin_xpy`` with the bias
    correction of ``test_logits``) on train, test and all pairs, for both key sets (the official neuron set too)."""
    o = _official()["checkpoints"][str(step)]["keys"][keyset]
    d = _data()
    restricted, excluded = fourier_logit_split(_grid_logits(step).view(d.p, d.p, d.p), o["freqs"])
    restricted, excluded = restricted.view(d.p ** 2, d.p), excluded.view(d.p ** 2, d.p)
    for mode, idx in (("train", d.train_idx), ("test", d.test_idx), ("all", None)):
        _close(_ce(restricted, idx), o[f"restricted_{mode}"], f"restricted loss, {mode}")
        _close(_ce(excluded, idx), o[f"excluded_{mode}"], f"excluded loss, {mode}")


@pytest.mark.parametrize("keyset", ["embed_top", "neuron"])
@pytest.mark.parametrize("step", [0, 300, 1500])
def test_excluded_loss_per_frequency(step, keyset):
    """One key frequency removed at a time (official ``calculate_excluded_loss``, the paper's Fig. 12)."""
    o = _official()["checkpoints"][str(step)]["keys"][keyset]
    d = _data()
    grid = _grid_logits(step).view(d.p, d.p, d.p)
    mine = [_ce(fourier_logit_split(grid, [k])[1].view(d.p ** 2, d.p), d.train_idx) for k in o["freqs"]]
    _close(mine, o["excluded_per_freq_train"], "excluded loss per frequency")


@pytest.mark.xfail(strict=True, reason="known difference (tests/parity/README.md): lmsci's restricted loss is the "
                   "cross-entropy on the test pairs; the official take_metrics logs calculate_trig_loss with its "
                   "default mode='all' (all p**2 pairs), 1.1886 vs lmsci's 1.3198 at step 300")
def test_restricted_loss_equals_the_official_default_all_pairs():
    for step in (0, 300, 1500):
        o = _official()["checkpoints"][str(step)]["keys"]["embed_top"]
        _close(_progress()[0].set_index("step").loc[step, "restricted_loss"], o["restricted_all"], f"step {step}")
