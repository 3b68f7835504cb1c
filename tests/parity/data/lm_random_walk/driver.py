"""Driver that made the LM_random_walk parity fixtures (run once, by hand; not collected by pytest).

It imports the OFFICIAL code (WANGXinyiLinda/LM_random_walk at abc06a0e645260aabcf51726ff599b4a0033ad73,
``kg_reasoning/``, extracted to a throwaway folder) and runs it unchanged on the small graphs written here, except
for one shim: the official ``create_graph`` / ``get_all_rule_probs`` build their tensors with ``device='cuda'``
hard-coded; the driver maps that device to the CPU (``torch.sparse_coo_tensor`` / ``torch.eye`` wrapped). The
analysis loop of ``analysis.py`` (``__main__`` body, not a function) is repeated here for one LM: its ``llm_dist``
is a fixed distribution stored as input (no LM is trained), everything else is the official calls.

Command (from /work/main, project venv):

    PYTHONPATH=/work/tmp_lmrw/site:/work/tmp_lmrw/official/kg_reasoning OMP_NUM_THREADS=1 \
        python tests/parity/data/lm_random_walk/driver.py /work/tmp_lmrw/run tests/parity/data/lm_random_walk

``/work/tmp_lmrw/site`` holds ``english-words==2.0.2`` (imported at the top of ``generator.py``);
``/work/tmp_lmrw/official`` is ``git archive abc06a0 kg_reasoning``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import sys

import numpy as np
import scipy.special
import torch

_coo, _eye = torch.sparse_coo_tensor, torch.eye


def _cpu(kw):
    if kw.get("device") == "cuda":
        kw["device"] = "cpu"
    return kw


torch.sparse_coo_tensor = lambda *a, **kw: _coo(*a, **_cpu(kw))
torch.eye = lambda *a, **kw: _eye(*a, **_cpu(kw))

from data_generation.generator import Grapher  # noqa: E402  (official)
import analysis  # noqa: E402  (official: KL)
import eval as official_eval  # noqa: E402  (official: SupervisedDataset)
import train as official_train  # noqa: E402  (official: TrainDataset.random_walk_iter / random_iter)

SEED = 1234          # the official default seed (analysis.py / train.py)
PRA_TEMP = 100.0     # heatmap.sh
MAX_RULE_LEN = 3     # heatmap.sh
N_WALKS = 20000
WALK_LEN = 3


def write_dataset(root: str, name: str, n_entities: int, n_rel: int, train, test) -> str:
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "vocab"), exist_ok=True)
    json.dump({f"e{i}": i for i in range(n_entities)}, open(os.path.join(d, "vocab", "entity_vocab.json"), "w"))
    json.dump({f"r{i}": i for i in range(n_rel)}, open(os.path.join(d, "vocab", "relation_vocab.json"), "w"))
    for fname, trip in (("graph.txt", train), ("test.txt", test), ("dev.txt", test)):
        with open(os.path.join(d, fname), "w") as f:
            for h, r, t in trip:
                f.write(f"e{h}\tr{r}\te{t}\n")
    return d


def dense(sp) -> np.ndarray:
    return sp.to_dense().numpy().astype(np.float32)


class FakeTok:
    """Stands in for the GPT-2 tokenizer with entities as new tokens: token id = entity id."""

    eos_token = "</s>"

    def __call__(self, name):
        class _R:
            input_ids = [int(name.split("_")[-1].split(">")[0])]
        return _R()

    def decode(self, tok):
        return f"<entity_{int(tok)}>"


def rule_probs_fixture(root, name, max_len):
    with contextlib.redirect_stdout(io.StringIO()):
        g = Grapher(root, name, False, False, True, True, max_len, 100, SEED)
        probs = g.get_all_rule_probs()
    rules = [list(k) for k in probs]
    return rules, np.stack([dense(probs[k]) for k in probs])


def analysis_fixture(root, name, n_entities, llm, out, prefix):
    """The analysis.py loop body for pra_path_len = 1..MAX_RULE_LEN with a fixed llm_dist per query."""
    tok = FakeTok()
    res = {"queries": None, "by_len": {}}
    for L in range(1, MAX_RULE_LEN + 1):
        rec = {"rules": {}, "weights": {}, "pra_scores": [], "sum_scores": [], "PRA": [], "sum": [],
               "kl": {h: [] for h in ("uniform", "groundtruth", "PRA", "sum")}}
        with contextlib.redirect_stdout(io.StringIO()):
            ds = official_eval.SupervisedDataset(root, name, "test", tok, "completion", False, True, True, L, 100,
                                                 False, k=4, seed=SEED)
            queries = []
            pra_ok = van_ok = 0
            for idx, (x_text, y_text, triple) in enumerate(ds):
                e1, r, e2s = triple
                seen = ds.seen_answers[(e1, r)]
                queries.append([int(e1), int(r), [int(e) for e in e2s], [int(e) for e in seen]])
                all_e2s = np.array(list(ds.grapher.rev_entity_vocab.keys()))
                triples = [(e1, r, e) for e in all_e2s]
                token_ids = np.array([tok(ds.grapher.entity2name(e)).input_ids[0] for e in all_e2s])
                dist = {"uniform": np.ones(len(all_e2s)) / len(all_e2s), "groundtruth": np.zeros(len(all_e2s))}
                for i, e in enumerate(all_e2s):
                    if e in e2s:
                        dist["groundtruth"][i] = 1 / len(e2s)
                pra_scores, vanilla_scores, _ = ds.grapher.path_ranking_predict(triples, r)
                dist["PRA"] = scipy.special.softmax(pra_scores * PRA_TEMP)
                dist["sum"] = scipy.special.softmax(vanilla_scores * PRA_TEMP)
                for scores, key in ((pra_scores, "pra"), (vanilla_scores, "van")):
                    for t in token_ids[np.argsort(-scores)]:
                        pred = ds.grapher.name2entity(tok.decode(t))
                        if pred not in seen:
                            break
                    if pred in e2s:
                        if key == "pra":
                            pra_ok += 1
                        else:
                            van_ok += 1
                for h in rec["kl"]:
                    rec["kl"][h].append(float(analysis.KL(dist[h], llm[idx])))
                rec["pra_scores"].append(pra_scores)
                rec["sum_scores"].append(vanilla_scores)
                rec["PRA"].append(dist["PRA"])
                rec["sum"].append(dist["sum"])
            for r in sorted(ds.grapher.rules):
                rec["rules"][str(r)] = [[list(k), int(v["count"])] for k, v in ds.grapher.rules[r].items()]
                rec["weights"][str(r)] = [float(v["weight"]) for v in ds.grapher.rules[r].values()]
        rec["pra_acc"], rec["vanilla_acc"] = pra_ok / len(ds), van_ok / len(ds)
        for k in ("pra_scores", "sum_scores", "PRA", "sum"):
            out[f"{prefix}_L{L}_{k}"] = np.asarray(rec.pop(k))
        res["by_len"][L] = rec
        if res["queries"] is None:
            res["queries"] = queries
        assert res["queries"] == queries
    return res


def walks_fixture(root, name, n_entities, n_rel, out):
    """Official random_walk_iter and random_iter on the graph: per-step edge counts."""
    with contextlib.redirect_stdout(io.StringIO()):
        g = Grapher(root, name, False, False, True, True, WALK_LEN, 100, SEED)

    class _Self:
        grapher, path_len, weighted_r = g, WALK_LEN, None

    res = {}
    for mode, fn in (("random_walk", official_train.TrainDataset.random_walk_iter),
                     ("random", official_train.TrainDataset.random_iter)):
        random.seed(SEED)
        it = fn(_Self())
        trip = np.zeros((N_WALKS, WALK_LEN, 3), dtype=np.int64)
        with contextlib.redirect_stdout(io.StringIO()):
            for w in range(N_WALKS):
                sents = next(it).split(". ")
                assert len(sents) == WALK_LEN, sents
                for i, s in enumerate(sents):
                    trip[w, i] = g.sent2triple(s.rstrip(".") + ".")
        out[f"walks_{mode}"] = trip
        res[mode] = {"n_walks": N_WALKS, "walk_len": WALK_LEN, "python_random_seed": SEED}
    return res


def weights_fixture(root, name, out):
    """get_rule_weights on the functional graph, recording get_path_ranking_data's (X, y)."""
    rec = {}
    orig = Grapher.get_path_ranking_data

    def spy(self, r):
        x, y, n_pos, n_neg = orig(self, r)
        rec.update(X=np.asarray(x), y=np.asarray(y), num_pos=n_pos, num_neg=n_neg)
        return x, y, n_pos, n_neg

    Grapher.get_path_ranking_data = spy
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            g = Grapher(root, name, False, False, True, True, 2, 100, SEED)
            w = g.get_rule_weights(3)
    finally:
        Grapher.get_path_ranking_data = orig
    lr = g.path_ranking_predictors[3]
    out["B_X"], out["B_y"] = rec["X"], rec["y"]
    return {"goal": 3, "rules": [[list(k), int(v["count"])] for k, v in g.rules[3].items()],
            "weights": [float(v) for v in w], "intercept": float(lr.intercept_[0]), "n_iter": int(lr.n_iter_[0]),
            "num_pos": int(rec["num_pos"]), "num_neg": int(rec["num_neg"])}


