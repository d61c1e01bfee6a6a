#!/usr/bin/env bash
# Set up attnsvm in a virtual environment (default ./.venv) from scratch.
# PyTorch is installed first with an explicit pin so that nothing pulls a multi-GB
# CUDA build; override with TORCH_SPEC (e.g. TORCH_SPEC="torch>=2.1") elsewhere.
# Usage: bash scripts/setup.sh [EXTRAS]     (EXTRAS default "dev,real"; "dev" skips the real-data extra)
# Each step prints a line when it starts and when it ends (with its time); pip prints what it
# collects and installs as it goes. QUIET=1 keeps pip's own lines out.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${ATTNSVM_VENV:-$here/.venv}"
extras="${1:-dev,real}"
python="${PYTHON:-python3}"
pipq=()
if [ "${QUIET:-0}" = "1" ]; then pipq=(--quiet); fi
start=$SECONDS
step() {  # step N/M "what" command...
  local label="$1" what="$2"
  shift 2
  local t0=$SECONDS
  echo "==> [$label] $what"
  "$@"
  echo "    [$label] done in $((SECONDS - t0)) s"
}
if [ ! -x "$venv/bin/python" ]; then
  step 1/3 "create the virtual environment $venv" "$python" -m venv "$venv"
else
  echo "==> [1/3] virtual environment $venv exists, reused"
fi
step 2/3 "install PyTorch (${TORCH_SPEC:-torch==2.13.0}; the largest download)" \
  "$venv/bin/python" -m pip install ${pipq[@]+"${pipq[@]}"} --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}"
step 3/3 "install attnsvm with the extras [$extras] (editable) and its dependencies" \
  "$venv/bin/python" -m pip install ${pipq[@]+"${pipq[@]}"} --disable-pip-version-check -e "$here[$extras]"
echo "attnsvm is set up in $venv ($("$venv/bin/attnsvm" --version)) in $((SECONDS - start)) s"
