"""Provenance a machine can check (issue 46 item 1): the digest of a run (config, import closure, library versions),
its record in the run directory and the published rows, and ``lmsci suite --check`` with the smoke goldens."""

from __future__ import annotations

import json
from typing import ClassVar

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from lmsci.claims import Claim
from lmsci.cli import app
from lmsci.config import ExperimentConfig, resolve_config
from lmsci.experiments.base import Experiment, Point
from lmsci.provenance import (EXECUTOR_ROOTS, Provenance, config_digest, import_closure, library_versions, provenance,
                              split_digest)
from lmsci.publish import CLAIMS_CSV, CSV_COLUMNS, claims_table
from lmsci.runs import RunDir
from lmsci.stats import across_seeds
from lmsci.sweep import run_experiment
from lmsci.table_check import (CURRENT, CURRENT_BY_GOLDEN, STALE, as_stored, check_published, check_rows,
                               compare_results, golden_vouches, head_provenance, outcome_columns, read_golden_csv,
                               update_golden, values_close)

runner = CliRunner()

# -- the import closure ---------------------------------------------------------------------------------------------
TREE = {
    "lmsci/__init__.py": b"",
    "lmsci/exp/__init__.py": b"",
    "lmsci/exp/fam/__init__.py": b"from lmsci.exp.fam import a\n",
    "lmsci/exp/fam/a.py": b"from lmsci.lib import helper\nfrom . import _shared\n\ndef f():\n    import lmsci.lazy\n",
    "lmsci/exp/fam/_shared.py": b"from ..util import thing\n",
    "lmsci/exp/util.py": b"import numpy as np\nimport torch.nn\n",
    "lmsci/lib.py": b"import sklearn.linear_model\ndef helper(): pass\n",
    "lmsci/lazy.py": b"",
    "lmsci/unrelated.py": b"import transformers\n",
}


def _read(tree):
    return lambda rel: tree.get(rel)


def test_the_closure_is_static_transitive_and_covers_packages_relative_and_lazy_imports():
    paths, third = import_closure(["lmsci.exp.fam.a"], _read(TREE))
    assert paths == ["lmsci/__init__.py", "lmsci/exp/__init__.py", "lmsci/exp/fam/__init__.py", "lmsci/exp/fam/_shared.py",
                     "lmsci/exp/fam/a.py", "lmsci/exp/util.py", "lmsci/lazy.py", "lmsci/lib.py"]
    assert "lmsci/unrelated.py" not in paths  # not the whole tree
    assert third == {"numpy", "torch", "sklearn"}
    with pytest.raises(ValueError):
        import_closure(["lmsci.exp.nothing"], _read(TREE))


def test_the_digest_moves_with_a_file_of_the_closure_and_only_with_it():
    def prov(tree):
        paths, third = import_closure(["lmsci.exp.fam.a"], _read(tree))
        from lmsci.provenance import file_hashes

        return Provenance("x", "lmsci.exp.fam.a", "c0000000", file_hashes(paths, _read(tree)), {"torch": "1"})

    base = prov(TREE)
    assert prov(dict(TREE)).digest == base.digest  # deterministic
    assert prov({**TREE, "lmsci/unrelated.py": b"# edited\n"}).digest == base.digest
    edited = prov({**TREE, "lmsci/lazy.py": b"X = 1\n"})
    assert edited.source != base.source and edited.config == base.config and edited.libs == base.libs
    assert split_digest(base.digest) == {"config": "c0000000", "source": base.source, "libraries": base.libs}
    assert split_digest("") is None and split_digest("mixed") is None


def test_config_digest_covers_science_fields_only():
    class C(ExperimentConfig):
        width: int = 4

    a = C()
    assert config_digest(a) == config_digest(C(threads=3, device="cpu", seed=7))  # where and how fast, master seed
    assert config_digest(a) != config_digest(C(width=5))
    assert config_digest(a) != config_digest(C(n_seeds=a.n_seeds + 1))


