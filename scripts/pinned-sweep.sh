#!/usr/bin/env bash
# A sweep (`raptor sweep`, docs/sweeps.md) trained from a pinned commit in the background, its records
# going to this work tree's results/ as each run finishes. Later commits that change fingerprinted code
# neither restart it nor alter it, and a wiped work tree costs one command: the records are committed,
# and `--each` names the arms still to run (on another machine, pretrained snapshots need not hash the
# same, so the records of runs from them would not match and would train again: docs/sweeps.md).
#   scripts/pinned-sweep.sh start COMMIT NAME DATASET [--arms A,B | --each A,B] [raptor sweep options]
#   scripts/pinned-sweep.sh status NAME        alive or not, the log's last lines, runs recorded
#   scripts/pinned-sweep.sh stop NAME          SIGTERM to the sweep's process group (runs resume from checkpoints)
# start: makes .pipelines/sweep-NAME/raptor-tkg (a clone at COMMIT, ../shared linked beside it) when
# missing, ingests DATASET and builds its graph there with that commit's code when missing, then runs
#   raptor sweep NAME --dataset DATASET --jobs 2 --threads 1 --no-progress --results <here>/results/sweeps/NAME/DATASET
# with nohup, in its own session at low CPU priority (nice 10, scheduler autogroup nice 19), logging to
# .pipelines/sweep-NAME/sweep.log (an older log is kept as sweep-<time>.log). `--each A,B` runs one
# `raptor sweep --arms` per arm, in that order (the order in which results arrive); other options
# go to raptor sweep after the defaults above (a later `--jobs 16` wins). This .venv's Python runs the
# clone's code (python -m from the clone's root). Refuses to start while the sweep is alive.
# The records' folder gets a COMMIT file naming the pinned commit (what the sweeps page prints); start
# refuses when that folder's COMMIT names another commit.
# PIPELINES_DIR moves .pipelines/ (the clones, logs and pid files); RESULTS_DIR moves results/.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
pipes="${PIPELINES_DIR:-$here/.pipelines}"
records_root="${RESULTS_DIR:-$here/results}"
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
cmd="${1:-}"; [ $# -gt 0 ] && shift
case "$cmd" in -h|--help|"") usage; exit 0 ;; start|status|stop) ;;
  *) echo "pinned-sweep.sh: unknown command '$cmd' (start, status or stop)" >&2; exit 2 ;; esac
