"""The text, the models and the key/value search of :mod:`lmsci.experiments.knowledge.mlp_memories_lm`.

* :func:`get_lm` loads the pretrained causal LM (zoo name, local Hugging Face directory or ``.gguf`` file, once per
  process and device) or builds :data:`TINY`, a random 4-layer Llama with a character tokenizer over the
  Shakespeare corpus (the smoke preset and the tests); :func:`random_init_copy` is the same architecture
  re-initialised by ``transformers``' own initialiser (the ``random_init`` arm).
* :func:`shakespeare_windows` draws a seed's random windows of the corpus (:mod:`lmsci.worlds.shakespeare`), each
  starting at a line start and prefixed with the document separator.
* :func:`search_keys` finds the top-``k`` trigger prefixes of a random sample of neurons per layer and, from the
  same forward passes, the model's NLL on the windows; :func:`value_side` projects the sampled neurons' values
  onto the vocabulary (:func:`lmsci.measure.kv_memories.value_logits`).

Why not :func:`lmsci.measure.kv_memories.key_value_memories` itself (which defines keys and values correctly for a
gated MLP: its hook ``blocks.{l}.mlp.post`` is the down projection's input ``act(gate) * up``, and a value is a
column of ``down_proj``, :meth:`lmsci.models.arch.Arch.mlp_values`): it projects *every* neuron of every layer
(SmolLM2-135M: 30 x 1536 values x 49,152 tokens, ~1.3 TFLOP per model, minutes on one CPU thread), while a seed
here is a random *sample* of neurons; and it discards the logits of its forward passes, which give the NLL gate
for free. The search below uses the same hook, the same masking and the same streaming top-k; the agreement and
the exact shuffled baseline are the library's (:class:`~lmsci.measure.kv_memories.KVMemories`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.measure.kv_memories import check_layers, next_token_targets, value_logits

TINY = "tiny-llama"
"""The smoke preset's model: a 4-layer d_model 32, d_mlp 64 random Llama (SiLU-gated MLP, GQA) with a character
tokenizer over the Shakespeare corpus; no file is read."""
SEPARATOR = "<|endoftext|>"

_MODELS: dict[tuple[str, str], Any] = {}
_TEXT: list[str] = []


def check_model_name(value: str, field: str = "model") -> None:
    """Refuse a bad model value before any work (:func:`lmsci.models.zoo.check_model_source`; reads no weights).

    Raises:
        ConfigError: naming ``field``, the value and the allowed values (zoo names, a local HF directory, a
            ``.gguf`` file, or ``tiny-llama``).
    """
    if value == TINY:
        return
    from lmsci.models.zoo import check_model_source

    try:
        check_model_source(value, field)
    except ConfigError as err:
        raise ConfigError(field, value, f"{err.allowed}; or {TINY!r} (a tiny random Llama, for tests)") from err


def corpus_text() -> str:
    """The cleaned Shakespeare works joined by blank lines (read once per process).

    Raises:
        DataError: the corpus package is missing.
    """
    if not _TEXT:
        from lmsci.worlds.shakespeare import load_works

        _TEXT.append("\n\n".join(w.text for w in load_works()))
    return _TEXT[0]


class CharTokenizer:
    """A character tokenizer for :data:`TINY`: id 0 is :data:`SEPARATOR`, id 1 unknown, then the corpus's
    characters (sorted)."""

    def __init__(self, chars: str):
        self.vocab = {SEPARATOR: 0, "<unk>": 1, **{c: i + 2 for i, c in enumerate(sorted(set(chars)))}}
        self.inv = {i: c for c, i in self.vocab.items()}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.vocab.get(c, 1) for c in text]

    def decode(self, ids: Any) -> str:
        return "".join(self.inv.get(int(i), "?") for i in ids)

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.vocab.get(token)

    def convert_ids_to_tokens(self, i: int) -> str | None:
        return self.inv.get(int(i))

    def __len__(self) -> int:
        return len(self.vocab)


def _tiny(device: str) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmsci.models.hf import HFModel

    tok = CharTokenizer(corpus_text())
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = LlamaForCausalLM(cfg).eval()
    hf = HFModel(m.to(device), tok, TINY)
    hf.provenance = {"source": TINY, "kind": "random", "deviation": "random weights (tests only)"}
    return hf


def get_lm(name: str, device: str) -> Any:
    """The :class:`~lmsci.models.hf.HFModel` named ``name`` on ``device`` (float32, eval mode, no gradients),
    loaded once per process and device; its weights are never changed.

    Raises:
        ConfigError: as :func:`check_model_name`; a model without a tokenizer.
    """
    key = (name, str(device))
    if key not in _MODELS:
        check_model_name(name)
        if name == TINY:
            hf = _tiny(device)
        else:
            from lmsci.models.zoo import load_cached

            hf = load_cached(name, device, field="model")
            if hf.tokenizer is None:
                raise ConfigError("model", name, "a causal LM with a tokenizer (the text is tokenised by it)")
        for p in hf.parameters():
            p.requires_grad_(False)
        _MODELS[key] = hf
    return _MODELS[key]


def random_init_copy(hf: Any, seed: int) -> Any:
    """The same architecture (``hf.model.config``) with fresh weights from ``transformers``' own initialiser
    (Llama: normal, std ``initializer_range``; norms at 1), drawn under ``torch.manual_seed(seed)``; same device,
    dtype and tokenizer; an :class:`~lmsci.models.hf.HFModel` in eval mode."""
    from transformers import AutoModelForCausalLM

    from lmsci.models.hf import HFModel

    p = next(hf.model.parameters())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        m = AutoModelForCausalLM.from_config(copy.deepcopy(hf.model.config))
    m = m.to(device=p.device, dtype=p.dtype).eval()
    for q in m.parameters():
        q.requires_grad_(False)
    out = HFModel(m, hf.tokenizer, f"{hf.name} (random init)")
    out.provenance = {**getattr(hf, "provenance", {}), "deviation": f"random re-initialisation, seed {seed}"}
    return out


def separator_id(tok: Any) -> int:
    """The id of :data:`SEPARATOR` (SmolLM2's document separator), else the tokenizer's BOS or EOS id.

    Raises:
        ConfigError: the tokenizer has none of them.
    """
    tid = tok.convert_tokens_to_ids(SEPARATOR)
    if tid is not None and tok.convert_ids_to_tokens(int(tid)) == SEPARATOR:  # (SmolLM2: also its unk token, id 0)
        return int(tid)
    for name in ("bos_token_id", "eos_token_id"):
        if getattr(tok, name, None) is not None:
            return int(getattr(tok, name))
    raise ConfigError("model", getattr(tok, "name_or_path", "?"), f"a tokenizer with {SEPARATOR!r}, BOS or EOS")


def shakespeare_windows(tok: Any, n_windows: int, seq_len: int, seed: int) -> Tensor:
    """``[n_windows, seq_len + 1]`` long: the separator, then ``seq_len`` tokens of the corpus from the first line
    start after a character offset drawn uniformly at random (so a line is drawn with probability proportional to
    the length of the line before it; ``numpy`` generator seeded by ``seed``; windows may overlap)."""
    text, rng, sep = corpus_text(), np.random.default_rng(seed), separator_id(tok)
    out = torch.empty(n_windows, seq_len + 1, dtype=torch.long)
    for i in range(n_windows):
        o = int(rng.integers(0, len(text) - 1))
        o = text.find("\n", o) + 1 if text.find("\n", o) >= 0 else 0
        ids: list[int] = []
        span = 8 * seq_len
        while len(ids) < seq_len:
            chunk = text[o:o + span]
            if len(chunk) < span and o > 0:  # near the end: start over at the corpus's beginning
                o, chunk = 0, text[:span]
            ids = list(tok.encode(chunk, add_special_tokens=False))
            span *= 2
        out[i, 0] = sep
        out[i, 1:] = torch.as_tensor(ids[:seq_len])
    return out


def sample_neurons(n_layers: int, d_mlp: int, n: int, seed: int) -> Tensor:
    """``[n_layers, n]`` long: per layer, ``n`` distinct neuron indices drawn uniformly (sorted; all when ``n``
    is ``d_mlp``).

    Raises:
        ConfigError: ``n`` outside ``[2, d_mlp]``.
    """
    if not 2 <= n <= d_mlp:
        raise ConfigError("n_neurons", n, f"an integer in [2, {d_mlp}] (d_mlp = {d_mlp})")
    g = torch.Generator().manual_seed(int(seed))
    return torch.stack([torch.randperm(d_mlp, generator=g)[:n].sort().values for _ in range(n_layers)])


def cyclic_derangement(n: int, seed: int) -> Tensor:
    """``[n]`` long: a uniformly random ``n``-cycle ``pi`` (``pi[i] != i`` for all ``i``, ``n >= 2``)."""
    g = torch.Generator().manual_seed(int(seed))
    order = torch.randperm(n, generator=g)
    pi = torch.empty(n, dtype=torch.long)
    pi[order] = order.roll(-1)
    return pi


@dataclass
class Keys:
    """Top trigger prefixes of the sampled neurons: ``acts [L, n, k]`` (descending), ``where [L, n, k, 2]``
    (window, position of the prefix's last token), ``next [L, n, k]`` (the token after it); the model's ``nll``
    (nats/token) over the ``n_positions`` prefixes searched; wall ``seconds`` of the forward passes."""

    layers: list[int]
    neurons: Tensor
    acts: Tensor
    where: Tensor
    next: Tensor
    nll: float
    n_positions: int
    seconds: float


def search_keys(model: Any, windows: Tensor, neurons: Tensor, k: int = 1, batch_size: int = 8) -> Keys:
    """Geva et al. (arXiv 2012.14913, Sec. 3) trigger prefixes of the sampled neurons of every layer, and the NLL.

    A prefix ends at any position ``t >= 1`` of a window with a successor (position 0, the separator alone, is
    not searched); neuron ``i``'s coefficient is ``blocks.{l}.mlp.post[..., i]`` (gated MLP: ``act(gate) * up``,
    the down projection's input). The NLL of the next token is averaged over the same positions.

    Args:
        model: an :class:`~lmsci.models.hf.HFModel`. windows: ``[N, T]`` long (:func:`shakespeare_windows`).
        neurons: ``[n_layers, n]`` (:func:`sample_neurons`). k: prefixes kept per neuron.

    Raises:
        ConfigError: ``neurons`` not ``[n_layers, n]``; ``k`` larger than the positions searched.
    """
    layers = check_layers(model, None)
    if neurons.dim() != 2 or neurons.shape[0] != len(layers):
        raise ConfigError("neurons", tuple(neurons.shape), f"[n_layers = {len(layers)}, n]")
    nxt_all = next_token_targets(windows)
    nxt_all[:, 0] = -1
    valid = int((nxt_all >= 0).sum())
    if not 1 <= k <= valid:
        raise ConfigError("top_k", k, f"an integer in [1, {valid}] (the prefixes searched)")
    dev = next(model.parameters()).device
    names = [f"blocks.{l}.mlp.post" for l in layers]
    idx_dev = neurons.to(dev)
    T = windows.shape[1]
    best_a: list[Tensor | None] = [None] * len(layers)
    best_i: list[Tensor | None] = [None] * len(layers)
    nll_sum, t0 = 0.0, time.perf_counter()
    with torch.no_grad():
        for s in range(0, windows.shape[0], batch_size):
            x, nxt = windows[s:s + batch_size].to(dev), nxt_all[s:s + batch_size].to(dev)
            with model.hooks(cache=names) as cache:
                logits = model(x)
            ok = (nxt >= 0).reshape(-1)
            nll_sum += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1])[ok].float(),
                                             nxt.reshape(-1)[ok], reduction="sum"))
            del logits
            flat = (torch.arange(s, s + x.shape[0], device=dev)[:, None] * T
                    + torch.arange(T, device=dev)[None, :]).reshape(-1)
            for j, name in enumerate(names):
                a = cache[name].reshape(-1, cache[name].shape[-1])[:, idx_dev[j]].float()  # [B*T, n]
                a = a.masked_fill(~ok[:, None], float("-inf"))
                i = flat[:, None].expand_as(a)
                if best_a[j] is not None:
                    a, i = torch.cat([best_a[j], a]), torch.cat([best_i[j], i])
                top, w = torch.topk(a, min(k, a.shape[0]), dim=0)
                best_a[j], best_i[j] = top, torch.gather(i, 0, w)
    seconds = time.perf_counter() - t0
    flat_next = nxt_all.reshape(-1).to(dev)
    acts = torch.stack([b.T for b in best_a]).cpu()
    pos = torch.stack([b.T for b in best_i])
    return Keys(layers, neurons, acts, torch.stack([pos // T, pos % T], dim=-1).cpu(), flat_next[pos].cpu(),
                nll_sum / valid, valid, seconds)


def value_side(model: Any, keys: Keys, targets: list[Tensor], *, norm: str = "none", n_top: int = 5,
               chunk: int = 512) -> tuple[Tensor, list[Tensor]]:
    """The sampled neurons' values on the vocabulary (Geva et al. Sec. 4, ``v_i E``): ``value_top [L, n, n_top]``
    (descending), and for each ``targets[m]`` (``[L, n]`` token ids, one per neuron) the rank (0 = top) of that
    token in the neuron's ``v_i E``: ``[L, n]`` each.

    Raises:
        ConfigError: a bad norm (:func:`lmsci.measure.kv_memories.value_logits`).
    """
    tops, ranks = [], [[] for _ in targets]
    for j, l in enumerate(keys.layers):
        tl, rl = [], [[] for _ in targets]
        for c in range(0, keys.neurons.shape[1], chunk):
            lg = value_logits(model, l, norm=norm, neurons=keys.neurons[j, c:c + chunk])  # [chunk, vocab]
            tl.append(torch.topk(lg, min(n_top, lg.shape[1]), dim=1).indices.cpu())
            for m, t in enumerate(targets):
                tgt = lg.gather(1, t[j, c:c + chunk, None].to(lg.device))
                rl[m].append((lg > tgt).sum(1).cpu())
        tops.append(torch.cat(tl))
        for m in range(len(targets)):
            ranks[m].append(torch.cat(rl[m]))
    return torch.stack(tops), [torch.stack(r) for r in ranks]