def functional_graph():
    """Graph B (40 entities): b0 a function plus a second b0 edge on 0..9, b1 a function, b2 on 30..39; goal g (id 3)
    = b1 o b0 (first b0 edge) on heads 0..21, another tail on 22..29; held out: g on heads 30..39."""
    E = 40
    b0 = [(x * 7 + 2) % E for x in range(E)]
    b1 = [(y * 11 + 5) % E for y in range(E)]
    tri = [(x, 0, b0[x]) for x in range(E)] + [(x, 0, (x * 7 + 9) % E) for x in range(10)]
    tri += [(y, 1, b1[y]) for y in range(E)] + [(x, 2, (x * 3 + 1) % E) for x in range(30, E)]
    for x in range(30):
        tri.append((x, 3, b1[b0[x]] if x < 22 else (b1[b0[x]] + 13) % E))
    test = [(x, 3, b1[b0[x]]) for x in range(30, E)]
    return E, 4, np.asarray(tri, dtype=np.int64), np.asarray(test, dtype=np.int64)


def main(work: str, dest: str) -> None:
    from lmsci.worlds.kg_walks import kg_world

    os.makedirs(dest, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    meta: dict = {"repository": "WANGXinyiLinda/LM_random_walk", "commit": "abc06a0e645260aabcf51726ff599b4a0033ad73",
                  "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "numpy": np.__version__,
                               "scipy": scipy.__version__,
                               "sklearn": __import__("sklearn").__version__},
                  "seed": SEED, "pra_temp": PRA_TEMP}
    # Graph A: lmsci's own world, written out as official data files.
    w = kg_world(50, 3, 2, 0.9, 0.3, 0)
    E, R = w.n_entities, w.n_rel
    write_dataset(work, "kgA", E, R, w.train_triples, w.test_triples)
    arrays["A_train"], arrays["A_test"] = w.train_triples, w.test_triples
    rules, mats = rule_probs_fixture(work, "kgA", MAX_RULE_LEN)
    arrays["A_rule_probs"] = mats
    meta["A"] = {"made_by": "lmsci.worlds.kg_walks.kg_world(50, 3, 2, 0.9, 0.3, seed=0)", "n_entities": E,
                 "n_relations": R, "rule_probs_rules": rules, "max_rule_len": MAX_RULE_LEN}
    n_q = len({(int(h), int(r)) for h, r, _ in w.test_triples})
    logits = np.random.default_rng(0).normal(0.0, 2.0, size=(n_q, E))
    arrays["A_llm"] = scipy.special.softmax(logits, -1)
    meta["A"]["analysis"] = analysis_fixture(work, "kgA", E, arrays["A_llm"], arrays, "A")
    meta["A"]["walks"] = walks_fixture(work, "kgA", E, R, arrays)
    # Graph B: functional relations, no negative sampling (all negatives are used).
    E, R, tri, test = functional_graph()
    write_dataset(work, "kgB", E, R, tri, test)
    arrays["B_train"], arrays["B_test"] = tri, test
    meta["B"] = {"made_by": "functional_graph() in this driver", "n_entities": E, "n_relations": R,
                 "weights": weights_fixture(work, "kgB", arrays)}
    rules, mats = rule_probs_fixture(work, "kgB", MAX_RULE_LEN)
    arrays["B_rule_probs"] = mats
    meta["B"]["rule_probs_rules"] = rules
    arrays["B_llm"] = scipy.special.softmax(np.random.default_rng(1).normal(0.0, 2.0, size=(len(test), E)), -1)
    meta["B"]["analysis"] = analysis_fixture(work, "kgB", E, arrays["B_llm"], arrays, "B")
    np.savez_compressed(os.path.join(dest, "official.npz"), **arrays)
    json.dump(meta, open(os.path.join(dest, "official.json"), "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
