"""The streaming bioS pipeline (lmsci.worlds.bios_stream): rendering is the reference rendering,
streams are deterministic, exposures exact, windows full and clean, memory flat in N."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from lmsci.errors import ConfigError
from lmsci.worlds.bios import ATTRS, BiosWorld
from lmsci.worlds.bios_render import INVERSE, KIND_BIO, BiosRenderer
from lmsci.worlds.bios_stream import BioStream, MixedStream, QAStream
from lmsci.worlds.counter_rng import feistel_permutation


@pytest.fixture(scope="module")
def world():
    return BiosWorld(300, seed=3)


def _docs_of_window(ids, bos, eos):
    """Token lists of the documents in one window (split at <bos> ... <eos>)."""
    out, cur = [], None
    for t in ids:
        if t == bos:
            cur = [t]
        elif cur is not None:
            cur.append(t)
            if t == eos:
                out.append(cur)
                cur = None
    return out


def _all(stream):
    return [(b.input_ids.numpy().copy(), b.targets.numpy().copy(), b) for b in stream]


@pytest.mark.parametrize("permute,fullname,reverse", [(False, False, False), (True, False, True), (True, True, False)])
def test_render_is_token_identical_to_the_reference_renderer(world, permute, fullname, reverse):
    r = BiosRenderer(world)
    people, copies = np.arange(40), np.arange(40) % 3
    docs = r.to_doc_list(r.bios(people, copies, 5, permute=permute, fullname=fullname, reverse=reverse))
    tmpl, order, rev = r.choices(people, copies, 5, permute)
    for k, d in enumerate(docs):
        ref = world.bio(int(people[k]), templates=list(tmpl[k]), order=list(order[k]), fullname=fullname,
                        reverse=reverse, reverse_template=int(rev[k]))
        assert d.ids == ref.ids and d.spans == ref.spans and d.loss_mask == ref.loss_mask
    if not permute:
        assert (order == np.arange(6)).all()
    qa = r.qa(np.repeat(people[:5], 7), np.tile(np.arange(7), 5))
    for d, i, it in zip(r.to_doc_list(qa), qa.person, qa.copy):
        ref = world.inverse_qa(int(i)) if it == INVERSE else world.qa(int(i), ATTRS[int(it)])
        assert (d.ids, d.loss_mask, d.spans, d.kind) == (ref.ids, ref.loss_mask, ref.spans, ref.kind)


def test_choices_are_uniform_over_templates_and_orders(world):
    r = BiosRenderer(world)
    n = 20000
    tmpl, order, _ = r.choices(np.arange(n) % 300, np.arange(n) // 300, 1, True)
    counts = np.bincount(tmpl[:, 0], minlength=25)
    assert counts.min() > 0.8 * n / 25 and counts.max() < 1.2 * n / 25
    first = np.bincount(order[:, 0], minlength=6)
    assert first.min() > 0.9 * n / 6 and first.max() < 1.1 * n / 6
    assert (np.sort(order, axis=1) == np.arange(6)).all()


def test_feistel_is_a_permutation():
    for n in (1, 2, 7, 1000, 1025):
        p = feistel_permutation(np.arange(n), n, key=12345)
        assert sorted(p.tolist()) == list(range(n))
    a, b = feistel_permutation(np.arange(1000), 1000, 1), feistel_permutation(np.arange(1000), 1000, 2)
    assert (a != b).mean() > 0.9


def test_same_seed_same_stream_other_seed_other_stream_and_chunk_invariant(world):
    kw = dict(seq_len=256, batch_size=8, exposures=2, multiplicity=2, permute=True)
    a = _all(BioStream(world, seed=1, **kw))
    b = _all(BioStream(world, seed=1, chunk=37, **kw))
    c = _all(BioStream(world, seed=2, **kw))
    d = _all(BioStream(world, seed=1, order_seed=9, **kw))
    assert len(a) == len(b) and all((x[0] == y[0]).all() and (x[1] == y[1]).all() for x, y in zip(a, b))
    assert not all(x[0].shape == y[0].shape and (x[0] == y[0]).all() for x, y in zip(a, c))
    # another order seed: other windows, but the same biographies (person, copy) -> same tokens
    assert not (a[0][0] == d[0][0]).all()


@pytest.mark.parametrize("fresh,mult", [(False, 1), (False, 3), (True, 1)])
def test_exposures_exact_and_copies_cycle(world, fresh, mult):
    s = BioStream(world, seq_len=256, batch_size=7, exposures=5, seed=0, multiplicity=mult, fresh=fresh,
                  permute=True)
    seen: dict[int, list[int]] = {}
    n_windows = 0
    for b in s:
        n_windows += b.input_ids.shape[0]
        for p, c in zip(b.doc_person, b.doc_copy):
            seen.setdefault(int(p), []).append(int(c))
    assert (s.exposures == 5).all() and len(seen) == world.n
    for cs in seen.values():
        assert sorted(cs) == (list(range(5)) if fresh else sorted(k % mult for k in range(5)))
    assert s.count_windows() == n_windows


def test_groups_with_their_own_specs(world):
    class Spec:
        def __init__(self, multiplicity, permute, fullname):
            self.multiplicity, self.permute, self.fullname = multiplicity, permute, fullname

    celeb, minority = np.arange(0, 100), np.arange(100, 160)
    s = BioStream(world, seq_len=256, batch_size=4, exposures=4, seed=0,
                  people=[(celeb, Spec(4, True, True)), (minority, Spec(1, False, False))])
    copies: dict[int, set] = {}
    for b in s:
        for p, c in zip(b.doc_person, b.doc_copy):
            copies.setdefault(int(p), set()).add(int(c))
    assert (s.exposures[:160] == 4).all() and (s.exposures[160:] == 0).all()
    assert all(copies[int(i)] == {0, 1, 2, 3} for i in celeb) and all(copies[int(i)] == {0} for i in minority)
    name = world.full_name(5)  # a celebrity's biography uses the full name in every sentence
    doc = s.training_bios([5])[0]
    assert world.vocab.decode(doc.ids).count(name) == 6


def test_windows_full_targets_shifted_no_person_twice(world):
    s = BioStream(world, seq_len=200, batch_size=6, exposures=3, seed=4, multiplicity=3, permute=True)
    v = world.vocab
    for b in s:
        x, y = b.input_ids.numpy(), b.targets.numpy()
        assert x.shape[1] == 200 and y.shape == x.shape
        m = y != -100
        assert (y[:, :-1][m[:, :-1]] == x[:, 1:][m[:, :-1]]).all()
        assert not m[x == v.pad_id].any() and not m[x == v.eos_id].any()
        assert (b.ntok == (x != v.pad_id).sum(1)).all()
        for w in range(x.shape[0]):
            ppl = b.doc_person[b.doc_window == w]
            assert len(set(ppl.tolist())) == len(ppl) > 0


def test_every_biography_decodes_to_the_ground_truth(world):
    s = BioStream(world, seq_len=256, batch_size=8, exposures=2, seed=7, permute=True, fresh=True)
    v = world.vocab
    n = 0
    for b in s:
        x = b.input_ids.numpy()
        for w in range(x.shape[0]):
            docs = _docs_of_window(x[w].tolist(), v.bos_id, v.eos_id)
            ppl = b.doc_person[b.doc_window == w]
            assert len(docs) == len(ppl)
            for ids, i in zip(docs, ppl):
                text = v.decode(ids)
                assert text.startswith("<bos> ") and text.endswith(" <eos>") and text.count(" . ") == 6
                assert world.full_name(int(i)) in text
                for a in ATTRS:
                    assert f" {world.value_text(int(i), a)} " in text, (a, text)
                pron = "He" if i % 2 == 0 else "She"
                assert text.count(f". {pron} ") == 5
                n += 1
    assert n == 2 * world.n


def test_fresh_renders_differ_across_exposures_single_does_not(world):
    def forms(fresh):
        s = BioStream(world, seq_len=256, batch_size=8, exposures=4, seed=1, permute=True, fresh=fresh)
        out: dict[int, set] = {}
        v = world.vocab
        for b in s:
            x = b.input_ids.numpy()
            for w in range(x.shape[0]):
                for ids, i in zip(_docs_of_window(x[w].tolist(), v.bos_id, v.eos_id), b.doc_person[b.doc_window == w]):
                    out.setdefault(int(i), set()).add(tuple(ids))
        return out

    fresh, single = forms(True), forms(False)
    assert all(len(f) == 1 for f in single.values())
    assert np.mean([len(f) == 4 for f in fresh.values()]) > 0.99


def test_training_bios_are_the_trained_ones(world):
    s = BioStream(world, seq_len=256, batch_size=8, exposures=1, seed=11, multiplicity=2, permute=True)
    got = {}
    v = world.vocab
    for b in s:
        x = b.input_ids.numpy()
        for w in range(x.shape[0]):
            for ids, i in zip(_docs_of_window(x[w].tolist(), v.bos_id, v.eos_id), b.doc_person[b.doc_window == w]):
                got[int(i)] = ids
    ref = s.training_bios(np.arange(20), copy=0)
    assert all(d.ids == got[i] for i, d in enumerate(ref))


def test_qa_stream_epochs_and_mixed_stream_fraction(world):
    qa = QAStream(world, np.arange(0, 300, 2), seq_len=256, batch_size=8, epochs=2, inverse=True, order_seed=3)
    items = {}
    for b in qa:
        assert b.is_qa.all()
        for p, c in zip(b.doc_person, b.doc_copy):
            items[(int(p), int(c))] = items.get((int(p), int(c)), 0) + 1
    assert len(items) == 150 * 7 and set(items.values()) == {2}
    assert (qa.qa_exposures[::2] == 14).all() and (qa.qa_exposures[1::2] == 0).all()

    bio = BioStream(world, seq_len=256, batch_size=8, exposures=10, seed=0, permute=True, fresh=True)
    q = QAStream(world, np.arange(150), seq_len=256, batch_size=8, order_seed=1)
    for r in (0.8, 0.5):
        mix = MixedStream(bio, q, qa_fraction=r, batch_size=8)
        n_qa = n_bio = 0
        for b in mix:
            for w in range(b.input_ids.shape[0]):
                kinds = set(b.doc_kind[b.doc_window == w].tolist())
                assert kinds == ({KIND_BIO} if not b.is_qa[w] else {1})  # windows are pure
            n_qa += int(b.is_qa.sum())
            n_bio += int((~b.is_qa).sum())
        assert abs(mix.qa_token_fraction - r) < 0.01
        assert (mix.exposures == 10).all()  # the stream ends when the biographies do
        assert 0 < n_bio < n_qa + n_bio


def test_memory_is_independent_of_n():
    def peak(n):
        w = BiosWorld(n, seed=0)
        s = BioStream(w, seq_len=512, batch_size=16, exposures=10, seed=0, permute=True, count_exposures=False,
                      chunk=1024)
        it = iter(s)
        next(it)  # warm up (imports, compiled kernels)
        tracemalloc.start()
        for _ in range(60):
            next(it)
        p = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return p

    small, large = peak(2_000), peak(200_000)
    assert large < 1.5 * small + 200_000


def test_bad_configs_raise(world):
    with pytest.raises(ConfigError):
        BioStream(world, seq_len=40, batch_size=2, exposures=1, seed=0)
    with pytest.raises(ConfigError):
        BioStream(world, seq_len=256, batch_size=2, exposures=0, seed=0)
    bio = BioStream(world, seq_len=256, batch_size=2, exposures=1, seed=0)
    with pytest.raises(ConfigError):
        MixedStream(bio, QAStream(world, [1, 2], seq_len=128, batch_size=2), qa_fraction=0.8)
    with pytest.raises(ConfigError):
        MixedStream(bio, QAStream(world, [1, 2], seq_len=256, batch_size=2), qa_fraction=1.0)


def test_to_packed_and_get_batch_fn(world):
    kw = dict(seq_len=256, batch_size=4, exposures=2, seed=0, permute=True)
    packed = BioStream(world, **kw).to_packed()
    assert (packed.exposures(world.n) == 2).all() and packed.input_ids.shape[1] == 256
    s = BioStream(world, **kw)
    gb = s.get_batch_fn()
    n = s.count_windows() // 4
    for step in range(n):
        x, y = gb(step, None)
        assert (x.numpy() == packed.input_ids[4 * step:4 * step + 4].numpy()).all()
    if s.count_windows() % 4:
        gb(n, None)  # the last, partial batch
    with pytest.raises(RuntimeError, match="stream ended"):
        gb(n + 1, None)
    again = s.get_batch_fn(cycle=True)
    first = again(0)[0]
    for step in range(1, -(-s.count_windows() // 4) + 1):  # one past the last batch: the first again
        x, _ = again(step)
    assert (x.numpy() == first.numpy()).all()


def test_iter_from_resumes_exactly(world):
    class Spec:
        multiplicity, permute, fullname = 3, True, True

    def streams():
        bio = BioStream(world, seq_len=256, batch_size=5, exposures=3, seed=2, order_seed=4, chunk=50,
                        people=[(np.arange(0, 60), Spec()), (np.arange(60, 300), Spec())])
        fresh = BioStream(world, seq_len=256, batch_size=5, exposures=3, seed=2, permute=True, fresh=True, chunk=64)
        qa = QAStream(world, np.arange(100), seq_len=256, batch_size=5, epochs=2, inverse=True, chunk=70)
        mix = MixedStream(BioStream(world, seq_len=256, batch_size=5, exposures=2, seed=0, chunk=64),
                          QAStream(world, np.arange(150), seq_len=256, batch_size=5, chunk=64), qa_fraction=0.8)
        return [bio, fresh, qa, mix]

    for full, part in zip(streams(), streams()):
        ref = _all(full)
        for k in (1, 7, len(ref) - 1):
            got = [(b.input_ids.numpy(), b.targets.numpy(), b) for b in part.iter_from(k)]
            assert len(got) == len(ref) - k
            for (x, y, b), (rx, ry, rb) in zip(got, ref[k:]):
                assert (x == rx).all() and (y == ry).all() and (b.doc_person == rb.doc_person).all()
            assert (part.exposures == full.exposures).all() and (part.qa_exposures == full.qa_exposures).all()
    s = streams()[0]
    gb = s.get_batch_fn()
    x, _ = gb(4)  # a run resumed at step 4 gets batch 4
    assert (x.numpy() == _all(streams()[0])[4][0]).all()


def test_people_must_be_listed(world):
    with pytest.raises(ConfigError):
        BioStream(world, seq_len=256, batch_size=2, exposures=1, seed=0, people=[])
    with pytest.raises(ConfigError):
        BioStream(world, seq_len=256, batch_size=2, exposures=1, seed=0, people=[world.n])
    s = BioStream(world, seq_len=256, batch_size=2, exposures=1, seed=0, people=range(10))
    assert sum(len(b.doc_person) for b in s) == 10 and (s.exposures[:10] == 1).all()
