"""TransformerLens hook names as aliases of lmsci's (issue 31, item 4): each alias reads (and patches) the same
tensor as its lmsci name on a tiny GPT and, through the architecture map, on tiny Hugging Face models; the
TransformerLens identities between the residual hooks hold; unknown names keep their did-you-mean error."""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError, UnknownNameError
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hooks import TRANSFORMER_LENS_ALIASES, HookCache, transformer_lens_name

X = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(0))


def tiny(**kw) -> GPT:
    base = dict(vocab_size=40, seq_len=16, n_layers=2, n_heads=2, d_model=16, pos="rope")
    base.update(kw)
    return GPT(GPTConfig(**base), seed=3).eval()


def _aliases(n_layers: int):
    for tl, ours in TRANSFORMER_LENS_ALIASES.items():
        for i in range(n_layers) if "{i}" in tl else [None]:
            yield (tl, ours) if i is None else (tl.format(i=i), ours.format(i=i))


@pytest.mark.parametrize("kw", [dict(), dict(mlp="swiglu", norm="rmsnorm")])
def test_every_alias_reads_the_same_tensor_as_its_lmsci_name(kw):
    m = tiny(**kw)
    with torch.no_grad():
        for tl, ours in _aliases(m.cfg.n_layers):
            _, c = m.run_with_cache(X, [tl])
            _, ref = m.run_with_cache(X, [ours])
            assert list(c) == [ours] and torch.equal(c[ours], ref[ours]), tl
            assert torch.equal(c[tl], ref[ours])  # the cache also answers to the TransformerLens name


def test_an_alias_patches_like_its_lmsci_name():
    m = tiny()

    def zero(x, hook):
        return torch.zeros_like(x)

    with torch.no_grad():
        clean = m(X)
        for tl, ours in [("blocks.1.attn.hook_pattern", "blocks.1.attn.pattern"),
                         ("blocks.0.hook_mlp_out", "blocks.0.mlp.out"), ("hook_embed", "embed")]:
            a, b = m.run_with_hooks(X, [(tl, zero)]), m.run_with_hooks(X, [(ours, zero)])
            assert torch.equal(a, b) and not torch.equal(a, clean), tl


def test_layer_globs_carry_over():
    m = tiny()
    _, c = m.run_with_cache(X, "blocks.*.attn.hook_pattern")
    assert sorted(c) == ["blocks.0.attn.pattern", "blocks.1.attn.pattern"]
    assert transformer_lens_name("blocks.*.hook_resid_post") == "blocks.*.resid_post"


def test_transformer_lens_identities_hold():
    """TransformerLens's own relations between its hooks hold on the aliased tensors (so the names mean
    what they mean there): hook_embed is the token embedding (rotary model), resid_mid = resid_pre +
    attn_out, resid_post = resid_mid + mlp_out, hook_z has [B, T, n_heads, d_head]."""
    m = tiny()
    with torch.no_grad():
        _, c = m.run_with_cache(X, "*")
        assert torch.equal(c["hook_embed"], m.wte(X)) and torch.equal(c["blocks.0.hook_resid_pre"], c["hook_embed"])
        for i in range(2):
            torch.testing.assert_close(c[f"blocks.{i}.hook_resid_mid"],
                                       c[f"blocks.{i}.hook_resid_pre"] + c[f"blocks.{i}.hook_attn_out"])
            torch.testing.assert_close(c[f"blocks.{i}.hook_resid_post"],
                                       c[f"blocks.{i}.hook_resid_mid"] + c[f"blocks.{i}.hook_mlp_out"])
        assert c["blocks.0.attn.hook_z"].shape == (2, 12, 2, 8)
        torch.testing.assert_close(m.lm_head(c["ln_final.hook_normalized"]), m(X))


def test_hook_embed_with_learned_positions_is_refused():
    m = tiny(pos="learned")
    with pytest.raises(ConfigError) as e:
        m.run_with_cache(X, ["hook_embed"])
    assert "hook_resid_pre" in str(e.value)
    _, c = m.run_with_cache(X, ["blocks.0.hook_resid_pre"])  # TransformerLens's embed + pos_embed
    torch.testing.assert_close(c["blocks.0.resid_pre"], m.wte(X) + m.wpe(torch.arange(12)))
    _, c = m.run_with_cache(X, "*")
    with pytest.raises(KeyError, match="hook_resid_pre"):  # the cache does not pass embed off as hook_embed
        c["hook_embed"]


@pytest.mark.parametrize("name,model_kw", [
    ("blocks.0.attn.hook_q", {}),             # no lmsci hook point for queries: no alias
    ("hook_pos_embed", {"pos": "learned"}),
    ("blocks.0.hook_resid_pots", {}),         # a typo
    ("blocks.0.hook_resid_mid", {"mlp": "none"}),  # an alias whose lmsci point this model lacks
    ("blocks.5.hook_resid_post", {}),
])
def test_unknown_names_keep_their_did_you_mean_error(name, model_kw):
    m = tiny(**model_kw)
    with pytest.raises(UnknownNameError) as e:
        with m.hooks(cache=[name]):
            pass
    assert e.value.value == name  # the name as asked, not its translation
    if name == "blocks.0.hook_resid_pots":
        assert "Did you mean" in str(e.value) and "blocks.0.resid_post" in str(e.value)


def test_hook_cache_lookup():
    c = HookCache({"blocks.0.resid_post": torch.ones(1)})
    assert c["blocks.0.hook_resid_post"] is c["blocks.0.resid_post"]
    with pytest.raises(KeyError):
        c["blocks.1.hook_resid_post"]
    with pytest.raises(KeyError):
        c["nonsense"]


def test_probe_instrument_accepts_transformer_lens_names():
    from lmsci.measure.probes import hidden_at

    m = tiny()
    seqs, pos = [[1, 2, 3, 4], [5, 6, 7]], [3, 2]
    assert torch.equal(hidden_at(m, seqs, pos, hook="blocks.1.hook_resid_post"),
                       hidden_at(m, seqs, pos, hook="blocks.1.resid_post"))


HF_ALIASES = ["hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_attn_out", "blocks.1.hook_mlp_out",
              "blocks.0.mlp.hook_pre", "blocks.0.mlp.hook_post", "ln_final.hook_normalized"]


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_aliases_on_hugging_face_models(arch, tmp_path):
    pytest.importorskip("transformers")
    from lmsci.models.hf import load_hf
    from lmsci.models.hf_convert import export_hf

    kw = dict(pos="learned") if arch == "gpt2" else dict(mlp="swiglu", norm="rmsnorm", bias=False)
    m = tiny(**kw)
    export_hf(m, tmp_path)
    w = load_hf(tmp_path)
    with torch.no_grad():
        for tl in HF_ALIASES:
            ours = transformer_lens_name(tl)
            _, a = w.run_with_cache(X, [tl])
            _, b = w.run_with_cache(X, [ours])
            assert torch.equal(a[tl], b[ours]), tl
        _, c = w.run_with_cache(X, ["hook_embed"])
        assert torch.equal(c["hook_embed"], m.wte(X))  # the token embedding alone, as in TransformerLens
        _, c = w.run_with_cache(X, ["blocks.1.hook_resid_post"])
        _, r = m.run_with_cache(X, ["blocks.1.resid_post"])
        torch.testing.assert_close(c["blocks.1.hook_resid_post"], r["blocks.1.resid_post"], atol=1e-4, rtol=0)
        with pytest.raises(UnknownNameError):
            w.run_with_cache(X, ["blocks.0.attn.hook_q"])
