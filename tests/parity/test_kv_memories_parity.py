"""Parity of lmsci's key-value memories with the official code (issue 30, item 2: key-value memories).

Fixtures (``fixtures/kv_memories/``, see ``tests/parity/README.md`` and ``fixtures/kv_memories/SOURCE.json``) are
outputs of mega002/ff-layers at f4a71c6 (Geva, Schuster, Berant & Levy, arXiv 2012.14913), whose analysis functions
were fed the MLP pre-activations of a tiny GPT-2 (``fixtures/kv_memories/model/``: 16 layers, d = 16, d_mlp = 32,
V = 48 with fairseq's dictionary layout, safetensors; ReLU as saved, and the same weights with ``gelu_new``) on 40
sentences scored as fairseq scores them (``</s>`` prepended, positions 0..n-1):

* ``SequenceScorer._aggregate_layer_values`` (per sentence and key: the max pre-activation over positions and where),
  ``generate_outputs.format_ffn_values`` and ``get_trigger_examples`` (top-k sentences per key, ReLU applied), for
  k = 1 and 5: the trigger (sentence, position, value) per layer, key and rank;
* ``trigger_examples_jsonl_to_textual`` and ``key_value_agreement`` (``load_vocab``, ``get_target_counts``,
  ``get_softmax_log_probabilities`` with the model's output layer ``log_softmax(v E^T)``,
  ``compare_argmax_w1_w2_all_layers``): per key the value's top token, its probability, how many triggers have it
  as target and the targets' ranks; once as the official code runs (``official``) and once with each trigger's next
  token put where ``get_target_counts`` reads the target (``next``, the paper's definition).

No official code is used here. Known differences (strict xfails):

* target of the agreement: ``get_target_counts`` takes ``record_tokens[-2]`` ("fix bug: taking the one-before-last
  token, because we are ignoring the BOS token"); the textual record is ``tokens[:p + 1]`` for a trigger at position
  ``p`` of the ``</s>``-prefixed input, so ``[-2]`` is the *last token of the trigger prefix* (``<s>`` at p = 0), not
  the next token that the paper (Sec. 4) and lmsci compare with;
* top-k triggers: the official search keeps one position per sentence (the sentence's max) and then the top-k
  sentences; lmsci keeps the top-k positions, so one window can give several triggers (top-1 is the same);
* the coefficient: the official ranks ``max(fc1(x), 0)`` (the pre-activation; its LM uses ReLU), lmsci the neuron
  activation ``act(fc1(x))`` (``blocks.{l}.mlp.post``): the same on ReLU models and the same ranking of positive
  coefficients on GELU models, other numbers.

Ties: a prefix shared by several sentences (the ``</s>`` prefix at position 0, or sentences with the same first
token) gives the same coefficient at several places; the official search keeps the first sentence met, ``torch.topk``
another. Prefixes and coefficients are compared everywhere; sentence, position and next token only where the top-1
prefix occurs once in the corpus.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lmsci.measure.kv_memories import key_value_memories, next_token_targets, value_logits

transformers = pytest.importorskip("transformers")
from lmsci.models.hf import HFModel  # noqa: E402

FIX = Path(__file__).parent / "fixtures" / "kv_memories"
VARIANTS = ("relu", "gelu_new")
KS = (1, 5)
EOS, PAD, BOS_SYMBOL = 2, 1, 0  # fairseq: '</s>' is prepended; get_target_counts names the p = 0 target '<s>' (id 0)

#: coefficients (float32 forwards: transformers 4.40.2 one sentence at a time vs this venv's padded batch): measured
#: max 4.8e-7 (values up to 1.7)
ACT_ATOL = 2e-6
#: the value's top-token probability (float32 log_softmax of v E^T on both sides): measured max 3.7e-9
PROB_ATOL = 1e-6


@lru_cache(maxsize=None)
def _T() -> dict:
    return load_file(str(FIX / "official.safetensors"))


@lru_cache(maxsize=None)
def _J() -> dict:
    return json.loads((FIX / "official.json").read_text())


@lru_cache(maxsize=None)
def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """lmsci's windows: ``</s> w1 .. wn`` padded, next tokens ``w1 .. wn`` (-1 at the last token and padding)."""
    sents = _J()["sentences"]
    T = max(map(len, sents)) + 1
    inp = torch.full((len(sents), T), PAD, dtype=torch.long)
    for i, s in enumerate(sents):
        inp[i, :len(s) + 1] = torch.tensor([EOS] + s)
    return inp, next_token_targets(inp, PAD)


@lru_cache(maxsize=None)
def _model(variant: str) -> HFModel:
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(FIX / "model"), activation_function=variant).eval()
    return HFModel(hf)


@lru_cache(maxsize=None)
def _kv(variant: str, k: int):
    inp, nxt = _inputs()
    return key_value_memories(_model(variant), inp, nxt, k=k, n_top=5)


