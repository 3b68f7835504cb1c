"""Part 3.2 Section 5's reversed data (arXiv 2309.14402), lmsci's reverse1 / reverse2 / reverse6: the name comes
after the attributes, in every rendering the reversal-curse experiment trains on (the Python renderer of the quick
preset and the vectorised one of the gpu / paper presets), and the evaluation prompts hold no name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmsci.config import resolve_config
from lmsci.experiments.knowledge.reversal_curse import ReversalCurseConfig, reversed_docs, streamed_pretraining
from lmsci.worlds.bios import ATTRS, BiosWorld
from lmsci.worlds.bios_datasets import qa_split
from lmsci.worlds.bios_render import BiosRenderer
from lmsci.worlds.bios_templates import REVERSE_FRAGMENTS, REVERSE_HELD_OUT

N = 24


def _contains(seq, sub):
    return any(seq[k:k + len(sub)] == sub for k in range(len(seq) - len(sub) + 1))


def _check_reversed(w: BiosWorld, d, groups: int) -> None:
    """The name after the attributes: ``groups`` sentences of 6/groups attributes each, every attribute value
    before the name of its sentence, and no occurrence of the name before the first one (nothing to copy)."""
    name = w.vocab.encode(w.name_words(d.person))
    names = d.spans["name"]
    assert d.kind == "bio_reverse" and len(names) == groups
    for s, e in names:
        assert d.ids[s:e] == name
    assert not _contains(d.ids[:names[0][0]], name)
    starts = [0] + [e for _, e in names]
    per_sentence = [0] * groups
    for a in ATTRS:
        (s, e), = d.spans[a]
        assert d.ids[s:e] == w.vocab.encode(w.value_words(d.person, a))
        k = next(j for j in range(groups) if starts[j] <= s < starts[j + 1])
        assert e <= names[k][0]  # the value precedes its sentence's name
        per_sentence[k] += 1
    assert per_sentence == [len(ATTRS) // groups] * groups


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_reverse_variant_puts_the_name_after_the_attributes_in_every_training_rendering(groups):
    w = BiosWorld(N, seed=0)
    # the quick preset's Python renderings (reversed_docs) ...
    for d in reversed_docs(w, range(N), seed=0, groups=groups, multiplicity=2):
        _check_reversed(w, d, groups)
    # ... and the gpu / paper presets' vectorised ones, exactly as the stream trains on them
    cfg = resolve_config(ReversalCurseConfig, "smoke", {"n_people": N, "reverse_groups": groups,
                                                         "reverse_multiplicity": 2, "seq_len": 256})
    stream, _, rev_fn = streamed_pretraining(w, cfg, True, order_seed=1)
    first = rev_fn(np.arange(N))
    for d in first:
        _check_reversed(w, d, groups)
    trained = {tuple(stream.docs.tok[o:o + n].tolist())
               for o, n, k in zip(stream.docs.off, stream.docs.length, stream.docs.kind) if k == 3}
    assert {tuple(d.ids) for d in first} <= trained  # the recall gate reads the biographies trained on
    text = w.vocab.decode(first[0].ids)
    assert text.split()[1] in ("The", "A") and text.rstrip(" <eos>").endswith(".")


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_reverse_variant_is_evaluated_from_prompts_that_hold_no_name(groups):
    w = BiosWorld(N, seed=0)
    cfg = resolve_config(ReversalCurseConfig, "smoke", {"n_people": N, "reverse_groups": groups})
    _, te = qa_split(cfg.n_people, cfg.seed)
    training = {tuple(d.ids[:-9]) for d in reversed_docs(w, range(N), seed=0, groups=groups, multiplicity=20)}
    held_out = set(REVERSE_HELD_OUT[a] for a in ATTRS)
    assert not held_out & {f for a in ATTRS for f in REVERSE_FRAGMENTS[a]}  # a template never trained on
    for i in te:
        name = w.vocab.encode(w.name_words(int(i)))
        p = w.reverse_prompt(int(i))  # the completion test (Berglund et al.) on the pretrained model
        (s, e), = p.spans["answer"]
        assert p.ids[s:e] == name and not _contains(p.ids[:s], name)
        assert all(p.spans[a][0][1] <= s for a in ATTRS)  # every attribute is in the prompt, before the answer
        assert tuple(p.ids[:-9]) not in training
        q = w.inverse_qa(int(i))  # inverse search after QA fine-tuning (Part 3.2)
        (s, e), = q.spans["answer"]
        assert q.ids[s:e] == name and not _contains(q.ids[:s], name)


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_vectorised_reversed_biographies_match_the_reference_renderer(groups):
    w = BiosWorld(N, seed=0)
    r = BiosRenderer(w)
    ppl = np.arange(N)
    got = r.to_doc_list(r.bios_reversed(ppl, 2, seed=7, groups=groups))
    order, frag, opener, name = r.reversed_choices(ppl, 2, 7, groups)
    for i in range(N):
        ref = w.bio_reversed(i, groups=groups, order=order[i], fragments=frag[i], openers=opener[i],
                             name_clauses=name[i])
        assert got[i].ids == ref.ids and got[i].spans == ref.spans and got[i].loss_mask == ref.loss_mask
    assert len({tuple(d.ids) for d in r.to_doc_list(r.bios_reversed(np.zeros(30, np.int64), np.arange(30), 7,
                                                                       groups=groups))}) > 20  # copies differ
    # the uniform order: every attribute comes first for some copy
    firsts = {tuple(o)[0] for o in r.reversed_choices(np.zeros(200, np.int64), np.arange(200), 7, groups)[0]}
    assert firsts == set(range(len(ATTRS)))


def test_streamed_reversal_data_counts_every_exposure():
    w = BiosWorld(N, seed=0)
    cfg = resolve_config(ReversalCurseConfig, "smoke", {"n_people": N, "exposures": 10, "reverse_multiplicity": 3,
                                                         "seq_len": 256})
    stream, fwd_fn, _ = streamed_pretraining(w, cfg, True, order_seed=2)
    for b in stream:
        assert isinstance(b.input_ids, torch.Tensor)
    assert (stream.exposures == 10).all()  # ceil(10 / 5) passes x multi5
    assert (stream.reverse_exposures == 2 * 3).all()
    assert all(d.kind == "bio" and len(d.spans["name"]) == len(ATTRS) for d in fwd_fn([0, 1]))  # fullname
