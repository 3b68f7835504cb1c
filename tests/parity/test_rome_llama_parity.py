"""Parity of lmsci's causal tracing and ROME with the official code on Llama models (issue 43, item 5).

The companion of ``test_rome_parity.py`` (a tiny GPT-2) on the Llama architecture (RMSNorm, rotary positions,
grouped-query attention, a gated SiLU MLP whose down projection is a ``Linear``). Fixtures
(``fixtures/rome_llama/``, see ``tests/parity/README.md`` and ``fixtures/rome_llama/SOURCE.json``) are outputs of
kmeng01/rome at 0874014 run with Llama shims (the official ``layername`` knows GPT-2 and GPT-NeoX names only):

* a tiny ``LlamaForCausalLM`` trained on the six facts of the GPT-2 fixture (``fixtures/rome_llama/model/``: 4
  layers, d = 32, d_mlp = 128, 4 query / 2 key-value heads, the same 63-token word vocabulary, safetensors):
  causal tracing (``collect_embedding_std``, ``calculate_hidden_flow`` with ``trace_with_patch``: the noise level and
  the effect grids of three prompts for hidden states and MLP / attention windows of 2, 3 and 10, with the official
  noise draws) and ROME (``execute_rome``: ``compute_u``, ``compute_v``, ``layer_stats``) for two requests (layers 1
  and 2) with KL factor 0.0625, 0 and 1 and without the second-moment adjustment;
* the real SmolLM2-135M (lmsci zoo ``smollm2-135m``, Q4_1 dequantised to float32): ROME at layer 6 of 30 for one
  request (gpt2-xl hyper-parameters, no second-moment adjustment), KL factor 0.0625 and 0. That test is skipped
  where the zoo model is not installed.

No official code is used here. The tiny model is checked through the plain ``transformers`` model (``hf``, its default
SDPA attention) and lmsci's wrapper (``hfmodel``: :func:`lmsci.models.hf.load_hf`, eager attention, as the zoo loads
models; the official runs used eager attention).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import rome_parity_common as common  # this folder's shared lmsci side (not a test module)

from lmsci.measure.causal_tracing import causal_trace, embedding_std
from lmsci.methods.rome import RomeHParams, apply_edit, compute_rome, down_projection, key_second_moment, restore

transformers = pytest.importorskip("transformers")

FIX = Path(__file__).parent / "fixtures" / "rome_llama"

#: causal-trace probabilities (float32 forwards; SDPA or eager attention here, eager in the official run): measured
#: max 3.0e-7 (hf, SDPA) / 1.8e-7 (hfmodel, eager) over 15 grids
PROB_ATOL = 3e-6
#: the noise level: measured relative difference 0 (both read model.embed_tokens' output)
STD_RTOL = 1e-6
#: C = E[k k^T] relative to its largest entry (6.4 / 1.5; lmsci float64 against the official float64 SecondMoment):
#: measured 1.0e-8
COV_RTOL = 1e-7
#: u (unit norm; the official inverts C in float64, casts the inverse to float32 and multiplies in float32; lmsci
#: solves in float64; C's condition number is 9.4e6 / 2.3e6): measured max 9.2e-6
U_ATOL = 2e-4
#: v* (entries up to 7.6): measured max 4.1e-6, 4.8e-7 after the first step
V_ATOL = 1e-4
#: the weight delta, relative to its largest entry (|dW| up to 153: u . k0 is small, which amplifies u's float32
#: rounding): measured max 1.7e-4
DW_RTOL = 3e-3
#: SmolLM2 (30 layers, d = 576, d_mlp = 1536; 20 Adam steps back-propagated through 24 float32 layers; |delta| ends
#: at the clamp, 103.6): measured u 3.1e-8; v* 6.1e-5 = 5.2e-6 of its largest entry (11.9); the weight delta 7.8e-6
#: of its largest entry; P(' football') after the edit 5.0e-6 (0.97210 against 0.97210)
SMOL_U_ATOL, SMOL_V_RTOL, SMOL_DW_RTOL, SMOL_P_ATOL = 1e-5, 1e-4, 1e-3, 1e-4

BACKENDS = ("hf", "hfmodel")
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
    if backend == "hf":
        return transformers.LlamaForCausalLM.from_pretrained(str(FIX / "model")).eval()
    from lmsci.models.hf import load_hf

    return load_hf(FIX / "model", tokenizer=False)


def _module(backend: str) -> torch.nn.Module:
    m = _model(backend)
    return m if backend == "hf" else m.model


def _trace(backend: str, i: int, kinds_windows: dict[str, tuple[str, int]], monkeypatch):
    return common.trace(_model(backend), _src(), _T(), i, kinds_windows, monkeypatch)


def _rome(backend: str, case: int, variant: str, cov: torch.Tensor | None = None, **over):
    return common.rome(_model(backend), _src(), _T(), case, variant, 128, cov, **over)


def _dW(edit) -> torch.Tensor:
    """lmsci's update in down_proj's Linear layout ``[d_model, d_mlp]``."""
    return torch.outer(edit.lam.double(), edit.u.double())


def _official_dW(pre: str, T: dict) -> torch.Tensor:
    """The official ``u v^T`` matched to down_proj's weight ``[d_model, d_mlp]``: right_vector (x) u."""
    return torch.outer(T[f"{pre}/right_vector"].double(), T[f"{pre}/u"].double())


