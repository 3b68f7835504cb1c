"""syntactic-embeddings: the part-of-speech PCFG, the probe and purity on synthetic embeddings, verdicts from
synthetic tables (reproduced / not reproduced / gated / null-passing), bad input, a smoke run.

Source: seed lecture 000 ("Word Embeddings Encode Syntactic Roles"), issue 34 part 4.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.syntax.syntactic_embeddings import (SyntacticEmbeddings, SyntacticEmbeddingsConfig,
                                                           embedding_metrics, shuffle_within_sentences)
from lmsci.runs import RunDir
from lmsci.worlds.pos_pcfg import BOS, EOS, ROLES, PosPCFG


def test_grammar_sentences_follow_the_roles():
    g = PosPCFG()
    assert g.vocab_size == 2 + 314 and (g.role_of[2:] >= 0).all() and g.role_of[0] == g.role_of[1] == -1
    rng = np.random.default_rng(0)
    det, n, adj, pron = (ROLES.index(r) for r in ("DET", "N", "ADJ", "PRON"))
    for _ in range(200):
        s = g.sentence(rng)
        assert s[0] == BOS and s[-1] == EOS
        r = g.role_of[np.array(s[1:-1])]
        assert r[0] in (det, pron)  # a sentence starts with a noun phrase
        # a determiner is always followed by an adjective or a noun
        assert all(r[i + 1] in (adj, n) for i in range(len(r) - 1) if r[i] == det)
    st = g.stream(5000, rng)
    assert st.shape == (5000,) and st.max() < g.vocab_size
    with pytest.raises(ConfigError):
        PosPCFG(class_sizes={"DET": 3})


def test_within_sentence_shuffle_keeps_each_sentence_bag_of_words():
    g = PosPCFG()
    st = g.stream(3000, np.random.default_rng(0))
    sh = shuffle_within_sentences(st, np.random.default_rng(1))
    assert sh.shape == st.shape and (st != sh).mean() > 0.3  # the order changed
    assert (sh[st == BOS] == BOS).all() and (sh[st == EOS] == EOS).all()  # boundaries in place
    starts = np.flatnonzero(st == BOS)
    for a, b in zip(starts[:-1], starts[1:]):
        assert sorted(st[a:b]) == sorted(sh[a:b])  # each sentence keeps its words
    assert sorted(st[starts[-1]:]) == sorted(sh[starts[-1]:])  # the truncated last sentence too


def test_probe_and_purity_separate_clustered_from_random_embeddings():
    rng = np.random.default_rng(0)
    roles = np.repeat(np.arange(4), 30)
    centres = rng.normal(size=(4, 16)) * 4
    clustered = centres[roles] + rng.normal(size=(120, 16))
    m = embedding_metrics(clustered, roles, 0)
    assert m["probe_acc"] >= 0.95 and m["purity"] >= 0.95
    r = embedding_metrics(rng.normal(size=(120, 16)), roles, 0)
    assert r["probe_acc"] < 0.6 and r["purity"] < 0.6 and r["probe_chance"] == pytest.approx(0.25)


def rows(probe=0.97, purity=0.85, gain=1.4, init=0.35, shuf=0.4, shuf_purity=0.4, n=3) -> pd.DataFrame:
    """Arms real (ordered), sentence_shuffled and init (the ordered model's embeddings at initialisation), n seeds."""
    out = []
    for k in range(n):
        sfx = f"__s{k}" if k else ""
        for order, arm, p, pu in (("ordered", "real", probe - 0.01 * k, purity),
                                  ("sentence-shuffled", "sentence_shuffled", shuf, shuf_purity)):
            out.append({"point": order + sfx, "arm": arm, "status": "ok", "seed_index": k, "order": order,
                        "probe_acc": p, "probe_chance": 0.38, "purity": pu,
                        "test_nll": 3.4 if order == "ordered" else 4.9,
                        "unigram_entropy": 4.86, "nll_gain": gain if order == "ordered" else 0.0})
        out.append({"point": "init-ordered" + sfx, "arm": "init", "status": "ok", "seed_index": k, "order": "init",
                    "probe_acc": init, "probe_chance": 0.38, "purity": 0.39})
    return pd.DataFrame(out)


def verdicts(df, tmp_path, preset="quick"):
    cfg = resolve_config(SyntacticEmbeddingsConfig, preset, {})
    return {v.claim_id: v for v in SyntacticEmbeddings().verdicts(cfg, df, RunDir(tmp_path))}


def test_passing_failing_gated_and_null_passing_tables(tmp_path):
    v = verdicts(rows(), tmp_path)
    assert v["role-probe"].outcome == "reproduced" and v["role-probe"].null_passed is False
    assert v["kmeans-purity"].ablation and v["kmeans-purity"].null_passed is False
    assert verdicts(rows(shuf_purity=0.85), tmp_path)["kmeans-purity"].null_passed  # the engine's null arm
    assert verdicts(rows(probe=0.7), tmp_path)["role-probe"].outcome == "not reproduced"
    assert verdicts(rows(gain=0.1), tmp_path)["role-probe"].outcome == "inconclusive"
    v = verdicts(rows(shuf=0.95), tmp_path)  # the sentence-shuffled model's embeddings also encode the roles
    assert v["role-probe"].outcome == "inconclusive" and v["role-probe"].null_passed
    assert v["role-probe"].null_value == pytest.approx(0.95)  # the larger of the two null arms: sentence-shuffled
    assert v["role-probe"].details["null_per_seed"] == pytest.approx([0.95] * 3)
    assert verdicts(rows(shuf=0.88), tmp_path)["role-probe"].outcome == "reproduced"  # close, below the rule
    assert SyntacticEmbeddings().get_claim("role-probe").null_can_meet
    assert verdicts(rows(init=0.92), tmp_path)["role-probe"].outcome == "inconclusive"
    assert verdicts(rows(n=2), tmp_path)["role-probe"].outcome == "inconclusive"
    assert verdicts(rows(), tmp_path, preset="smoke")["role-probe"].outcome == "inconclusive"


def test_bad_config_is_a_named_error():
    with pytest.raises(ConfigError, match="n_stream"):
        SyntacticEmbeddings().validate(resolve_config(SyntacticEmbeddingsConfig, "smoke",
                                                      {"n_stream": 1000, "seq_len": 300}))
    with pytest.raises(ConfigError, match="d_model"):
        SyntacticEmbeddings().validate(resolve_config(SyntacticEmbeddingsConfig, "smoke",
                                                      {"model.d_model": 18, "model.n_heads": 4}))
    with pytest.raises(ConfigError, match="n_stream"):
        resolve_config(SyntacticEmbeddingsConfig, "smoke", {"n_stream": 10})


def test_smoke_run(tmp_path):
    from lmsci.sweep import run_experiment

    cfg = resolve_config(SyntacticEmbeddingsConfig, "smoke", {"threads": 1})
    run = run_experiment(SyntacticEmbeddings(), cfg, tmp_path / "run", progress=False, log=lambda *a, **k: None)
    res = run.results()
    assert (res["status"] == "ok").all() and set(res["order"]) == {"ordered", "sentence-shuffled", "init"}
    assert set(res["arm"]) == {"real", "sentence_shuffled", "init"}
    assert res["probe_acc"].between(0, 1).all() and (run.path / "figures" / "embedding_pca.png").exists()
    vs = {v.claim_id: v for v in run.verdicts()}
    # both null arms are measured and, for an almost untrained model, far from the rule
    v = vs["role-probe"]
    assert v.null_value is not None and v.null_passed is False and v.details["null_per_seed"]
