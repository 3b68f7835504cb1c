"""``lmsci check-model``: is every intervention exact on *this* checkpoint?

A user points it at their own checkpoint before trusting a result: it loads the model (a local
directory with ``config.json``, or a hub id where the hub is reachable), resolves its family in the
architecture map (:mod:`lmsci.models.arch`), and for each intervention the family supports installs a
configuration of it that must change nothing on the test input (a window and distance ceiling longer
than the input; streaming decode token by token) and reports the largest logit difference against the
unpatched model, with the dtype's tolerance (relative to the largest |logit|: :data:`TOLERANCE`).

Exit codes (CLI): 0 all within tolerance, 1 some intervention above it, 2 bad input (unsupported family,
a directory without ``config.json``, an unknown dtype, a ``transformers`` version outside the range).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from lmsci.errors import ConfigError

TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "bfloat16": 5e-2}
"""Largest allowed ``max |patched - unpatched|`` as a fraction of ``max |logit|`` per dtype. bfloat16:
the unpatched model rounds every attention step to 8 mantissa bits, the harness computes in float32."""


@dataclass
class InterventionCheck:
    """One intervention's result: ``max_abs_diff`` of the logits, ``tolerance`` (absolute), ``passed``."""

    intervention: str
    policy: str
    max_abs_diff: float
    tolerance: float
    passed: bool


@dataclass
class ModelCheck:
    """The report of :func:`check_model`."""

    source: str
    family: str
    model_class: str
    dtype: str
    seq_len: int
    logit_scale: float
    layout: dict[str, Any]
    checks: list[InterventionCheck] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_json(self) -> str:
        d = asdict(self)
        d["passed"] = self.passed
        return json.dumps(d, indent=2, default=str)

    def text(self) -> str:
        lines = [f"model        {self.source}",
                 f"family       {self.family} ({self.model_class}, {self.layout['n_layers']} layers, "
                 f"{self.layout['positions']} positions)",
                 f"sliding      {self.layout['sliding_windows']}",
                 f"dtype        {self.dtype} (tolerance {TOLERANCE[self.dtype]:g} x max|logit| = "
                 f"{TOLERANCE[self.dtype] * self.logit_scale:.3g}); input {self.seq_len} tokens",
                 f"supports     {', '.join(c.intervention for c in self.checks)}", ""]
        lines.append(f"{'intervention':<17}{'policy (no-op on this input)':<42}{'max |diff|':>12}  result")
        for c in self.checks:
            lines.append(f"{c.intervention:<17}{c.policy:<42}{c.max_abs_diff:>12.3g}  "
                         f"{'ok' if c.passed else 'ABOVE TOLERANCE'}")
        lines.append("")
        lines.append("all interventions exact to the dtype's tolerance" if self.passed
                     else "some intervention is NOT exact on this model: do not trust its results")
        return "\n".join(lines)


def _read_family(source: str) -> str:
    """The checkpoint's ``model_type`` from its config (before any weights are loaded)."""
    from lmsci.models.arch import FAMILIES, SUPPORTED, check_transformers_version

    p = Path(source).expanduser()
    if p.exists() and not p.is_dir():
        raise ConfigError("path_or_id", source, "a directory containing config.json, a .gguf file, a zoo name "
                                                "(lmsci models) or a hub model id")
    if p.is_dir():
        cfg_path = p / "config.json"
        if not cfg_path.is_file():
            raise ConfigError("path_or_id", source, "a checkpoint directory containing config.json")
        try:
            mt = json.loads(cfg_path.read_text()).get("model_type")
        except json.JSONDecodeError as err:
            raise ConfigError("config.json", str(cfg_path), f"valid JSON ({err})") from err
        if mt not in FAMILIES:
            raise ConfigError("model", f"family {mt!r} ({cfg_path})",
                              "a model of a supported family: " + ", ".join(SUPPORTED))
        check_transformers_version()
        return str(mt)
    return ""