def _official(variant: str, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    t = _T()
    return (t[f"{variant}/k{k}/trigger_sentence"].long(), t[f"{variant}/k{k}/trigger_position"].long(),
            t[f"{variant}/k{k}/trigger_value"])


def _prefix(s: int, p: int) -> tuple[int, ...]:
    return tuple(_inputs()[0][s, :p + 1].tolist())


@lru_cache(maxsize=None)
def _prefix_counts() -> Counter:
    inp, nxt = _inputs()
    return Counter(_prefix(s, p) for s, p in (nxt >= 0).nonzero().tolist())


def _coef(variant: str, official_value: torch.Tensor) -> torch.Tensor:
    """lmsci's coefficient for an official (ReLU'd pre-activation) value: act(pre), pre > 0 here."""
    x = official_value.float()
    return x if variant == "relu" else transformers.activations.ACT2FN["gelu_new"](x)


def _untied(variant: str, k: int) -> torch.Tensor:
    """``[L, d_mlp]``: keys whose official top-1 prefix occurs once in the corpus."""
    s, p, _ = _official(variant, k)
    c = _prefix_counts()
    return torch.tensor([[c[_prefix(int(a), int(b))] == 1 for a, b in zip(sr, pr)]
                         for sr, pr in zip(s[..., 0], p[..., 0])])


def test_fixture_layout():
    """The fixture's shapes, and every official trigger is a valid, positive prefix (no empty top-k slots)."""
    inp, nxt = _inputs()
    for v in VARIANTS:
        for k in KS:
            s, p, val = _official(v, k)
            assert s.shape == p.shape == val.shape == (16, 32, k)
            assert bool((nxt[s, p] >= 0).all()) and bool((val > 0).all())
            assert _J()["runs"][f"{v}/k{k}"]["n_zero_value_triggers"] == 0


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_top1_trigger(variant, k):
    """lmsci's top-1 trigger prefix and coefficient equal the official ones for every key (sentence and position
    where the prefix is unique)."""
    s, p, val = _official(variant, k)
    kv = _kv(variant, k)
    ws, wp = kv.key_where[..., 0, 0], kv.key_where[..., 0, 1]
    for l in range(16):
        for d in range(32):
            assert _prefix(int(ws[l, d]), int(wp[l, d])) == _prefix(int(s[l, d, 0]), int(p[l, d, 0])), (l, d)
    torch.testing.assert_close(kv.key_acts[..., 0], _coef(variant, val[..., 0]), atol=ACT_ATOL, rtol=0)
    u = _untied(variant, k)
    assert int(u.sum()) >= 480  # 497 (relu) / 495 (gelu_new) of 512 keys here
    assert bool((ws[u] == s[..., 0][u]).all()) and bool((wp[u] == p[..., 0][u]).all())


@pytest.mark.parametrize("variant", VARIANTS)
def test_topk_official_rule_from_lmsci_maxima(variant):
    """The official top-5 (best position per sentence, then the top 5 sentences) is reproduced from lmsci's own
    per-window top-1 search: coefficients rank by rank, prefixes as multisets."""
    inp, nxt = _inputs()
    s, p, val = _official(variant, 5)
    per = [key_value_memories(_model(variant), inp[i:i + 1], nxt[i:i + 1], k=1, n_top=1) for i in range(len(inp))]
    acts = torch.stack([kv.key_acts[..., 0] for kv in per], -1)  # [L, d, N]
    pos = torch.stack([kv.key_where[..., 0, 1] for kv in per], -1)
    top = torch.topk(acts, 5, dim=-1)
    torch.testing.assert_close(top.values, _coef(variant, val), atol=ACT_ATOL, rtol=0)
    tp = torch.gather(pos, -1, top.indices)
    for l in range(16):
        for d in range(32):
            mine = Counter(_prefix(int(a), int(b)) for a, b in zip(top.indices[l, d], tp[l, d]))
            theirs = Counter(_prefix(int(a), int(b)) for a, b in zip(s[l, d], p[l, d]))
            assert mine == theirs, (l, d)


@pytest.mark.parametrize("variant", VARIANTS)
def test_value_projection(variant):
    """The value's top token (``v_i E``, no final norm) and its probability equal ``compare_argmax_w1_w2_all_layers``'s
    ``embedding_index`` and ``max_prob``."""
    t = _T()
    m = _model(variant)
    for k in KS:
        kv = _kv(variant, k)
        for run in ("official", "next"):
            assert bool((kv.value_top[..., 0] == t[f"{variant}/k{k}/{run}/embedding_index"].long()).all())
    probs = torch.stack([value_logits(m, l).softmax(-1).max(-1).values for l in range(16)]).double()
    torch.testing.assert_close(probs, t[f"{variant}/k1/official/max_prob"], atol=PROB_ATOL, rtol=0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_agreement_next_token(variant):
    """With the next token as target (the paper's definition, fed to the official functions), lmsci's agreement and
    rank equal the official count and ranking at k = 1 on every untied key."""
    t = _T()
    kv = _kv(variant, 1)
    u = _untied(variant, 1)
    mine = (kv.value_top[..., 0] == kv.key_next[..., 0]).int()
    assert torch.equal(mine[u], t[f"{variant}/k1/next/target_count"][u])
    ranks = torch.tensor(_J()["runs"][f"{variant}/k1"]["next"]["target_rankings"]).view(16, 32)
    assert torch.equal(kv.next_rank[u], ranks[u])
    # lmsci's per-layer agreement is the fraction of agreeing keys; the tied keys bound the difference to the official
    off = (t[f"{variant}/k1/next/target_count"] > 0).float().mean(1)
    assert float((kv.agreement() - off).abs().max()) <= float((~u).sum(1).max()) / 32


@pytest.mark.parametrize("variant", VARIANTS)
def test_agreement_as_the_official_code_runs(variant):
    """The official code's count and ranking (target = the prefix's last token, ``<s>`` at position 0), rebuilt from
    lmsci's triggers and ``value_logits``, equal the official outputs at k = 1 on every untied key."""
    inp, _ = _inputs()
    t = _T()
    m = _model(variant)
    kv = _kv(variant, 1)
    u = _untied(variant, 1)
    ws, wp = kv.key_where[..., 0, 0], kv.key_where[..., 0, 1]
    target = torch.where(wp == 0, torch.full_like(wp, BOS_SYMBOL), inp[ws, wp])
    mine = (kv.value_top[..., 0] == target).int()
    assert torch.equal(mine[u], t[f"{variant}/k1/official/target_count"][u])
    lg = torch.stack([value_logits(m, l) for l in range(16)])  # [L, d, V]
    rank = (lg > lg.gather(-1, target[..., None])).sum(-1)
    ranks = torch.tensor(_J()["runs"][f"{variant}/k1"]["official"]["target_rankings"]).view(16, 32)
    assert torch.equal(rank[u], ranks[u])


# the known differences: strict xfails (they turn red when lmsci adopts the official rule)

@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.xfail(strict=True, reason="agreement target: the official key_value_agreement compares the value's top "
                   "token with the last token of the trigger prefix (record_tokens[-2]); lmsci (and the paper, "
                   "Sec. 4) with the next token. At k = 1: relu 0.0293 (lmsci) vs 0.0234 (official), gelu_new 0.0273 "
                   "vs 0.0176")
def test_agreement_equals_official_code(variant):
    off = (_T()[f"{variant}/k1/official/target_count"] > 0).float().mean()
    assert float(_kv(variant, 1).agreement().mean()) == pytest.approx(float(off), abs=1e-9)


def test_agreement_difference_bound():
    """Regression guard beside the xfail: the measured gap between lmsci's agreement and the official code's."""
    for variant, gap in (("relu", 3 / 512), ("gelu_new", 5 / 512)):
        off = float((_T()[f"{variant}/k1/official/target_count"] > 0).float().mean())
        assert float(_kv(variant, 1).agreement().mean()) - off == pytest.approx(gap, abs=1e-9)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.xfail(strict=True, reason="top-k rule: the official search keeps the best position of each sentence and "
                   "then the top-k sentences; lmsci the top-k positions (several per window). At k = 5 the prefix "
                   "sets differ on 88 (relu) and 91 (gelu_new) of 512 keys")
def test_top5_sets_equal_official(variant):
    s, p, _ = _official(variant, 5)
    kv = _kv(variant, 5)
    for l in range(16):
        for d in range(32):
            mine = Counter(_prefix(int(a), int(b)) for a, b in kv.key_where[l, d].tolist())
            assert mine == Counter(_prefix(int(a), int(b)) for a, b in zip(s[l, d], p[l, d])), (l, d)


def test_top5_difference_bound():
    """Regression guard beside the xfail: how many keys' top-5 prefix sets differ, and lmsci's k-th coefficient is
    never below the official k-th (it searches a superset of the official candidates)."""
    for variant, n_diff in (("relu", 88), ("gelu_new", 91)):
        s, p, val = _official(variant, 5)
        kv = _kv(variant, 5)
        diff = sum(Counter(_prefix(int(a), int(b)) for a, b in kv.key_where[l, d].tolist())
                   != Counter(_prefix(int(a), int(b)) for a, b in zip(s[l, d], p[l, d]))
                   for l in range(16) for d in range(32))
        assert diff == n_diff
        assert bool((kv.key_acts >= _coef(variant, val) - ACT_ATOL).all())


@pytest.mark.xfail(strict=True, reason="coefficient: the official ranks max(fc1(x), 0) (the pre-activation), lmsci "
                   "act(fc1(x)) (blocks.{l}.mlp.post); on gelu_new the top-1 coefficients differ by up to 0.17")
def test_gelu_coefficient_is_preactivation():
    _, _, val = _official("gelu_new", 1)
    torch.testing.assert_close(_kv("gelu_new", 1).key_acts[..., 0], val[..., 0].float(), atol=ACT_ATOL, rtol=0)