pid_of() { cat "$pipes/sweep-$1/sweep.pid" 2>/dev/null || true; }
alive() { local p; p="$(pid_of "$1")"; [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

if [ "$cmd" = status ] || [ "$cmd" = stop ]; then
  [ $# -eq 1 ] || { echo "pinned-sweep.sh $cmd: give the sweep's NAME" >&2; exit 2; }
  name="$1"; dir="$pipes/sweep-$name"
  [ -d "$dir" ] || { echo "pinned-sweep.sh: no sweep $name here ($dir)" >&2; exit 1; }
  if [ "$cmd" = stop ]; then
    alive "$name" && kill -TERM -- "-$(pid_of "$name")" && echo "stopped sweep $name" || echo "sweep $name is not running"
    exit 0
  fi
  alive "$name" && echo "sweep $name: running (pid $(pid_of "$name"))" || echo "sweep $name: not running"
  tail -n 5 "$dir/sweep.log" 2>/dev/null || true
  for r in "$records_root"/sweeps/"$name"/*/; do
    [ -d "$r/train" ] && echo "$(find "$r/train" -name run_config.json | wc -l) run(s) recorded in ${r#"$here"/}"
  done
  exit 0
fi

[ $# -ge 3 ] || { echo "pinned-sweep.sh start: give COMMIT NAME DATASET" >&2; exit 2; }
commit="$1"; name="$2"; dataset="$3"; shift 3
each=""; args=()
while [ $# -gt 0 ]; do
  case "$1" in --each) each="$2"; shift 2 ;; *) args+=("$1"); shift ;; esac
done
py="$here/.venv/bin/python"
[ -x "$py" ] || { echo "pinned-sweep.sh: $py missing: run scripts/setup.sh first" >&2; exit 1; }
shared="$(realpath "$here/../shared")" || { echo "pinned-sweep.sh: no shared folder beside $here" >&2; exit 2; }
full="$(git -C "$here" rev-parse --verify "$commit^{commit}")" || { echo "pinned-sweep.sh: unknown commit $commit" >&2; exit 2; }
dir="$pipes/sweep-$name"; src="$dir/raptor-tkg"
alive "$name" && { echo "pinned-sweep.sh: sweep $name is running (pid $(pid_of "$name")); stop it first" >&2; exit 1; }
results="$records_root/sweeps/$name/$dataset"
if [ -f "$results/COMMIT" ] && [ "$(cat "$results/COMMIT")" != "$full" ]; then
  echo "pinned-sweep.sh: the records in $results were trained at $(head -c 12 "$results/COMMIT"), not ${full:0:12};" \
       "move that folder aside to start afresh (or delete its COMMIT if ${full:0:12} trains the very same runs)" >&2; exit 1
fi
mkdir -p "$dir"
if [ ! -d "$src/.git" ]; then
  git clone -q "$here" "$src"
  git -C "$src" checkout -q "$full"
fi
have="$(git -C "$src" rev-parse HEAD)"
[ "$have" = "$full" ] || { echo "pinned-sweep.sh: $src is at ${have:0:12}, not ${full:0:12}; move it away to re-pin" >&2; exit 1; }
ln -sfn "$shared" "$dir/shared"
cd "$src"
[ -f "data/$dataset/ingested/meta.json" ] || "$py" -m raptor.cli ingest --dataset "$dataset" --out "data/$dataset/ingested"
[ -f "data/$dataset/graph.npz" ] || "$py" -m raptor.cli graph --data "data/$dataset/ingested" --out "data/$dataset/graph.npz"
if [ ! -f "$results/COMMIT" ]; then  # the commit the results pages name for these records (raptor.reporting.results)
  mkdir -p "$results" && echo "$full" > "$results/COMMIT.tmp" && mv "$results/COMMIT.tmp" "$results/COMMIT"
fi
base=("$py" -m raptor.cli sweep "$name" --dataset "$dataset" --no-progress --results "$results" --jobs 2 --threads 1 "${args[@]}")
[ -f "$dir/sweep.log" ] && mv "$dir/sweep.log" "$dir/sweep-$(date -u +%Y%m%dT%H%M%S).log"
{
  echo "#!/usr/bin/env bash"
  echo "# written by scripts/pinned-sweep.sh start at $(date -u +%FT%TZ)"
  echo "cd $(printf '%q' "$src") || exit 1"
  if [ -n "$each" ]; then
    for arm in ${each//,/ }; do
      echo "echo \"=== \$(date -u +%FT%TZ) arm $arm\""
      echo "$(printf '%q ' "${base[@]}") --arms $(printf '%q' "$arm")"
      echo "rc=\$?; echo \"=== \$(date -u +%FT%TZ) arm $arm exit \$rc\""  # $? first: the $(date) in the message resets it
    done
  else
    printf '%q ' "${base[@]}"; echo
    echo "rc=\$?; echo \"=== \$(date -u +%FT%TZ) exit \$rc\""
  fi
} > "$dir/run.sh"
chmod +x "$dir/run.sh"
echo "=== $(date -u +%FT%TZ) sweep $name on $dataset at ${full:0:12} in $src" > "$dir/sweep.log"
nohup setsid bash -c 'echo 19 > /proc/$$/autogroup 2>/dev/null; exec nice -n 10 "$0"' "$dir/run.sh" \
  >> "$dir/sweep.log" 2>&1 < /dev/null &
echo $! > "$dir/sweep.pid"
echo "sweep $name started (pid $!): log $dir/sweep.log, script $dir/run.sh, records $results"