_unit = common.unit


def _max(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


# ---- fixtures ------------------------------------------------------------------------------------------------


def test_fixtures_are_the_official_outputs():
    src, T = _src(), _T()
    assert src["repository"] == "kmeng01/rome"
    assert src["commit"] == "0874014cd9837e4365f3e6f3c71400ef11509e04"
    cfg = json.loads((FIX / "model" / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["num_key_value_heads"] < cfg["num_attention_heads"]
    ctr = src["causal_trace"]
    assert ctr["samples"] == 10 and ctr["noise_factor"] == 3.0
    assert abs(ctr["noise"] - 3.0 * ctr["nu_std"]) < 1e-12
    vocab = src["tokenizer"]["vocab"]
    for i, tr in enumerate(ctr["traces"]):
        s, e = tr["subject_range"]
        z = np.random.RandomState(1).randn(10, e - s, 32)  # the official draws, re-created in every trace_with_patch
        assert np.array_equal(T[f"trace/{i}/noise_z"].numpy(), z)
        assert [vocab[t] for t in tr["input_ids"]] == [t.replace(" ", "Ġ") for t in tr["input_tokens"]]
        assert "".join(tr["input_tokens"][s:e]).strip() == tr["subject"]
        assert vocab[tr["answer_id"]] == tr["answer"].replace(" ", "Ġ")
        for run in RUNS:
            assert T[f"trace/{i}/{run}/scores"].shape == (len(tr["input_ids"]), 4)
    for case, meta in enumerate(src["rome"]["requests"]):
        for v, vm in meta["variants"].items():
            assert vm["n_adam_steps"] == vm["hparams"]["v_num_grad_steps"] - 1
            assert vm["hparams"]["rewrite_module_tmp"] == "model.layers.{}.mlp.down_proj"
            assert abs(float(T[f"rome/{case}/{v}/u"].norm()) - 1) < 1e-6
        assert meta["variants"]["official"]["hparams"]["kl_factor"] == 0.0625
        assert T[f"rome/{case}/official/weight_delta"].shape == (32, 128)
        assert torch.allclose(T[f"rome/{case}/official/weight_delta"].double(),
                              _official_dW(f"rome/{case}/official", T), atol=1e-5)
    assert int(T["mom2/mask"].sum()) == src["rome"]["mom2_count"]
    S = src["smollm2"]
    TS = load_file(str(FIX / "smollm2.safetensors"))
    for v in ("official", "kl0"):
        assert TS[f"rome/{v}/u"].shape == (1536,) and TS[f"rome/{v}/v_star"].shape == (576,)
        assert abs(float(TS[f"rome/{v}/u"].norm()) - 1) < 1e-6
        assert S["variants"][v]["n_adam_steps"] == 19 and S["variants"][v]["hparams"]["layers"] == [S["layer"]]
    assert TS["rome/official/weight_delta"].shape == (576, 1536)
    assert S["tokens"][0][S["subject_last"][0]] == "ĠJames" and S["target_ids"] == [13159]


# ---- causal tracing --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_noise_level(backend):
    """lmsci's embedding_std on the subjects alone gives the official collect_embedding_std (model.embed_tokens:
    Llama has no position embedding, so lmsci's ``embed`` hook is the same tensor)."""
    src = _src()
    ids = [src["model"]["subject_ids"][p] for p in src["model"]["people"]]
    got = embedding_std(_model(backend), ids, [(0, len(s)) for s in ids])
    assert abs(got - src["causal_trace"]["nu_std"]) <= STD_RTOL * src["causal_trace"]["nu_std"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("i", range(3))
@pytest.mark.parametrize("run", list(RUNS))
def test_causal_trace_grid(backend, i, run, monkeypatch):
    """The effect grid [n_tokens, n_layers], P(o) clean and corrupted, with the official noise draws (hidden states:
    the decoder layer's output; windows of MLP outputs and of self-attention outputs)."""
    T = _T()
    res = _trace(backend, i, {run: RUNS[run]}, monkeypatch)
    off = _src()["causal_trace"]["traces"][i]["runs"][run]
    want = T[f"trace/{i}/{run}/scores"].numpy()
    got = res.scores[RUNS[run][0]]
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= PROB_ATOL
    assert abs(res.high - off["high_score"]) <= PROB_ATOL
    assert abs(res.low - off["low_score"]) <= PROB_ATOL
    # the grid is far from flat: restoring states moves P(o) by much more than the tolerance
    assert float(want.max() - want.min()) > 500 * PROB_ATOL


@pytest.mark.parametrize("i", range(3))
def test_causal_trace_all_kinds_at_once(i, monkeypatch):
    """The three kinds in one call (one batched forward per kind), as the experiment calls causal_trace."""
    T = _T()
    res = _trace("hfmodel", i, {r: RUNS[r] for r in ("resid", "mlp", "attn")}, monkeypatch)
    for run in ("resid", "mlp", "attn"):
        assert float(np.abs(res.scores[RUNS[run][0]] - T[f"trace/{i}/{run}/scores"].numpy()).max()) <= PROB_ATOL


# ---- ROME ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layer", [1, 2])
def test_key_second_moment(backend, layer):
    """lmsci's C = E[k k^T] (k: down_proj's input, the gated MLP activation) over the official token set is the
    official layer_stats SecondMoment."""
    T = _T()
    C = key_second_moment(_model(backend), layer, T["mom2/input_ids"].long(), T["mom2/mask"])
    want = T[f"mom2/{layer}"]
    assert _max(C, want) <= COV_RTOL * float(want.abs().max())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", [0, 1])
def test_rome_without_kl(backend, case):
    """KL factor 0: u, v*, the weight delta and the number of steps agree."""
    T = _T()
    pre = f"rome/{case}/kl0"
    e = _rome(backend, case, "kl0")
    assert _max(_unit(e.u), T[f"{pre}/u"]) <= U_ATOL
    assert _max(e.v_star, T[f"{pre}/v_star"]) <= V_ATOL
    want = _official_dW(pre, T)
    assert _max(_dW(e), want) <= DW_RTOL * float(want.abs().max())
    # the optimisation moved v* beyond the tolerance (case 0 far: |delta| 14.6; case 1 less: 0.34)
    assert float((T[f"{pre}/v_star"] - T[f"{pre}/target_init"]).norm()) > 100 * V_ATOL
    assert e.info["steps"] == _src()["rome"]["requests"][case]["variants"]["kl0"]["hparams"]["v_num_grad_steps"]


@pytest.mark.parametrize("case", [0, 1])
def test_rome_with_lmsci_second_moment(case):
    """End to end on lmsci's side: C from key_second_moment over the official token set, then compute_rome."""
    T = _T()
    layer = _src()["rome"]["requests"][case]["layer"]
    C = key_second_moment(_model("hf"), layer, T["mom2/input_ids"].long(), T["mom2/mask"])
    e = _rome("hf", case, "official", cov=C)
    pre = f"rome/{case}/official"
    assert _max(_unit(e.u), T[f"{pre}/u"]) <= U_ATOL
    want = T[f"{pre}/weight_delta"].double()
    assert _max(_dW(e), want) <= DW_RTOL * float(want.abs().max())


@pytest.mark.parametrize("case", [0, 1])
def test_rome_u_without_second_moment(case):
    """mom2_adjustment false: the official u is k* / |k*| (k* averaged over the context templates); lmsci with
    C = I gives the same direction, and the same v*."""
    T = _T()
    e = _rome("hf", case, "nomom2")
    assert _max(_unit(e.u), T[f"rome/{case}/nomom2/u"]) <= 1e-6
    assert _max(e.v_star, T[f"rome/{case}/nomom2/v_star"]) <= V_ATOL


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", [0, 1])
def test_rome_edited_weights(backend, case):
    """apply_edit adds the official weight delta to down_proj (a Linear, [d_model, d_mlp], not transposed); the
    edited layer outputs v* at the subject's last token of the unprefixed prompt."""
    T = _T()
    meta = _src()["rome"]["requests"][case]
    e = _rome(backend, case, "official")
    m = _model(backend)
    mod, transposed = down_projection(m, meta["layer"])
    assert not transposed and mod is _module(backend).model.layers[meta["layer"]].mlp.down_proj
    W0 = mod.weight.detach().clone()
    old = apply_edit(m, e)
    try:
        want = T[f"rome/{case}/official/weight_delta"].double()
        assert _max(mod.weight.detach() - W0, want) <= DW_RTOL * float(want.abs().max())
        got = []
        h = mod.register_forward_hook(lambda mm, a, o: got.append(o.detach()))
        with torch.no_grad():
            m(torch.tensor([meta["prompts"][0]]))
        h.remove()
        assert _max(got[0][0, meta["subject_last"][0]], T[f"rome/{case}/official/v_star"]) <= V_ATOL
    finally:
        restore(m, meta["layer"], old)
    assert torch.equal(mod.weight.detach(), W0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", [0, 1])
@pytest.mark.parametrize("variant", ["official", "kl1"])
def test_rome_first_step_with_kl(backend, case, variant):
    """With the KL term on, the first Adam step agrees: v* after one step = target_init + the official first delta."""
    T = _T()
    pre = f"rome/{case}/{variant}"
    e = _rome(backend, case, variant, v_steps=2)  # two forwards, one step
    assert _max(e.v_star, T[f"{pre}/target_init"] + T[f"{pre}/delta_steps"][0]) <= V_ATOL
    assert _max(_unit(e.u), T[f"{pre}/u"]) <= U_ATOL


@pytest.mark.parametrize("case", [0, 1])
@pytest.mark.parametrize("variant", ["official", "kl1"])
def test_rome_with_kl(case, variant):
    """With the KL term on (official factor 0.0625, and 1), v* and the weight delta equal the official ones."""
    T = _T()
    pre = f"rome/{case}/{variant}"
    e = _rome("hf", case, variant)
    assert _max(e.v_star, T[f"{pre}/v_star"]) <= V_ATOL
    want = _official_dW(pre, T)
    assert _max(_dW(e), want) <= DW_RTOL * float(want.abs().max())


@pytest.mark.xfail(strict=True, reason="known difference (as on GPT-2, test_rome_parity.py): lmsci's default "
                   "RomeHParams.ridge = 1e-4 adds 1e-4 x the mean diagonal of C to C before solving; the official "
                   "compute_u inverts C as it is. Here C (3349 tokens, d_mlp 128) has condition number 9.4e6 / 2.3e6 "
                   "(smallest eigenvalue 8.6e-7 / 1.9e-6), so the default ridge moves the unit u by up to 0.20 / 0.18. "
                   "The other tests set ridge = 0.")
@pytest.mark.parametrize("case", [0, 1])
def test_rome_default_ridge(case):
    e = _rome("hf", case, "kl0", ridge=RomeHParams().ridge)
    assert _max(_unit(e.u), _T()[f"rome/{case}/kl0/u"]) <= U_ATOL


# ---- the real model ---------------------------------------------------------------------------------------------


def test_rome_smollm2(smollm2):
    """ROME on SmolLM2-135M (zoo ``smollm2-135m``) at layer 6 against the official run (gpt2-xl hyper-parameters, KL
    factor 0.0625, no second-moment adjustment): u, v*, the weight delta, and the edit's effect (P(' football') after
    'LeBron James plays the sport of' from 0.033 to 0.972 in the official run). The fixture's KL-0 variant is only
    checked for its shape (one variant keeps the test near 15 s of CPU)."""
    S = _src()["smollm2"]
    T = load_file(str(FIX / "smollm2.safetensors"))
    layer = S["layer"]
    mod, transposed = down_projection(smollm2, layer)
    assert not transposed and tuple(mod.weight.shape) == (576, 1536)
    h = S["variants"]["official"]["hparams"]
    assert not h["mom2_adjustment"] and h["kl_factor"] == 0.0625
    e = compute_rome(smollm2, layer, prompts=S["prompts"], subject_last=S["subject_last"], target=S["target_ids"],
                     cov=torch.eye(1536, dtype=torch.float64), kl_prompts=S["kl_prompts"],
                     kl_positions=S["kl_positions"], hparams=common.hparams(h))
    assert _max(_unit(e.u), T["rome/official/u"]) <= SMOL_U_ATOL
    assert _max(e.v_star, T["rome/official/v_star"]) <= SMOL_V_RTOL * float(T["rome/official/v_star"].abs().max())
    assert float((T["rome/official/v_star"] - T["rome/official/target_init"]).norm()) > 100.0
    want = _official_dW("rome/official", T)
    assert torch.allclose(want, T["rome/official/weight_delta"].double(), atol=1e-6)
    assert _max(_dW(e), want) <= SMOL_DW_RTOL * float(want.abs().max())
    assert e.info["steps"] == h["v_num_grad_steps"]
    ids = torch.tensor([S["prompts"][0]])
    old = apply_edit(smollm2, e)
    try:
        with torch.no_grad():
            p = torch.softmax(smollm2(ids)[0, -1].double(), -1)[S["target_ids"][0]]
    finally:
        restore(smollm2, layer, old)
    assert abs(float(p) - S["variants"]["official"]["p_new_after"]) <= SMOL_P_ATOL
