"""Parity of lmsci's knowledge-neuron attribution with the official code (issue 30, item 2: knowledge neurons).

Fixtures (``fixtures/knowledge_neurons/``, see ``tests/parity/README.md`` and ``fixtures/knowledge_neurons/SOURCE.json``)
are outputs of EleutherAI/knowledge-neurons at be1a84a (``KnowledgeNeurons.get_scores`` / ``get_coarse_neurons`` /
``get_refined_neurons``, ``model_type="gpt2"``, steps 20, batch size 10) on a tiny GPT-2 (``fixtures/knowledge_neurons/
model/``: 3 layers, d = 32, d_mlp = 128, V = 64, safetensors) and on the same weights with an identity MLP activation
(``activation_function="linear"``), for 3 facts x 5 prompts of token ids with a fixed target token each: the
attribution tensors ``[layer, neuron]`` and the coarse (t = 0.2, 0.3) and refined ((t, p) = (0.2, 0.7), (0.3, 0.5))
neurons. No official code is used here.

The official rule differs from lmsci's (and the paper's) in two places, both pinned below as strict xfails:

* the Riemann grid: the official scales by ``torch.linspace(0, 1, m)`` (0, 1/(m-1), ..., 1) and divides by m;
  lmsci (Dai et al. Eq. 3) uses ``k / m``, k = 1..m;
* the neurons of GPT models: the official hooks ``mlp.c_fc``'s output (the pre-activation); lmsci hooks the neuron
  activations ``act(pre)`` (``blocks.{l}.mlp.post``, the paper's intermediate neurons, as the official code itself
  does for BERT).

Passing tests show that these are the only differences: on the identity-activation model, where pre-activation and
activation coincide, the official m-step score is exactly ``((m - 1) * lmsci(m - 1) + official(1)) / m`` (official(1)
is its alpha = 0 term); on the GELU model the official score is the pre-activation integrated gradient on the official
grid, computed here through lmsci's own ``blocks.{l}.mlp.pre`` hook; and lmsci's ``coarse_neurons`` / ``refine`` applied
to the official scores select exactly the official neurons.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lmsci.measure.attribution import answer_probs, coarse_neurons, integrated_gradients, knowledge_neurons, refine

transformers = pytest.importorskip("transformers")
from lmsci.models.hf import HFModel  # noqa: E402

FIX = Path(__file__).parent / "fixtures" / "knowledge_neurons"
STEPS, BATCH = 20, 10  # the official run's steps and batch size
VARIANTS = ("gelu", "linear")
SETTINGS = ((0.2, 0.7), (0.3, 0.5), (0.3, 0.4))  # (coarse adaptive threshold t, sharing p): the paper's, the
#: README's, and p = 0.4, where 5 p = 2 exactly (tells "more than p" from "at least p")

#: attributions, relative to each prompt's largest |official score| (~1e-3 .. 9e-3 probability): float32 rounding of
#: two different batchings of the same forward/backward passes; measured max 3.2e-7 (grid identity, linear model) and
#: 7.0e-7 (pre-activation rule, both models, all 15 prompts)
REL_TOL = 1e-5
#: answer probabilities: lmsci's HF model (transformers of this venv) against the driver's forward under
#: transformers 4.40.2; measured max 1.1e-8
PROB_ATOL = 1e-6


@lru_cache(maxsize=None)
def _T() -> dict:
    return load_file(str(FIX / "official.safetensors"))


@lru_cache(maxsize=None)
def _J() -> dict:
    return json.loads((FIX / "official.json").read_text())


@lru_cache(maxsize=None)
def _model(variant: str) -> HFModel:
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(FIX / "model"), activation_function=variant).eval()
    return HFModel(hf)


def _facts() -> list[dict]:
    return _J()["facts"]


def _cases():
    return [(fi, pi) for fi, f in enumerate(_facts()) for pi in range(len(f["prompts"]))]


def _official(variant: str, fi: int, pi: int, kind: str = "scores") -> torch.Tensor:
    return _T()[f"{variant}/{kind}/f{fi}/p{pi}"]


def _rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a - ref).abs().max() / ref.abs().max())


def _as_lists(neurons) -> list[list[int]]:
    return sorted([int(l), int(i)] for l, i in neurons)


def _official_rule_pre(model: HFModel, prompt: list[int], target: int, steps: int) -> torch.Tensor:
    """The official rule written with lmsci's hooks: integrated gradients of the MLP *pre-activation*
    (``blocks.{l}.mlp.pre`` = ``c_fc``'s output) at the last position, alphas ``linspace(0, 1, steps)``, sum / steps."""
    ids = torch.tensor([prompt])
    n_layers = model.config.n_layer
    names = [f"blocks.{l}.mlp.pre" for l in range(n_layers)]
    with torch.no_grad():
        _, cache = model.run_with_cache(ids, names)
    alphas = torch.linspace(0, 1, steps)[:, None]
    out = []
    for n in names:
        base = cache[n][0, -1]
        scaled = (alphas * base[None]).requires_grad_(True)

        def fn(x, hook, scaled=scaled):
            x = x.clone()
            x[:, -1, :] = scaled
            return x

        with torch.enable_grad(), model.hooks([(n, fn)]):
            logits = model(ids.expand(steps, -1))
        p = torch.softmax(logits[:, -1], -1)[:, target]
        (g,) = torch.autograd.grad(p.sum(), scaled)
        out.append(base * g.sum(0) / steps)
    return torch.stack(out)


# ------------------------------------------------------------------------------------------------ the fixtures
def test_fixture_model_and_probs():
    m = _model("gelu")
    assert m.config.n_layer == 3 and m.config.n_embd == 32 and m.config.vocab_size == 64
    for v in VARIANTS:
        prompts = [p for f in _facts() for p in f["prompts"]]
        answers = [f["target"] for f in _facts() for _ in f["prompts"]]
        got = answer_probs(_model(v), prompts, answers)
        assert torch.allclose(got, torch.tensor(_J()["models"][v]["probs"]), atol=PROB_ATOL, rtol=0)
        assert _official(v, 0, 0).shape == (3, 128)


# ------------------------------------------------------------------------------- selection on the official scores
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("t", (0.2, 0.3))
def test_coarse_neurons_of_official_scores(variant, t):
    """lmsci's ``coarse_neurons`` on the official scores = the official ``get_coarse_neurons`` (exact sets)."""
    ref = _J()["models"][variant]["coarse"][str(t)]
    for fi, pi in _cases():
        got = coarse_neurons(_official(variant, fi, pi), threshold=t)
        assert _as_lists(got) == ref[str(fi)][pi], (fi, pi)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("t,p", SETTINGS)
def test_refine_of_official_scores(variant, t, p):
    """lmsci's ``refine`` of the coarse sets of the official scores = the official ``get_refined_neurons``."""
    ref = _J()["models"][variant]["refined"][f"{t}/{p}"]
    for fi, f in enumerate(_facts()):
        coarse = [coarse_neurons(_official(variant, fi, pi), threshold=t) for pi in range(len(f["prompts"]))]
        assert _as_lists(refine(coarse, p)) == ref[str(fi)], fi


# ------------------------------------------------------------------------ the attributions: what exactly differs
def test_grid_identity_identity_activation():
    """Identity MLP activation (pre-activation = activation): official(m) = ((m - 1) lmsci(m - 1) + official(1)) / m,
    i.e. lmsci's integrated gradients are the official ones up to the Riemann grid."""
    m, worst = _model("linear"), 0.0
    f = _facts()[0]
    for pi, prompt in enumerate(f["prompts"]):
        ours = integrated_gradients(m, prompt, f["target"], steps=STEPS - 1)
        pred = ((STEPS - 1) * ours + _official("linear", 0, pi, "scores_steps1")) / STEPS
        worst = max(worst, _rel(pred, _official("linear", 0, pi)))
    assert worst < REL_TOL, worst


def test_official_scores_are_preactivation_ig():
    """GELU model: the official scores are integrated gradients of ``c_fc``'s output (lmsci hook
    ``blocks.{l}.mlp.pre``) on the official grid; with an identity activation this is lmsci's quantity."""
    for v in VARIANTS:
        m = _model(v)
        for fi, pi in _cases():
            f = _facts()[fi]
            got = _official_rule_pre(m, f["prompts"][pi], f["target"], STEPS)
            assert _rel(got, _official(v, fi, pi)) < REL_TOL, (v, fi, pi)


def test_grid_difference_vanishes_hook_difference_does_not():
    """At m = 100 (official batch 20) lmsci and the official differ by 0.5% on the identity-activation model (the
    grids converge to the same integral, O(1/m); 25% at m = 20) but still by 8.9% on the GELU model (a different
    quantity: pre-activation against activation attribution)."""
    f = _facts()[0]
    d = {v: _rel(integrated_gradients(_model(v), f["prompts"][0], f["target"], steps=100),
                 _official(v, 0, 0, "scores_steps100")) for v in VARIANTS}
    assert d["linear"] < 0.01 and d["gelu"] > 0.05, d


# the two known differences: strict xfails (they turn red when lmsci adopts the official rule)
#: lmsci integrated_gradients(steps=20) against the official get_scores(steps=20), max over prompts of the difference
#: relative to the prompt's largest |score|: measured 0.25 (linear: grid only) and 0.29 (gelu: grid and
#: pre-activation), both in fact 0 prompt 1; the bound below is a regression guard
DIFF_BOUND = {"linear": 0.3, "gelu": 0.35}


@pytest.mark.parametrize("variant", VARIANTS)
def test_attribution_difference_is_bounded(variant):
    m = _model(variant)
    worst = max(_rel(integrated_gradients(m, _facts()[fi]["prompts"][pi], _facts()[fi]["target"], steps=STEPS),
                     _official(variant, fi, pi)) for fi, pi in _cases())
    assert worst < DIFF_BOUND[variant], worst


@pytest.mark.xfail(strict=True, reason="Riemann grid: the official scores by torch.linspace(0, 1, m) (alpha = 0 "
                   "included) and divides by m; lmsci uses alpha = k/m, k = 1..m (Dai et al. Eq. 3). GELU model also: "
                   "the official attributes c_fc's output (pre-activation), lmsci act(pre). Max relative difference "
                   "0.25 (linear) / 0.29 (gelu)")
@pytest.mark.parametrize("variant", VARIANTS)
def test_attributions_equal_official(variant):
    m = _model(variant)
    for fi, pi in _cases():
        f = _facts()[fi]
        got = integrated_gradients(m, f["prompts"][pi], f["target"], steps=STEPS)
        assert _rel(got, _official(variant, fi, pi)) < REL_TOL, (fi, pi)


@pytest.mark.xfail(strict=True, reason="follows from the attribution differences: lmsci's knowledge_neurons at the "
                   "same steps and thresholds selects different sets in 4 of 9 (fact, setting) pairs on the GELU model "
                   "(one extra neuron each: (1, 66) for fact 0 and (2, 1) for fact 2 at t 0.3, p 0.5 and 0.4) and 1 of "
                   "9 on the linear model (extra (1, 40) for fact 0 at t 0.2 / p 0.7); no official neuron is missed")
@pytest.mark.parametrize("variant", VARIANTS)
def test_selected_neurons_equal_official(variant):
    m = _model(variant)
    for t, p in SETTINGS:
        ref = _J()["models"][variant]["refined"][f"{t}/{p}"]
        for fi, f in enumerate(_facts()):
            got, _ = knowledge_neurons(m, f["prompts"], f["target"], steps=STEPS, threshold=t, share=p)
            assert _as_lists(got) == ref[str(fi)], (t, p, fi)


def test_selected_neurons_mostly_agree():
    """Regression guard beside the xfail: of the 18 (variant, setting, fact) refined sets, lmsci's pipeline gives
    the official set in 13 and differs by one extra neuron in the other 5 (measured)."""
    same, extra = 0, []
    for v in VARIANTS:
        m = _model(v)
        for t, p in SETTINGS:
            ref = _J()["models"][v]["refined"][f"{t}/{p}"]
            for fi, f in enumerate(_facts()):
                got = _as_lists(knowledge_neurons(m, f["prompts"], f["target"], steps=STEPS, threshold=t,
                                                  share=p)[0])
                if got == ref[str(fi)]:
                    same += 1
                else:
                    extra.append(len({tuple(x) for x in got} ^ {tuple(x) for x in ref[str(fi)]}))
    assert same >= 13 and all(e == 1 for e in extra), (same, extra)
