"""Per-step overhead of tiny quick-preset GPTs on one CPU thread: lmsci's trainer vs a bare loop, torch.compile
and stacked seeds, side by side in one process.

Issue 46 item 3: the quick suite's tiny models reach 3-10% MFU of a one-thread float32 matmul peak
(``results/quick/profile.md``), i.e. they are bound by per-step overhead (Python, dispatch, many small kernels).
This benchmark measures, for the GPT shapes the slowest quick experiments train (``SHAPES``, read from their
quick presets), the training step in these variants:

* ``trainer``: :func:`lmsci.train.trainer.train` as :func:`lmsci.train.adaptor.train_lm` calls it today (fp32,
  ``compile="off"``, ``log_every = steps // 20``); one ``train`` call per timed window;
* ``trainer_on``: the same with ``TrainConfig.compile="on"`` (today's switch, :mod:`lmsci.train.compile`);
* ``bare``: a hand-written loop with the trainer's recipe (same AdamW groups via ``make_optimizer``, lr schedule
  ``lr_at``, clipping, batches and fused loss head ``GPT.sum_nll``) and nothing else: the overhead reference;
* ``comp_loss``: the trainer, with the model's ``sum_nll`` replaced (instance attribute) by a
  ``torch.compile(dynamic=False)`` function ``F.cross_entropy(model(x), y, reduction="sum")``: what an opt-in
  compile of the forward and loss would do;
* ``comp_step``: the bare loop's whole step (forward, loss, backward, clipping, AdamW ``step`` and ``zero_grad``)
  under ``torch.compile(step, fullgraph=False, dynamic=False)``, the learning rate a tensor (no recompilation when
  it changes; Dynamo breaks the graph at ``backward`` and compiles the parts around it);
* ``comp_step_ca``: ``comp_step`` with compiled autograd (``torch._dynamo.config.compiled_autograd``), which
  traces the backward into the compiled step instead of breaking the graph there;
* ``stacked``: ``--k`` seeds of the shape as one :func:`lmsci.train.stacked.train_stacked` computation (tokens/s
  count all K members).

Method: every variant first runs ``--check-steps`` steps from the same initial weights (``GPT(cfg, seed=0)``) on the
same batches (the batch generator seeded 0): those steps include compilation, whose cost (seconds beyond the steady
step time) is reported as ``compile_s`` (the trainer's own first-step cost, ``w_trainer``, is its row's), and their losses are compared with the trainer's (largest relative
difference over the steps: ``loss_rel_diff``). Then the variants run ``--rounds`` rounds of ``--window`` timed steps
each, interleaved (A B C ... A B C ...) so that load drift on a shared machine hits all alike. Reported per shape and
variant: steps/s and tokens/s (target tokens; stacked: summed over its K members), MFU (FLOPs per token
``6 N + 12 n_layers d_model T``, Kaplan et al. 2020, arXiv:2001.08361 Table 1, via :meth:`GPT.flops_per_token`, over
``--peak`` GFLOP/s, the one-thread matmul peak of ``results/quick/profile.md``), the ratio of tokens/s to the
trainer's, and ``quick_ratio``: the speed-up over a whole quick run of the shape including the warm-up,
``(w_trainer + S t_trainer) / (compile_s + S t_variant)`` with S the quick preset's steps per model (and the same
in CPU seconds: ``compile CPU s``, ``ratio over a quick run (CPU)``).

Usage (one thread, reniced; the machine is shared, so read the ratios, measured in the same run, not the absolute
rates)::

    nice -n 10 env OMP_NUM_THREADS=1 python benchmarks/bench_compile.py --out benchmarks/results/compile_DATE.md
    python benchmarks/bench_compile.py --shapes induction-heads --window 5 --rounds 1 --check-steps 3  # smallest
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F

from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.loss import IGNORE_INDEX
from lmsci.train.stacked import train_stacked
from lmsci.train.trainer import TrainConfig, lr_at, make_optimizer, train

#: name -> (GPTConfig fields, batch_size, quick steps per model, stack size of the experiment, source)
SHAPES: dict[str, tuple[dict[str, Any], int, int, str]] = {  # in order of interest (a cut run keeps the first)
    "model-shape L2": (dict(vocab_size=65, seq_len=128, n_layers=2, n_heads=4, d_model=64, d_head=16), 16, 350,
                       "model-shape quick N100000_L2_d64 (char vocab ~65, 3 seeds stacked)"),
    "model-shape L16": (dict(vocab_size=65, seq_len=128, n_layers=16, n_heads=1, d_model=23, d_head=16, d_mlp=92),
                        16, 350, "model-shape quick N100000_L16_d23 (deep and narrow)"),
    "induction-heads": (dict(vocab_size=32, seq_len=32, n_layers=2, n_heads=4, d_model=64, mlp="none"), 64, 3000,
                        "induction-heads quick attn2 (attention-only, eval every 50 steps not timed here)"),
    "cfg-learning": (dict(vocab_size=5, seq_len=128, n_layers=4, n_heads=4, d_model=64, pos="rope"), 16, 3000,
                     "cfg-learning quick GPT_rot on cfg3b-small (|T| + 2 = 5 tokens)"),
    "mlp-memories": (dict(vocab_size=1024, seq_len=128, n_layers=4, n_heads=4, d_model=128), 8, 1600,
                     "mlp-memories quick Shakespeare GPT (BPE 1024)"),
    "transformer-vs-lstm 2x48": (dict(vocab_size=65, seq_len=256, n_layers=2, n_heads=3, d_model=48, d_head=16), 8,
                                 400, "transformer-vs-lstm quick GPT (2, 48) on Shakespeare chars (3 seeds stacked)"),
    "transformer-vs-lstm 2x96": (dict(vocab_size=65, seq_len=256, n_layers=2, n_heads=6, d_model=96, d_head=16), 8,
                                 400, "transformer-vs-lstm quick GPT (2, 96) on Shakespeare chars (3 seeds stacked)"),
    "icl-kernel-regression": (dict(vocab_size=64, seq_len=96, n_layers=2, n_heads=4, d_model=64), 24, 1500,
                              "icl-kernel-regression quick GPT (context ~96; 3 seeds stacked)"),
    "path-aggregation": (dict(vocab_size=120, seq_len=48, n_layers=2, n_heads=2, d_model=64), 16, 1500,
                         "path-aggregation quick GPT (KG of 100 entities; 24 members per stack: run with --k 24)"),
    "icl-linreg (proxy)": (dict(vocab_size=64, seq_len=22, n_layers=3, n_heads=4, d_model=64), 64, 4000,
                           "icl-linear-regression quick trunk (own loop, VectorGPT; proxied by a token GPT of "
                           "its shape: 2(2d+1) = 22 positions)"),
}
VARIANTS = ("trainer", "trainer_on", "bare", "comp_loss", "comp_step", "comp_step_ca", "stacked")
DEFAULT_VARIANTS = ("trainer", "bare", "comp_loss", "comp_step", "stacked")


def batches(vocab: int, batch: int, seq: int) -> Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    """``get_batch``: sequences whose second half repeats the first (learnable), inputs and next-token targets."""
    def get_batch(step: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        half = torch.randint(0, vocab, (batch, (seq + 2) // 2), generator=g)
        x = torch.cat([half, half], 1)[:, : seq + 1]
        return x[:, :-1], x[:, 1:]
    return get_batch


def trainer_config(steps: int, log_every: int, compile: str = "off") -> TrainConfig:
    """The quick presets' recipe (lr 3e-3, warmup 10%, cosine to 0.1, weight decay 0.1, clip 1)."""
    return TrainConfig(steps=steps, batch_size=1, lr=3e-3, warmup_steps=max(1, steps // 10), min_lr_ratio=0.1,
                       weight_decay=0.1, grad_clip=1.0, device="cpu", log_every=log_every, compile=compile)


def _ce_sum(model: GPT) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model(x)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    return f


@dataclass
class Arm:
    """One variant on one shape: how to run n steps, and what it measured."""

    name: str
    run: Callable[[int], list[float]]  # run(n) -> the n losses (trainer arms: logged ones)
    members: int = 1
    losses: list[float] = field(default_factory=list)
    check_s: float = 0.0
    check_cpu: float = 0.0
    t: float = 0.0
    cpu: float = 0.0
    steps: int = 0
    error: str = ""


def _trainer_arm(name: str, gc: GPTConfig, gb, compile: str, patch: bool) -> Arm:
    model = GPT(gc, seed=0)
    if patch:  # an opt-in compile of forward + loss, as the trainer would call it (TrainConfig.compile stays off)
        model.sum_nll = torch.compile(_ce_sum(model), dynamic=False)
    state = {"seed": 0}

    def run(n: int) -> list[float]:
        log_every = 1 if not arm.losses else max(1, n // 20)
        res = train(model, gb, trainer_config(n, log_every, compile), seed=state["seed"])
        state["seed"] += 1
        return [r["loss"] for r in res.history if "grad_norm" in r]
    arm = Arm(name, run)
    return arm


class _Loop:
    """The trainer's recipe by hand: the overhead reference (``bare``) and, compiled, the whole step."""

    def __init__(self, gc: GPTConfig, gb, compiled: bool, compiled_autograd: bool = False) -> None:
        self.model = GPT(gc, seed=0).train()
        self.gb, self.compiled = gb, compiled
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.cfg = trainer_config(1, 1)
        self.opt = make_optimizer(self.model, self.cfg)
        if compiled:  # lr as a tensor: a changing float would recompile every step
            for g in self.opt.param_groups:
                g["lr"] = torch.tensor(float(g["lr"]))
            loss_fn = _ce_sum(self.model)
        else:
            loss_fn = self.model.sum_nll

        def step(x: torch.Tensor, y: torch.Tensor, n_tok: int) -> tuple[torch.Tensor, torch.Tensor]:
            s = loss_fn(x, y)
            (s / n_tok).backward()
            gn = torch.nn.utils.clip_grad_norm_(self.params, 1.0)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            return s.detach(), gn
        self.step = torch.compile(step, fullgraph=False, dynamic=False) if compiled else step
        self.gen_seed, self.ca = 0, compiled_autograd

    def run(self, n: int) -> list[float]:
        with torch._dynamo.config.patch(compiled_autograd=self.ca):
            return self._run(n)

    def _run(self, n: int) -> list[float]:
        cfg = self.cfg.model_copy(update={"steps": n, "warmup_steps": max(1, n // 10)})
        gen = torch.Generator().manual_seed(self.gen_seed)
        self.gen_seed += 1
        out = []
        for i in range(n):
            lr = lr_at(i, cfg)
            for g in self.opt.param_groups:
                if self.compiled:
                    g["lr"].fill_(lr)
                else:
                    g["lr"] = lr
            x, y = self.gb(i, gen)
            n_tok = int((y != IGNORE_INDEX).sum())
            s, _ = self.step(x, y, n_tok)
            out.append(float(s) / n_tok)
        return out


def _stacked_arm(gc: GPTConfig, gb, k: int) -> Arm:
    models = [GPT(gc, seed=s) for s in range(k)]
    state = {"seed": 0}

    def run(n: int) -> list[float]:
        seeds = [state["seed"] + j for j in range(k)]
        state["seed"] += k
        res = train_stacked(models, gb, trainer_config(n, 1 if not arm.losses else max(1, n // 20)), seeds=seeds)
        return [r["loss"] for r in res.members[0].history if "grad_norm" in r]
    arm = Arm("stacked", run, members=k)
    return arm


def make_arm(name: str, gc: GPTConfig, gb, k: int) -> Arm:
    if name == "trainer":
        return _trainer_arm(name, gc, gb, "off", False)
    if name == "trainer_on":
        return _trainer_arm(name, gc, gb, "on", False)
    if name == "comp_loss":
        return _trainer_arm(name, gc, gb, "off", True)
    if name in ("bare", "comp_step", "comp_step_ca"):
        loop = _Loop(gc, gb, name != "bare", name == "comp_step_ca")
        return Arm(name, loop.run)
    if name == "stacked":
        return _stacked_arm(gc, gb, k)
    raise ValueError(f"unknown variant {name!r}; one of {VARIANTS}")


def bench_shape(name: str, a: argparse.Namespace) -> list[dict[str, Any]]:
    fields, batch, quick_steps, _ = SHAPES[name]
    gc = GPTConfig(**fields)
    gb = batches(gc.vocab_size, batch, gc.seq_len)
    probe = GPT(gc, seed=0)
    fpt, n_params = probe.flops_per_token(), probe.num_params()
    train(GPT(gc, seed=1), gb, trainer_config(2, 1), seed=1)  # first-call costs of the process, not of a variant
    arms = []
    for v in a.variants:
        arm = make_arm(v, gc, gb, a.k)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            arm.losses = arm.run(a.check_steps)
        except Exception as e:  # noqa: BLE001 - a variant that fails on this machine is reported, not fatal
            arm.error = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        arm.check_s, arm.check_cpu = time.perf_counter() - t0, time.process_time() - c0
        arms.append(arm)
        print(f"  [{name}] {v}: {a.check_steps} check steps in {arm.check_s:.1f} s {arm.error}", flush=True)
    for _ in range(a.rounds):
        for arm in arms:
            if arm.error:
                continue
            t0, c0 = time.perf_counter(), time.process_time()
            arm.run(a.window)
            arm.t += time.perf_counter() - t0
            arm.cpu += time.process_time() - c0
            arm.steps += a.window
    ref = next(x for x in arms if x.name == "trainer")
    t_ref = ref.t / ref.steps
    ref_warm = max(0.0, ref.check_s - a.check_steps * t_ref)
    c_ref = ref.cpu / ref.steps
    ref_warm_cpu = max(0.0, ref.check_cpu - a.check_steps * c_ref)
    rows = []
    for arm in arms:
        row: dict[str, Any] = {"shape": name, "variant": arm.name, "N": n_params, "tok_step": batch * gc.seq_len}
        if arm.error:
            rows.append({**row, "error": arm.error})
            continue
        t_step = arm.t / arm.steps
        tps = arm.members * batch * gc.seq_len / t_step
        compile_s = max(0.0, arm.check_s - a.check_steps * t_step)
        c_step = arm.cpu / arm.steps
        compile_cpu = max(0.0, arm.check_cpu - a.check_steps * c_step)
        quick_cpu = (ref_warm_cpu + quick_steps * c_ref) / (compile_cpu / arm.members + quick_steps * c_step / arm.members)
        m = min(len(arm.losses), len(ref.losses))
        diff = max(abs(p - q) / abs(q) for p, q in zip(arm.losses[:m], ref.losses[:m])) if m else float("nan")
        # a stacked step trains K models: per model it costs t_step / K
        per_model = t_step / arm.members
        quick = (ref_warm + quick_steps * t_ref) / (compile_s / arm.members + quick_steps * per_model)
        rows.append({**row, "steps_s": 1 / t_step, "tok_s": tps, "mfu": tps * fpt / (a.peak * 1e9),
                     "ratio": tps / (batch * gc.seq_len / t_ref), "compile_s": compile_s,
                     "cpu_ratio": arm.members * c_ref / (arm.cpu / arm.steps),
                     "loss_rel_diff": diff, "loss_first_last": (arm.losses[0], arm.losses[m - 1]) if m else None,
                     "quick_steps": quick_steps, "quick_ratio": quick, "compile_cpu": compile_cpu,
                     "quick_cpu": quick_cpu})
    return rows


def table(rows: list[dict[str, Any]], a: argparse.Namespace) -> str:
    head = ("| shape | variant | N | tokens/step | steps/s | tokens/s | MFU | ratio to trainer | per CPU s | compile s | "
            f"loss rel. diff to trainer ({a.check_steps} steps) | quick steps | ratio over a quick run | "
            "compile CPU s | ratio over a quick run (CPU) |")
    out = [head, "|" + "---|" * 15]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['shape']} | {r['variant']} | {r['N']:,} | {r['tok_step']} | failed: {r['error']} |"
                       + " |" * 10)
            continue
        diff = "-" if r["variant"] == "trainer" else f"{r['loss_rel_diff']:.1e}"
        out.append(f"| {r['shape']} | {r['variant']} | {r['N']:,} | {r['tok_step']} | {r['steps_s']:.1f} | "
                   f"{r['tok_s']:,.0f} | {100 * r['mfu']:.1f}% | {r['ratio']:.2f}x | {r['cpu_ratio']:.2f}x | "
                   f"{r['compile_s']:.1f} | "
                   f"{diff} | {r['quick_steps']} | {r['quick_ratio']:.2f}x | {r['compile_cpu']:.1f} | {r['quick_cpu']:.2f}x |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--window", type=int, default=200, help="timed steps per window and variant")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of windows")
    ap.add_argument("--check-steps", type=int, default=50, help="untimed first steps: compile + loss comparison")
    ap.add_argument("--k", type=int, default=3, help="seeds per stack (the quick presets' n_seeds)")
    ap.add_argument("--peak", type=float, default=160.4, help="one-thread fp32 matmul peak, GFLOP/s")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="", help="also write the table (markdown) here")
    a = ap.parse_args()
    if "trainer" not in a.variants:
        a.variants = ["trainer", *a.variants]
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.threads} thread(s); {a.check_steps} check steps, then {a.rounds} x "
          f"{a.window} timed steps per variant, interleaved", flush=True)
    rows: list[dict[str, Any]] = []
    for name in a.shapes:
        t0 = time.perf_counter()
        rows += bench_shape(name, a)
        print(table([r for r in rows if r["shape"] == name], a), f"\n({time.perf_counter() - t0:.0f} s)", flush=True)
        write(rows, a)
    print(table(rows, a))


def write(rows: list[dict[str, Any]], a: argparse.Namespace) -> None:
    """The table so far, with the command and the shapes, to ``--out`` (after every shape: a cut run keeps its rows)."""
    text = table(rows, a)
    if a.out:
        src = "\n".join(f"- {k}: {SHAPES[k][3]}; {SHAPES[k][0]}, batch {SHAPES[k][1]}"
                        for k in dict.fromkeys(r["shape"] for r in rows))
        with open(a.out, "w") as f:
            f.write(f"Command: `{' '.join(['python', *sys.argv])}`\n\ntorch {torch.__version__}, {a.threads} "
                    f"thread(s), peak {a.peak} GFLOP/s\n\n{text}\n\nShapes:\n{src}\n")


if __name__ == "__main__":
    main()
