"""Every experiment runs on the device it is given (issue 12, item 3), checked on a CPU-only machine.

A device spy emulates a CUDA device with CPU memory: a :class:`torch.overrides.TorchFunctionMode` turns
every ``device="cuda"`` (factories, ``.to``, ``.cuda()``, ``torch.Generator(device=...)``) into a CPU
allocation whose storage it marks "on CUDA", propagates the mark through every torch operation, and answers
``tensor.device`` / ``is_cuda`` for marked tensors as a real CUDA tensor would. It reports what real CUDA
would reject or what the issue forbids:

* an operation mixing a "CUDA" tensor with a CPU tensor of one dimension or more (CPU 0-d scalars are
  allowed, as on CUDA; index arguments of ``t[...]`` may live on the CPU, as on CUDA);
* a random generator on the other device than the tensor it fills (``torch.multinomial`` with a CPU
  generator on CUDA probabilities fails on a GPU);
* ``.numpy()`` of a "CUDA" tensor (fails on a GPU: results must be moved with ``.cpu()`` first);
* an ``nn.Module`` called while its own parameters or buffers are on the CPU, or with CPU tensor inputs
  (a model built on the CPU whatever the device, or moved back to the CPU for evaluation: the bugs issue
  12 names in factual-recall, hallucination-stage, length-generalization and passkey-retrieval);
* heavy compute (matmuls, attention, softmax, cross-entropy, embeddings, norms) on CPU tensors while the
  run's device is CUDA (a harness or measurement pinned to the CPU).

Each registered experiment's smoke preset (one training seed where the experiment allows it) is run
group by group through ``run_group`` with ``ctx.device == "cuda"`` and ``cfg.device == "cuda"``; the
executor (sweep/backends) is bypassed because it is device-agnostic and refuses "cuda" on this machine.
An experiment that computes with NumPy/SciPy only (no torch tensor) is walked and then skipped with that
reason: there is nothing to place on a device. The test that ``--device cuda`` without CUDA is a
ConfigError / exit 2 naming the field lives in tests/test_sweep_contract.py and tests/test_suite.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from lmsci.config import config_to_yaml, resolve_config
from lmsci.train.compile import compile_mode
from lmsci.contract import PointContext
from lmsci.errors import ConfigError
from lmsci.experiments.registry import catalog

NAMES = sorted(catalog())
_F = torch._C._functorch
CUDA0 = torch.device("cuda", 0)
_RealGenerator = torch.Generator

# ops whose arithmetic should run on the run's device (a CPU call of one of them while the device is CUDA
# means a model, harness or measurement pinned to the CPU)
HEAVY = {"matmul", "__matmul__", "mm", "bmm", "baddbmm", "addmm", "einsum", "linear", "conv1d", "conv2d",
         "scaled_dot_product_attention", "softmax", "log_softmax", "cross_entropy", "embedding", "layer_norm",
         "rms_norm"}
# ops that may take tensors of both devices (copies between devices, metadata, conversions to Python)
CROSS_OK = {"copy_", "to", "cpu", "cuda", "__setitem__", "__repr__", "__format__", "__str__", "tolist", "item",
            "__bool__", "__float__", "__int__", "__index__", "__len__", "untyped_storage", "data_ptr",
            "is_floating_point", "dim", "size", "numel", "element_size", "stride", "storage_offset",
            "is_contiguous", "__hash__", "__reduce_ex__", "_fix_weakref", "requires_grad_", "__set__",
            "_has_compatible_shallow_copy_type",
            "_parse_to",  # nn.Module.to(device=...) parses its arguments through it: the device must survive
            "detach"}
MIN_HEAVY_NUMEL = 64  # smaller CPU ops (bookkeeping on a few numbers) are not reported

# Experiments (not owned by the author of this test) that still pin work to the CPU, with where; each is an
# expected failure until fixed, and a strict one: once it keeps its work on the device the test fails and asks
# for the entry to be removed. Found by this test on 2026-11-23 (issue 12, item 3).
KNOWN_PINNED: dict[str, str] = {}


def _base(t: torch.Tensor) -> torch.Tensor:
    while _F.is_functorch_wrapped_tensor(t):  # vmap / grad wrappers: the device is the wrapped tensor's
        t = _F.get_unwrapped(t)
    return t


def on_cuda(t: torch.Tensor) -> bool | None:
    """Whether ``t`` lives on the emulated CUDA device (None: no storage to tell, e.g. sparse)."""
    try:
        s = _base(t).untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    return bool(getattr(s, "_lmsci_cuda", False))


def mark(t: torch.Tensor) -> None:
    try:
        _base(t).untyped_storage()._lmsci_cuda = True
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        pass


def _is_cuda_device(d) -> bool | None:
    if d is None:
        return None
    if isinstance(d, int):
        return True
    try:
        return torch.device(d).type == "cuda"
    except (RuntimeError, TypeError):
        return None


class FakeGenerator(_RealGenerator):
    """``torch.Generator`` whose ``device="cuda"`` is a CPU generator marked as CUDA."""

    def __new__(cls, device="cpu"):
        g = _RealGenerator.__new__(cls, "cpu")
        g._lmsci_cuda = bool(_is_cuda_device(device))
        return g

    def __init__(self, device="cpu"):
        pass

    @property
    def device(self):
        return CUDA0 if self._lmsci_cuda else torch.device("cpu")


def _where() -> str:
    """The innermost three lmsci frames of the current stack (cheap: no source lines are read)."""
    out, f = [], sys._getframe(2)
    while f is not None and len(out) < 3:
        if "/lmsci/" in f.f_code.co_filename:
            out.append(f"{Path(f.f_code.co_filename).name}:{f.f_lineno} {f.f_code.co_name}")
        f = f.f_back
    return " <- ".join(out) or "?"


def _in_world() -> bool:
    """Whether the innermost lmsci frame is in ``lmsci/worlds``: worlds draw data on the CPU from their seeds
    (the same data on every device) and the experiments move it; that is not work pinned to the CPU."""
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if "/lmsci/" in fn:
            return "/lmsci/worlds/" in fn
        f = f.f_back
    return False


class _Pinned(Exception):
    pass


class DeviceSpy(TorchFunctionMode):
    """The emulated CUDA device (see the module docstring); ``violations`` lists what a GPU run would break
    on or what pins work to the CPU, with the lmsci code location."""

    def __init__(self):
        super().__init__()
        self.violations: list[str] = []
        self.cuda_ops = 0
        self.module_calls = 0
        self.torch_ops = 0

    stop_at_first = False  # raise _Pinned at the first violation (known-pinned experiments: keeps them quick)

    def flag(self, what: str) -> None:
        if len(self.violations) >= 40:  # enough to diagnose; keeps a badly pinned run fast
            return
        msg = f"{what} at {_where()}"
        if msg not in self.violations:
            self.violations.append(msg)
        if self.stop_at_first:
            raise _Pinned(msg)

    # -- tensors moving between devices -------------------------------------------------------------
    def _to(self, func, name, args, kwargs):
        t = args[0]
        src = on_cuda(t)
        rest, kw = list(args[1:]), dict(kwargs)
        if name == "cuda":
            target, rest, kw = True, [], {k: v for k, v in kw.items() if k != "device"}
        elif name == "cpu":
            target = False
        else:
            target = None
            if rest and isinstance(rest[0], torch.Tensor):  # .to(other): other's device and dtype
                other = rest.pop(0)
                target = bool(on_cuda(other))
                kw.setdefault("dtype", other.dtype)
            elif rest and not isinstance(rest[0], torch.dtype):
                target = _is_cuda_device(rest[0])
                rest[0] = "cpu"
            elif kw.get("device") is not None:
                target = _is_cuda_device(kw["device"])
                kw["device"] = "cpu"
        out = func(t, *rest, **kw) if name == "to" else (func(t, *rest, **kw) if name == "cpu" else t.to("cpu", **kw))
        moved = target is not None and target != bool(src)
        if moved and isinstance(out, torch.Tensor) and _base(out).untyped_storage().data_ptr() == \
                _base(t).untyped_storage().data_ptr():
            out = out.clone()  # a real move allocates on the other device
        if (target is True) or (target is None and src):
            mark(out)
        return out

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "__get__":  # tensor properties
            prop = getattr(getattr(func, "__self__", None), "__name__", "")
            if prop in ("device", "is_cuda", "is_cpu", "grad") and args and isinstance(args[0], torch.Tensor):
                c = on_cuda(args[0])
                if prop == "device":
                    return CUDA0 if c else func(*args, **kwargs)
                if prop == "is_cuda":
                    return bool(c)
                if prop == "is_cpu":
                    return not c
                g = func(*args, **kwargs)
                if g is not None and c:
                    mark(g)  # autograd allocates a gradient on its parameter's device
                return g
            return func(*args, **kwargs)
        if name == "get_device" and args and isinstance(args[0], torch.Tensor):
            return 0 if on_cuda(args[0]) else -1
        if name in ("to", "cuda", "cpu") and args and isinstance(args[0], torch.Tensor):
            return self._to(func, name, args, kwargs)
        if name in ("numpy", "__array__") and args and isinstance(args[0], torch.Tensor):
            if on_cuda(args[0]):
                self.flag(f"{name}() of a CUDA tensor (TypeError on a GPU: move it with .cpu() first)")
            return func(*args, **kwargs)
        if name in CROSS_OK:
            return func(*args, **kwargs)
        if name == "__deepcopy__":  # a copy stays on its device
            out = func(*args, **kwargs)
            if on_cuda(args[0]):
                mark(out)
            return out

        self.torch_ops += 1
        dev_given = kwargs.get("device") is not None
        dev_kw = bool(_is_cuda_device(kwargs["device"])) if dev_given else False
        if dev_kw:
            kwargs = {**kwargs, "device": "cpu"}
        checked = args[:1] if name == "__getitem__" else (args, kwargs)  # CPU index tensors are fine on CUDA
        ts = [x for x in tree_leaves(checked) if isinstance(x, torch.Tensor)]
        states = [(x, on_cuda(x)) for x in ts]
        any_cuda = any(s for _, s in states)
        cpu_big = [x for x, s in states if s is False and x.dim() > 0]
        if any_cuda and cpu_big:
            shapes = [tuple(x.shape) for x in cpu_big][:3]
            self.flag(f"{name}: CUDA tensors mixed with CPU tensors of shape {shapes}")
        out_cuda = dev_kw if dev_given else any_cuda  # an explicit device wins, else the inputs' device
        gen = kwargs.get("generator")
        if isinstance(gen, _RealGenerator):
            g_cuda = bool(getattr(gen, "_lmsci_cuda", False))
            if g_cuda != bool(out_cuda):
                self.flag(f"{name}: a {'CUDA' if g_cuda else 'CPU'} generator draws a "
                          f"{'CUDA' if out_cuda else 'CPU'} tensor")
        if out_cuda:
            self.cuda_ops += 1
        elif name in HEAVY and ts and max(x.numel() for x in ts) >= MIN_HEAVY_NUMEL and not _in_world():
            self.flag(f"{name} computed on the CPU while the run's device is CUDA")
        out = func(*args, **kwargs)
        inplace = (name.endswith("_") and not name.endswith("__")) or "out" in kwargs
        if out_cuda and not inplace:
            for x in tree_leaves(out):
                if isinstance(x, torch.Tensor):
                    mark(x)
        return out

    # -- modules --------------------------------------------------------------------------------------
    def module_hook(self, module, args):
        self.module_calls += 1
        for what, ts in (("parameter", module.parameters(recurse=False)), ("buffer", module.buffers(recurse=False))):
            for t in ts:
                if on_cuda(t) is False:
                    self.flag(f"{type(module).__name__} called with a {what} on the CPU")
                    break
        for x in tree_leaves(args):
            if isinstance(x, torch.Tensor) and x.dim() > 0 and on_cuda(x) is False:
                self.flag(f"{type(module).__name__} called with a CPU input of shape {tuple(x.shape)}")


@pytest.fixture
def fake_cuda(monkeypatch):
    """Installs the spy: "cuda" resolves, generators and autograd follow it, modules are checked."""
    spy = DeviceSpy()
    for mod in list(sys.modules.values()):  # every module that imported resolve_device by name
        if getattr(mod, "__name__", "").startswith("lmsci") and hasattr(mod, "resolve_device"):
            monkeypatch.setattr(mod, "resolve_device", lambda d="auto": "cuda" if d in ("auto", "cuda") else d)
    monkeypatch.setattr(torch, "Generator", FakeGenerator)
    real_grad = torch.autograd.grad

    def grad(outputs, inputs, *a, **k):
        gs = real_grad(outputs, inputs, *a, **k)
        for i, g in zip([inputs] if isinstance(inputs, torch.Tensor) else inputs, gs):
            if g is not None and on_cuda(i):
                mark(g)
        return gs

    monkeypatch.setattr(torch.autograd, "grad", grad)
    # torch.random.fork_rng(devices=[cuda]) saves and restores CUDA generator states: the emulated device answers
    # with the CPU generator's state (a CPU build has no CUDA generator to ask)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": torch.get_rng_state())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": None)
    handle = torch.nn.modules.module.register_module_forward_pre_hook(spy.module_hook)
    try:
        yield spy
    finally:
        handle.remove()


def _config(cls):
    """The smoke preset on "cuda" with one training seed where the experiment allows it, eager: the emulated device
    cannot be traced by torch.compile (Dynamo's generated frames build tensors the spy never placed), so the walk
    checks placement in eager code; compiled training is checked against eager on CPU (tests/train/test_compile.py)."""
    base = {"device": "cuda", "threads": 1, "compile": "off"}
    for extra in ({"n_seeds": 1}, {}):
        try:
            cfg = resolve_config(cls.Config, "smoke", {**base, **extra})
            cls().validate(cfg)
            return cfg
        except ConfigError:
            continue
    raise AssertionError(f"{cls.name}: the smoke preset does not validate on device cuda")


def representative(groups: list) -> list:
    """The groups that bring a new categorical point parameter (a string or bool value: a kind, a method, an
    arm, a variant), in sweep order; groups that differ only in numbers (sizes, budgets) or in the training
    seed run the same code and are left out to keep the walk short. The first group is always kept."""
    seen: set = set()
    out = []
    for g in groups:
        cats = {(k, v) for p in g for k, v in p.params.items() if isinstance(v, (str, bool))}
        if not out or not cats <= seen:
            out.append(g)
        seen |= cats
    return out


def walk(name: str, out: Path, spy: DeviceSpy) -> int:
    """Run every group of ``name``'s smoke sweep under the spy; returns the number of points run."""
    from lmsci.runs import RunDir, environment

    cls = catalog()[name]
    cfg = _config(cls)
    exp = cls()
    run = RunDir(out)
    env = environment(cfg.seed, "cpu")
    env["device"] = "cuda (emulated by tests/test_devices.py)"
    run.init(name, config_to_yaml(cfg), env)
    n = 0
    for group in representative(exp.groups(cfg, exp.seeded_points(cfg))):
        ctxs = [PointContext(run, p, exp.point_seed(cfg, p), "cuda", False) for p in group]
        with spy, compile_mode(cfg.compile):  # as the executor sets it (lmsci.sweep)
            rows = exp.run_group(cfg, group, ctxs)
        for p, row in zip(group, rows):
            run.append_result(p.id, {"status": "ok", **row, "seed_index": p.seed_index})
        n += len(group)
    return n


@pytest.mark.parametrize("name", NAMES)
def test_experiment_keeps_its_work_on_the_configured_device(name, tmp_path, fake_cuda):
    t0 = time.perf_counter()
    if name in KNOWN_PINNED:
        fake_cuda.stop_at_first = True
        try:
            walk(name, tmp_path / name, fake_cuda)
        except _Pinned:
            pass
        except Exception as e:  # a known failure under the emulated device (KNOWN_PINNED says which)
            pytest.xfail(f"known: {KNOWN_PINNED[name]} ({type(e).__name__}: {e})")
        if fake_cuda.violations:
            pytest.xfail(f"known CPU pinning: {KNOWN_PINNED[name]} (first: {fake_cuda.violations[0]})")
        pytest.fail(f"{name} now keeps its work on the device: remove it from KNOWN_PINNED in tests/test_devices.py")
    n = walk(name, tmp_path / name, fake_cuda)
    spent = time.perf_counter() - t0
    assert n > 0
    assert not fake_cuda.violations, (f"{name} ({n} points, {spent:.0f} s) would not run on CUDA end to end:\n  "
                                      + "\n  ".join(fake_cuda.violations[:12]))
    if fake_cuda.torch_ops == 0 and fake_cuda.module_calls == 0:
        pytest.skip(f"{name} computes with NumPy/SciPy only: no torch tensor or module to place on a device "
                    f"(walked {n} points without a violation)")
    assert fake_cuda.cuda_ops > 0, f"{name} ran {fake_cuda.torch_ops} torch ops, none of them on the device"


# -- the spy itself catches the bugs of issue 12 (so a clean run above means something) -------------------
class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.out = torch.nn.Linear(8, 11)

    def forward(self, x):
        return self.out(self.emb(x))


def test_spy_catches_a_model_left_on_the_cpu(fake_cuda):
    with fake_cuda:
        model = _Tiny()  # built on the CPU and never moved
        x = torch.zeros(2, 5, dtype=torch.long, device="cuda")
        model(x)
    assert any("on the CPU" in v for v in fake_cuda.violations), fake_cuda.violations


def test_spy_catches_a_model_moved_back_to_the_cpu_for_evaluation(fake_cuda):
    with fake_cuda:
        model = _Tiny().to("cuda")
        x = torch.zeros(2, 5, dtype=torch.long).to("cuda")
        model(x)
        assert not fake_cuda.violations, fake_cuda.violations
        assert next(model.parameters()).device.type == "cuda" and x.is_cuda
        model.cpu()
        model(torch.zeros(2, 5, dtype=torch.long))  # evaluation harness on the CPU
    assert any("Embedding called with a parameter on the CPU" in v for v in fake_cuda.violations)


def test_spy_follows_module_to_with_keyword_arguments_and_cuda_rng_forks(fake_cuda):
    """Two limits of the emulation found at stop 50 (mlp-memories-lm, lm-steer-lm): ``Module.to(device=...,
    dtype=...)`` left the parameters unmarked, and ``fork_rng(devices=[cuda])`` asked a CPU build for CUDA
    generator states; both work on real CUDA, so the emulation must follow them."""
    with fake_cuda:
        ref = _Tiny().to("cuda")
        p = next(ref.parameters())
        m = _Tiny().to(device=p.device, dtype=p.dtype)
        assert next(m.parameters()).device.type == "cuda"
        with torch.random.fork_rng(devices=[p.device]):
            torch.manual_seed(0)
            m(torch.zeros(2, 5, dtype=torch.long, device="cuda"))
        cpu = _Tiny().to(device="cpu")
    assert next(cpu.parameters()).device.type == "cpu"
    assert not fake_cuda.violations, fake_cuda.violations


def test_spy_catches_cpu_tensors_cpu_generators_and_numpy(fake_cuda):
    with fake_cuda:
        q = torch.randn(3, 4, device="cuda")
        q * torch.tensor([1.0, 2.0, 3.0, 4.0])  # a helper's CPU tensor (the LM-Infinite top-k bug)
        q * torch.tensor(2.0)  # a CPU scalar is fine, as on CUDA
        probs = torch.softmax(q, -1)
        torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(0))
        torch.multinomial(probs, 1, generator=torch.Generator(device=q.device).manual_seed(0))  # fine
        q.numpy()
        q.cpu().numpy()  # fine
    v = "\n".join(fake_cuda.violations)
    assert "mul: CUDA tensors mixed with CPU tensors of shape [(4,)]" in v
    assert "a CPU generator draws a CUDA tensor" in v and "a CUDA generator" not in v
    assert v.count("numpy() of a CUDA tensor") == 1
    assert len(fake_cuda.violations) == 3, fake_cuda.violations


