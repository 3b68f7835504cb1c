"""Parity of lmsci's causal tracing and ROME with the official code (issue 30, item 2: ROME and causal tracing).

Fixtures (``fixtures/rome/``, see ``tests/parity/README.md`` and ``fixtures/rome/SOURCE.json``) are outputs of
kmeng01/rome at 0874014 on a tiny GPT-2 trained on six facts (``fixtures/rome/model/``: 4 layers, d = 32, a 63-token
GPT-2-style word vocabulary, safetensors):

* causal tracing (``experiments/causal_trace.py``: ``collect_embedding_std``, ``calculate_hidden_flow`` with
  ``trace_with_patch``): the noise level (3 x the subject embeddings' std), and the effect grids (answer
  probability with one state / a window of MLP or attention outputs restored) of three prompts, for hidden states
  and for MLP / attention windows of 2, 3 and 10, with the official noise draws (``numpy.random.RandomState(1)``,
  stored as ``noise_z``);
* ROME (``rome/rome_main.py`` ``execute_rome``: ``compute_u``, ``compute_v``, ``layer_stats``): the second moment
  ``C`` of the MLP keys over a local text set (the official code's Wikipedia statistics cannot be downloaded), ``u``,
  ``v*``, the right vector and the weight delta ``u v^T`` for two requests (one- and two-token targets, layers 1
  and 2), at the gpt2-xl hyper-parameters scaled to the model, with KL factor 0.0625 (official), 0 and 1, and
  without the second-moment adjustment.

No official code is used here. Both of lmsci's model paths are checked: the Hugging Face model (``hf``) and its
conversion to an lmsci GPT (``gpt``: ``import_hf``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

import rome_parity_common as common  # this folder's shared lmsci side (not a test module)

import lmsci.methods.rome as rome_mod
from lmsci.measure.causal_tracing import causal_trace, embedding_std
from lmsci.methods.rome import RomeHParams, apply_edit, compute_rome, down_projection, key_second_moment, restore

transformers = pytest.importorskip("transformers")

FIX = Path(__file__).parent / "fixtures" / "rome"

#: causal-trace probabilities (float32 forwards, two attention implementations): measured max 4.2e-7
PROB_ATOL = 3e-6
#: the noise level: measured relative difference 0 (hf: both read transformer.wte's output)
STD_RTOL = 1e-6
#: C = E[k k^T] (lmsci float64 against the official float64 SecondMoment): measured max 7.6e-9 (entries up to 0.76)
COV_ATOL = 1e-7
#: u (unit norm; the official inverts C in float64, casts the inverse to float32 and multiplies in float32; lmsci
#: solves in float64): measured max 2.6e-5
U_ATOL = 2e-4
#: v* (entries up to 6): measured max 7.2e-6 (KL factor 0, and with the KL swapped to the official direction),
#: 8.6e-7 after the first step
V_ATOL = 1e-4
#: the weight delta u v^T, relative to its largest entry (|dW| up to 93: u . k0 is small here, which amplifies u's
#: float32 rounding): measured max 5.0e-4
DW_RTOL = 3e-3

BACKENDS = ("hf", "gpt")
RUNS = {"resid": ("resid", 1), "mlp": ("mlp", 2), "attn": ("attn", 2), "mlp_w10": ("mlp", 10),
        "attn_w3": ("attn", 3)}
"""Fixture run name -> (lmsci kind, window)."""


@lru_cache(maxsize=None)
def _T() -> dict:
    return load_file(str(FIX / "official.safetensors"))


@lru_cache(maxsize=None)
def _src() -> dict:
    return json.loads((FIX / "SOURCE.json").read_text())


@lru_cache(maxsize=None)
def _model(backend: str):
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(FIX / "model")).eval()
    if backend == "hf":
        return hf
    from lmsci.models.hf_convert import import_hf

    return import_hf(hf).eval()


def _trace(backend: str, i: int, kinds_windows: dict[str, tuple[str, int]], monkeypatch):
    return common.trace(_model(backend), _src(), _T(), i, kinds_windows, monkeypatch)


def _rome(backend: str, case: int, variant: str, cov: torch.Tensor | None = None, **over):
    return common.rome(_model(backend), _src(), _T(), case, variant, 128, cov, **over)


def _dW(edit) -> torch.Tensor:
    """lmsci's update in the official Conv1D layout ``[d_mlp, d_model]``."""
    return torch.outer(edit.lam.double(), edit.u.double()).T