def _noop_policies(arch: Any, n: int) -> list[tuple[str, Any]]:
    from lmsci.models.attention_harness import (
        attention_sinks_policy,
        full_policy,
        lambda_mask_policy,
        lm_infinite_policy,
        sliding_window_policy,
    )

    out = []
    for name in arch.interventions():
        if name == "full":
            out.append((name, full_policy()))
        elif name == "lm_infinite":
            out.append((name, lm_infinite_policy(n, 4, block_size=16)))
        elif name == "lambda_mask":
            out.append((name, lambda_mask_policy(n, 4, block_size=16)))
        elif name == "sliding_window":
            out.append((name, sliding_window_policy(n, block_size=16)))
        elif name == "attention_sinks":
            out.append((name, attention_sinks_policy(n + 4, 4)))
        elif name == "streaming":
            pol = lambda_mask_policy(n, 4) if arch.positions in ("absolute", "learned") else lm_infinite_policy(n, 4)
            out.append((name, pol))
    return out


def check_model(source: str, dtype: str = "float32", seq_len: int = 48, seed: int = 0) -> ModelCheck:
    """Load ``source`` and measure every supported intervention's no-op logit difference.

    Args:
        source: a zoo name (:mod:`lmsci.models.zoo`), a local checkpoint directory (``config.json`` + weights),
            a ``.gguf`` file or a hub id.
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float64"`` (the model is loaded in it).
        seq_len: input length (random token ids; clipped to an absolute-position model's table).
        seed: seed of the input ids.

    Returns:
        a :class:`ModelCheck`; ``.passed`` is False when any difference exceeds the tolerance.

    Raises:
        ConfigError: unknown dtype; a path that is not a directory with ``config.json``; an unsupported
            family (before loading weights); a ``transformers`` version outside the supported range.
        HubUnavailableError: a hub id while the hub cannot be reached.
    """
    from lmsci.models.arch import arch_of
    from lmsci.models.attention_harness import AttentionPatch
    from lmsci.models.hf import load_hf
    from lmsci.models.hf_attention import full_precision_softmax

    if dtype not in TOLERANCE:
        raise ConfigError("--dtype", dtype, ", ".join(TOLERANCE))
    if seq_len < 8:
        raise ConfigError("--seq-len", seq_len, "an integer >= 8")
    from lmsci.models.zoo import ZOO, load_model

    if source in ZOO or str(source).lower().endswith(".gguf"):  # checked (package, file, sha256) before loading
        hf = load_model(source, dtype=getattr(torch, dtype), attn_implementation="eager", field="path_or_id")
    else:
        _read_family(source)
        hf = load_hf(source, dtype=getattr(torch, dtype), attn_implementation="eager", tokenizer=False)
    model = hf.model
    arch = arch_of(model)
    n = min(seq_len, arch.max_positions or seq_len)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    x = torch.randint(0, vocab, (2, n), generator=torch.Generator().manual_seed(seed)).to(hf.device)
    ctx = full_precision_softmax if dtype == "float64" else contextlib.nullcontext
    rel = TOLERANCE[dtype]
    with torch.no_grad(), ctx():
        ref = model(input_ids=x, use_cache=False).logits.double()
        scale = float(ref.abs().max())
        report = ModelCheck(source, arch.name, type(model).__name__, dtype, n, scale, arch.describe())
        for name, pol in _noop_policies(arch, n):
            patch = AttentionPatch(model, pol)
            with patch:
                if name == "streaming":
                    with patch.stream() as s:
                        got = torch.cat([s.feed(x[:, i:i + 1]) for i in range(n)], dim=1)
                else:
                    got = patch._call_model(x)
            diff = float((got.double() - ref).abs().max())
            report.checks.append(InterventionCheck(name, pol.label() + (" token by token" if name == "streaming" else ""),
                                                   diff, rel * scale, diff <= rel * scale))
    return report


__all__ = ["check_model", "ModelCheck", "InterventionCheck", "TOLERANCE"]
