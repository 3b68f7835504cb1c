"""The benchmark scripts run at their smallest settings and print what they promise (not timed here:
ratios on a shared test machine mean nothing; these guard the scripts against rot)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: str, *args: str) -> str:
    out = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_gpt_vs_hf_same_losses_and_a_ratio():
    text = _run("bench_gpt_vs_hf.py", "--size", "tiny", "--windows", "2", "--steps", "1", "--warmup", "1",
                "--threads", "1")
    ratio = float(re.search(r"ratio lmsci/HF: total ([0-9.]+)x", text).group(1))
    diff = float(re.search(r"loss difference after \d+ identical steps ([0-9.e+-]+)", text).group(1))
    assert ratio > 0
    assert diff < 1e-4  # the fused head and HF's logits path train the same model


def test_lm_infinite_bench_prints_both_modes():
    text = _run("bench_lm_infinite.py", "--lengths", "256", "--window", "64", "--n-layers", "1", "--d-model", "32",
                "--n-heads", "2", "--decode", "4", "--threads", "1")
    assert re.search(r"encode\s+n=\s*256 .*ratio=", text) and re.search(r"decode\s+n=\s*256 .*cache entries", text)
    full, lmi = map(int, re.search(r"cache entries full=(\d+) lm_inf=(\d+)", text).groups())
    assert lmi < full  # the LM-Infinite cache is bounded


def test_laws_bootstrap_bench_agrees_with_lbfgsb():
    text = _run("bench_laws_bootstrap.py", "--n-boot", "20", "--lbfgsb", "2")
    diff = float(re.search(r"max \|difference\| of fit-space estimates: ([0-9.e+-]+)", text).group(1))
    assert diff < 1e-2


def test_stacked_bench_prints_ratio_mfu_and_equal_losses():
    text = _run("bench_stacked.py", "--sizes", "tiny", "--ks", "2", "--steps", "3", "--windows", "1", "--threads", "1")
    ratio = float(re.search(r"ratio stacked/sequential ([0-9.]+)x", text).group(1))
    mfu = float(re.search(r"stacked\s+[0-9,]+ tok/s \(MFU ([0-9.e+-]+)%\)", text).group(1))
    diff = float(re.search(r"max rel\. loss difference ([0-9.e+-]+)", text).group(1))
    assert ratio > 0 and mfu > 0
    assert diff < 1e-5  # the stacked arm trains the same models on the same batches


def test_bios_pipeline_bench_prints_rates_memory_and_a_ratio():
    text = _run("bench_bios_pipeline.py", "--old-n", "30", "60", "--new-n", "100", "400",
                "--bios", "800", "--seq-len", "256", "--batch-size", "4")
    wall, cpu = map(float, re.search(r"ratio new/old: ([0-9.]+)x \(wall\), ([0-9.]+)x \(CPU\)", text).groups())
    assert wall > 0 and cpu > 0
    assert len(re.findall(r"^new  BioStream .* bios/s CPU .* peak +[0-9.]+ MB", text, flags=re.M)) == 2
    assert re.search(r"peak memory: old x[0-9.]+ .*; new x[0-9.]+ ", text)


def test_arch_overhead_bench_prints_the_ratio_and_exact_logits():
    text = _run("bench_arch_overhead.py", "--n", "64", "--d-model", "32", "--n-layers", "1", "--n-heads", "2",
                "--repeats", "1", "--threads", "1")
    ratio = float(re.search(r"overhead full_policy/unpatched: ([0-9.]+)x", text).group(1))
    assert ratio > 0
    diff = float(re.search(r"full_policy\s+[0-9.]+ s\s+ratio=[0-9.]+\s+max\|dlogit\|=([0-9.e+-]+)", text).group(1))
    assert diff == 0.0  # the full policy through AttentionInterface changes nothing


def test_igsm_bench_prints_rate_rejections_and_memory():
    text = _run("bench_igsm.py", "--n", "200", "--windows", "2", "--seq-len", "128")
    rate, rej = re.search(r"igsm-med light op, train: ([0-9,]+) problems/s CPU .*, ([0-9.]+) rejections/problem",
                          text).groups()
    assert float(rate.replace(",", "")) > 0 and float(rej) >= 0
    assert re.search(r"memory: [0-9.]+ MB retained .*peak memory: [0-9.]+ MB", text)
    assert re.search(r"40/40 generated solutions correct", text)


def test_grokking_bench_prints_ratio_and_equal_losses():
    text = _run("bench_grokking.py", "--p", "13", "--d-model", "32", "--n-heads", "2", "--d-mlp", "64", "--members", "2",
                "--steps", "3", "--windows", "1", "--threads", "1")
    ratio = float(re.search(r"ratio 2 x single / stacked: ([0-9.]+)x", text).group(1))
    diff = float(re.search(r"max rel\. loss difference stacked vs single over 3 steps: ([0-9.e+-]+)", text).group(1))
    assert ratio > 0 and re.search(r"ratio 2 x single / vmap: [0-9.]+x", text)
    assert diff < 1e-5  # stacked training trains the same models


def test_watermark_walk_bench_draws_the_same_and_prints_a_ratio():
    text = _run("bench_watermark_walk.py", "--n-texts", "4", "--prompt-len", "8", "--T", "24", "--steps", "2",
                "--windows", "1", "--threads", "1")
    ratio = float(re.search(r"ratio full/cached: ([0-9.]+)x", text).group(1))
    diff = float(re.search(r"max \|log-prob difference\|: ([0-9.e+-]+|nan)", text).group(1))
    assert ratio > 0 and "same draws for one seed: True" in text
    assert diff < 1e-4  # the cached proposal scores like a full pass


@pytest.mark.skipif(not any(shutil.which(c) for c in ("c++", "g++", "clang++")),
                    reason="torch.compile on CPU (inductor) needs a C++ compiler")
@pytest.mark.skipif(os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "default",
                    reason="inductor's C++ does not build with ATEN_CPU_CAPABILITY=default (at::vec undeclared; S54)")
def test_train_throughput_bench_compiled_equals_eager():
    text = _run("bench_train_throughput.py", "--shapes", "32x1", "--steps", "3", "--warmup", "1", "--windows", "1",
                "--k", "2", "--seq-len", "16", "--vocab", "32", "--batch-size", "2")
    arms = dict(re.findall(r"layers  (\w+)\s+[0-9,]+ tok/s  \(MFU [0-9.e+-]+%\)  ratio \w+/eager ([0-9.]+)x", text))
    assert set(arms) == {"eager", "bf16", "compiled", "stacked"} and float(arms["eager"]) == 1.0
    diff = float(re.search(r"compiled vs eager: max rel\. loss difference ([0-9.e+-]+) over 3 steps", text).group(1))
    assert diff < 1e-4  # torch.compile trains the same model on the same batches


def test_patching_bench_lmsci_and_nnsight_give_the_same_patched_logit_differences():
    pytest.importorskip("nnsight")
    text = _run("bench_patching_nnsight.py", "--model", "tiny", "--n-prompts", "4", "--threads", "1")
    diff = float(re.search(r"largest \|difference\| of the patched logit differences: ([0-9.e+-]+)", text).group(1))
    assert diff < 1e-5  # the same scan through two hook interfaces
    assert float(re.search(r"ratio nnsight/lmsci: ([0-9.]+)x", text).group(1)) > 0
    assert "top-5 heads equal: True" in text


def test_cfg_attention_bench_prints_kernel_ratios_equal_outputs_and_the_step_profile():
    text = _run("bench_cfg_attention.py", "--steps", "1", "--reps", "1", "--top", "3")
    rows = re.findall(r"math [0-9.]+ \(([0-9.]+)x; ([0-9.e+-]+)\), explicit [0-9.]+ \(([0-9.]+)x; ([0-9.e+-]+)\)", text)
    assert len(rows) == 3
    for r_math, d_math, r_exp, d_exp in rows:
        assert float(r_math) > 0 and float(r_exp) > 0
        assert float(d_math) < 1e-4 and float(d_exp) < 1e-4  # the three kernels compute the same attention
    ms = float(re.search(r"([0-9.]+) CPU ms per step", text).group(1))
    shares = [float(s) for s in re.findall(r"^\s+([0-9.]+)%\s+\S", text, flags=re.M)]
    assert ms > 0 and len(shares) == 3 and all(0 < s <= 100 for s in shares)
