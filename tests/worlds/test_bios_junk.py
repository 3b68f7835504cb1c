"""Junk biographies in the bioS stream and the domain-token remedy (Physics of LMs Part 3.3, arXiv 2404.05405)."""

from collections import Counter

import numpy as np
import pytest
from pydantic import ValidationError

from lmsci.errors import ConfigError
from lmsci.measure.knowledge import insert_after_bos
from lmsci.worlds.bios import BiosWorld
from lmsci.worlds.bios_junk import JunkBioStream, JunkSpec, junk_stream, name_index
from lmsci.worlds.bios_stream import BioStream

N, E = 40, 3
KW = dict(seq_len=256, batch_size=4, exposures=E, seed=5, permute=True, fresh=True, order_seed=2)


@pytest.fixture(scope="module")
def world():
    return BiosWorld(N, seed=0)


def _docs(stream):
    """Every document of the stream as (person, copy, token tuple), read back from the batches: each window's
    non-pad tokens split at <bos>."""
    out = []
    for b in stream:
        x = b.input_ids.numpy()
        for w in range(x.shape[0]):
            row = x[w][: int(b.ntok[w])]
            starts = list(np.flatnonzero(row == 1)) + [len(row)]
            sel = b.doc_window == w
            people, copies = b.doc_person[sel], b.doc_copy[sel]
            assert len(starts) - 1 == len(people)
            assert len(set(people.tolist())) == len(people)  # no person twice in a window
            for k in range(len(people)):
                out.append((int(people[k]), int(copies[k]), tuple(row[starts[k]:starts[k + 1]].tolist())))
    return out


@pytest.mark.parametrize("share,domain", [(0.5, False), (0.875, True)])
def test_junk_share_in_tokens_and_domain_token(world, share, domain):
    s = JunkBioStream(world, junk=JunkSpec(share=share, domain_token=domain), **KW)
    docs = _docs(s)
    junk_tok = sum(len(t) for p, _, t in docs if p >= N)
    all_tok = sum(len(t) for _, _, t in docs)
    assert abs(junk_tok / all_tok - share) < 0.02
    assert s.junk_token_fraction == pytest.approx(junk_tok / all_tok)
    assert s.junk_tokens_yielded == junk_tok and s.tokens_yielded == all_tok
    assert (s.exposures == E).all() and (s.junk_exposures == 1).all() and s.n_junk > N
    dom = len(world.vocab)
    assert s.vocab_size == dom + int(domain) and s.eval_prefix() == ([dom] if domain else [])
    for p, _, t in docs:
        assert (t[1] == dom) == (domain and p < N)  # the domain token only on useful biographies ...
        assert dom not in t[2:]  # ... and only right after <bos>


def test_useful_biographies_are_those_of_the_plain_stream(world):
    plain = {(p, c): t for p, c, t in _docs(BioStream(world, **KW))}
    for domain in (False, True):
        s = JunkBioStream(world, junk=JunkSpec(share=0.75, exposures=2, domain_token=domain), **KW)
        docs = _docs(s)
        useful = {(p, c): (t[:1] + t[2:] if domain else t) for p, c, t in docs if p < N}
        assert useful == plain
        assert Counter(p for p, _, _ in docs if p >= N) == Counter({N + j: 2 for j in range(s.n_junk)})
    assert not np.isin(name_index(s.junk_world)[s._junk_ids], name_index(world)).any()  # no shared names


def test_resume_mid_stream_gives_the_same_batches(world):
    s = JunkBioStream(world, junk=JunkSpec(share=0.8, domain_token=True), **KW)
    full = [b.input_ids.clone() for b in s]
    k = len(full) // 2
    rest = [b.input_ids for b in s.iter_from(k)]
    assert len(rest) == len(full) - k and all((a == b).all() for a, b in zip(full[k:], rest))


def test_spec_validation_and_the_plain_case(world):
    with pytest.raises(ConfigError, match="JunkSpec"):
        JunkBioStream(world, junk={"share": 0.5}, **KW)
    with pytest.raises(ValidationError):
        JunkSpec(share=1.0)
    assert type(junk_stream(world, None, **KW)) is BioStream
    assert type(junk_stream(world, JunkSpec(), **KW)) is BioStream
    assert type(junk_stream(world, JunkSpec(domain_token=True), **KW)) is JunkBioStream
    with pytest.raises(ConfigError, match="junk"):
        JunkBioStream(world, junk=JunkSpec(share=0.999), **{**KW, "exposures": 10 ** 6})


def test_eval_prefix_goes_after_bos(world):
    d = world.bio(3, np.random.default_rng(0))
    before = {k: [d.ids[a:b] for a, b in v] for k, v in d.spans.items()}
    insert_after_bos([d], [999])
    assert d.ids[0] == 1 and d.ids[1] == 999 and len(d.ids) == len(d.loss_mask)
    assert {k: [d.ids[a:b] for a, b in v] for k, v in d.spans.items()} == before
