#!/usr/bin/env bash
# The documentation site (MkDocs + mkdocs-material + mkdocstrings; the `docs` extra of pyproject.toml).
#   bash scripts/docs.sh serve     live preview at http://127.0.0.1:8000 (rebuilds on edits)
#   bash scripts/docs.sh build     build site/ with --strict (a broken link, a missing page or file fails)
#   bash scripts/docs.sh outputs   rerun every tutorial under docs/tutorials/ and store what it printed
#                                  (docs/tutorials/NAME.out.txt, shown in the pages; commit them)
# The pages document the checkout they are built from (src/ is put first on the path).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${VENV:-.venv}/bin
[ -x "$BIN/mkdocs" ] || BIN=$(dirname "$(command -v mkdocs || command -v python3)")
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export NO_MKDOCS_2_WARNING=${NO_MKDOCS_2_WARNING:-1}   # mkdocs-material's banner about its successor
case "${1:-build}" in
  serve) exec "$BIN/mkdocs" serve --strict "${@:2}" ;;
  build) exec "$BIN/mkdocs" build --strict "${@:2}" ;;
  outputs)
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    for f in docs/tutorials/*.py; do
      echo "running $f" >&2
      "$BIN/python" "$f" > "${f%.py}.out.txt"
    done ;;
  *) echo "usage: bash scripts/docs.sh serve|build|outputs" >&2; exit 2 ;;
esac