def test_a_real_experiments_provenance_is_its_closure_with_the_executor_and_versions():
    p = head_provenance("factual-recall", "quick")
    assert "lmsci/experiments/knowledge/factual_recall.py" in p.files and "lmsci/sweep.py" in p.files
    assert "lmsci/experiments/syntax/cfg_learning.py" not in p.files  # another family's experiment
    for r in EXECUTOR_ROOTS:  # a module or a package (lmsci.claims is one)
        rel = f"lmsci/{r.split('.', 1)[1].replace('.', '/')}"
        assert f"{rel}.py" in p.files or f"{rel}/__init__.py" in p.files, r
    assert p.libraries["torch"] == torch.__version__ and p.libraries["numpy"]
    assert head_provenance("factual-recall", "quick").digest == p.digest
    assert head_provenance("factual-recall", "smoke").config != p.config
    assert library_versions(["not_a_library"]) == {"python": p.libraries["python"]}


# -- the run directory and the published rows -----------------------------------------------------------------------
class ToyConfig(ExperimentConfig):
    PRESETS: ClassVar[dict] = {"smoke": {}, "quick": {}}


class Toy(Experiment):
    """One point; the claim: its value is positive."""

    name = "prov-toy"
    claim = "toy"
    source = "none"
    Config = ToyConfig
    claims = [Claim("positive", "the value is positive", "test", "1", "value", "above 0", presets=("quick",))]

    def points(self, cfg):
        return [Point("a", {})]

    def run_point(self, cfg, point, ctx):
        return {"value": 1.0 + float(torch.rand(1, generator=torch.Generator().manual_seed(ctx.seed)))}

    def verdicts(self, cfg, results, run):
        s = across_seeds(results["value"])
        return [self.judge(cfg, "positive", value=s.mean, ci=s.ci, n_seeds=s.n, passed=s.mean > 0)]


def test_a_run_records_its_provenance_and_the_claims_table_carries_the_digest(tmp_path):
    cfg = resolve_config(ToyConfig, "quick")
    run = run_experiment(Toy(), cfg, tmp_path / "prov-toy", progress=False, log=lambda m: None)
    rec = json.loads((run.path / RunDir.PROVENANCE).read_text())
    assert rec["digest"] == provenance("prov-toy", __name__, cfg).digest
    assert "lmsci/sweep.py" in rec["files"] and f"<{__name__}>" in rec["files"] and rec["libraries"]["torch"]
    assert run.digests() == [rec["digest"]]
    table = claims_table(tmp_path, ["prov-toy"], state={"preset": "quick", "experiments": {}})
    assert list(table.columns) == CSV_COLUMNS and table["digest"].tolist() == [rec["digest"]]
    # a resume by other code is recorded, and the row's digest says the run is mixed
    run.write_provenance({**rec, "digest": "00000000.00000000.00000000"})
    assert len(run.digests()) == 2
    assert claims_table(tmp_path, ["prov-toy"], state={"preset": "quick", "experiments": {}})["digest"].tolist() == \
        ["mixed"]


# -- the check --------------------------------------------------------------------------------------------------------
def _prov(config="c0000000", files=None, libs=None):
    return Provenance("e", "lmsci.e", config, files or {"lmsci/e.py": "1"}, libs or {"torch": "2"})


def _table(rows):
    return pd.DataFrame([{"experiment": e, "claim": c, "outcome": "reproduced", "value": 1.0, "commit": "abc",
                          "digest": d} for e, c, d in rows])