def test_spy_follows_training_through_the_trainer(fake_cuda, tmp_path):
    """The trainer moves the model, batches, optimizer state and gradients to the device and keeps the
    CUDA RNG bookkeeping out of a CPU-only build's way (checkpoint + resume included)."""
    from lmsci.train.trainer import TrainConfig, train

    def get_batch(step, g):
        x = torch.randint(0, 11, (4, 6), generator=g)
        return x, (x + 1) % 11

    cfg = TrainConfig(steps=4, batch_size=4, warmup_steps=1, device="cuda", checkpoint_every=2)
    with fake_cuda:
        model = _Tiny()
        train(model, get_batch, cfg, seed=0, checkpoint_dir=tmp_path / "ck",
              eval_fn=lambda m: {"nll": float(torch.nn.functional.cross_entropy(
                  m(torch.zeros(2, 6, dtype=torch.long, device="cuda")).flatten(0, 1),
                  torch.ones(12, dtype=torch.long, device="cuda")))})
        assert next(model.parameters()).device.type == "cuda"
        again = _Tiny().to("cuda")
        res = train(again, get_batch, cfg, seed=0, checkpoint_dir=tmp_path / "ck")  # loads the final checkpoint
        assert res.resumed_from == 4 and torch.equal(next(again.parameters()).cpu(), next(model.parameters()).cpu())
    assert not fake_cuda.violations, fake_cuda.violations
    assert fake_cuda.cuda_ops > 0 and fake_cuda.module_calls > 0


