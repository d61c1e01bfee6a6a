#!/usr/bin/env bash
# Build the documentation into docs/_build/html with warnings as errors, then fail if an executed
# tutorial's page shows a warning in a cell's output or a notebook kernel warned in the build's log
# (docs/_build/sphinx.log; both checked by scripts/check_docs_outputs.py).
#
#   bash scripts/build_docs.sh            # fresh build: every page read, every notebook executed
#   ATTNSVM_DOCS_SKIP_TUTORIALS=1 bash scripts/build_docs.sh   # quick: tutorials shown without outputs
#
# Extra arguments go to sphinx-build (e.g. -j 2). Needs the docs and real extras:
# pip install -e ".[docs,real]" (scripts/setup.sh installs real; add docs).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

start=$(date +%s.%N)
# -E: a fresh environment, so that every page is checked and every notebook runs (-W: warnings
# are errors; --keep-going: report all of them before failing)
# the output (the notebooks' kernels write to its stderr) is printed and kept in $LOG for the check below
LOG="$ROOT/docs/_build/sphinx.log"
mkdir -p "$ROOT/docs/_build"
"$PY" -m sphinx -b html -E -W --keep-going "$@" "$ROOT/docs" "$ROOT/docs/_build/html" 2>&1 | tee "$LOG"
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" -v out="$ROOT/docs/_build/html/index.html" \
    'BEGIN { printf "docs built in %.1f s: %s\n", e - s, out }'
# -W does not see what a tutorial's cells print while they run: fail on a warning in an executed cell's
# output (e.g. tqdm's "IProgress not found"), naming the page and the line
"$PY" "$ROOT/scripts/check_docs_outputs.py" "$ROOT/docs/_build/html"
# nor what a notebook's kernel logs: fail on "[IPKernelApp] WARNING" in the build's log (docs/_ext/kernel_transport.py
# runs the kernels over IPC, so ipykernel's "Kernel is running over TCP without encryption" cannot come back silently)
"$PY" "$ROOT/scripts/check_docs_outputs.py" --sphinx-log "$LOG"
