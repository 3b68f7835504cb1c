"""`lmsci check-model` on saved tiny checkpoints: report, exit codes 0 / 1 / 2 (issue 21)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from lmsci.cli import app


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    import transformers as tf

    root = tmp_path_factory.mktemp("ckpt")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        tf.Qwen3ForCausalLM(tf.Qwen3Config(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=128, initializer_range=0.3,
        )).save_pretrained(root / "qwen3")
        tf.PhiForCausalLM(tf.PhiConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=4, pad_token_id=0)).save_pretrained(root / "phi")
    (root / "empty").mkdir()
    return root


def test_check_model_reports_family_interventions_and_differences(ckpts):
    r = CliRunner().invoke(app, ["check-model", str(ckpts / "qwen3"), "--dtype", "float64", "--seq-len", "24",
                                 "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output[r.output.index("{"):])
    assert rep["family"] == "qwen3" and rep["passed"] and rep["dtype"] == "float64"
    names = [c["intervention"] for c in rep["checks"]]
    assert names == ["full", "lm_infinite", "lambda_mask", "sliding_window", "attention_sinks", "streaming"]
    assert all(c["max_abs_diff"] <= 1e-10 * rep["logit_scale"] for c in rep["checks"])
    assert rep["layout"]["qk_norm"] == "head"


def test_check_model_exits_1_above_tolerance(ckpts, monkeypatch):
    import lmsci.models.check as chk

    monkeypatch.setitem(chk.TOLERANCE, "float32", -1.0)  # no difference can be below a negative tolerance
    r = CliRunner().invoke(app, ["check-model", str(ckpts / "qwen3"), "--seq-len", "16"])
    assert r.exit_code == 1 and "ABOVE TOLERANCE" in r.output


@pytest.mark.parametrize("case,args,needle", [
    ("phi", [], "family 'phi'"),
    ("empty", [], "config.json"),
    ("qwen3", ["--dtype", "float16"], "--dtype"),
])
def test_check_model_bad_input_exits_2_before_loading(ckpts, case, args, needle):
    r = CliRunner().invoke(app, ["check-model", str(ckpts / case), *args])
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output