def test_check_sorts_rows_into_current_current_by_golden_and_stale():
    head = _prov()
    old_src = _prov(files={"lmsci/e.py": "0"})
    new_cfg = _prov(config="c1111111")
    heads = {n: head for n in ("same", "nodigest", "mixed", "src", "vouched", "cfg", "libs")}
    heads["gone"] = "UnknownNameError: no experiment 'gone'"
    table = _table([("same", "x", head.digest), ("same", "y", head.digest), ("nodigest", "x", None),
                    ("mixed", "x", "mixed"), ("src", "x", old_src.digest), ("vouched", "x", old_src.digest),
                    ("cfg", "x", new_cfg.digest), ("libs", "x", _prov(libs={"torch": "1"}).digest),
                    ("gone", "x", head.digest)])
    golden = {"verified": [{"source": old_src.source, "libraries": old_src.libs},
                           {"source": head.source, "libraries": head.libs}]}
    seen = []
    rep = check_rows(table, "quick", heads, {"vouched": golden, "cfg": golden},
                     diff=lambda c, paths: seen.append((c, paths)) or ["lmsci/e.py"])
    by = {c.experiment: c for c in rep.checks}
    assert by["same"].status == CURRENT and by["same"].rows == 2 and not by["same"].reasons
    assert by["nodigest"].status == STALE and by["nodigest"].reasons == ["no digest recorded"]
    assert by["nodigest"].files == ["lmsci/e.py"] and seen[0] == ("abc", ["lmsci/e.py"])
    assert by["mixed"].status == STALE and "mixed" in by["mixed"].reasons[0]
    assert by["src"].status == STALE and by["src"].reasons == ["source changed", "no golden"]
    assert by["vouched"].status == CURRENT_BY_GOLDEN and by["vouched"].reasons == ["source changed"]
    assert by["cfg"].status == STALE and by["cfg"].reasons == ["config changed"]  # a golden never vouches for a config
    assert by["libs"].status == STALE and by["libs"].reasons[0] == "libraries changed"
    assert by["gone"].status == STALE and "no digest at HEAD" in by["gone"].reasons[0]
    assert rep.counts() == {CURRENT: 2, CURRENT_BY_GOLDEN: 1, STALE: 6} and not rep.clean
    text = rep.text()
    assert "2 rows current, 1 current by their golden, 6 stale" in text
    assert "nodigest (1 rows): stale: no digest recorded [changed since abc: lmsci/e.py]" in text
    assert check_rows(table[table["experiment"] == "same"], "quick", heads, {}).clean
    # a row's commit that git cannot find (a shallow clone, a commit that never landed): the line says so
    gone = check_rows(table[table["experiment"] == "vouched"], "quick", heads, {"vouched": golden},
                      diff=lambda c, paths: None)
    assert gone.checks[0].status == CURRENT_BY_GOLDEN and gone.checks[0].files is None
    assert gone.checks[0].line().endswith("[files not listed: git cannot diff against abc here]")


def test_a_golden_vouches_only_for_sources_it_was_verified_at():
    g = {"verified": [{"source": "a", "libraries": "l"}, {"source": "b", "libraries": "l"}]}
    assert golden_vouches(g, {"source": "a", "libraries": "l"}, {"source": "b", "libraries": "l"})
    assert not golden_vouches(g, {"source": "a", "libraries": "l"}, {"source": "c", "libraries": "l"})
    assert not golden_vouches(None, {"source": "a", "libraries": "l"}, {"source": "a", "libraries": "l"})


def test_golden_comparison_holds_within_tolerance_and_sees_real_changes():
    assert values_close(1.0, 1.0 + 1e-7) and not values_close(1.0, 1.01)
    assert values_close(float("nan"), float("nan")) and not values_close(float("nan"), 0.0)
    assert values_close('[{"acc": 0.5, "ok": true}]', '[{"acc": 0.5000001, "ok": true}]')
    assert not values_close('[{"acc": 0.5}]', '[{"acc": 0.6}]') and not values_close("a", "b")
    g = pd.DataFrame({"point": ["p", "q"], "loss": [1.0, 2.0], "seconds": [3.0, 4.0], "train_tok_per_s": [1, 2]})
    assert compare_results(g, g.assign(loss=[1.0 + 1e-7, 2.0], seconds=[9.0, 9.0], train_tok_per_s=[5, 6])) == []
    assert compare_results(g, g.iloc[::-1]) == []  # matched on the point, not the order
    diffs = compare_results(g, g.assign(loss=[1.0, 2.5]))
    assert diffs == ["q / loss: 2.0 -> 2.5"]
    assert "points differ" in compare_results(g, g.iloc[:1])[0]
    assert "columns differ" in compare_results(g, g.assign(extra=1))[0]


