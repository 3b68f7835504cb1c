"""Parity of lmsci's LM-Steer with the official code (issue 30, item 2: LM-Steer).

Fixtures (``fixtures/lm_steer/``, see ``tests/parity/README.md`` and ``fixtures/lm_steer/SOURCE.json``) are outputs of
Glaciohound/LM-Steer at 265982f (``lm_steer/models/steers.py`` ``Projected_Adaptor``, the GPT-2 wrapper
``model_gpt_neo.Switching_GPTNeoModel`` and the loop body of ``experiments/training/train.py``) on a tiny GPT-2
(``fixtures/lm_steer/model/``, 2 layers, d = 32, V = 64, safetensors): steered logits for a given ``P1, P2`` (rank 8)
at four epsilons, in float32 and float64; the official initial steer after ``set_seed(0)``; and three Adam steps
(README settings: 2 steers, dummy steer 1, lr 1e-2, epsilon 1e-3, init 1e-2, rank = d) on a fixed batch, with and
without the L2 term, plus one step on a right-padded batch. No official code is used here.

Both of lmsci's model paths are checked: the Hugging Face model itself (``hf``: a forward pre-hook on ``lm_head``)
and its conversion to an lmsci GPT (``gpt``: ``import_hf``, the steer on hook point ``final``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from lmsci.methods.lm_steer import LMSteer, train_steer
from lmsci.methods.steerable import logits_of, mean_nll
from lmsci.methods.steering import steering

transformers = pytest.importorskip("transformers")

FIX = Path(__file__).parent / "fixtures" / "lm_steer"

#: logits: lmsci (float32) against the official float32 and float64 logits; measured max 6.7e-6 (at epsilon 1, where
#: the logits reach 13; 7.5e-7 unsteered): two attention implementations and float32 rounding
LOGIT_RTOL, LOGIT_ATOL = 2e-6, 1e-5
#: the steer's own effect (steered minus unsteered logits), relative to its largest entry; measured max 4.7e-5 (at
#: epsilon 1e-3, where the effect is 0.014 and the logits carry ~1e-6 of rounding)
EFFECT_RTOL = 5e-4
#: losses (nats/token, ~4.3): measured max 9.5e-7
LOSS_ATOL = 5e-6
#: gradients of P1, P2, relative to the largest entry of the official gradient (~4e-6): measured max 4.1e-7
GRAD_RTOL = 1e-5
#: P1, P2 after an Adam step (each step moves an entry by about lr = 1e-2): measured max 5.2e-7
PARAM_ATOL = 5e-6

BACKENDS = ("hf", "gpt")


@lru_cache(maxsize=None)
def _T() -> dict:
    return load_file(str(FIX / "official.safetensors"))


@lru_cache(maxsize=None)
def _src() -> dict:
    return json.loads((FIX / "SOURCE.json").read_text())


@lru_cache(maxsize=None)
def _model(backend: str):
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(FIX / "model")).eval()
    if backend == "hf":
        return hf
    from lmsci.models.hf_convert import import_hf

    return import_hf(hf)


def _steer(P1: torch.Tensor, P2: torch.Tensor, epsilon: float) -> LMSteer:
    s = LMSteer(P1.shape[1], names=("attr",), rank=P1.shape[2], epsilon=epsilon, dummy=True)
    assert s.names == ("attr", "dummy")  # official steer 0 = the attribute (training_steer), 1 = dummy_steer
    with torch.no_grad():
        s.P1.copy_(P1)
        s.P2.copy_(P2)
    return s


def _logits(backend: str, ids, mask, steer=None, values=None) -> torch.Tensor:
    m = _model(backend)
    with torch.no_grad(), steering(m, steer, values) as sm:
        return logits_of(sm, ids, mask).float()


def _data(batch: str) -> tuple[list[list[int]], list[float]]:
    T = _T()
    ids, mask = T[f"train/{batch}/input_ids"], T[f"train/{batch}/attention_mask"]
    return [row[mk.bool()].tolist() for row, mk in zip(ids, mask)], _src()["training"]["labels"][batch]


def test_fixtures_are_the_official_outputs():
    src, T = _src(), _T()
    assert src["repository"] == "Glaciohound/LM-Steer"
    assert src["commit"] == "265982f6d8027d3a2ec4b65b775cf3e704e187f5"
    assert src["logits"]["epsilons"] == [1e-3, 1e-2, 1e-1, 1.0] and src["logits"]["rank"] == 8
    tr = src["training"]
    assert (tr["rank"], tr["epsilon"], tr["init_var"], tr["lr"], tr["num_steers"]) == (32, 1e-3, 1e-2, 1e-2, 2)
    assert (tr["training_steer"], tr["dummy_steer"]) == (0, 1)
    assert T["logits/eps0/float32"].shape == (3, 10, 64) and T["train/init/P1"].shape == (2, 32, 32)
    # the training batches are the official tokenizer's output of the stored texts ("wN" is token N)
    for b in ("equal", "padded"):
        ids, mask = T[f"train/{b}/input_ids"], T[f"train/{b}/attention_mask"]
        for text, row, mk in zip(tr["texts"][b], ids, mask):
            want = [int(w[1:]) for w in text.split()]
            assert row[mk.bool()].tolist() == want and bool((row[~mk.bool()] == 63).all())
        assert T[f"train/{b}/steer_values"].tolist() == [[y, 1.0] for y in tr["labels"][b]]
    assert int((T["train/padded/attention_mask"] == 0).sum()) > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_unsteered_logits(backend):
    T = _T()
    ids = T["logits/input_ids"]
    mask = torch.ones_like(ids)
    want = T["logits/unsteered/float32"]
    torch.testing.assert_close(_logits(backend, ids, mask), want, rtol=LOGIT_RTOL, atol=LOGIT_ATOL)
    # a steer with all values 0 is the unsteered LM (the official early return)
    s = _steer(T["logits/P1"], T["logits/P2"], 1.0)
    torch.testing.assert_close(_logits(backend, ids, mask, s, torch.zeros(3, 2)), want, rtol=LOGIT_RTOL,
                               atol=LOGIT_ATOL)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("i", range(4))
def test_steered_logits(backend, i):
    """h <- h + eps sum_k s_k (h P1_k) P2_k^T with per-example values [B, K] (dummy at 1, 1, 0)."""
    T = _T()
    eps = _src()["logits"]["epsilons"][i]
    ids = T["logits/input_ids"]
    mask = torch.ones_like(ids)
    s = _steer(T["logits/P1"], T["logits/P2"], eps)
    got = _logits(backend, ids, mask, s, T["logits/steer_values"])
    for dtype in ("float32", "float64"):
        torch.testing.assert_close(got.double(), T[f"logits/eps{i}/{dtype}"].double(), rtol=LOGIT_RTOL,
                                   atol=LOGIT_ATOL)
    # the steer's effect itself, not only the logits it rides on
    want = T[f"logits/eps{i}/float64"] - T["logits/unsteered/float32"].double()
    effect = got.double() - _logits(backend, ids, mask).double()
    scale = float(want.abs().max())
    assert scale > 1e-2  # the steer moves the logits far beyond the tolerance
    assert float((effect - want).abs().max()) <= EFFECT_RTOL * scale


def test_lmsci_init_is_the_official_init():
    """LMSteer(seed=0) draws P1 then P2 as ``randn(K, d, r) * init_std`` from a generator seeded 0: the same tensors
    as the official Projected_Adaptor after ``set_seed(0)``. Equal bit for bit on the CPU kernels the reference was
    recorded with (AVX2/AVX-512); torch's scalar kernel (``ATEN_CPU_CAPABILITY=default``) computes the Box-Muller
    transform with other log/sin/cos and differs by up to 2e-8 on values of size 1e-2 (issue 46), while another
    seed or draw order differs by about 1e-2: an absolute tolerance of 1e-7 tells the same draw from another."""
    T = _T()
    s = LMSteer(32, names=("attr",), rank=32, epsilon=1e-3, init_std=1e-2, dummy=True, seed=0)
    for got, key in ((s.P1, "P1"), (s.P2, "P2")):
        want = T[f"train/init/{key}"]
        assert float(want.std()) > 5e-3  # the draw is of size init_std, far above the tolerance
        assert float((got.detach() - want).abs().max()) <= 1e-7, key


def _loss_and_grads(backend, P1, P2, batch, l2):
    T = _T()
    m = _model(backend)
    s = _steer(P1, P2, _src()["training"]["epsilon"])
    ids, mask = T[f"train/{batch}/input_ids"], T[f"train/{batch}/attention_mask"]
    with steering(m, s, T[f"train/{batch}/steer_values"]) as sm:
        loss = mean_nll(sm, ids, mask)  # the loss of lmsci's train_intervention
        (loss + l2 * s.regularization()).backward()
    return float(loss.detach()), s.P1.grad, s.P2.grad


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("run,step", [("equal_reg0", 0), ("equal_reg0", 1), ("equal_reg0", 2), ("equal_reg1e-6", 0)])
def test_loss_and_gradients(backend, run, step):
    T = _T()
    r = _src()["training"]["runs"][run]
    P1 = T["train/init/P1"] if step == 0 else T[f"train/{run}/step{step - 1}/P1"]
    P2 = T["train/init/P2"] if step == 0 else T[f"train/{run}/step{step - 1}/P2"]
    loss, g1, g2 = _loss_and_grads(backend, P1, P2, r["batch"], r["regularization"])
    assert abs(loss - r["loss"][step]) <= LOSS_ATOL
    for got, key in ((g1, "grad_P1"), (g2, "grad_P2")):
        want = T[f"train/{run}/step{step}/{key}"]
        assert float((got - want).abs().max()) <= GRAD_RTOL * float(want.abs().max()), key


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("run", ["equal_reg0", "equal_reg1e-6"])
def test_training_steps(backend, run):
    """lmsci's train_steer (Adam, lr 1e-2, the whole batch each step) from the official init follows the official
    P1, P2 step by step; its history is the official loss (plus the L2 term)."""
    T = _T()
    r = _src()["training"]["runs"][run]
    data, labels = _data(r["batch"])
    s = LMSteer(32, names=("attr",), rank=32, epsilon=1e-3, init_std=1e-2, dummy=True, seed=0)
    after = []
    train_steer(_model(backend), data, labels, steer=s, lr=_src()["training"]["lr"], steps=r["steps"],
                batch_size=len(data), l2=r["regularization"], pad_id=63,
                on_step=lambda k, v: after.append((s.P1.detach().clone(), s.P2.detach().clone())))
    assert len(after) == r["steps"]
    for k, (P1, P2) in enumerate(after):
        assert float((P1 - T[f"train/{run}/step{k}/P1"]).abs().max()) <= PARAM_ATOL, k
        assert float((P2 - T[f"train/{run}/step{k}/P2"]).abs().max()) <= PARAM_ATOL, k
        want = r["loss"][k] + r["regularization"] * float(T[f"train/{run}/step{k}/regularization_term"])
        assert abs(s.history[k] - want) <= LOSS_ATOL, k
    # each step moves every entry by about lr (Adam's first step is lr * sign(grad)): far beyond PARAM_ATOL
    assert float((after[0][0] - T["train/init/P1"]).abs().max()) > 0.9e-2


def test_padded_batch_differs_only_by_the_padding_mask():
    """The official loss on a right-padded batch is Hugging Face's ``labels=input_ids`` loss: it also scores the
    padded EOS targets; lmsci masks them (a documented difference). Everything else agrees: lmsci's steered logits
    are the official ones, the official loss and gradients are the unmasked cross-entropy of lmsci's steered
    logits, and lmsci's masked loss is the masked cross-entropy of the official logits."""
    T = _T()
    tr = _src()["training"]
    ids, mask, sv = (T[f"train/padded/{k}"] for k in ("input_ids", "attention_mask", "steer_values"))
    m = _model("hf")
    s = _steer(T["train/init/P1"], T["train/init/P2"], tr["epsilon"])
    with steering(m, s, sv) as sm:
        logits = logits_of(sm, ids, mask)
        unmasked = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))
        unmasked.backward()
        masked = float(mean_nll(sm, ids, mask).detach())
    torch.testing.assert_close(logits.detach(), T["train/padded/init_logits"], rtol=LOGIT_RTOL, atol=LOGIT_ATOL)
    official = tr["runs"]["padded_reg0"]["loss"][0]
    assert abs(float(unmasked.detach()) - official) <= LOSS_ATOL
    for got, key in ((s.P1.grad, "grad_P1"), (s.P2.grad, "grad_P2")):
        want = T[f"train/padded_reg0/step0/{key}"]
        assert float((got - want).abs().max()) <= GRAD_RTOL * float(want.abs().max()), key
    want_masked = _masked_ce(T["train/padded/init_logits"], ids, mask)
    assert abs(masked - want_masked) <= LOSS_ATOL
    assert abs(masked - official) > 0.1  # the two losses differ (4.21 against 4.01 nats/token)


def _masked_ce(logits, ids, mask) -> float:
    tgt = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
    return float(F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).double(), tgt.reshape(-1),
                                 ignore_index=-100))


@pytest.mark.xfail(strict=True, reason="deliberate difference: lmsci's train_steer masks padded targets out of the "
                   "loss; the official loss (Hugging Face labels=input_ids, pad = EOS) also scores the padded EOS "
                   "targets, so on a padded batch the gradients differ and the first Adam step (lr * sign(grad)) "
                   "differs by up to 2 lr = 0.02 per entry (measured 0.0199)")
@pytest.mark.parametrize("backend", BACKENDS)
def test_padded_batch_training_step(backend):
    T = _T()
    data, labels = _data("padded")
    s = LMSteer(32, names=("attr",), rank=32, epsilon=1e-3, init_std=1e-2, dummy=True, seed=0)
    train_steer(_model(backend), data, labels, steer=s, lr=1e-2, steps=1, batch_size=len(data), pad_id=63)
    assert float((s.P1.detach() - T["train/padded_reg0/step0/P1"]).abs().max()) <= PARAM_ATOL
    assert float((s.P2.detach() - T["train/padded_reg0/step0/P2"]).abs().max()) <= PARAM_ATOL