_unit = common.unit


# ---- fixtures ------------------------------------------------------------------------------------------------


def test_fixtures_are_the_official_outputs():
    src, T = _src(), _T()
    assert src["repository"] == "kmeng01/rome"
    assert src["commit"] == "0874014cd9837e4365f3e6f3c71400ef11509e04"
    ctr = src["causal_trace"]
    assert ctr["samples"] == 10 and ctr["noise_factor"] == 3.0
    assert abs(ctr["noise"] - 3.0 * ctr["nu_std"]) < 1e-12
    vocab = src["tokenizer"]["vocab"]
    for i, tr in enumerate(ctr["traces"]):
        s, e = tr["subject_range"]
        # the official noise draws: numpy's legacy RandomState(1) re-created in every trace_with_patch call
        z = np.random.RandomState(1).randn(10, e - s, 32)
        assert np.array_equal(T[f"trace/{i}/noise_z"].numpy(), z)
        # the official tokens are the stored ids; the subject range covers the subject's words
        assert [vocab[t] for t in tr["input_ids"]] == [t.replace(" ", "Ġ") for t in tr["input_tokens"]]
        assert "".join(tr["input_tokens"][s:e]).strip() == tr["subject"]
        assert vocab[tr["answer_id"]] == tr["answer"].replace(" ", "Ġ")
        for run in RUNS:
            assert T[f"trace/{i}/{run}/scores"].shape == (len(tr["input_ids"]), 4)
    for case, meta in enumerate(src["rome"]["requests"]):
        for v, vm in meta["variants"].items():
            assert vm["n_adam_steps"] == vm["hparams"]["v_num_grad_steps"] - 1
            assert abs(float(T[f"rome/{case}/{v}/u"].norm()) - 1) < 1e-6
        assert meta["variants"]["official"]["hparams"]["kl_factor"] == 0.0625
        assert meta["variants"]["kl0"]["hparams"]["kl_factor"] == 0.0
        assert T[f"rome/{case}/official/weight_delta"].shape == (128, 32)
    assert int(T["mom2/mask"].sum()) == src["rome"]["requests"][0]["mom2_count"]


# ---- causal tracing --------------------------------------------------------------------------------------------


def test_noise_level_hf():
    """lmsci's embedding_std on the subjects alone (the official collect_embedding_std tokenizes each subject alone
    and reads transformer.wte's output) gives the official std."""
    src = _src()
    ids = [src["model"]["subject_ids"][p] for p in src["model"]["people"]]
    got = embedding_std(_model("hf"), ids, [(0, len(s)) for s in ids])
    assert abs(got - src["causal_trace"]["nu_std"]) <= STD_RTOL * src["causal_trace"]["nu_std"]


@pytest.mark.xfail(strict=True, reason="known difference: lmsci GPT's 'embed' hook point is the token embedding "
                   "plus the learned position embedding, so embedding_std (and the experiment's noise level "
                   "nu = 3 x std) on an lmsci GPT includes the positions; the official noise level is the std of "
                   "the token embeddings alone (transformer.wte). On this model (small position embeddings) "
                   "0.18966 against the official 0.19016 (-0.26%); the noise itself is added to the same sum "
                   "either way")
