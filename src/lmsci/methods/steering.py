"""A steering harness for causal LMs: attach, train, score and generate with named steers; two baselines.

One harness serves LM-Steer (:class:`lmsci.methods.lm_steer.LMSteer`, a linear map on the input of the
unembedding) and the two baselines defined here, so that they are trained with the same loss on the same
data, attached the same way and driven by the same steer values:

* :class:`LogitOffset` -- a vocabulary bias ``b_k [vocab_size]`` added to the logits,
  ``logits <- logits + eps * sum_k s_k b_k``; the ``offset`` adaptor of the LM-Steer code
  (``Glaciohound/LM-Steer@265982f:lm_steer/models/steers.py``), trained with the LM-Steer loss.
* :class:`ActAdd` -- a steering vector ``a_k [d_model]`` added to the residual stream leaving block
  ``layer`` at every position, ``x <- x + eps * sum_k s_k a_k`` (activation addition, Turner et al. 2023,
  arXiv 2308.10248). Two ways to obtain ``a``: trained with the LM-Steer loss (:func:`train_intervention`),
  or :meth:`ActAdd.from_contrast`, the difference of the mean residual activations of positive and negative
  texts (the mean-difference form of Rimsky et al. 2023, arXiv 2312.06681; Turner et al. contrast a single
  prompt pair, "Love" - "Hate", and inject at the first positions only -- here the vector is added at every
  position, which is what the steer values then scale).

Every steer holds ``K`` named steers (``names``; with ``dummy=True`` the last one is ``"dummy"``, see
:mod:`lmsci.methods.lm_steer`) and acts with a steer-value tensor ``s``: ``[K]`` (one setting for the whole
batch) or ``[batch, K]`` (one per example). The scalar ``epsilon`` multiplies every steer (LM-Steer's
``eps0 = 1e-3``; 1.0 for the baselines). The steer values are the scale knob: ``k * s`` scales the
intervention by ``k`` (the knob an experiment turns to match fluency cost across methods).

Models: an lmsci :class:`~lmsci.models.gpt.GPT`, an :class:`~lmsci.models.hf.HFModel`, or a raw
``transformers`` causal LM (wrapped by :func:`as_steerable`). Where each site is on each model:

==================  ===========================================  ==========================================
site                lmsci GPT                                    Hugging Face causal LM
==================  ===========================================  ==========================================
``unembed_input``   hook point ``final`` (input of ``lm_head``;  forward pre-hook on
                    also fires in ``sum_nll``)                   ``get_output_embeddings()`` (``lm_head``)
``logits``          forward hook on ``lm_head``                  forward hook on ``get_output_embeddings()``
``residual``        hook point ``blocks.{layer}.resid_post``     output of block ``layer`` (architecture
                                                                 map, :mod:`lmsci.models.arch`)
==================  ===========================================  ==========================================

Functions (shapes: ``B`` batch, ``T`` sequence, ``K`` steers, ``V`` vocabulary, ``d`` = ``d_model``):

* :func:`steering` ``(model, steer, values)`` -- context manager: the steer acts inside the block.
* :func:`train_intervention` ``(model, steer, data, values, ...)`` -- next-token cross-entropy of the
  steered LM, padding masked, LM frozen (checked: after the first backward no LM parameter has a gradient);
  raises :class:`~lmsci.errors.DivergedError` on a non-finite loss.
* :func:`token_logprobs` ``(model, input_ids, steer, values)`` -> ``[B, T-1]`` log P(x_t | x_<t) (nats).
* :func:`generate` ``(model, input_ids, steer, values, max_new_tokens, **kw)`` -> ``[B, T + new]`` with the
  model's own ``generate`` and the steer active.
* :func:`save_steer` / :func:`load_steer` (``steer.json`` + ``steer.safetensors``).
* :func:`mean_nll` (the training loss), :func:`unembed_inputs` ``-> [N, d]`` (final hidden states),
  :func:`pad_batch`, :func:`as_token_lists`, :func:`hidden_size`, :func:`output_embeddings`.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmsci.errors import ConfigError, DivergedError, UnknownNameError
from lmsci.models.device import device_of
from lmsci.models.gpt import GPT
from lmsci.models.hf import HFModel

SITES = ("unembed_input", "logits", "residual")


# ------------------------------------------------------------------------------------ models


def as_steerable(model: Any) -> GPT | HFModel:
    """``model`` as an lmsci :class:`GPT` or :class:`HFModel` (a raw ``transformers`` model is wrapped).

    Raises:
        ConfigError: field ``model`` for anything else, or for a Hugging Face model without an output
            embedding (``get_output_embeddings()`` is None or not a linear layer: a base model without
            ``lm_head``).
    """
    if isinstance(model, GPT):
        return model
    if not isinstance(model, HFModel):
        if isinstance(model, nn.Module) and hasattr(model, "get_output_embeddings") and hasattr(model, "config"):
            model = HFModel(model, None, type(model).__name__)
        else:
            raise ConfigError("model", type(model).__name__,
                              "an lmsci GPT, an lmsci HFModel or a transformers causal LM with an lm_head")
    head = model.model.get_output_embeddings() if hasattr(model.model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if not isinstance(head, nn.Module) or not isinstance(weight, Tensor) or weight.dim() != 2:
        raise ConfigError("model", f"{type(model.model).__name__} (output embeddings: {type(head).__name__})",
                          "a causal LM with an lm_head (a linear output embedding, weight [vocab, d]), e.g. "
                          "LlamaForCausalLM; not a base model such as LlamaModel")
    return model


def lm_head(model: GPT | HFModel) -> nn.Module:
    """The unembedding module (``lm_head``; GPT-NeoX ``embed_out``), weight ``[V, d]``."""
    model = as_steerable(model)
    return model.lm_head if isinstance(model, GPT) else model.model.get_output_embeddings()


def hidden_size(model: Any) -> int:
    """``d``: the width of the input of the unembedding."""
    return int(lm_head(model).weight.shape[1])


def vocab_size(model: Any) -> int:
    """``V``: the number of logits (rows of the unembedding)."""
    return int(lm_head(model).weight.shape[0])


def output_embeddings(model: Any) -> Tensor:
    """The output word embeddings ``E [V, d]`` (the ``lm_head`` weight; tied models share it with the input
    embedding), detached."""
    return lm_head(model).weight.detach()


def n_layers(model: Any) -> int:
    """Number of transformer blocks (lmsci GPT: ``cfg.n_layers``; Hugging Face: the architecture map)."""
    model = as_steerable(model)
    if isinstance(model, GPT):
        return model.cfg.n_layers
    from lmsci.models.arch import arch_of

    return arch_of(model).n_layers


def logits_of(model: GPT | HFModel, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """Forward pass: ``input_ids [B, T]`` (+ ``attention_mask [B, T]`` for Hugging Face models; lmsci GPTs are
    causal and right padding never reaches an earlier position) -> logits ``[B, T, V]``."""
    if isinstance(model, GPT):
        return model(input_ids)
    return model.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


# ------------------------------------------------------------------------------------ steers


class Steer(nn.Module):
    """Base class of the steers: ``K`` named steers acting at one ``site`` of a model.

    Args:
        names: the steer names (unique, non-empty strings).
        dummy: append a steer named ``"dummy"`` (set to 1 for every training example; see
            :mod:`lmsci.methods.lm_steer`).
        epsilon: scalar multiplying every steer.

    Subclasses set ``site`` and implement :meth:`shift` (the activation at the site -> the steered one).
    """

    site: str = ""
    kinds: dict[str, type[Steer]] = {}

    def __init_subclass__(cls, **kw: Any):
        super().__init_subclass__(**kw)
        Steer.kinds[cls.__name__] = cls

    def config(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this steer's shape (for :func:`save_steer`)."""
        return {"names": list(self.names), "dummies": list(self.dummies), "epsilon": self.epsilon}

    def __init__(self, names: Sequence[str], dummy: bool = True, epsilon: float = 1.0):
        super().__init__()
        names = (names,) if isinstance(names, str) else tuple(names)
        if not names or any(not isinstance(n, str) or not n for n in names):
            raise ConfigError("names", names, "a non-empty sequence of non-empty strings")
        if dummy:
            names = (*names, "dummy")
        if len(set(names)) != len(names):
            raise ConfigError("names", names, "unique names ('dummy' is reserved when dummy=True)")
        if not math.isfinite(float(epsilon)):
            raise ConfigError("epsilon", epsilon, "a finite number")
        self.names: tuple[str, ...] = names
        self.dummies: tuple[str, ...] = ("dummy",) if dummy else ()
        self.epsilon = float(epsilon)
        self._values: Tensor | None = None
        self.history: list[float] = []

    # -- names and values --------------------------------------------------------------------
    @property
    def K(self) -> int:
        """Number of steers ``K`` (the dummy included)."""
        return len(self.names)

    @property
    def attributes(self) -> tuple[str, ...]:
        """The non-dummy steer names."""
        return tuple(n for n in self.names if n not in self.dummies)

    def index(self, name: str) -> int:
        """Position of steer ``name``. Raises UnknownNameError (a ConfigError) naming the trained steers."""
        if name not in self.names:
            raise UnknownNameError("steer", name, self.names)
        return self.names.index(name)

    def values(self, named: Mapping[str, float] | None = None, *, dummy: float = 1.0,
               batch: int | None = None, **kw: float) -> Tensor:
        """Steer values ``[K]`` (or ``[batch, K]`` repeated): the named steers at the given values, every dummy
        steer at ``dummy``, the rest 0. ``steer.values(sentiment=5)`` (the paper's "5 eps0" with the dummy
        at 1, as the README's ``--steer_values 5 1``); ``steer.values({"a.x": 1})`` for dotted names.

        Raises:
            UnknownNameError: a name that is not one of this steer's (lists them).
        """
        out = torch.zeros(self.K, device=self._device())
        for n in self.dummies:
            out[self.index(n)] = float(dummy)
        for n, v in {**(named or {}), **kw}.items():
            out[self.index(n)] = float(v)
        return out if batch is None else out.expand(batch, -1).clone()

    def _device(self) -> torch.device:
        return device_of(self) if any(True for _ in self.parameters()) else torch.device("cpu")

    def set_values(self, values: Tensor | Mapping[str, float] | None) -> None:
        """Set the steer values used by the attached hooks: ``[K]``, ``[B, K]``, a name -> value mapping (dummy
        steers at 1) or None (the steer is inert: the activation is returned unchanged).

        Raises:
            ConfigError: a tensor whose last dimension is not ``K``.
        """
        if values is None:
            self._values = None
            return
        if isinstance(values, Mapping):
            values = self.values(values)
        values = torch.as_tensor(values, dtype=torch.float32)
        if values.dim() not in (1, 2) or values.shape[-1] != self.K:
            raise ConfigError("values", tuple(values.shape), f"[K] or [batch, K] with K={self.K} ({self.names})")
        self._values = values

    def coefficients(self, batch: int, values: Tensor | None = None, device: torch.device | None = None) -> Tensor:
        """The steer values for an activation of batch size ``batch``: ``[batch, K]`` float32. A ``[B0, K]``
        tensor with ``batch`` a multiple of ``B0`` is repeated per example (``repeat_interleave``, the order
        Hugging Face ``generate`` uses for ``num_return_sequences``)."""
        v = self._values if values is None else torch.as_tensor(values, dtype=torch.float32)
        if v is None:
            raise ConfigError("values", None, f"steer values [K] or [batch, K] (set_values / steering); K={self.K}")
        v = v.to(device if device is not None else self._device(), torch.float32)
        if v.dim() == 1:
            return v.expand(batch, -1)
        if v.shape[0] == batch:
            return v
        if v.shape[0] and batch % v.shape[0] == 0:
            return v.repeat_interleave(batch // v.shape[0], dim=0)
        raise ConfigError("values", tuple(v.shape), f"[K] or [batch, K] with batch={batch} (or a divisor of it)")

    def regularization(self) -> Tensor:
        """Sum of squares of the steer's parameters (the code's L2 term, ``--regularization``)."""
        return sum((p.float() ** 2).sum() for p in self.parameters())

    def shift(self, x: Tensor, coef: Tensor) -> Tensor:
        """The steered activation; ``coef [B, K]`` are the steer values. Implemented by subclasses."""
        raise NotImplementedError

    def _act(self, x: Tensor) -> Tensor:
        if self._values is None:
            return x
        coef = self.coefficients(x.shape[0], device=x.device)
        return self.shift(x, coef)

    # -- attaching ---------------------------------------------------------------------------
    def check_model(self, model: GPT | HFModel) -> None:
        """Raise ConfigError when this steer does not fit ``model`` (width, vocabulary, layer)."""

    def attach(self, model: Any) -> SteerHandle:
        """Attach to ``model`` (see the site table in the module docstring); returns a handle whose
        ``remove()`` (or ``with`` exit) detaches. The steer acts with the values of :meth:`set_values`.

        Raises:
            ConfigError: a model the steer does not fit, or without an ``lm_head``.
        """
        model = as_steerable(model)
        self.check_model(model)
        stack = contextlib.ExitStack()
        try:
            if self.site == "unembed_input":
                if isinstance(model, GPT):
                    stack.enter_context(model.hooks({"final": lambda x, hook: self._act(x)}))
                else:
                    def pre(module: nn.Module, args: tuple) -> tuple:
                        return (self._act(args[0]), *args[1:])

                    stack.callback(lm_head(model).register_forward_pre_hook(pre).remove)
            elif self.site == "logits":
                def post(module: nn.Module, args: tuple, out: Tensor) -> Tensor:
                    return self._act(out)

                stack.callback(lm_head(model).register_forward_hook(post).remove)
            elif self.site == "residual":
                name = f"blocks.{self.layer}.resid_post"  # type: ignore[attr-defined]
                stack.enter_context(model.hooks({name: lambda x, hook: self._act(x)}))
            else:  # pragma: no cover - subclass error
                raise ConfigError("site", self.site, ", ".join(SITES))
        except BaseException:
            stack.close()
            raise
        return SteerHandle(stack)


class SteerHandle:
    """Detaches a steer: ``remove()`` or leaving a ``with`` block."""

    def __init__(self, stack: contextlib.ExitStack):
        self._stack = stack

    def remove(self) -> None:
        """Detach the steer (remove its hooks); calling it again does nothing."""
        self._stack.close()

    def __enter__(self) -> SteerHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


@contextlib.contextmanager
def steering(model: Any, steer: Steer | None, values: Tensor | Mapping[str, float] | None) -> Iterator[GPT | HFModel]:
    """Context manager: ``steer`` acts on ``model`` with ``values`` (``[K]``, ``[B, K]`` or a name -> value
    mapping) inside the block; yields the steerable model. ``steer=None`` is a no-op (the unsteered LM).
    The previous values are restored and the hooks removed on exit, also when the body raises."""
    m = as_steerable(model)
    if steer is None:
        yield m
        return
    old = steer._values
    steer.set_values(values)
    handle = steer.attach(m)
    try:
        yield m
    finally:
        handle.remove()
        steer._values = old


class LogitOffset(Steer):
    """Logit-offset baseline: ``logits <- logits + eps * sum_k s_k b_k``, ``b [K, V]`` (initialised to 0).

    The ``offset`` adaptor of the LM-Steer code (``steers.py``); a context-independent shift of the
    next-token distribution. Trained with :func:`train_intervention` (the LM-Steer loss).
    """

    site = "logits"

    def __init__(self, vocab_size: int, names: Sequence[str] = ("attr",), dummy: bool = True, epsilon: float = 1.0,
                 device: str | torch.device | None = None):
        super().__init__(names, dummy, epsilon)
        if int(vocab_size) < 1:
            raise ConfigError("vocab_size", vocab_size, ">= 1")
        self.vocab_size = int(vocab_size)
        self.bias = nn.Parameter(torch.zeros(self.K, self.vocab_size, device=device))

    def config(self) -> dict[str, Any]:
        """The base config plus ``vocab_size`` (rebuilds the shape of ``bias [K, V]``)."""
        return {**super().config(), "vocab_size": self.vocab_size}

    def check_model(self, model: GPT | HFModel) -> None:
        """Raise ConfigError (field ``vocab_size``) when the model's vocabulary size is not ``vocab_size``."""
        v = vocab_size(model)
        if v != self.vocab_size:
            raise ConfigError("vocab_size", self.vocab_size, f"the model's vocabulary size {v}")

    def shift(self, x: Tensor, coef: Tensor) -> Tensor:
        """Logits ``x [B, T, V]`` (or ``[B, V]``) plus ``eps * coef @ bias``, ``coef [B, K]``; same dtype as ``x``."""
        off = (coef @ self.bias.float()) * self.epsilon  # [B, V]
        return x + off.view(x.shape[0], *([1] * (x.dim() - 2)), -1).to(x.dtype)


class ActAdd(Steer):
    """Activation-addition baseline: ``x <- x + eps * sum_k s_k a_k`` on the residual stream leaving block
    ``layer`` (0-based), every position; ``a [K, d]`` (initialised to 0; train it with
    :func:`train_intervention`, or set it with :meth:`from_contrast`). Turner et al. 2023, arXiv 2308.10248.
    """

    site = "residual"

    def __init__(self, d_model: int, layer: int, names: Sequence[str] = ("attr",), dummy: bool = True,
                 epsilon: float = 1.0, device: str | torch.device | None = None):
        super().__init__(names, dummy, epsilon)
        if int(d_model) < 1:
            raise ConfigError("d_model", d_model, ">= 1")
        if int(layer) < 0:
            raise ConfigError("layer", layer, ">= 0 (a block index)")
        self.d_model, self.layer = int(d_model), int(layer)
        self.vectors = nn.Parameter(torch.zeros(self.K, self.d_model, device=device))

    def config(self) -> dict[str, Any]:
        """The base config plus ``d_model`` and ``layer`` (rebuild the shape of ``vectors [K, d]``)."""
        return {**super().config(), "d_model": self.d_model, "layer": self.layer}

    def check_model(self, model: GPT | HFModel) -> None:
        """Raise ConfigError (field ``layer`` or ``d_model``) when block ``layer`` does not exist in the model or its
        width is not ``d_model``."""
        n = n_layers(model)
        if not 0 <= self.layer < n:
            raise ConfigError("layer", self.layer, f"a block index in 0..{n - 1}")
        d = hidden_size(model)
        if d != self.d_model:
            raise ConfigError("d_model", self.d_model, f"the model's width {d}")

    def shift(self, x: Tensor, coef: Tensor) -> Tensor:
        """Residual stream ``x [B, T, d]`` plus ``eps * coef @ vectors`` at every position, ``coef [B, K]``; same dtype as ``x``."""
        add = (coef @ self.vectors.float()) * self.epsilon  # [B, d]
        return x + add.view(x.shape[0], *([1] * (x.dim() - 2)), -1).to(x.dtype)

    @classmethod
    @torch.no_grad()
    def from_contrast(cls, model: Any, layer: int, positive: Any, negative: Any, name: str = "attr",
                      pad_id: int = 0, batch_size: int = 32, max_length: int = 256, tokenizer: Any = None) -> ActAdd:
        """A one-steer ActAdd whose vector is ``mean(x | positive) - mean(x | negative)``, the residual stream
        leaving block ``layer`` averaged over every non-padding position of the texts (``positive``/``negative``:
        token lists, ``[N, T]`` tensors or strings with ``tokenizer``). No dummy steer. ``s = +1`` moves the
        activations by the full mean difference.

        Raises:
            ConfigError: ``layer`` out of range; empty text sets.
        """
        m = as_steerable(model)
        d, dev = hidden_size(m), device_of(m)
        steer = cls(d, layer, names=(name,), dummy=False, device=dev)
        steer.check_model(m)
        means = []
        for field, data in (("positive", positive), ("negative", negative)):
            seqs = as_token_lists(data, tokenizer, max_length)
            if not seqs:
                raise ConfigError(field, 0, "at least one non-empty text")
            total, count = torch.zeros(d, device=dev, dtype=torch.float64), 0
            for i in range(0, len(seqs), batch_size):
                ids, mask = pad_batch(seqs[i:i + batch_size], pad_id, dev)
                with m.hooks(cache=f"blocks.{layer}.resid_post") as cache:
                    logits_of(m, ids, mask)
                x = cache[f"blocks.{layer}.resid_post"].double()
                total += (x * mask[..., None]).sum((0, 1))
                count += int(mask.sum())
            means.append(total / count)
        steer.vectors.data[0] = (means[0] - means[1]).float()
        return steer


def save_steer(steer: Steer, directory: str | Path) -> Path:
    """Write ``steer.json`` (kind, names, dummies, epsilon, shape) and ``steer.safetensors`` (its parameters)."""
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "steer.json").write_text(json.dumps({"kind": type(steer).__name__, **steer.config()}, indent=2))
    save_file({k: v.detach().contiguous().cpu() for k, v in steer.state_dict().items()}, str(d / "steer.safetensors"))
    return d


