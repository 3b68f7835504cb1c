"""Parity of attention policies on every family of the architecture map (issue 21), in float64.

Each family is a tiny random model built here (2 layers, d_model 32-48, no download). For every family:
a policy that changes nothing reproduces the unpatched logits; streaming decode token by token
reproduces the full-sequence patched logits with a bounded cache; a window shorter than the sequence
changes the logits; batch 1 and batch 4 agree. Tolerance: 1e-10 x the largest |logit|. The reference is
the family's own eager attention with its float32 softmax kept in float64 (:func:`full_precision_softmax`).
"""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.methods.lm_infinite import (
    AttentionPatch,
    attention_sinks_policy,
    full_policy,
    lambda_mask_policy,
    lm_infinite_policy,
    patched,
    sliding_window_policy,
)
from lmsci.models.hf_attention import full_precision_softmax
from lmsci.models.arch import FAMILIES, SUPPORTED, TRANSFORMERS_RANGE, arch_of, check_transformers_version

V, N = 64, 32  # vocab, sequence length
TOL = 1e-10
COMMON = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=128, initializer_range=0.3, attn_implementation="eager")


def _build(name: str):
    import transformers as tf

    c = dict(COMMON)
    if name == "llama":
        cls, cfg = tf.LlamaForCausalLM, tf.LlamaConfig(num_key_value_heads=4, **c)
    elif name == "llama_gqa":
        cls, cfg = tf.LlamaForCausalLM, tf.LlamaConfig(num_key_value_heads=2, **c)
    elif name == "mistral":
        cls, cfg = tf.MistralForCausalLM, tf.MistralConfig(num_key_value_heads=2, sliding_window=None, **c)
    elif name == "mistral_window":
        cls, cfg = tf.MistralForCausalLM, tf.MistralConfig(num_key_value_heads=2, sliding_window=12, **c)
    elif name == "mixtral":
        cls, cfg = tf.MixtralForCausalLM, tf.MixtralConfig(num_key_value_heads=2, num_local_experts=4,
                                                           num_experts_per_tok=2, sliding_window=None,
                                                           experts_implementation="eager", **c)
    elif name == "qwen2":
        cls, cfg = tf.Qwen2ForCausalLM, tf.Qwen2Config(num_key_value_heads=2, use_sliding_window=True,
                                                       sliding_window=12, max_window_layers=1, **c)
    elif name == "qwen3":
        cls, cfg = tf.Qwen3ForCausalLM, tf.Qwen3Config(num_key_value_heads=2, head_dim=8, **c)
    elif name == "gemma":
        cls, cfg = tf.GemmaForCausalLM, tf.GemmaConfig(num_key_value_heads=1, head_dim=8, **c)
    elif name == "gemma2":
        cls, cfg = tf.Gemma2ForCausalLM, tf.Gemma2Config(num_key_value_heads=2, head_dim=8, sliding_window=12,
                                                         query_pre_attn_scalar=8, attn_logit_softcapping=2.0,
                                                         **c)
    elif name == "gemma3_text":
        cls, cfg = tf.Gemma3ForCausalLM, tf.Gemma3TextConfig(
            num_key_value_heads=2, head_dim=8, sliding_window=12, query_pre_attn_scalar=8,
            layer_types=["sliding_attention", "full_attention"], **c)
    elif name == "olmo2":
        cls, cfg = tf.Olmo2ForCausalLM, tf.Olmo2Config(num_key_value_heads=2, **c)
    elif name == "phi3":
        cls, cfg = tf.Phi3ForCausalLM, tf.Phi3Config(num_key_value_heads=2, pad_token_id=0, bos_token_id=1,
                                                     eos_token_id=2, partial_rotary_factor=0.5, **c)
    elif name == "gpt_neox":
        c.pop("max_position_embeddings")
        cls, cfg = tf.GPTNeoXForCausalLM, tf.GPTNeoXConfig(max_position_embeddings=128, rotary_pct=0.5, **c)
    elif name == "gpt2":
        cls, cfg = tf.GPT2LMHeadModel, tf.GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                                     initializer_range=0.3, attn_implementation="eager")
    elif name == "lmsci-gpt":
        from lmsci.models.gpt import GPT, GPTConfig

        return GPT(GPTConfig(vocab_size=V, seq_len=N, n_layers=2, n_heads=4, d_model=32, pos="rope"),
                   seed=0).double().eval()
    else:  # pragma: no cover
        raise KeyError(name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = cls(cfg)
    return m.double().eval()


CASES = ["llama", "llama_gqa", "mistral", "mistral_window", "mixtral", "qwen2", "qwen3", "gemma", "gemma2",
         "gemma3_text", "olmo2", "phi3", "gpt_neox", "gpt2", "lmsci-gpt"]
ABSOLUTE = {"gpt2"}


@pytest.fixture(scope="module")
def models():
    return {}


@pytest.fixture(autouse=True)
def _float64_reference():
    """Hugging Face's eager attention rounds its logits to float32 before the softmax even in float64;
    the reference runs the family's own eager code in float64 throughout."""
    with full_precision_softmax():
        yield


def _model(models, name):
    if name not in models:
        models[name] = _build(name)
    return models[name]


def _logits(m, x):
    out = m(x) if not hasattr(m, "config") else m(input_ids=x)
    return out if isinstance(out, torch.Tensor) else out.logits


def _close(a, b, ref):
    return float((a - b).abs().max()) <= TOL * float(ref.abs().max())


def _policies(name):
    """(no-op policies, a policy narrower than the sequence)."""
    if name in ABSOLUTE:
        return [full_policy(), lambda_mask_policy(64, 4), sliding_window_policy(64)], lambda_mask_policy(6, 2)
    return ([full_policy(), full_policy(block_size=7), lm_infinite_policy(128, 4, block_size=8),
             sliding_window_policy(128), attention_sinks_policy(128, 4)], lm_infinite_policy(6, 2))


def test_every_family_of_the_map_is_tested():
    tested = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2", "phi3",
              "gpt_neox", "gpt2", "lmsci-gpt"}
    assert set(SUPPORTED) == tested
    for name in CASES:
        assert arch_of(_build(name)).name in FAMILIES


