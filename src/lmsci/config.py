"""Experiment configurations: pydantic models, presets and ``--set key=value`` overrides.

Every experiment declares a subclass of :class:`ExperimentConfig` whose field defaults are its
``quick`` preset and whose ``PRESETS`` map each preset name (``smoke``, ``quick``, ``paper``) to the
fields that differ from those defaults. :func:`resolve_config` applies a preset, then the user's
overrides, then validates; any problem raises :class:`lmsci.errors.ConfigError` naming the field,
the value and what is allowed, before any work starts.
"""

from __future__ import annotations

import copy
import re
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lmsci.errors import ConfigError, UnknownNameError

PRESET_NAMES = ("smoke", "quick", "paper")  # every experiment defines these; "gpu" where it has one
ALL_PRESET_NAMES = ("smoke", "quick", "gpu", "paper")

#: preset fields left out of a preset's digest (where and how fast it runs, not what it computes); re-exported
#: by :mod:`lmsci.claims`, which imports this module (never the reverse). ``stack_seeds`` (S53): training a point's
#: seeds as one stacked computation or one after another gives the same models to float rounding
#: (:mod:`lmsci.train.seeds`), like ``compile``; which is faster depends on the device
NON_SCIENCE_FIELDS = ("device", "threads", "progress", "out", "preset", "compile", "stack_seeds")


class StrictModel(BaseModel):
    """A pydantic model that rejects unknown keys and validates on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())


class ExperimentConfig(StrictModel):
    """Fields shared by all experiments.

    Attributes:
        preset: which preset produced this configuration (recorded in the report).
        seed: the one source of randomness; per-point seeds derive from (seed, point id).
        device: ``"auto"`` picks CUDA when available, else CPU.
        threads: torch intra-op threads while points are computed (0 keeps torch's default). Tiny
            models run faster on one thread: on a loaded 2-core machine two threads were 4-25x slower.
        n_seeds: independent training seeds per sweep point; verdict intervals are across these seeds.
            Seed k of point ``p`` runs as point ``p`` (k = 0) or ``p__s{k}`` with its own derived seed.
        precision: arithmetic of the training forward passes: ``fp32`` (the default, on CPU and GPU alike)
            or ``bf16`` (autocast; weights, optimizer state and the loss head stay fp32). An experiment
            accepts the values in its config's ``PRECISIONS`` (``("fp32",)`` unless it trains through
            :func:`lmsci.train.trainer.train` and says otherwise); any other value is a ConfigError.
        compile: whether the trainers (:func:`lmsci.train.trainer.train`, :func:`lmsci.train.stacked.train_stacked`)
            compile the forward and loss with :func:`torch.compile`: ``auto`` (on CUDA, not on CPU), ``on``, ``off``.
            An execution setting like ``device``: compiled training equals eager to float tolerance, so it is
            not part of a preset's digest (CLAIMS.md, 2026-11-27).
    """

    preset: str = "quick"
    seed: int = Field(0, ge=0, description="master seed")
    device: str = Field("auto", pattern="^(auto|cpu|cuda(:[0-9]+)?)$")
    threads: int = Field(0, ge=0, description="torch intra-op threads while computing points (0 = torch's default)")
    n_seeds: int = Field(1, ge=1, le=100, description="independent training seeds per sweep point")
    compile: Literal["auto", "on", "off"] = Field(
        "auto", description="torch.compile the training forward and loss: auto (on CUDA only) | on | off")
    precision: str = Field("fp32", description="training arithmetic: fp32 or bf16 where the experiment's PRECISIONS "
                           "has it (same default on CPU and GPU)")

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {"smoke": {}, "quick": {}, "paper": {}}
    #: the precisions this experiment honours (the others are refused before any work)
    PRECISIONS: ClassVar[tuple[str, ...]] = ("fp32",)

    @field_validator("precision")
    @classmethod
    def _precision_supported(cls, v: str) -> str:
        if v not in cls.PRECISIONS:
            why = "" if "bf16" in cls.PRECISIONS else " (this experiment's training loop runs in fp32 only)"
            raise ValueError(" or ".join(repr(p) for p in cls.PRECISIONS) + why)
        return v


def _parse_value(text: str) -> Any:
    """Parse a command-line value: numbers (``1e-3`` too), booleans, lists (``[1,2]``), else a string."""
    t = text.strip()
    if re.fullmatch(r"[+-]?\d+", t):
        return int(t)
    if re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", t):
        return float(t)
    try:
        v = yaml.safe_load(t)
    except yaml.YAMLError:
        return t
    return v


def _field_names(model_cls: type[BaseModel]) -> list[str]:
    return [n for n in model_cls.model_fields]


def _check_key(model_cls: type[BaseModel], key: str) -> None:
    """Raise UnknownNameError when a dotted key names no field of ``model_cls``."""
    parts = key.split(".")
    cls: Any = model_cls
    for i, part in enumerate(parts):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            raise ConfigError(".".join(parts[:i]), key, "a scalar field (it has no sub-fields)")
        names = _field_names(cls)
        if part not in names:
            prefix = ".".join(parts[:i])
            choices = [f"{prefix}.{n}" if prefix else n for n in names]
            raise UnknownNameError("config key", key, choices)
        cls = cls.model_fields[part].annotation


def _canonical_key(model_cls: type[BaseModel], key: str) -> str:
    """``key`` itself, or ``spec.key`` when ``key`` is no top-level field but a field of exactly one nested spec
    (``--set steps=4000`` means ``train.steps`` in a config with ``train: TrainSpec``). Ambiguous or unknown keys
    come back unchanged (and :func:`_check_key` names the choices)."""
    if "." in key or key in model_cls.model_fields:
        return key
    hits = [f"{name}.{key}" for name, f in model_cls.model_fields.items()
            if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel) and key in f.annotation.model_fields]
    return hits[0] if len(hits) == 1 else key


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    d = data
    for p in parts[:-1]:
        d = d.setdefault(p, {})
        if not isinstance(d, dict):
            raise ConfigError(key, value, "a nested key under a sub-configuration")
    d[parts[-1]] = value


def validation_to_config_error(err: ValidationError, data: dict) -> ConfigError:
    """Turn the first pydantic error into a ConfigError with field, value and allowed values."""
    e = err.errors()[0]
    field = ".".join(str(x) for x in e["loc"]) or "config"
    value = e.get("input")
    ctx = e.get("ctx") or {}
    if "expected" in ctx:
        allowed = str(ctx["expected"])
    else:
        allowed = e["msg"].replace("Input should be ", "").replace("Value error, ", "")
    return ConfigError(field, value, allowed)


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Parse ``["a=1", "model.d_model=64"]`` into ``{"a": 1, "model.d_model": 64}``.

    Raises:
        ConfigError: an item without ``=``.
    """
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError("--set", item, "key=value (for example --set steps=200)")
        k, v = item.split("=", 1)
        out[k.strip()] = _parse_value(v)
    return out


