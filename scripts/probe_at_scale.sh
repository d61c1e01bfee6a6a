#!/usr/bin/env bash
# MiniLM layer 3 at up to 1000 SVM sentences as resumable stored tasks from a worktree frozen at one commit
# (issue 39). Stop it any time (Ctrl-C, a lost machine); the same command resumes where it stopped.
#
#   bash scripts/probe_at_scale.sh COMMIT [WORKDIR]
#
# COMMIT: the commit every task runs (a frozen worktree is made at WORKDIR/src-COMMIT once, then reused);
# WORKDIR (default /work/atscale): the worktree, the stored tasks (WORKDIR/out-*) and the logs.
# When every part has finished, turn each folder into the committed table with scripts/probe_table.py, e.g.
#   cd WORKDIR/src-COMMIT && python scripts/probe_table.py WORKDIR/out-L3 docs/data/probe_minilm_L3.csv --command "..."
set -euo pipefail
commit=${1:?usage: probe_at_scale.sh COMMIT [WORKDIR]}
work=${2:-/work/atscale}
repo=$(git rev-parse --show-toplevel)
python=${PYTHON:-$repo/.venv/bin/python}
src=$work/src-$commit
mkdir -p "$work"
[ -d "$src" ] || git -C "$repo" worktree add --detach "$src" "$commit"
run() {  # one stored probe, resumable; its output appended to its log
  local name=$1; shift
  echo "$(date -u +%FT%TZ) start $name: attnsvm probe $*" >> "$work/$name.log"
  (cd "$src" && PYTHONPATH="$src/src" OMP_NUM_THREADS=1 "$python" -m attnsvm probe "$@" --out "$work/$name") \
    >> "$work/$name.log" 2>&1
  echo "$(date -u +%FT%TZ) done $name" >> "$work/$name.log"
}
# every head of layer 3 at m = 128, 256, 512, 1000; K = 8 sink nulls (stopped early where no draw can change a
# verdict) and 8 spectrum nulls beside them; the secondary random baseline only at m = 128
run out-L3 --layers 3 --n-sentences 1000 --svm-sentences 128,256,512,1000 --null-draws 8 --baseline-max-m 128
# a second draw of the queries at the largest m: each head's spread over query draws
run out-L3-q1 --layers 3 --n-sentences 1000 --svm-sentences 1000 --null-draws 8 --baseline-max-m 128 --query-seed 1
