"""Load a Hugging Face ``transformers`` causal LM by path and hook it by module path.

* :func:`load_hf` loads any causal LM by hub name or local path and wraps the *real* HF module in
  :class:`HFModel` (no re-implementation); :meth:`HFModel.hooks` reads/replaces the outputs of modules
  addressed by their module path (``model.layers.0.self_attn``, ``transformer.h.3.mlp``) and always
  removes its hooks on exit. When the hub cannot be reached, :class:`HubUnavailableError` says so and
  suggests a local path.
* Converting lmsci GPTs to and from ``transformers`` (:func:`~lmsci.models.hf_convert.export_hf`,
  :func:`~lmsci.models.hf_convert.import_hf`, :func:`~lmsci.models.hf_convert.to_hf`) is
  :mod:`lmsci.models.hf_convert`.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from lmsci.errors import ConfigError, LmsciError, UnknownNameError
from lmsci.models.hooks import hook_plan, select_names, transformer_lens_name


class HubUnavailableError(LmsciError, OSError):
    """The Hugging Face hub could not be reached (offline mode or network error) for a hub model id."""


# ------------------------------------------------------------------------------------- loading


@dataclass
class ModuleHook:
    """Passed to HF hook functions: ``name`` is the module path the hook is attached to."""

    name: str
    module: nn.Module


HFHookFn = Callable[[Tensor, ModuleHook], "Tensor | None"]


class HFModel:
    """A loaded Hugging Face causal LM (the real module in ``.model``) with a hook API by module path.

    Calling it maps ``input_ids [batch, seq]`` to logits ``[batch, seq, vocab_size]``. :meth:`hooks` and
    :meth:`run_with_cache` address modules by path (``model.layers.0.mlp``), by glob, or by lmsci's hook names
    (``embed``, ``blocks.{i}.resid_post`` ``[batch, seq, d_model]``, ``blocks.{i}.attn.out``, ``blocks.{i}.mlp.out``,
    ``blocks.{i}.mlp.pre``/``post`` ``[batch, seq, d_mlp]``, ``final``) through the architecture map
    (:func:`lmsci.models.arch.arch_of`), so lmsci's instruments run on it. Made by :func:`load_hf`.

    Raises:
        UnknownNameError: (from :meth:`hooks`) a path or name that matches no module, with close matches.
        ConfigError: (from the lmsci names) a family the architecture map does not support.

    Attributes:
        model: the ``transformers`` module (e.g. ``LlamaForCausalLM``), in eval mode.
        tokenizer: the checkpoint's tokenizer when one was found, else None.
        name: the hub id or path it was loaded from.
        provenance: where the weights come from (file sha256, package version, known deviations), set by
            :func:`lmsci.models.zoo.load_model`; empty when loaded otherwise.
    """

    def __init__(self, model: nn.Module, tokenizer: Any = None, name: str = ""):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.provenance: dict[str, Any] = {}

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # nn.Module-like conveniences, so instruments written for lmsci GPT (``eval()``, ``train(mode)``,
    # ``training``, ``parameters()``, ``run_with_cache``) accept an HFModel too
    @property
    def training(self) -> bool:
        return self.model.training

    def eval(self) -> HFModel:
        self.model.eval()
        return self

    def train(self, mode: bool = True) -> HFModel:
        self.model.train(mode)
        return self

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.model.parameters()

    def to(self, *args: Any, **kw: Any) -> HFModel:
        self.model.to(*args, **kw)
        return self

    def module_names(self) -> list[str]:
        """All addressable module paths (``named_modules`` order, root excluded)."""
        return [n for n, _ in self.model.named_modules() if n]

    def num_params(self) -> int:
        """Parameter count (shared tensors once)."""
        return sum(p.numel() for p in {id(p): p for p in self.model.parameters()}.values())

    def __call__(self, input_ids: Tensor, **kw: Any) -> Tensor:
        """``input_ids [batch, seq]`` -> logits ``[batch, seq, vocab_size]`` (extra kwargs go to the HF forward)."""
        return self.model(input_ids=input_ids.to(self.device), use_cache=False, **kw).logits

    def arch_path(self, name: str) -> str | None:
        """The module path of an lmsci hook name on this model, through the architecture map
        (:func:`lmsci.models.arch.arch_of`), or None when ``name`` is not one of them.

        Names: ``blocks.{i}.resid_post`` (block i's output), ``blocks.{i}.attn.out`` (the attention module's
        output), ``blocks.{i}.mlp.out`` (the MLP's output), ``blocks.{i}.mlp.pre`` (the MLP pre-activation
        ``[B, T, d_mlp]``: output of ``c_fc`` / ``dense_h_to_4h`` / the SwiGLU ``gate_proj``, as lmsci GPT's
        ``mlp.pre``), ``blocks.{i}.mlp.post`` (the neuron activations ``[B, T, d_mlp]``, ``act(pre)`` or
        ``act(gate) * up`` for SwiGLU: the *input* of the down projection, so this name returns the down
        projection's path and :meth:`hooks` attaches a forward pre-hook there; see :meth:`arch_site`),
        ``final`` (the final norm's output), ``embed`` (the token embedding's output; lmsci GPT's ``embed``
        adds learned positions, which rotary families do not have). :meth:`hooks` also takes TransformerLens's
        spellings of these (``blocks.{i}.hook_resid_post``, ``hook_attn_out``, ``hook_mlp_out``,
        ``mlp.hook_pre``, ``mlp.hook_post``, ``ln_final.hook_normalized``, ``hook_embed``; see
        :data:`lmsci.models.hooks.TRANSFORMER_LENS_ALIASES`). Instruments written with these names
        (probes, attention, knowledge, key-value-memory instruments) run on every family the map supports.

        Raises:
            ConfigError: a family the map does not support (names the family and the supported list); an
                MLP name on a family without that module (MoE, fused gate/up).
            UnknownNameError: a layer index out of range (lists the names that exist).
        """
        site = self.arch_site(name)
        return None if site is None else site[0]

    def arch_site(self, name: str) -> tuple[str, str] | None:
        """``(module path, "output" | "input")`` of an lmsci hook name on this model (see :meth:`arch_path`):
        ``"input"`` for ``blocks.{i}.mlp.post`` (the down projection's first positional input), ``"output"``
        for the others; None when ``name`` is not an lmsci hook name.

        Raises:
            ConfigError, UnknownNameError: as :meth:`arch_path`.
        """
        import re

        from lmsci.models.arch import arch_of

        m = re.fullmatch(r"blocks\.(\d+)\.(resid_post|attn\.out|mlp\.out|mlp\.pre|mlp\.post)", name)
        if m is None and name not in ("final", "embed"):
            return None
        arch = arch_of(self.model)
        if name == "final":
            return arch.family.final_norm, "output"
        if name == "embed":
            return arch.family.embedding, "output"
        i = int(m.group(1))
        if not 0 <= i < arch.n_layers:
            raise UnknownNameError("hook", name, [f"blocks.{j}.{m.group(2)}" for j in range(arch.n_layers)])
        kind = m.group(2)
        if kind == "mlp.post":
            return arch.mlp_down_path(i), "input"
        if kind == "mlp.pre":
            return arch.mlp_in_path(i), "output"
        return {"resid_post": arch.block_path(i), "attn.out": arch.attention_path(i),
                "mlp.out": arch.mlp_path(i)}[kind], "output"

    def _resolve(self, name: str | Callable[[str], bool]) -> list[tuple[str, nn.Module]]:
        mods = dict(self.model.named_modules())
        mods.pop("", None)
        if isinstance(name, str) and name not in mods:
            # an lmsci hook name, or a TransformerLens one (``blocks.0.hook_resid_post``; here ``hook_embed`` is
            # the token embedding, as in TransformerLens)
            site = self.arch_site(transformer_lens_name(name) or name)
            if site is not None:  # an lmsci hook name: the mapped module, keyed by the name asked for
                module = self.model.get_submodule(site[0])
                return [(name, _InputOf(module) if site[1] == "input" else module)]
        found = select_names(name, mods)
        if found or callable(name):
            return found
        close = difflib.get_close_matches(name, list(mods), n=8, cutoff=0.6)
        raise UnknownNameError("module path", name, close or [n for n in mods if n.count(".") <= 2])

    @contextmanager
    def hooks(
        self,
        fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HFHookFn]] | Mapping[str, HFHookFn] = (),
        cache: Iterable[str] | str | Callable[[str], bool] | None = None,
    ) -> Iterator[dict[str, Tensor]]:
        """Hook module outputs by module path for the duration of a ``with`` block.

        Args:
            fwd_hooks: ``[(path, fn), ...]`` or ``{path: fn}``; ``path`` is a module path
                (``"model.layers.0.self_attn"``), a glob (``"model.layers.*.mlp"``) or a predicate.
                ``fn(output, hook)`` gets the module's output tensor (the first element when the module
                returns a tuple, e.g. attention ``(attn_output, attn_weights)``: ``[batch, seq, d_model]``;
                the first field of a ``ModelOutput``, e.g. ``last_hidden_state`` or ``logits``)
                and returns ``None`` (read) or a same-shape tensor that replaces it.
            cache: paths/globs/predicate whose outputs (detached, first element of tuples) are recorded
                into the yielded dict keyed by path.

        Raises:
            UnknownNameError: a path matching no module, with close matches (before anything is attached).

        Hooks are plain ``register_forward_hook`` handles, all removed on exit, also on exceptions.
        """
        plan, store = hook_plan(fwd_hooks, cache, self._resolve)
        handles = []
        try:
            for (path, module), fn in plan:
                if isinstance(module, _InputOf):  # blocks.{i}.mlp.post: the down projection's input
                    handles.append(module.module.register_forward_pre_hook(_wrap_input(fn, ModuleHook(path, module.module))))
                else:
                    handles.append(module.register_forward_hook(_wrap(fn, ModuleHook(path, module))))
            yield store
        finally:
            for h in handles:
                h.remove()

    def run_with_cache(self, input_ids: Tensor, names: Iterable[str] | str | Callable[[str], bool]) -> tuple[Tensor, dict[str, Tensor]]:
        """Forward and record the outputs of ``names``: ``(logits [B, T, vocab], {path: output})``."""
        with self.hooks(cache=names) as c:
            logits = self(input_ids)
        return logits, c

    def attention_patterns(self, input_ids: Tensor) -> list[Tensor]:
        """Attention probabilities of every layer, each ``[batch, n_heads, q, k]`` (HF ``output_attentions``;
        needs ``attn_implementation="eager"``, the :func:`load_hf` default).

        Raises:
            ConfigError: the model runs a fused attention that does not return its weights.
        """
        out = self.model(input_ids=input_ids.to(self.device), use_cache=False, output_attentions=True)
        att = getattr(out, "attentions", None)
        if not att or any(a is None for a in att):
            raise ConfigError("attn_implementation", self.config._attn_implementation,
                              "'eager' to read attention weights (load_hf(..., attn_implementation='eager'))")
        return list(att)

    @torch.no_grad()
    def generate(self, input_ids: Tensor, max_new_tokens: int, **kw: Any) -> Tensor:
        """``model.generate`` (HF's own); returns ``[batch, seq + new]``."""
        return self.model.generate(input_ids.to(self.device), max_new_tokens=max_new_tokens, **kw)


@dataclass(frozen=True)
class _InputOf:
    """A hook site that is a module's first positional *input* (``blocks.{i}.mlp.post``: the down projection's)."""

    module: nn.Module


def _wrap_input(fn: HFHookFn, hook: ModuleHook):
    def pre_hook(module: nn.Module, args: tuple) -> Any:
        if not args or not isinstance(args[0], Tensor):
            raise TypeError(f"module {hook.name!r} was not called with a tensor as its first positional input")
        main = args[0]
        new = fn(main, hook)
        if new is None:
            return None
        if not isinstance(new, Tensor) or new.shape != main.shape:
            got = tuple(new.shape) if isinstance(new, Tensor) else type(new).__name__
            raise ValueError(f"hook on {hook.name!r} returned {got}; expected a tensor of shape {tuple(main.shape)}")
        return (new, *args[1:])

    return pre_hook


def _wrap(fn: HFHookFn, hook: ModuleHook):
    def forward_hook(module: nn.Module, args: Any, output: Any) -> Any:
        key = None
        if isinstance(output, tuple):
            main = output[0]
        elif hasattr(output, "to_tuple") and hasattr(output, "keys"):  # a transformers ModelOutput
            key = next(iter(output.keys()))
            main = output[key]
        else:
            main = output
        if not isinstance(main, Tensor):
            raise TypeError(f"module {hook.name!r} returned {type(main).__name__}, not a tensor; hook a submodule")
        new = fn(main, hook)
        if new is None:
            return None
        if not isinstance(new, Tensor) or new.shape != main.shape:
            got = tuple(new.shape) if isinstance(new, Tensor) else type(new).__name__
            raise ValueError(f"hook on {hook.name!r} returned {got}; expected a tensor of shape {tuple(main.shape)}")
        if isinstance(output, tuple):
            return (new, *output[1:])
        if key is not None:
            output[key] = new
            return output
        return new

    return forward_hook


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on") or \
        os.environ.get("TRANSFORMERS_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def local_model_dir(field: str, path: str | Path) -> Path:
    """``path`` as a local model directory (one holding ``config.json``), for config fields that must name a model
    on this machine (lmsci never downloads one).

    Raises:
        ConfigError: naming ``field``, when ``path`` is not a directory with a ``config.json``.
    """
    p = Path(path).expanduser()
    if not (p.is_dir() and (p / "config.json").is_file()):
        raise ConfigError(field, str(path), "a local directory with a model's config.json and weights "
                                            "(lmsci does not download models)")
    return p


def _looks_like_path(s: str) -> bool:
    """Hub ids are ``name`` or ``owner/name``; anything else is meant as a local path."""
    return s.startswith((".", "/", "~")) or s.count("/") > 1 or "\\" in s or Path(s).exists()


def load_hf(
    name_or_path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str | None = None,
    attn_implementation: str | None = "eager",
    tokenizer: bool = True,
) -> HFModel:
    """Load a Hugging Face causal LM (``AutoModelForCausalLM``) by hub id or local directory.

    Args:
        name_or_path: a hub id (``"gpt2"``, ``"meta-llama/Llama-3.2-1B"``) or a directory with
            ``config.json`` and weights (for example one written by :func:`~lmsci.models.hf_convert.export_hf`).
        device: where to put it. dtype: e.g. ``torch.bfloat16`` (default: the checkpoint's / float32).
        attn_implementation: ``"eager"`` (default; exact and hookable attention weights) or ``"sdpa"``.
        tokenizer: also load the tokenizer when the checkpoint has one.

    Raises:
        HubUnavailableError: a hub id while the hub cannot be reached (``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE``
            set, or a network error) and the model is not in the local cache; the message suggests a local path.
        ConfigError: a path that does not exist or has no ``config.json``; a hub id that is not a model.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    s = str(name_or_path)
    local = Path(s).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ConfigError("name_or_path", s, "a directory containing config.json and model weights")
    elif _looks_like_path(s):
        raise ConfigError("name_or_path", s, "an existing local directory or a hub model id such as 'gpt2'")
    kw: dict[str, Any] = {}
    if dtype is not None:
        kw["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if attn_implementation is not None:
        kw["attn_implementation"] = attn_implementation
    try:
        with torch.random.fork_rng(devices=[]):
            model = AutoModelForCausalLM.from_pretrained(str(local) if local.is_dir() else s, **kw)
    except OSError as err:
        msg = str(err)
        network = any(t in msg.lower() for t in ("couldn't connect", "could not connect", "offline", "connection", "resolve"))
        if not local.is_dir() and (_offline() or network):
            why = "offline mode is on (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE)" if _offline() else "the network request failed"
            raise HubUnavailableError(
                f"Cannot download {s!r} from the Hugging Face hub: {why}, and it is not in the local cache. "
                f"Pass a local directory instead, e.g. load_hf('/path/to/{s.split('/')[-1]}'), after "
                f"`huggingface-cli download {s} --local-dir /path/to/{s.split('/')[-1]}` on a machine with internet."
            ) from err
        raise ConfigError("name_or_path", s, f"a loadable causal LM ({msg.splitlines()[0]})") from err
    model = model.to(device).eval()
    tok = None
    if tokenizer:
        try:
            tok = AutoTokenizer.from_pretrained(str(local) if local.is_dir() else s)
        except (OSError, ValueError, TypeError):
            tok = None
    return HFModel(model, tok, s)