def test_golden_allows_the_known_spread_between_cpu_classes_only_across_classes(monkeypatch):
    """S54: goldens recorded on Intel AVX-512 hosts, verified on an AMD AVX2 host: five experiments' smoke values
    move by more than the default tolerance in known columns; across CPU classes those get their own tolerance or
    are left out, on the recording CPU class every column is compared as before."""
    import lmsci.table_check as tc

    assert set(tc.GOLDEN_CPU_SPREAD) == set(tc.GOLDEN_CPU_SPREAD_WHY)
    g = pd.DataFrame({"point": ["trained"], "a0.01_hi": [-0.60], "a0.01_nstar": [7.36], "loss": [1.0]})
    moved = g.assign(**{"a0.01_hi": [-0.86]})
    monkeypatch.setattr(tc, "cpu_class", lambda: "GenuineIntel AVX512")
    assert tc.golden_diffs("alignment-attack", g, moved, {"cpu": "AuthenticAMD AVX2"}) == []
    assert tc.golden_diffs("alignment-attack", g, moved, {}) == []  # recorded on an unknown class
    assert tc.golden_diffs("alignment-attack", g, moved, {"cpu": "GenuineIntel AVX512"}) != []  # same class: strict
    assert tc.golden_diffs("alignment-attack", g, g.assign(loss=[1.5]), {}) != []  # other columns: strict
    assert tc.golden_diffs("grokking", g, moved, {}) != []  # no known spread: strict
    r = pd.DataFrame({"point": ["f"], "name_gap_bits_train": [-0.0009007304701178498]})
    assert tc.golden_diffs("reversal-curse", r, r.assign(name_gap_bits_train=[-0.0009034821925316313]), {}) == []
    assert tc.golden_diffs("reversal-curse", r, r.assign(name_gap_bits_train=[-0.0019]), {}) != []
    assert tc.compare_results(g, moved, spread={"a*_hi": (0.5, 0.0)}) == []


def test_timing_columns_are_not_compared_and_an_arm_named_null_survives_the_csv(tmp_path):
    res = pd.DataFrame({"point": ["real-p", "null-p"], "arm": ["real", "null"], "attn_s": [0.5, 0.25],
                        "cpu_s": [1.0, 2.0], "sec_per_fact": [0.1, 0.2], "time_exact_s": [3.0, 4.0],
                        "cpu_speedup": [1.3, 1.2], "mfu": [0.07, 0.08], "train_cpu_s": [5.0, 6.0]})
    assert outcome_columns(res) == ["point", "arm", "attn_s"]  # attention to S is an outcome, not a time
    (tmp_path / "g.csv").write_text(res.to_csv(index=False))
    stored = read_golden_csv(tmp_path / "g.csv")
    assert stored["arm"].tolist() == ["real", "null"]  # pandas' default reader makes "null" a NaN
    assert compare_results(stored, as_stored(res.assign(cpu_s=[9.0, 9.0], mfu=[0.01, 0.02]))) == []
    assert compare_results(stored, as_stored(res.assign(arm=["real", "real"]))) == ["null-p / arm: 'null' -> 'real'"]


