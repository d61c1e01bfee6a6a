#!/usr/bin/env bash
# MiniLM layer 3 at up to 1000 SVM sentences as resumable stored tasks from a worktree frozen at one commit
# (issue 39), then the other layers. Stop it any time (Ctrl-C, a lost machine); the same command resumes where it stopped.
#
#   bash scripts/probe_at_scale.sh COMMIT [WORKDIR]
#
# COMMIT: the commit every task runs (a frozen worktree is made at WORKDIR/src-COMMIT once, then reused);
# WORKDIR (default /work/atscale): the worktree, the stored tasks (WORKDIR/out-*) and the logs.
# Turn the folders into the committed table with scripts/probe_table.py (it reads a run still going too), e.g.
#   PYTHONPATH=WORKDIR/src-COMMIT/src python scripts/probe_table.py WORKDIR/out-L3 WORKDIR/out-L3-m1000 \
#     docs/data/probe_minilm_L3.csv --command "bash scripts/probe_at_scale.sh COMMIT"
set -euo pipefail
commit=${1:?usage: probe_at_scale.sh COMMIT [WORKDIR]}
work=${2:-/work/atscale}
repo=$(git rev-parse --show-toplevel)
python=${PYTHON:-$repo/.venv/bin/python}
src=$work/src-$commit
mkdir -p "$work"
[ -d "$src" ] || git -C "$repo" worktree add --detach "$src" "$commit"
stored() {  # one stored probe from ProbeConfig settings (scripts/probe_stored.py, this checkout's script, the frozen code)
  local name=$1; shift
  echo "$(date -u +%FT%TZ) start $name: probe_stored.py $*" >> "$work/$name.log"
  (cd "$src" && PYTHONPATH="$src/src" OMP_NUM_THREADS=1 "$python" "$repo/scripts/probe_stored.py" "$work/$name" "$@") \
    >> "$work/$name.log" 2>&1
  echo "$(date -u +%FT%TZ) done $name" >> "$work/$name.log"
}
L3="layers=[3] heads=[0,1,2,3,4,5,6,7,8,9,10,11] n_sentences=1000 null_draws=8 baseline_max_m=128 max_length=128"
# 1. every head of layer 3 at m = 128, 256, 512; K = 8 sink nulls (stopped early where no draw can change a verdict)
# and 8 spectrum nulls beside them; the secondary random baseline only at m = 128. These are the settings of
#   attnsvm probe --layers 3 --n-sentences 1000 --svm-sentences 128,256,512,1000 --null-draws 8 --baseline-max-m 128
# (the same shard folder), stopped once m <= 512 is in: at m = 1000 its 8 spectrum nulls per head (descriptive,
# never stopped early) would cost about 3x the verdict's sink nulls (the tasks' seconds at m = 512, heads 0-4:
# 1368 s of spectrum nulls against 421 s of sink nulls).
stored out-L3 --stop-after-m 512 $L3 "svm_sentences=[128,256,512,1000]"
# 2. a second draw of the queries at the largest m, the head SVMs only (no nulls, no verdict): each head's own
# spread over query draws, against its score in 3.
stored out-L3-q1 layers=[3] heads=[0,1,2,3,4,5,6,7,8,9,10,11] n_sentences=1000 null_draws=0 baseline_max_m=128 \
  max_length=128 svm_sentences=1000 query_seed=1
# 2b. the same head SVMs on the first query draw (the m = 1000 run below computes them again beside its nulls; this
# run has them within minutes)
stored out-L3-q0heads layers=[3] heads=[0,1,2,3,4,5,6,7,8,9,10,11] n_sentences=1000 null_draws=0 baseline_max_m=128 \
  max_length=128 svm_sentences=1000
# 3. m = 1000 with the same verdict nulls (the same draws: each is seeded by seed, layer, head and draw only) and
# 2 spectrum nulls beside; scripts/probe_table.py reads out-L3 and out-L3-m1000 as one table
stored out-L3-m1000 $L3 svm_sentences=1000 spectrum_draws=2
# 4. the other five layers at m = 256 and 512 (the stable verdict over both; layer 3 has them in out-L3): every head,
# the same verdict nulls, 2 spectrum nulls beside; about 5 h of one core on this machine by layer 3's m = 512 cost
stored out-layers layers=[0,1,2,4,5] heads=[0,1,2,3,4,5,6,7,8,9,10,11] n_sentences=1000 null_draws=8 \
  baseline_max_m=128 max_length=128 "svm_sentences=[256,512]" spectrum_draws=2