# -- precision: one config field, the same default on every device ------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_precision_is_a_config_field_checked_before_any_work(name):
    cls = catalog()[name]
    assert resolve_config(cls.Config, "smoke").precision == "fp32"  # the default, whatever the device
    for preset in cls.Config.PRESETS:
        assert resolve_config(cls.Config, preset).precision in cls.Config.PRECISIONS
    with pytest.raises(ConfigError) as e:
        resolve_config(cls.Config, "smoke", ["precision=fp16"])
    assert e.value.field == "precision"
    if "bf16" not in cls.Config.PRECISIONS:  # an experiment whose loop would ignore bf16 refuses it
        with pytest.raises(ConfigError, match="precision"):
            resolve_config(cls.Config, "smoke", ["precision=bf16"])


class _Stop(Exception):
    pass


@pytest.mark.parametrize("name", [n for n in NAMES if "bf16" in catalog()[n].Config.PRECISIONS])
def test_bf16_reaches_the_trainer(name, tmp_path, monkeypatch):
    """An experiment that accepts bf16 hands it to the trainer (the first training call is intercepted)."""
    import lmsci.train.stacked as stacked
    import lmsci.train.trainer as trainer
    from lmsci.runs import RunDir, environment

    seen = []

    def spy(model, get_batch, cfg, **kw):
        seen.append(cfg.precision)
        raise _Stop

    monkeypatch.setattr(trainer, "train", spy)
    monkeypatch.setattr(stacked, "train_stacked", spy)
    cls = catalog()[name]
    cfg = resolve_config(cls.Config, "smoke", {"precision": "bf16", "device": "cpu"})
    exp = cls()
    run = RunDir(tmp_path / "run")
    run.init(name, config_to_yaml(cfg), environment(cfg.seed, "cpu"))
    group = exp.groups(cfg, exp.seeded_points(cfg))[0]
    with pytest.raises(_Stop):
        exp.run_group(cfg, group, [PointContext(run, p, exp.point_seed(cfg, p), "cpu", False) for p in group])
    assert seen == ["bf16"]