def test_update_golden_records_unchanged_runs_and_restarts_on_a_change(tmp_path):
    res = pd.DataFrame({"point": ["p"], "loss": [1.0], "seconds": [2.0]})
    rec = {"digest": "c.s1.l", "config": "c", "source": "s1", "libraries_digest": "l", "libraries": {"torch": "2"}}
    assert update_golden("e", res, rec, tmp_path) == ("new", [])
    assert "seconds" not in pd.read_csv(tmp_path / "e.csv").columns
    assert update_golden("e", res.assign(loss=1.0 + 1e-8), {**rec, "source": "s2"}, tmp_path) == ("unchanged", [])
    assert update_golden("e", res, {**rec, "source": "s2"}, tmp_path) == ("unchanged", [])  # recorded once
    g = json.loads((tmp_path / "e.json").read_text())
    assert [v["source"] for v in g["verified"]] == ["s1", "s2"]
    status, diffs = update_golden("e", res.assign(loss=1.5), {**rec, "source": "s3"}, tmp_path)
    assert status == "changed" and diffs == ["p / loss: 1.0 -> 1.5"]
    assert [v["source"] for v in json.loads((tmp_path / "e.json").read_text())["verified"]] == ["s3"]


def test_a_golden_keeps_smoke_verdicts_and_a_changed_verdict_restarts_it(tmp_path):
    from lmsci.claims.core import GateResult, Verdict
    from lmsci.table_check import verdict_diffs, verdict_summary

    def v(outcome="inconclusive", value=0.5, ci=(0.4, 0.6), gate=(0.7, False)):
        return Verdict("c1", "claim", "src", "pv", "stat", "rule", outcome, value=value, ci=ci, n_seeds=1,
                       rule_passed=False, gates=[GateResult("learned", "rule", gate[0], gate[1])])

    s = verdict_summary([v()])
    assert s == {"c1": {"outcome": "inconclusive", "value": 0.5, "ci": [0.4, 0.6], "n_seeds": 1, "rule_passed": False,
                        "null_value": None, "null_passed": None, "gates": {"learned": [0.7, False]}}}
    res = pd.DataFrame({"point": ["p"], "loss": [1.0]})
    rec = {"digest": "c.s1.l", "config": "c", "source": "s1", "libraries_digest": "l", "libraries": {"torch": "2"}}
    assert update_golden("e", res, rec, tmp_path) == ("new", [])  # an old golden: no verdicts
    assert update_golden("e", res, {**rec, "source": "s2"}, tmp_path, verdicts=s) == ("unchanged", [])
    g = json.loads((tmp_path / "e.json").read_text())
    assert g["verdicts"] == s and [x["source"] for x in g["verified"]] == ["s1", "s2"]  # added, not restarted
    assert verdict_diffs("e", g, verdict_summary([v(value=0.5 + 1e-9)])) == []  # within tolerance
    assert verdict_diffs("e", {**g, "verdicts": None}, verdict_summary([v(outcome="reproduced")])) == []
    # smoke_diffs (what scripts/golden.py --verify and update_golden compare): results, then verdicts when given
    from lmsci.table_check import smoke_diffs
    new_v = verdict_summary([v(outcome="reproduced")])
    assert smoke_diffs("e", res, g, res, None) == []
    assert any("verdict c1 / outcome" in d for d in smoke_diffs("e", res, g, res, new_v))
    assert smoke_diffs("e", res, g, res.assign(loss=1.5), None) == ["p / loss: 1.0 -> 1.5"]
    # the same results, another judgment: an interval computed otherwise, a gate read otherwise
    status, diffs = update_golden("e", res, {**rec, "source": "s3"}, tmp_path,
                                  verdicts=verdict_summary([v(ci=(0.1, 0.9), gate=(0.7, True))]))
    assert status == "changed" and any("verdict c1 / ci" in d for d in diffs), diffs
    assert any("gates passed" in d for d in diffs)
    assert [x["source"] for x in json.loads((tmp_path / "e.json").read_text())["verified"]] == ["s3"]


