"""lmsci.worlds.bios_stream.DocStream: fixed documents (forward and reversed biographies) shuffled every pass and
packed on the fly, as reversal-curse's gpu preset trains on them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.worlds.bios import BiosWorld
from lmsci.worlds.bios_datasets import bio_docs, pack
from lmsci.worlds.bios_render import docs_of
from lmsci.worlds.bios_stream import DocStream


def _docs(n=16):
    w = BiosWorld(n, seed=0)
    fwd = bio_docs(w, range(n), multiplicity=2, permute=True, fullname=True, seed=0)
    rev = [w.bio_reversed(i, np.random.default_rng([0, 19, i]), groups=2) for i in range(n)]
    return w, fwd + rev


def _all(stream):
    return list(stream)


def test_every_document_is_seen_once_per_pass_with_no_person_twice_in_a_window():
    w, docs = _docs()
    st = DocStream(w, docs, seq_len=256, batch_size=3, epochs=4, order_seed=5)
    batches = _all(st)
    n_docs = sum(len(b.doc_person) for b in batches)
    assert n_docs == 4 * len(docs)
    assert (st.exposures == 4 * 2).all() and (st.reverse_exposures == 4).all() and (st.qa_exposures == 0).all()
    for b in batches:
        for r in range(b.input_ids.shape[0]):
            ppl = b.doc_person[b.doc_window == r]
            assert len(set(ppl.tolist())) == len(ppl)  # the pitfall of Part 3.1 (physics_of_lms.md 3.5)
        assert not b.is_qa.any()  # reversed biographies are biographies, not QA windows
    # the tokens of each window are the documents' own tokens, as pack() lays them out
    b = batches[0]
    ids = b.input_ids[0].tolist()
    pos = 0
    for c in b.doc_copy[b.doc_window == 0]:
        d = docs[int(c)]
        assert ids[pos:pos + len(d.ids)] == d.ids
        pos += len(d.ids)
    assert st.count_windows() == sum(x.input_ids.shape[0] for x in batches)


def test_passes_are_shuffled_and_the_targets_follow_the_loss_mask():
    w, docs = _docs()
    st = DocStream(w, docs, seq_len=256, batch_size=2, epochs=2, order_seed=1)
    order = np.concatenate([b.doc_copy for b in st])
    n = len(docs)
    assert sorted(order[:n].tolist()) != order[:n].tolist()  # not the list order
    assert not np.array_equal(order[:n], order[n:2 * n])  # each pass its own order
    ref = pack(docs, 256, seed=0, shuffle=False)  # one document per row would differ; compare per document
    b = next(iter(st))
    x, y = b.input_ids[0], b.targets[0]
    first = docs[int(b.doc_copy[0])]
    n0 = len(first.ids)
    assert torch.equal(y[:n0 - 1], x[1:n0])  # biography: loss on every token after <bos>
    assert ref.input_ids.shape[1] == 256


def test_resume_from_a_batch_gives_the_same_batches():
    w, docs = _docs()
    full = [b.input_ids for b in DocStream(w, docs, seq_len=256, batch_size=2, epochs=3, order_seed=2)]
    st = DocStream(w, docs, seq_len=256, batch_size=2, epochs=3, order_seed=2, chunk=7)
    get = st.get_batch_fn()
    assert torch.equal(get(5)[0], full[5]) and torch.equal(get(6)[0], full[6])
    assert st.reverse_exposures.sum() + st.exposures.sum() >= 1  # skipped windows are counted


def test_bad_documents_are_refused():
    w, docs = _docs(4)
    with pytest.raises(ConfigError):
        DocStream(w, docs, seq_len=16, batch_size=1, epochs=1)
    with pytest.raises(ConfigError):
        DocStream(w, [], seq_len=256, batch_size=1, epochs=1)
    d = docs[0]
    bad = type(d)(d.ids, [1, 0] + [1] * (len(d.ids) - 2), d.person, d.spans, d.kind)
    with pytest.raises(ValueError):
        docs_of([bad])
