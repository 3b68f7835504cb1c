"""The protocol fixes of issue 11 for the bioS extraction experiments (Physics of LMs Part 3.1, arXiv 2309.14316):
LoRA fine-tuning through peft trains only the adapters; the memorisation gate makes a verdict inconclusive; mixed
training windows hold one kind of document with QA at 80% of the tokens; pretraining stops at the memorisation
target and records when; probes read the training biographies."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lmsci.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from lmsci.config import resolve_config
from lmsci.experiments import registry
from lmsci.experiments.knowledge._bios_streams import bio_stream, mixed_stream, token_fractions, training_bios
from lmsci.experiments.knowledge._specs import SINGLE, PhaseSpec
from lmsci.measure.knowledge import recall_of_docs
from lmsci.train.packed import train_packed
from lmsci.models.gpt import GPT, GPTConfig, GPTSpec
from lmsci.runs import RunDir, derive_seed
from lmsci.train.finetune import FinetuneSpec, add_lora, finetune, trainable_parameters
from lmsci.worlds.bios import ATTRS, BiosWorld
from lmsci.worlds.bios_datasets import qa_docs, qa_split


def _bios_gpt(world, seq_len: int, seed: int = 0) -> GPT:
    """A 1-layer bioS GPT as the family's configs spell it (rotary, tied embeddings) for ``world``'s vocabulary."""
    spec = GPTSpec(d_model=16, n_layers=1, n_heads=2, pos="rope", tie_embeddings=True)
    return GPT(spec.gpt_config(len(world.vocab), seq_len), seed=seed)


def _tiny_gpt(seed: int = 0) -> GPT:
    return GPT(GPTConfig(vocab_size=64, seq_len=32, n_layers=2, n_heads=2, d_model=16, pos="rope"), seed=seed)


def _windows(n: int = 8, T: int = 32, V: int = 64):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, V, (n, T), generator=g)
    return x, torch.roll(x, -1, 1)


# -- 1. LoRA through peft -------------------------------------------------------------------------
def test_lora_trains_only_the_adapters():
    model = _tiny_gpt()
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    spec = FinetuneSpec(rank=4, embedding_rank=8, lr=1e-2, batch_size=4)
    tuned, res = finetune(model, _windows(), spec, seed=0)
    assert res.steps == 2
    names = [n for n, p in tuned.named_parameters() if p.requires_grad]
    # adapters on every block's qkv and on the embedding, nothing else trainable
    assert names and all("lora_" in n for n in names)
    assert sum(".qkv.lora_A" in n for n in names) == 2 and any("wte.lora_embedding_A" in n for n in names)
    base = tuned.get_base_model()
    changed_adapters = 0
    for k, v in base.state_dict().items():
        if "lora_" in k:
            changed_adapters += int("lora_B" in k or "lora_embedding_B" in k) and int(v.abs().sum() > 0)
            continue
        assert torch.equal(v, before[k.replace(".base_layer", "")]), k  # base weight untouched
    assert changed_adapters >= 3  # B starts at zero; after training it is not
    counts = trainable_parameters(tuned)
    assert 0 < counts["trainable"] < counts["total"] // 2
    # the adapters change the model's output
    x, _ = _windows(2)
    assert not torch.allclose(tuned(x), _tiny_gpt()(x))


def _adam_step_sizes(spec: FinetuneSpec, steps: int = 5, lr: float = 1e-3) -> tuple[float, float]:
    """RMS change per step, in units of ``lr``, of the effective input embedding (rows of the tokens seen) and
    of the first block's effective qkv weight, after ``steps`` Adam steps (full fine-tuning for method "full")."""
    import torch.nn.functional as F

    model = GPT(GPTConfig(vocab_size=100, seq_len=32, n_layers=2, n_heads=4, d_model=64, pos="rope"), seed=1)
    x = torch.randint(0, 100, (8, 32), generator=torch.Generator().manual_seed(1))
    with torch.random.fork_rng():  # peft draws the adapters from the global generator: seed it, leave it as it was
        torch.manual_seed(0)
        net = model if spec.method == "full" else add_lora(model, spec)

    def effective():
        with torch.no_grad():
            if spec.method == "full":
                return model.wte.weight.clone(), model.blocks[0].attn.qkv.weight.clone()
            emb, qkv = net.base_model.model.wte, net.base_model.model.blocks[0].attn.qkv
            E = emb.get_base_layer().weight + (emb.lora_embedding_B["default"] @ emb.lora_embedding_A["default"]).T \
                * emb.scaling["default"]
            W = qkv.get_base_layer().weight + qkv.lora_B["default"].weight @ qkv.lora_A["default"].weight \
                * qkv.scaling["default"]
            return E, W

    E0, W0 = effective()
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        logits = net(x)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, 100), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    E1, W1 = effective()
    used = torch.unique(x)
    rms = lambda d: float(d.pow(2).mean().sqrt()) / (lr * steps)  # noqa: E731
    return rms((E1 - E0)[used]), rms(W1 - W0)