def test_suite_check_on_a_small_published_table(tmp_path):
    pub = tmp_path / "quick"
    pub.mkdir()
    head = head_provenance("grokking", "quick")
    rows = _table([("grokking", "delay", head.digest), ("grokking", "restricted-before-test", head.digest),
                   ("factual-recall", "x", None)]).reindex(columns=CSV_COLUMNS)
    rows.to_csv(pub / CLAIMS_CSV, index=False)
    (pub / "published.json").write_text(json.dumps({"preset": "quick"}))
    res = runner.invoke(app, ["suite", "--check", str(pub)])
    assert res.exit_code == 1, res.output
    assert "2 rows current, 0 current by their golden, 1 stale, in 1 of 2 experiments" in res.output
    assert "grokking (2 rows): current" in res.output and "factual-recall (1 rows): stale: no digest recorded" in res.output
    rows[rows["experiment"] == "grokking"].to_csv(pub / CLAIMS_CSV, index=False)
    assert runner.invoke(app, ["suite", "--check", str(pub)]).exit_code == 0


def test_a_left_out_experiments_stale_rows_are_dropped_and_listed_as_left_out(tmp_path):
    """Issue 46: the quick suite leaves out experiments that decide nothing at quick, so their rows can never be
    rerun into currency by it; once stale they are dropped (current ones kept) and claims.md lists them."""
    from lmsci.table_check import leave_out_published

    pub = tmp_path / "quick"
    pub.mkdir()
    head = head_provenance("ioi-circuit", "quick")
    rows = _table([("grokking", "delay", None), ("ioi-circuit", "a", head.digest), ("watermark", "b", None)])
    rows.reindex(columns=CSV_COLUMNS).to_csv(pub / CLAIMS_CSV, index=False)
    (pub / "published.json").write_text(json.dumps({"preset": "quick"}))
    dropped = leave_out_published(pub, ["ioi-circuit", "watermark", "igsm-ood"], "quick", log=lambda m: None)
    assert dropped == ["watermark"]  # ioi-circuit is current: kept; igsm-ood has no rows
    t = pd.read_csv(pub / CLAIMS_CSV)
    assert list(dict.fromkeys(t["experiment"])) == ["grokking", "ioi-circuit"]  # grokking is stale but decides at quick
    md = (pub / "claims.md").read_text()
    left = md.split("## Left out at this preset")[1].split("##")[0]
    assert "`watermark`" in left and "`igsm-ood`" in left and "`grokking`" not in left and "`ioi-circuit`" not in left
    assert json.loads((pub / "published.json").read_text())["preset"] == "quick"
    with pytest.raises(Exception, match="preset"):
        leave_out_published(pub, ["watermark"], "gpu", log=lambda m: None)


def test_suite_check_runs_on_the_published_quick_table():
    from lmsci.publish import load_claims_table, results_root

    where = results_root() / "quick"
    if not (where / CLAIMS_CSV).is_file():
        pytest.skip("no published quick table in this checkout")
    rep = check_published(where)
    table = load_claims_table(where)
    assert rep.preset == "quick" and [c.experiment for c in rep.checks] == list(dict.fromkeys(table["experiment"]))
    assert sum(rep.counts().values()) == len(table)
    for c in rep.checks:
        assert c.status in (CURRENT, CURRENT_BY_GOLDEN, STALE)
        assert c.status != STALE or c.reasons  # a stale row says why
        assert c.head_digest and split_digest(c.head_digest)


def test_the_post_hoc_marks_are_not_part_of_a_runs_source_digest():
    """Marking a verdict post hoc (lmsci/claims/seen.py) must not make every published row stale: the marks are
    bookkeeping read at publishing time; any other file of the closure still changes the digest."""
    from lmsci.provenance import _read_src

    mod = "lmsci.experiments.theory.benign_overfitting"
    base = provenance("benign-overfitting", mod, {"a": 1})
    marked = provenance("benign-overfitting", mod, {"a": 1},
                        read=lambda rel: _read_src(rel) + b"\n# marked" if rel == "lmsci/claims/seen.py" else _read_src(rel))
    other = provenance("benign-overfitting", mod, {"a": 1},
                       read=lambda rel: _read_src(rel) + b"\n# edit" if rel == "lmsci/claims/rules.py" else _read_src(rel))
    assert "lmsci/claims/seen.py" not in base.files and "lmsci/claims/rules.py" in base.files
    assert marked.digest == base.digest
    assert other.digest != base.digest