@pytest.mark.parametrize("name", CASES)
def test_noop_policy_reproduces_unpatched_and_removal_is_exact(models, name):
    m = _model(models, name)
    x = torch.randint(0, V, (2, N), generator=torch.Generator().manual_seed(1))
    noops, _ = _policies(name)
    with torch.no_grad():
        ref = _logits(m, x)
        for pol in noops:
            with patched(m, pol):
                got = _logits(m, x)
            assert _close(got, ref, ref), (name, pol.label(), float((got - ref).abs().max()))
        assert torch.equal(_logits(m, x), ref)


@pytest.mark.parametrize("name", CASES)
def test_narrow_window_changes_logits_streaming_matches_and_cache_is_bounded(models, name):
    m = _model(models, name)
    x = torch.randint(0, V, (1, N), generator=torch.Generator().manual_seed(2))
    _, pol = _policies(name)
    with torch.no_grad():
        ref = _logits(m, x)
        with patched(m, pol) as p:
            long = _logits(m, x)
            assert not _close(long, ref, ref) and float((long - ref).abs().max()) > 1e-6 * float(ref.abs().max())
            with p.stream() as s:
                outs = [s.feed(x[:, i:i + 1]) for i in range(N)]
                assert s.cache_len() <= pol.cache_budget()
                assert s.max_cache <= pol.cache_budget() + 1
            stream = torch.cat(outs, 1)
            assert _close(stream, long, long), (name, float((stream - long).abs().max()))


@pytest.mark.parametrize("name", CASES)
def test_batch_of_four_equals_one_at_a_time(models, name):
    m = _model(models, name)
    x = torch.randint(0, V, (4, N), generator=torch.Generator().manual_seed(3))
    _, pol = _policies(name)
    with torch.no_grad(), patched(m, pol):
        both = _logits(m, x)
        for r in range(4):
            one = _logits(m, x[r:r + 1])
            assert _close(both[r:r + 1], one, one), (name, r)