def test_the_embedding_adapter_steps_like_the_attention_adapters():
    """peft's embedding adapter (A = 0, B ~ N(0, 1)) at the attention's alpha/rank moved input embeddings ~15x a
    full fine-tuning step per Adam step and erased biography recall; the default embedding_alpha is step-matched."""
    emb, qkv = _adam_step_sizes(FinetuneSpec(rank=16, embedding_rank=128))
    full_emb, full_qkv = _adam_step_sizes(FinetuneSpec(method="full"))
    assert 0.5 < emb / qkv < 2.0
    assert emb < 1.5 * full_emb and qkv < 1.5 * full_qkv
    # the old scaling (alpha_emb / r_emb = alpha / rank = 2, here r_emb = d_model = 64) is the runaway this guards
    hot, _ = _adam_step_sizes(FinetuneSpec(rank=16, embedding_rank=128, embedding_alpha=128.0))
    assert hot > 8 * full_emb


def test_full_finetune_changes_the_base_weights():
    model = _tiny_gpt()
    w0 = model.blocks[0].attn.qkv.weight.detach().clone()
    tuned, _ = finetune(model, _windows(), FinetuneSpec(method="full", lr=1e-2, batch_size=4), seed=0)
    assert tuned is model and not torch.equal(model.blocks[0].attn.qkv.weight, w0)


def test_lora_on_a_hugging_face_model():
    from transformers import GPT2Config, GPT2LMHeadModel

    hf = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2))
    pm = add_lora(hf, FinetuneSpec(rank=2, embedding_rank=4))
    names = [n for n, p in pm.named_parameters() if p.requires_grad]
    assert any("c_attn.lora_A" in n for n in names) and any("wte.lora_embedding_A" in n for n in names)
    assert all("lora_" in n for n in names)


# -- 3. mixed training windows ---------------------------------------------------------------------
def test_mixed_windows_hold_one_kind_with_qa_at_80_percent():
    world = BiosWorld(120, seed=0)
    tr, _ = qa_split(120, 0)
    packed = mixed_stream(world, exposures=3, seed=0, seq_len=256, specs=[(range(120), SINGLE)],
                          qa=qa_docs(world, tr), qa_ratio=0.8)
    frac = token_fractions(packed, world.vocab.pad_id)
    assert frac["mixed_windows"] == 0.0
    assert all(len(set(k)) == 1 for k in packed.kinds)
    assert frac["qa"] == pytest.approx(0.8, abs=0.01) and frac["bio"] == pytest.approx(0.2, abs=0.01)
    # every person still gets its 3 biographies; only P_train people have QA
    assert (packed.exposures(120) == 3).all()
    qa_people = {p for ps, ks in zip(packed.people, packed.kinds) for p, k in zip(ps, ks) if k == "qa"}
    assert qa_people == set(int(i) for i in tr)
    # the old way (QA packed into biography windows) mixes kinds inside windows
    old = bio_stream(world, exposures=3, seed=0, seq_len=256, specs=[(range(120), SINGLE)],
                     extra_docs=qa_docs(world, tr))
    assert token_fractions(old, world.vocab.pad_id)["mixed_windows"] > 0.5