def _preset_data(config_cls: type[ExperimentConfig], preset: str) -> dict[str, Any]:
    """The raw (unvalidated) fields of ``preset``: its PRESETS entry with dotted keys nested (a deep copy, so
    callers may edit it) and ``preset`` itself.

    Raises:
        UnknownNameError: the config has no such preset (with a did-you-mean).
    """
    if preset not in config_cls.PRESETS:
        raise UnknownNameError("preset", preset, config_cls.PRESETS.keys())
    data: dict[str, Any] = _spec_defaults(config_cls)
    for k, v in copy.deepcopy(config_cls.PRESETS[preset]).items():  # overrides must not edit PRESETS
        if isinstance(v, dict) and isinstance(data.get(k), dict):
            _merge(data[k], v)
        else:
            _set_dotted(data, k, v)
    data["preset"] = preset
    return data


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> None:
    """Deep-merge ``changes`` into ``base`` in place (a nested dict updates, anything else replaces)."""
    for k, v in changes.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def _spec_defaults(config_cls: type[BaseModel]) -> dict[str, Any]:
    """The dumped defaults of every nested-spec field (``model: GPTSpec = GPTSpec(d_model=128)``), so that a preset
    or ``--set`` that changes one sub-field (``model.d_model``) keeps the experiment's other sub-fields rather than
    falling back to the spec class's defaults."""
    out: dict[str, Any] = {}
    for name, f in config_cls.model_fields.items():
        if isinstance(f.default, BaseModel):
            out[name] = f.default.model_dump(mode="python")
    return out


def resolve_config(
    config_cls: type[ExperimentConfig],
    preset: str = "quick",
    overrides: list[str] | tuple[str, ...] | dict[str, Any] = (),
    seed: int | None = None,
) -> ExperimentConfig:
    """Build a validated configuration: class defaults, then the preset, then the overrides.

    Args:
        config_cls: the experiment's config class.
        preset: one of ``config_cls.PRESETS`` (``smoke``, ``quick``, ``paper``).
        overrides: ``key=value`` strings (dotted keys for nested fields; a bare key that names a field of exactly
            one nested spec, e.g. ``steps`` for ``train.steps``, means that field) or a dict.
        seed: overrides ``seed`` when given.

    Raises:
        UnknownNameError: unknown preset or config key (with a did-you-mean).
        ConfigError: a value of the wrong type or out of range.
    """
    data = _preset_data(config_cls, preset)
    ov = overrides if isinstance(overrides, dict) else parse_overrides(overrides)
    for k, v in ov.items():
        if k == "preset":
            raise ConfigError("preset", v, "set with --preset, not --set")
        k = _canonical_key(config_cls, k)
        _check_key(config_cls, k)
        _set_dotted(data, k, v)
    if seed is not None:
        data["seed"] = seed
    try:
        return config_cls.model_validate(data)
    except ValidationError as err:
        raise validation_to_config_error(err, data) from None


def config_to_yaml(cfg: BaseModel) -> str:
    """Every field of ``cfg``, defaults included, as YAML."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def config_from_yaml(config_cls: type[ExperimentConfig], text: str) -> ExperimentConfig:
    """Load a configuration written by :func:`config_to_yaml`."""
    try:
        return config_cls.model_validate(yaml.safe_load(text))
    except ValidationError as err:
        raise validation_to_config_error(err, {}) from None


def preset_digest(config_cls: type[ExperimentConfig], preset: str) -> str:
    """8 hex digits of a hash of ``preset``'s resolved configuration: every field but where and how fast it
    runs (:data:`NON_SCIENCE_FIELDS`: device, threads, progress, out, preset, compile, stack_seeds). A claim's
    registered digest includes it for every preset the claim is decided at, so a preset change is a
    registered change (CLAIMS.md).

    Raises:
        UnknownNameError: the config has no such preset.
        ConfigError: the preset does not validate on its own (for example it needs local files).
    """
    import hashlib
    import json

    data = _preset_data(config_cls, preset)
    try:
        cfg = config_cls.model_validate(data)
        dumped = cfg.model_dump(mode="json")
    except ValidationError:
        dumped = {**{k: f.default for k, f in config_cls.model_fields.items()}, **data}
    keep = {k: v for k, v in dumped.items() if k not in NON_SCIENCE_FIELDS}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:8]