def test_model_window_and_softcap_are_kept_and_recorded(models):
    g2 = _model(models, "gemma2")
    a = arch_of(g2)
    assert [a.sliding_window(i) for i in range(2)] == [12, None] and a.softcap(0) == 2.0
    x = torch.randint(0, V, (1, N), generator=torch.Generator().manual_seed(4))
    with torch.no_grad(), patched(g2, full_policy()) as p:
        _logits(g2, x)
        assert p.windows == {0: 12, 1: None}
    # the model's window is narrower than the policy's: the patched model equals the unpatched one
    mw = _model(models, "mistral_window")
    with torch.no_grad():
        ref = _logits(mw, x)
        with patched(mw, lm_infinite_policy(20, 0, d_max=10**6)):
            assert _close(_logits(mw, x), ref, ref)
    # dropping the window (what a patch that ignored it would compute) is far from the model
    nowin = _model(models, "mistral")
    nowin_state = {k: v.clone() for k, v in nowin.state_dict().items()}
    nowin.load_state_dict(mw.state_dict())
    with torch.no_grad():
        dropped = _logits(nowin, x)
    nowin.load_state_dict(nowin_state)
    assert float((dropped - ref).abs().max()) > 1e-3 * float(ref.abs().max())


def test_gemma3_uses_the_rotary_tables_of_each_layer_type(models):
    m = _model(models, "gemma3_text")
    a = arch_of(m)
    pos = torch.arange(5)
    c0, _ = a.rotary_tables(0)(pos)
    c1, _ = a.rotary_tables(1)(pos)
    assert not torch.allclose(c0, c1)  # local (sliding) and global layers have different rope bases


def test_bad_input_is_refused_by_name_before_any_work(models):
    import transformers as tf

    # an unsupported family: named, with the supported list
    phi = tf.PhiForCausalLM(tf.PhiConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, pad_token_id=0))
    with pytest.raises(ConfigError) as e:
        AttentionPatch(phi, full_policy())
    assert "phi" in str(e.value.value) and "llama" in e.value.allowed and "gemma3_text" in e.value.allowed
    # a padded batch under a patch
    m = _model(models, "qwen3")
    x = torch.randint(0, V, (2, 10), generator=torch.Generator().manual_seed(5))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, :3] = 0
    with patched(m, lm_infinite_policy(8, 2)), pytest.raises(ConfigError) as e:
        m(input_ids=x, attention_mask=mask)
    assert e.value.field == "attention_mask"
    # absolute positions: no distance ceiling, no sinks, no window beyond the position table
    g = _model(models, "gpt2")
    for pol, field in ((lm_infinite_policy(8, 2), "policy.kind"), (attention_sinks_policy(8, 2), "policy.kind"),
                       (lambda_mask_policy(100, 4), "policy.n_local")):
        with pytest.raises(ConfigError) as e:
            AttentionPatch(g, pol)
        assert e.value.field == field
    with patched(g, lambda_mask_policy(8, 2)), pytest.raises(ConfigError) as e:
        g(input_ids=torch.zeros(1, 65, dtype=torch.long))
    assert e.value.field == "sequence length"
    assert not g.transformer._forward_pre_hooks  # the checks leave with the patch


def test_transformers_version_range_is_declared_and_enforced():
    import transformers

    assert check_transformers_version() == transformers.__version__
    for bad in ("4.44.0", "5.24.0", "6.0.0"):
        with pytest.raises(ConfigError) as e:
            check_transformers_version(bad)
        assert e.value.field == "transformers" and TRANSFORMERS_RANGE[0] in e.value.allowed
    check_transformers_version("5.0.0")
    import tomllib
    from pathlib import Path

    deps = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"transformers{','.join(TRANSFORMERS_RANGE)}" in deps
