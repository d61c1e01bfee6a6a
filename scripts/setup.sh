#!/usr/bin/env bash
# Set up attnsvm in a virtual environment (default ./.venv) from scratch.
# PyTorch is installed first with an explicit pin so that nothing pulls a multi-GB
# CUDA build; override with TORCH_SPEC (e.g. TORCH_SPEC="torch>=2.1") elsewhere.
# Usage: bash scripts/setup.sh [EXTRAS]     (EXTRAS default "dev,real"; "dev" skips the real-data extra)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${ATTNSVM_VENV:-$here/.venv}"
extras="${1:-dev,real}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$here[$extras]"
echo "attnsvm is set up in $venv ($("$venv/bin/attnsvm" --version))"
