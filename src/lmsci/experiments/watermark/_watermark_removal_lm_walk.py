"""The models and the random walk of :mod:`lmsci.experiments.watermark.watermark_removal_lm` (private to it).

* :func:`check_model` / :func:`load` -- a pretrained causal LM by zoo name, local Hugging Face directory or ``.gguf``
  file (:func:`lmsci.models.zoo.load_cached`, once per process and device), or :data:`TINY`, a tiny random Llama
  without a tokenizer (the smoke preset and the tests run the whole pipeline on it in seconds).
* :func:`sample_prompts` -- Shakespeare windows in the model's tokenizer (random ids without one): ``watermark-lm``'s
  prompts (:func:`lmsci.experiments.watermark._watermark_lm_common.sample_prompts`, imported here).
* :func:`stopping_walk` -- Algorithm 1 of "Watermarks in the Sand" (Zhang et al., ICML 2024, arXiv 2311.04378) as
  token span resampling from a causal LM (the perturbation oracle of the toy ``watermark-removal``,
  :func:`~lmsci.experiments.watermark._watermark_removal_walk.propose_span`, with its Metropolis-Hastings step and
  quality oracle), with the official per-text stopping rule of the paper's code (``RandomWalkAttack.edit`` of
  hlzhang109/impossibility-watermark: a text stops once its z-score is at most ``stop_z`` and it has made
  ``total_steps`` steps or ``target_valid`` acceptances; lmsci caps the walk at ``max_steps``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from lmsci.errors import ConfigError
from lmsci.experiments.watermark._watermark_lm_common import sample_prompts  # noqa: F401 (this module's API)
from lmsci.experiments.watermark._watermark_removal_walk import propose_span, token_logprobs
from lmsci.methods import watermark as wm

TINY = "tiny-llama"
"""The smoke preset's model: a 2-layer d_model 32 random Llama (GQA: 4 query, 2 key-value heads), vocabulary 128,
no tokenizer (prompts are random token ids). Its near-uniform next-token laws let the watermark show strongly."""
TINY_VOCAB = 128
SAME = "same"
_MODELS: dict[tuple[str, str], Any] = {}


def check_model(value: str, field: str = "model", allow_same: bool = False) -> None:
    """Refuse a model value before any work: :data:`TINY`, a zoo name, a local HF directory or a ``.gguf`` file
    (and ``"same"`` where ``allow_same``).

    Raises:
        ConfigError: naming ``field``, the value and the allowed values."""
    if value == TINY or (allow_same and value == SAME):
        return
    from lmsci.models.zoo import check_model_source

    try:
        check_model_source(value, field=field)
    except ConfigError as err:
        extra = f"; or {SAME!r} (the generator's weights)" if allow_same else ""
        raise ConfigError(field, value, f"{err.allowed}; or {TINY!r} (a tiny random Llama, for tests){extra}") from err


def vocab_size_of(value: str) -> int | None:
    """The vocabulary size a model value declares without loading weights (a zoo entry, a directory's
    ``config.json``, :data:`TINY`), or None when it cannot be read cheaply (a ``.gguf`` file)."""
    import json
    from pathlib import Path

    from lmsci.models.zoo import ZOO

    if value == TINY:
        return TINY_VOCAB
    if value in ZOO:
        return int(ZOO[value].vocab_size)
    cfg = Path(value).expanduser() / "config.json"
    if cfg.is_file():
        v = json.loads(cfg.read_text()).get("vocab_size")
        return int(v) if v is not None else None
    return None


def _tiny(device: str) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmsci.models.hf import HFModel

    cfg = LlamaConfig(vocab_size=TINY_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg)
    hf = HFModel(model.to(device).eval(), None, TINY)
    hf.provenance = {"source": TINY, "kind": "random", "deviation": "random weights (tests only)"}
    return hf


def load(name: str, device: str) -> Any:
    """The :class:`~lmsci.models.hf.HFModel` for ``name`` on ``device`` (cached per process; SDPA attention).

    Raises:
        ConfigError: as :func:`check_model`."""
    key = (name, str(device))
    if key not in _MODELS:
        check_model(name)
        if name == TINY:
            _MODELS[key] = _tiny(device)
        else:
            from lmsci.models.zoo import load_cached

            _MODELS[key] = load_cached(name, device, attn_implementation="sdpa", field="model")
    return _MODELS[key]


@torch.no_grad()
def stopping_walk(A: Any, prompts: torch.Tensor, y0: torch.Tensor, det: Any, *, span: int, tau: float,
                  stop_z: float, total_steps: int, target_valid: int, max_steps: int, detect_every: int, seed: int,
                  log: Callable[..., None], device: Any, steps: np.ndarray | None = None
                  ) -> tuple[torch.Tensor, dict, list[dict]]:
    """The random walk on the generated tokens of every text at once, one Markov chain per text.

    Each step draws one span start ``i`` (shared by the texts still walking, as the toy walk), resamples ``span``
    tokens from the attacker ``A`` given the left context (:func:`propose_span`, no watermark) and keeps the
    proposal when (1) Metropolis-Hastings accepts it, ``u < A(suffix | new span) / A(suffix | old span)`` (the
    proposal ``A(span | left)`` cancels, so the chain's stationary law is ``A``), and (2) the quality oracle finds
    it no worse than the ORIGINAL text: ``A``'s mean NLL of the generated tokens is at most the original's plus
    ``tau`` nats/token (Algorithm 1). After each acceptance the text's z-score is recomputed; the unedited original
    counts as ``z = +inf`` (the official initial z). A text stops once its z is ``<= stop_z`` and it has made
    ``total_steps`` steps or ``target_valid`` acceptances, or at ``max_steps`` steps (lmsci's cap: the official walk
    never stops while ``z > stop_z``).

    Args:
        A: the attacker's Hugging Face causal LM (``transformers`` module).
        prompts: ``[n, P]`` long; y0: ``[n, T]`` the watermarked generated tokens; det: the watermark detector.
        seed: the walk's seed (span starts, draws, MH uniforms; a CPU generator).
        log: ``log(**row)`` for the curve rows; device: where the texts live.
        steps: ``[n]`` (the null arms): every proposal is accepted (no MH step, no quality oracle) and text ``j``
            walks exactly ``steps[j]`` steps (0: the text is left as it is).

    Returns:
        (final generated tokens ``[n, T]``, result fields, the curve: median z of the current texts every
        ``detect_every`` steps and at the end). Result fields: ``accept_rate`` (mean over texts of acceptances per
        step), ``walk_steps_median`` / ``walk_steps_max``, ``capped_share`` (texts stopped by ``max_steps``),
        ``attacker_dq_median`` (``A``'s NLL change, final minus original, nats/token), ``tokens_changed`` and
        ``steps_per_text`` (``[n]``).
    """
    n, P, T = prompts.shape[0], prompts.shape[1], y0.shape[1]
    x = torch.cat([prompts, y0], 1)
    lpA = token_logprobs(A, x)[:, P - 1:]  # [n, T]
    q0 = -lpA.mean(1)
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    iters, valid = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    z_cur = np.full(n, np.inf)
    done = (steps <= 0) if steps is not None else np.zeros(n, dtype=bool)
    capped = np.zeros(n, dtype=bool)
    curve: list[dict] = []
    step = 0
    while True:
        if step % detect_every == 0 or done.all():
            z = wm.detect(det, x[:, P:])["z"]
            curve.append({"step": step, "z_median": float(np.median(z)), "z_mean": float(np.mean(z)),
                          "accept_rate": float(valid.sum() / max(int(iters.sum()), 1)),
                          "quality_A_change": float((-lpA.mean(1) - q0).median()), "walking": int((~done).sum())})
            log(**curve[-1])
        if done.all():
            break
        act = np.flatnonzero(~done)
        ia = torch.as_tensor(act, device=x.device)
        i = int(torch.randint(0, T - span + 1, (1,), generator=g))
        new, lp_tail = propose_span(A, x[ia], P + i, span, g)
        lp_new = torch.cat([lpA[ia, :i], lp_tail], 1)
        u = torch.rand(len(act), generator=g).to(device)
        if steps is None:
            mh = torch.log(u) < (lp_new[:, i + span:] - lpA[ia, i + span:]).sum(1)
            take = mh & ((-lp_new.mean(1)) <= q0[ia] + tau)
        else:
            take = torch.ones(len(act), dtype=torch.bool, device=x.device)
        x[ia] = torch.where(take[:, None], new, x[ia])
        lpA[ia] = torch.where(take[:, None], lp_new, lpA[ia])
        tk = take.cpu().numpy()
        iters[act] += 1
        valid[act] += tk
        if steps is None:
            acc = act[tk]
            if len(acc):
                z_cur[acc] = wm.detect(det, x[torch.as_tensor(acc, device=x.device), P:])["z"]
            stop = (z_cur <= stop_z) & ((iters >= total_steps) | (valid >= target_valid))
            capped |= ~done & ~stop & (iters >= max_steps)
            done |= stop | (iters >= max_steps)
        else:
            done |= iters >= steps
        step += 1
    final = x[:, P:]
    extra = {"accept_rate": float(np.mean(valid / np.maximum(iters, 1))),
             "walk_steps_median": float(np.median(iters)), "walk_steps_max": int(iters.max()),
             "capped_share": float(capped.mean()), "attacker_dq_median": float((-lpA.mean(1) - q0).median()),
             "tokens_changed": float((final != y0).float().mean()), "steps_per_text": iters}
    return final, extra, curve
