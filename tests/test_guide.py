"""docs/adding-an-experiment.md (issue 31, item 3): its example experiment, extracted from the markdown as printed,
runs end to end at its smoke preset (registered under a test-only name, never shipped); its null arm does not
meet its rule; its verdicts decide hand-made tables as the guide says; its test snippet runs."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from lmsci.config import resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments import registry
from lmsci.sweep import run_experiment

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "adding-an-experiment.md"
NAME = "test-guide-markov-source"  # the test-only registry name of the guide's "markov-source"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)


@pytest.fixture(scope="module")
def guide():
    """The guide's experiment code, exec'd into a module outside lmsci.experiments; removed afterwards."""
    code = [b for b in _blocks() if "@register(" in b]
    assert len(code) == 1, "the guide's experiment is one fenced python block"
    src = code[0].replace('@register("markov-source")', f'@register("{NAME}")')
    assert NAME in src
    mod = types.ModuleType("lmsci_guide_example")
    sys.modules[mod.__name__] = mod  # pydantic resolves the config's annotations through sys.modules
    try:
        exec(compile(src, str(GUIDE), "exec"), mod.__dict__)
        yield mod
    finally:
        registry._REGISTRY.pop(NAME, None)
        sys.modules.pop(mod.__name__, None)


def test_guide_example_runs_at_smoke_and_its_null_arm_fails_its_rule(guide, tmp_path):
    assert NAME in registry.catalog() and NAME not in registry.shipped()
    cls = guide.MarkovSource
    run = run_experiment(cls(), resolve_config(cls.Config, "smoke", {"threads": 1}), tmp_path / "run",
                         progress=False, log=lambda m: None)
    res = run.results()
    assert len(res) == 6 and set(res["arm"]) == {"real", "null"} and (res["status"] == "ok").all()
    v = {x.claim_id: x for x in run.verdicts()}
    claim = v["beats-unigram"]
    assert claim.null_value is not None and claim.null_passed is False  # the null arm does not meet the rule
    assert claim.outcome == "inconclusive" and any("below the scale" in r for r in claim.reasons)
    assert v["sparse-source"].kind == "check" and v["sparse-source"].outcome == "passed"
    assert (run.path / "figures" / "nll.png").is_file() and (run.path / run.REPORT).is_file()
    assert claim.details["null_per_seed"] and len(claim.details["per_seed"]) == 3  # the engine judged both arms
    report = (run.path / run.REPORT).read_text()
    assert "### beats-unigram" in report and "## Method" in report  # the claim leads with its figure


def _table(real_gap, null_gap, own_excess=0.0):
    return pd.DataFrame([{"arm": arm, "seed_index": k, "gap": g, "room": 1.6, "own_excess": own_excess,
                          "status": "ok"} for arm, gaps in (("real", real_gap), ("null", null_gap))
                         for k, g in enumerate(gaps)])


@pytest.mark.parametrize("real,null,excess,outcome", [
    ((1.5, 1.55, 1.6), (0.0, 0.01, -0.01), 0.0, "reproduced"),
    ((0.5, 0.55, 0.6), (0.0, 0.01, -0.01), 0.0, "not reproduced"),
    ((1.5, 1.55, 1.6), (0.0, 0.01, -0.01), 0.5, "inconclusive"),     # the gate: the null arm was not trained
    ((1.5, 1.55, 1.6), (1.5, 1.6, 1.55), 0.0, "inconclusive"),       # the null arm meets the rule
    ((1.5, 1.6), (0.0, 0.01), 0.0, "inconclusive"),                  # two seeds: below min_seeds
])
def test_guide_verdicts(guide, real, null, excess, outcome):
    cfg = resolve_config(guide.MarkovConfig, "quick")
    v = guide.MarkovSource().verdicts(cfg, _table(real, null, excess), None)
    assert [x.claim_id for x in v] == ["beats-unigram", "sparse-source"]
    assert v[0].outcome == outcome and v[1].outcome == "passed"


def test_guide_example_refuses_bad_input_before_any_work(guide, tmp_path):
    cls = guide.MarkovSource
    cfg = resolve_config(cls.Config, "smoke", {"fanout": 16})
    with pytest.raises(ConfigError) as e:
        run_experiment(cls(), cfg, tmp_path / "never", progress=False, log=lambda m: None)
    assert e.value.field == "fanout" and not (tmp_path / "never").exists()
    with pytest.raises(ConfigError):
        resolve_config(cls.Config, "smoke", {"fanout": 1})


def test_guide_test_snippet_runs(guide):
    snippet = [b for b in _blocks() if b.lstrip().startswith("def test_")]
    assert len(snippet) == 1
    ns = {"MarkovSource": guide.MarkovSource, "MarkovConfig": guide.MarkovConfig, "resolve_config": resolve_config,
          "pd": pd}
    exec(snippet[0], ns)
    ns["test_null_arm_meeting_the_rule_is_inconclusive"]()


def test_readme_links_the_guide():
    assert "docs/adding-an-experiment.md" in (ROOT / "README.md").read_text()