def load_steer(directory: str | Path, device: str | torch.device | None = None) -> Steer:
    """Read a steer written by :func:`save_steer` (import :mod:`lmsci.methods.lm_steer` first for an LMSteer).

    Raises:
        ConfigError: a directory without the two files, or an unknown kind.
    """
    from safetensors.torch import load_file

    d = Path(directory)
    if not (d / "steer.json").is_file() or not (d / "steer.safetensors").is_file():
        raise ConfigError("directory", str(d), "a directory with steer.json and steer.safetensors (save_steer)")
    meta = json.loads((d / "steer.json").read_text())
    kind = meta.pop("kind")
    if kind not in Steer.kinds:
        raise UnknownNameError("steer kind", kind, Steer.kinds)
    dummies = tuple(meta.pop("dummies"))
    steer = Steer.kinds[kind](**meta, dummy=False, device=device)
    steer.dummies = dummies
    steer.load_state_dict({k: v.to(device) if device is not None else v
                           for k, v in load_file(str(d / "steer.safetensors")).items()})
    return steer


# ------------------------------------------------------------------------------------ data


def as_token_lists(data: Any, tokenizer: Any = None, max_length: int | None = None) -> list[list[int]]:
    """Texts or token sequences -> a list of token-id lists (each cut to ``max_length``).

    ``data``: a ``[N, T]`` long tensor, a list of id lists / 1-D tensors, or a list of strings with
    ``tokenizer`` (anything with ``encode(text) -> list[int]``, e.g. lmsci's BPETokenizer, or a Hugging Face
    tokenizer). Raises ConfigError: strings without a tokenizer.
    """
    if isinstance(data, Tensor):
        data = data.tolist() if data.dim() == 2 else [data.tolist()]
    out = []
    for x in data:
        if isinstance(x, str):
            if tokenizer is None:
                raise ConfigError("tokenizer", None, "a tokenizer with encode(text) when the data are strings")
            ids = tokenizer.encode(x)
            ids = list(getattr(ids, "ids", ids))
        else:
            ids = x.tolist() if isinstance(x, Tensor) else list(x)
        out.append([int(i) for i in ids][:max_length] if max_length else [int(i) for i in ids])
    return out


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int = 0, device: str | torch.device | None = None) -> tuple[Tensor, Tensor]:
    """Right-pad token lists to ``ids [B, T]`` (long) and ``mask [B, T]`` (long, 1 = real token)."""
    T = max(1, max(len(s) for s in seqs))
    ids = torch.full((len(seqs), T), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids.to(device), mask.to(device)


def masked_nll(logits: Tensor, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Next-token NLL per target position ``[B, T-1]`` (nats; 0 where the target is padding) and the target
    mask ``[B, T-1]``: position t scores ``ids[:, t+1]`` from ``logits[:, t]``."""
    tgt = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
    nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), tgt, ignore_index=-100, reduction="none")
    return nll, mask[:, 1:].to(nll.dtype)


def mean_nll(model: Any, input_ids: Tensor, attention_mask: Tensor, fused: bool = True) -> Tensor:
    """Mean next-token NLL (nats/token) over the real targets of ``input_ids [B, T]`` with ``attention_mask
    [B, T]``, with whatever steer is attached. On an lmsci GPT, unless a steer acts on the logits, the fused
    chunked head (``GPT.sum_nll``; hook point ``final`` fires there) avoids materialising ``[B, T, V]`` logits;
    ``fused=False`` forces the plain path (equal to float rounding)."""
    m = as_steerable(model)
    tgt = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
    n = (tgt != -100).sum().clamp(min=1)
    logit_hooks = bool(lm_head(m)._forward_hooks) if isinstance(m, GPT) else True
    if fused and isinstance(m, GPT) and not logit_hooks:
        return m.sum_nll(input_ids[:, :-1], tgt) / n
    nll, _ = masked_nll(logits_of(m, input_ids, attention_mask), input_ids, attention_mask)
    return nll.sum() / n


@torch.no_grad()
def unembed_inputs(model: Any, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """The inputs of the unembedding (final hidden states) at the real positions: ``[N, d]`` with ``N`` the number
    of non-padding tokens of ``input_ids [B, T]`` (e.g. the ``contexts`` of the SVD probe)."""
    m = as_steerable(model)
    ids = input_ids.to(device_of(m))
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask.to(ids.device)
    store: list[Tensor] = []

    def grab(module: nn.Module, args: tuple) -> None:
        store.append(args[0].detach())

    h = lm_head(m).register_forward_pre_hook(grab)
    try:
        logits_of(m, ids, mask)
    finally:
        h.remove()
    return store[-1].reshape(ids.shape[0], ids.shape[1], -1)[mask.bool()]


# ------------------------------------------------------------------------------------ training


def _intervention_data(m: GPT | HFModel, steer: Steer, data: Any, values: Tensor, tokenizer: Any, max_length: int,
                       steps: int, batch_size: int, lr: float) -> tuple[list[list[int]], Tensor]:
    """The training texts as token lists (cut to ``max_length`` and a GPT's ``seq_len``; texts of one token
    dropped) and their steer values ``[N', K]``, after checking the arguments of :func:`train_intervention`.

    Raises:
        ConfigError: ``values`` not ``[N, K]``; no text of two or more tokens; non-positive
            ``steps``/``batch_size``/``lr``.
    """
    if isinstance(m, GPT):
        max_length = min(max_length, m.cfg.seq_len)
    seqs = as_token_lists(data, tokenizer, max_length)
    values = torch.as_tensor(values, dtype=torch.float32)
    if values.shape != (len(seqs), steer.K):
        raise ConfigError("values", tuple(values.shape), f"[N, K] = [{len(seqs)}, {steer.K}] ({steer.names})")
    keep = [i for i, s in enumerate(seqs) if len(s) >= 2]  # a text of one token has no next-token target
    if not keep:
        raise ConfigError("data", len(seqs), "at least one text of two or more tokens")
    seqs, values = [seqs[i] for i in keep], values[keep]
    _check_optimiser(steps, batch_size, lr)
    return seqs, values


def _check_optimiser(steps: int, batch_size: int, lr: float) -> None:
    """Raise ConfigError for non-positive ``steps``, ``batch_size`` or ``lr``."""
    for field, v in (("steps", steps), ("batch_size", batch_size)):
        if int(v) < 1:
            raise ConfigError(field, v, ">= 1")
    if not lr > 0:
        raise ConfigError("lr", lr, "> 0")


def _loss_fn_data(steer: Steer, data: Any, values: Tensor, steps: int, batch_size: int,
                  lr: float) -> tuple[int, Tensor]:
    """``N = len(data)`` and the steer values ``[N, K]`` for :func:`train_intervention` with a ``loss_fn``.

    Raises:
        ConfigError: no example; ``values`` not ``[N, K]``; non-positive ``steps``/``batch_size``/``lr``.
    """
    n = len(data)
    values = torch.as_tensor(values, dtype=torch.float32)
    if values.shape != (n, steer.K):
        raise ConfigError("values", tuple(values.shape), f"[N, K] = [{n}, {steer.K}] ({steer.names})")
    if not n:
        raise ConfigError("data", n, "at least one example")
    _check_optimiser(steps, batch_size, lr)
    return n, values


@contextlib.contextmanager
def _frozen_lm(m: GPT | HFModel, steer: Steer) -> Iterator[None]:
    """Inside the block the LM is in eval mode with ``requires_grad`` off on every parameter and the steer is in
    train mode; afterwards the LM's flags and mode are restored and the steer is left in eval mode."""
    lm_params = list(m.parameters())
    flags = [p.requires_grad for p in lm_params]
    was_training = m.training
    try:
        for p in lm_params:
            p.requires_grad_(False)
        m.eval()
        steer.train()
        yield
    finally:
        for p, f in zip(lm_params, flags):
            p.requires_grad_(f)
        m.train(was_training)
        steer.eval()


def _check_no_leak(lm_params: list[Tensor], before: list[Tensor | None]) -> None:
    """Raise RuntimeError when an LM parameter's gradient differs from what it held before training (``before``)."""
    leaked = [i for i, (p, b) in enumerate(zip(lm_params, before))
              if p.grad is not None and (b is None or not torch.equal(p.grad, b))]
    if leaked:
        raise RuntimeError(f"{len(leaked)} LM parameters received gradients; the LM must stay frozen")


def _lm_loss(m: GPT | HFModel, steer: Steer, seqs: list[list[int]],
             pad_id: int) -> Callable[[list[int], Tensor], Tensor]:
    """The default batch loss of :func:`train_intervention` (the steer attached to ``m``): the texts ``seqs[idx]``
    right-padded with ``pad_id``, the steer set to their values ``[B, K]``, the LM's mean NLL over real targets."""
    dev = device_of(m)

    def loss(idx: list[int], values: Tensor) -> Tensor:
        ids, mask = pad_batch([seqs[i] for i in idx], pad_id, dev)
        steer.set_values(values)
        return mean_nll(m, ids, mask)

    return loss


def _steer_steps(m: GPT | HFModel, steer: Steer, n: int, values: Tensor,
                 batch_loss: Callable[[list[int], Tensor], Tensor], *, lr: float, steps: int, batch_size: int,
                 l2: float, seed: int, grad_clip: float | None, on_step: Callable[[int, float], None] | None) -> None:
    """The Adam steps of :func:`train_intervention` (the LM frozen): batches of indices into the ``n`` examples
    drawn without replacement from a ``torch.Generator`` seeded with ``seed``, the loss ``batch_loss(idx,
    values[idx])`` plus ``l2 * steer.regularization()``, losses appended to ``steer.history``.

    Raises:
        DivergedError: a non-finite loss. RuntimeError: an LM parameter received a gradient (checked once).
    """
    dev = device_of(m)
    params = [p for p in steer.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    lm_params = list(m.parameters())
    # gradients the LM already holds (e.g. from its own training) are not leaks: compare against them
    before = [None if p.grad is None else p.grad.detach().clone() for p in lm_params]
    g = torch.Generator().manual_seed(int(seed))
    order: list[int] = []
    for step in range(int(steps)):
        if len(order) < batch_size:
            order += torch.randperm(n, generator=g).tolist()
        idx, order = order[:batch_size], order[batch_size:]
        loss = batch_loss(idx, values[idx].to(dev))
        if l2:
            loss = loss + l2 * steer.regularization()
        val = float(loss.detach())
        if not math.isfinite(val):
            raise DivergedError(step, val, "steer training loss")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:
            _check_no_leak(lm_params, before)
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        steer.history.append(val)
        if on_step is not None:
            on_step(step, val)


def train_intervention(
    model: Any,
    steer: Steer,
    data: Any,
    values: Tensor,
    *,
    lr: float = 1e-2,
    steps: int = 1000,
    batch_size: int = 32,
    max_length: int = 256,
    l2: float = 0.0,
    seed: int = 0,
    pad_id: int = 0,
    tokenizer: Any = None,
    grad_clip: float | None = None,
    on_step: Callable[[int, float], None] | None = None,
    loss_fn: Callable[[list[int], Tensor], Tensor] | None = None,
) -> Steer:
    """Train ``steer`` on ``model`` (frozen) by next-token cross-entropy of the steered LM.

    Loss per step (LM-Steer, arXiv 2305.12798 Sec. 3; ``experiments/training/train.py``): the mean NLL over the
    real (non-padding) target tokens of a batch, each example under its own steer values, plus
    ``l2 * steer.regularization()``. Adam. Padding is masked out of the loss (the authors' code counts padded
    EOS tokens; we do not). The LM runs in eval mode (no dropout) with every parameter's ``requires_grad``
    off (restored afterwards); after the first backward a RuntimeError is raised if any LM parameter holds
    a gradient. Mini-batches are drawn without replacement (reshuffled each epoch) from a generator seeded
    with ``seed``; the steer's parameters move to the model's device.

    Args:
        model: lmsci GPT, HFModel or ``transformers`` causal LM.
        steer: any :class:`Steer` (LMSteer, LogitOffset, ActAdd).
        data: ``N`` texts (with ``tokenizer``) or token sequences (see :func:`as_token_lists`); each cut to
            ``max_length`` (and to an lmsci GPT's ``seq_len``).
        values: per-example steer values ``[N, K]``.
        lr, steps, batch_size, l2, grad_clip: optimiser settings (paper: Adam lr 1e-2, 1000 steps, batch 32).
        on_step: called as ``on_step(step, loss)`` after every step.
        loss_fn: a pluggable forward: ``loss_fn(idx, values) -> scalar tensor``, the loss (without L2) of the
            examples ``idx`` (a list of indices into ``data``) at their steer values ``values [B, K]`` (on the
            model's device). Then ``data`` is any sized collection of ``N`` examples (only ``len(data)`` is read;
            every example is kept), ``loss_fn`` computes the steered loss itself (e.g. from cached hidden states,
            :func:`lmsci.methods.lm_steer_cached.train_steer_cached`), the steer is not attached to the model and
            ``max_length``, ``pad_id``, ``tokenizer`` are unused; the batches, Adam, L2, divergence check, frozen
            LM and history are the same. None (default): the steered model's mean NLL of the padded texts.

    Returns:
        ``steer`` (trained in place); ``steer.history`` gets the per-step losses (nats/token).

    Raises:
        ConfigError: ``values`` not ``[N, K]``; no text of two or more tokens (shorter ones are dropped; with
            ``loss_fn``: no example); non-positive ``steps``/``batch_size``/``lr``.
        DivergedError: a non-finite loss.
    """
    m = as_steerable(model)
    if loss_fn is None:
        seqs, values = _intervention_data(m, steer, data, values, tokenizer, max_length, steps, batch_size, lr)
        n, batch_loss = len(seqs), _lm_loss(m, steer, seqs, pad_id)
    else:
        (n, values), batch_loss = _loss_fn_data(steer, data, values, steps, batch_size, lr), loss_fn
    steer.to(device_of(m))
    t0 = time.perf_counter()
    with _frozen_lm(m, steer):
        handle = steer.attach(m) if loss_fn is None else None
        try:
            _steer_steps(m, steer, n, values, batch_loss, lr=lr, steps=steps, batch_size=batch_size, l2=l2,
                         seed=seed, grad_clip=grad_clip, on_step=on_step)
        finally:
            if handle is not None:
                handle.remove()
            steer.set_values(None)
    steer.train_seconds = time.perf_counter() - t0
    return steer


# ------------------------------------------------------------------------------------ scoring / generation


@torch.no_grad()
def token_logprobs(model: Any, input_ids: Tensor, steer: Steer | None = None,
                   values: Tensor | Mapping[str, float] | None = None, attention_mask: Tensor | None = None) -> Tensor:
    """``log P(x_t | x_<t)`` for ``t = 1 .. T-1`` under the (steered) model: ``[B, T-1]`` nats
    (``input_ids [B, T]`` or ``[T]``; padding positions of ``attention_mask`` give 0)."""
    m = as_steerable(model)
    ids = input_ids if input_ids.dim() == 2 else input_ids[None]
    ids = ids.to(device_of(m))
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask.to(ids.device)
    with steering(m, steer, values):
        nll, tmask = masked_nll(logits_of(m, ids, mask), ids, mask)
    return -nll * tmask


@torch.no_grad()
def generate(model: Any, input_ids: Tensor, steer: Steer | None = None,
             values: Tensor | Mapping[str, float] | None = None, max_new_tokens: int = 20, **kw: Any) -> Tensor:
    """Decode with the model's own ``generate`` while ``steer`` acts with ``values`` (``[K]`` for all prompts,
    ``[B, K]`` per prompt, or a name -> value mapping); ``input_ids [B, T]`` -> ``[B, T + new]``.
    ``kw`` go to ``GPT.generate`` (``temperature``, ``top_k``, ``generator``) or Hugging Face ``generate``
    (``do_sample``, ``top_p``, ``attention_mask``, ...)."""
    m = as_steerable(model)
    ids = input_ids.to(device_of(m))
    with steering(m, steer, values):
        return m.generate(ids, max_new_tokens, **kw)


__all__ = ["SITES", "Steer", "SteerHandle", "LogitOffset", "ActAdd", "steering", "train_intervention",
           "token_logprobs", "generate", "as_steerable", "lm_head", "hidden_size", "vocab_size",
           "output_embeddings", "n_layers", "logits_of", "as_token_lists", "pad_batch", "masked_nll", "mean_nll",
           "unembed_inputs", "save_steer", "load_steer"]