# -- 2. memorisation first ------------------------------------------------------------------------
def test_pretraining_stops_at_the_memorisation_target_and_records_when():
    world = BiosWorld(16, seed=0)
    stream = bio_stream(world, exposures=20, seed=0, seq_len=128, specs=[(range(16), SINGLE)])
    model = _bios_gpt(world, 128)
    calls = iter([0.2, 0.5, 0.93, 0.99, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    res = train_packed(model, stream, PhaseSpec(lr=1e-3, batch_size=2), seed=0, ctx=None, phase="p",
                       recall_fn=lambda m: next(calls), check_every=2, stop_at=0.95)
    assert res["stopped_early"] and res["steps"] == 8 and res["windows_used"] == 16
    assert res["steps_to_gate"] == 6  # first check >= 0.9
    assert [s for s, _ in res["recall_checks"]] == [2, 4, 6, 8]
    # without a stop target the whole budget is trained
    calls2 = iter([0.0] * 100)
    res2 = train_packed(_bios_gpt(world, 128), stream,
                        PhaseSpec(lr=1e-3, batch_size=2), seed=0, ctx=None, phase="p",
                        recall_fn=lambda m: next(calls2), check_every=5, stop_at=None)
    assert not res2["stopped_early"] and res2["steps"] == stream.input_ids.shape[0] // 2
    assert res2["steps_to_gate"] is None


def test_recall_of_an_untrained_model_is_low():
    world = BiosWorld(10, seed=0)
    docs = training_bios(world, range(10), seed=0, spec=SINGLE)
    assert recall_of_docs(_bios_gpt(world, 256), docs, attrs=ATTRS) < 0.1


# -- 6. probes on the training biographies --------------------------------------------------------
def test_p_probe_reads_the_biographies_given():
    from lmsci.experiments.knowledge.common import first_value_words
    from lmsci.measure.probes import p_probe
    from lmsci.worlds.bios import ATTRS

    world = BiosWorld(40, seed=0)
    tr, te = qa_split(40, 0)
    bios = {int(b.person): b for b in training_bios(world, range(40), seed=0, spec=SINGLE)}
    asked = []

    def get(i):
        asked.append(i)
        return bios[i]

    model = _bios_gpt(world, 256)
    out = p_probe(model, world, tr, te, seed=0, attrs=ATTRS[:1], value_words=first_value_words(world), bios=get)
    assert sorted(asked) == sorted(int(i) for i in np.concatenate([tr, te]))
    assert 0.0 <= out["birth_date"]["test_acc"] <= 1.0


# -- verdicts of the registered claims -------------------------------------------------------------
SEEDS = (0, 1, 2)
JIT = {0: -0.01, 1: 0.0, 2: 0.01}


def _verdicts(name, rows, tmp_path):
    exp = registry.get(name)()
    cfg = resolve_config(exp.Config, "gpu", [])  # the claims are decided at gpu and paper (issue 29)
    return {v.claim_id: v for v in exp.verdicts(cfg, pd.DataFrame(rows), RunDir(tmp_path))}


def _ke_rows(acc, recall=0.99, qa_train=1.0):
    rows = []
    for (d, r), a in acc.items():
        for s in SEEDS:
            rows.append({"arm": "real", "point": f"{d}_{r}" + (f"__s{s}" if s else ""), "data": d, "regime": r,
                         "condition": f"{d}_{r}", "qa_test": min(1.0, max(0.0, a + JIT[s])), "qa_train": qa_train,
                         "bio_recall_test": recall, "n_qa_test": 300 * 6, "seed_index": s, "status": "ok"})
    for s in SEEDS:  # the null arm: a second single pretrain_ft model at another seed
        rows.append({"arm": "null", "point": "null-single_pretrain_ft" + (f"__s{s}" if s else ""), "data": "single",
                     "regime": "pretrain_ft", "condition": "single_pretrain_ft_second",
                     "qa_test": acc["single", "pretrain_ft"] + 0.02, "seed_index": s, "status": "ok"})
    return rows


PAPER = {("single", "pretrain_ft"): 0.097, ("augmented", "pretrain_ft"): 0.962, ("single", "mixed"): 0.866}


@pytest.mark.parametrize("acc, kw, outcome, reason", [
    (PAPER, {}, REPRODUCED, None),
    ({**PAPER, ("augmented", "pretrain_ft"): 0.30, ("single", "mixed"): 0.2}, {}, NOT_REPRODUCED, None),
    (PAPER, {"recall": 0.6}, INCONCLUSIVE, "memorised"),
    # the fine-tune never learned the QA: a low augmented accuracy says nothing about extraction
    ({**PAPER, ("augmented", "pretrain_ft"): 0.1}, {"qa_train": 0.2}, INCONCLUSIVE, "qa-learned"),
])
def test_knowledge_extraction_verdicts(acc, kw, outcome, reason, tmp_path):
    vs = _verdicts("knowledge-extraction", _ke_rows(acc, **kw), tmp_path)
    for cid in ("pretrain-ft-augmentation", "mixed-vs-pretrain-ft"):
        assert vs[cid].outcome == outcome, (cid, vs[cid].reasons)
        if reason:
            assert any(reason in r for r in vs[cid].reasons)
    assert vs["pretrain-ft-augmentation"].value == pytest.approx(acc["augmented", "pretrain_ft"] - acc["single", "pretrain_ft"])


def _celeb_rows(single, celeb, recall=0.99, qa_cel=1.0):
    rows = []
    for aug, a in ((False, single), (True, celeb)):
        for s in SEEDS:
            rows.append({"arm": "real",
                         "point": ("celebrities_augmented" if aug else "baseline_all_single") + (f"__s{s}" if s else ""),
                         "celebrities_augmented": aug, "condition": "celebrities_augmented" if aug else "all_single",
                         "qa_minority": min(1.0, max(0.0, a + JIT[s])),
                         "qa_celebrity": qa_cel, "bio_recall_minority": recall, "n_qa_minority": 1800,
                         "seed_index": s, "status": "ok"})
    for s in SEEDS:  # the null arm: a second all-single model at another seed
        rows.append({"arm": "null", "point": "null-baseline_all_single" + (f"__s{s}" if s else ""),
                     "celebrities_augmented": False, "condition": "all_single_second", "qa_minority": single + 0.02,
                     "seed_index": s, "status": "ok"})
    return rows


@pytest.mark.parametrize("single, celeb, kw, outcome, reason", [
    (0.044, 0.868, {}, REPRODUCED, None),
    (0.05, 0.20, {}, NOT_REPRODUCED, None),
    (0.044, 0.868, {"recall": 0.7}, INCONCLUSIVE, "memorised"),
    (0.05, 0.10, {"qa_cel": 0.3}, INCONCLUSIVE, "qa-learned"),
])
def test_celebrity_verdicts(single, celeb, kw, outcome, reason, tmp_path):
    v = _verdicts("celebrity-helps-minority", _celeb_rows(single, celeb, **kw), tmp_path)["minority-lift"]
    assert v.outcome == outcome, v.reasons
    if reason:
        assert any(reason in r for r in v.reasons)
    if reason == "memorised":
        assert "gpu preset" in v.note  # the verdict says what scale would settle it


def test_presets_use_lora_and_the_gpu_preset_is_the_issue_scale():
    for name in ("knowledge-extraction", "celebrity-helps-minority"):
        exp = registry.get(name)()
        for preset in ("quick", "gpu", "paper"):
            cfg = resolve_config(exp.Config, preset, [])
            assert cfg.finetune.method == "lora"
        gpu = resolve_config(exp.Config, "gpu", [])
        # session 52, within the 10 minutes of one H100: N = 2k for celebrity (10k was ~40.5 min), 1.2k for
        # extraction (5k was ~31 min)
        n_people = 2_000 if name == "celebrity-helps-minority" else 1_200
        assert gpu.n_people == n_people and gpu.model.d_model == 256 and gpu.model.n_layers == 4
        assert gpu.pretrain.batch_size == 24 and gpu.seq_len == 512 and gpu.pretrain.lr == 1e-3
        assert gpu.finetune.weight_decay == 0.01 and gpu.finetune.embedding_rank == 128
        paper = resolve_config(exp.Config, "paper", [])
        assert paper.finetune.lr == 3e-4 and paper.n_people >= 100_000 and paper.model.d_model == 768


def test_streaming_pipeline_trains_mixed_windows_and_counts_exposures():
    """The gpu/paper presets' pipeline (lmsci.worlds.bios_stream) through the same training function."""
    from lmsci.experiments.knowledge._bios_streams import exposures_of, pretraining_data
    from lmsci.experiments.knowledge.common import recall_checker

    world = BiosWorld(30, seed=0)
    tr, te = qa_split(30, 0)
    stream, bios_fn = pretraining_data(world, pipeline="stream", exposures=4, seed=0, seq_len=256, batch_size=4,
                                       specs=[(range(30), SINGLE)], order_seed=1, qa=tr, qa_ratio=0.8)
    model = _bios_gpt(world, 256)
    check = recall_checker(world, te, seed=0, spec=SINGLE, n=5, bios_fn=bios_fn)
    res = train_packed(model, stream, PhaseSpec(lr=1e-3, batch_size=4), seed=0, ctx=None, phase="p",
                       recall_fn=check, check_every=3)
    assert res["steps"] == res["steps_budget"] and len(res["recall_checks"]) >= 2
    assert token_fractions(stream)["qa"] == pytest.approx(0.8, abs=0.05)
    assert 3.0 <= exposures_of(stream, 30, res["windows_used"]) <= 4.0
    docs = bios_fn(te[:3])
    assert [d.person for d in docs] == [int(i) for i in te[:3]] and all("birth_date" in d.spans for d in docs)


@pytest.mark.parametrize("name,base,params", [
    ("knowledge-extraction", "single_pretrain_ft", {"data": "single", "regime": "pretrain_ft"}),
    ("celebrity-helps-minority", "baseline_all_single", {"celebrities": False}),
    ("reversal-curse", "forward_only", {"reverse": False}),
])
def test_null_is_a_second_control_model_at_its_own_seed(name, base, params):
    """Issue 44 item 4: the null arm is the control condition again (same params), at a seed of its own: the
    single pretrain_ft model (knowledge-extraction), the all-single model (celebrity), the forward-only model
    (reversal-curse)."""
    exp = registry.get(name)()
    cfg = resolve_config(exp.Config, "gpu", [])
    pts = {p.id: p for p in exp.seeded_points(cfg)}
    for k in range(cfg.n_seeds):
        sfx = f"__s{k}" if k else ""
        real, null = pts[f"{base}{sfx}"], pts[f"null-{base}{sfx}"]
        assert null.arm == "null" and null.params == real.params == params
        assert null.seed_index == real.seed_index == k  # paired by seed in the statistic
        # the real seed is what it always was; the null's is its own
        assert exp.point_seed(cfg, real) == derive_seed(cfg.seed, exp.name, real.id)
        assert exp.point_seed(cfg, null) not in {exp.point_seed(cfg, p) for p in pts.values() if p.arm == "real"}