def test_noise_level_gpt():
    src = _src()
    ids = [src["model"]["subject_ids"][p] for p in src["model"]["people"]]
    got = embedding_std(_model("gpt"), ids, [(0, len(s)) for s in ids])
    assert abs(got - src["causal_trace"]["nu_std"]) <= STD_RTOL * src["causal_trace"]["nu_std"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("i", range(3))
@pytest.mark.parametrize("run", list(RUNS))
def test_causal_trace_grid(backend, i, run, monkeypatch):
    """The effect grid [n_tokens, n_layers], P(o) clean and corrupted, with the official noise draws."""
    T = _T()
    res = _trace(backend, i, {run: RUNS[run]}, monkeypatch)
    off = _src()["causal_trace"]["traces"][i]["runs"][run]
    want = T[f"trace/{i}/{run}/scores"].numpy()
    got = res.scores[RUNS[run][0]]
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= PROB_ATOL
    assert abs(res.high - off["high_score"]) <= PROB_ATOL
    assert abs(res.low - off["low_score"]) <= PROB_ATOL
    assert res.window[RUNS[run][0]] == RUNS[run][1]
    # the grid is far from flat: restoring states moves P(o) by much more than the tolerance
    assert float(want.max() - want.min()) > 500 * PROB_ATOL


@pytest.mark.parametrize("i", range(3))
def test_causal_trace_all_kinds_at_once(i, monkeypatch):
    """The three kinds in one call (one batched forward per kind), as the experiment calls causal_trace."""
    T = _T()
    res = _trace("hf", i, {r: RUNS[r] for r in ("resid", "mlp", "attn")}, monkeypatch)
    for run in ("resid", "mlp", "attn"):
        assert float(np.abs(res.scores[RUNS[run][0]] - T[f"trace/{i}/{run}/scores"].numpy()).max()) <= PROB_ATOL


# ---- ROME ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layer", [1, 2])
def test_key_second_moment(backend, layer):
    """lmsci's C = E[k k^T] over the official token set is the official layer_stats SecondMoment."""
    T = _T()
    C = key_second_moment(_model(backend), layer, T["mom2/input_ids"].long(), T["mom2/mask"])
    assert float((C - T[f"mom2/{layer}"]).abs().max()) <= COV_ATOL


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", [0, 1])
def test_rome_without_kl(backend, case):
    """KL factor 0: u, v*, the right vector and the weight delta agree (lmsci's lam (x) u is the official
    u_hat (x) right_vector: the same rank-one matrix however u is scaled)."""
    T = _T()
    pre = f"rome/{case}/kl0"
    e = _rome(backend, case, "kl0")
    assert float((_unit(e.u) - T[f"{pre}/u"]).abs().max()) <= U_ATOL
    assert float((e.v_star.double() - T[f"{pre}/v_star"]).abs().max()) <= V_ATOL
    want = torch.outer(T[f"{pre}/u"], T[f"{pre}/right_vector"])
    assert float((_dW(e) - want).abs().max()) <= DW_RTOL * float(want.abs().max())
    # the optimisation moved v* far beyond the tolerance
    assert float((T[f"{pre}/v_star"] - T[f"{pre}/target_init"]).norm()) > 1.0
    assert e.info["steps"] == _src()["rome"]["requests"][case]["variants"]["kl0"]["hparams"]["v_num_grad_steps"]


@pytest.mark.parametrize("case", [0, 1])
def test_rome_with_lmsci_second_moment(case):
    """End to end on lmsci's side: C from key_second_moment over the official token set, then compute_rome."""
    T = _T()
    layer = _src()["rome"]["requests"][case]["layer"]
    C = key_second_moment(_model("hf"), layer, T["mom2/input_ids"].long(), T["mom2/mask"])
    e = _rome("hf", case, "kl0", cov=C)
    pre = f"rome/{case}/kl0"
    assert float((_unit(e.u) - T[f"{pre}/u"]).abs().max()) <= U_ATOL
    want = torch.outer(T[f"{pre}/u"], T[f"{pre}/right_vector"])
    assert float((_dW(e) - want).abs().max()) <= DW_RTOL * float(want.abs().max())


@pytest.mark.parametrize("case", [0, 1])
def test_rome_u_without_second_moment(case):
    """mom2_adjustment false: the official u is k* / |k*| (k* averaged over the context templates); lmsci with
    C = I gives the same direction."""
    e = _rome("hf", case, "nomom2")
    assert float((_unit(e.u) - _T()[f"rome/{case}/nomom2/u"]).abs().max()) <= 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", [0, 1])
def test_rome_edited_weights(backend, case):
    """apply_edit adds the official weight delta to c_proj (Conv1D, [d_mlp, d_model]) / lmsci's proj; the edited
    layer outputs v* at the subject's last token of the unprefixed prompt."""
    T = _T()
    meta = _src()["rome"]["requests"][case]
    e = _rome(backend, case, "kl0")
    m = _model(backend)
    mod, transposed = down_projection(m, meta["layer"])
    assert transposed == (backend == "hf")
    W0 = mod.weight.detach().clone()
    old = apply_edit(m, e)
    try:
        dW = (mod.weight.detach() - W0).double()
        dW = dW if transposed else dW.T
        want = torch.outer(T[f"rome/{case}/kl0/u"], T[f"rome/{case}/kl0/right_vector"])
        assert float((dW - want).abs().max()) <= DW_RTOL * float(want.abs().max())
        got = []
        h = mod.register_forward_hook(lambda mm, a, o: got.append(o.detach()))
        with torch.no_grad():
            m(torch.tensor([meta["prompts"][0]]))
        h.remove()
        assert float((got[0][0, meta["subject_last"][0]].double() - T[f"rome/{case}/kl0/v_star"]).abs().max()) <= 1e-4
    finally:
        restore(m, meta["layer"], old)
    assert torch.equal(mod.weight.detach(), W0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", [0, 1])
@pytest.mark.parametrize("variant", ["official", "kl1"])
def test_rome_first_step_with_kl(backend, case, variant):
    """With the KL term on, the first Adam step still agrees (the KL gradient is 0 at delta = 0 in either
    direction): v* after one step = target_init + the official delta after its first step."""
    T = _T()
    pre = f"rome/{case}/{variant}"
    e = _rome(backend, case, variant, v_steps=2)  # two forwards, one step
    want = T[f"{pre}/target_init"] + T[f"{pre}/delta_steps"][0]
    assert float((e.v_star.double() - want).abs().max()) <= V_ATOL
    assert float((_unit(e.u) - T[f"{pre}/u"]).abs().max()) <= U_ATOL


@pytest.mark.parametrize("case", [0, 1])
@pytest.mark.parametrize("variant", ["official", "kl1"])
def test_rome_with_kl(case, variant):
    """With the KL term on (official factor 0.0625, and 1), v* and the weight delta equal the official ones: the KL is
    KL(P_after || P_before) as in the paper's eq. 4 (lmsci had it reversed: v* differed by up to 1.31 and the weight
    delta by 27% of its largest entry; fixed)."""
    T = _T()
    pre = f"rome/{case}/{variant}"
    e = _rome("hf", case, variant)
    assert float((e.v_star.double() - T[f"{pre}/v_star"]).abs().max()) <= V_ATOL
    want = torch.outer(T[f"{pre}/u"], T[f"{pre}/right_vector"])
    if variant == "official":
        assert torch.allclose(want, T[f"{pre}/weight_delta"], atol=1e-5)
    assert float((_dW(e) - want).abs().max()) <= DW_RTOL * float(want.abs().max())


@pytest.mark.xfail(strict=True, reason="known difference: lmsci's default RomeHParams.ridge = 1e-4 adds 1e-4 x the "
                   "mean diagonal of C to C before solving ('numerical safety'); the official compute_u inverts C as it "
                   "is. Here C (3349 tokens, d_mlp 128) has condition number 1.9e6 / 5.0e6 and smallest eigenvalue "
                   "1.4e-6 / 6.9e-7, below the ridge (5.6e-6 / 6.0e-6), so the default ridge moves the unit u by up to "
                   "0.18 and the weight delta by 78% / 57% of its largest entry (KL factor 0). The other tests set "
                   "ridge = 0.")
@pytest.mark.parametrize("case", [0, 1])
def test_rome_default_ridge(case):
    T = _T()
    e = _rome("hf", case, "kl0", ridge=RomeHParams().ridge)
    assert float((_unit(e.u) - T[f"rome/{case}/kl0/u"]).abs().max()) <= U_ATOL
