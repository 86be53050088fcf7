#!/usr/bin/env bash
# Long runs (the paper's budget: hours each) from a pinned commit, so later commits neither restart nor
# silently alter them. Everything lives under .longruns/ (git-ignored; LONGRUN_DIR to move it):
#   src/         a git worktree at the pinned commit (made by the first `start`; later starts reuse it)
#   params.yaml  that commit's params.yaml plus the --set overrides (written by the first `start`)
#   params-DS.yaml  the runs of dataset DS, where a later `start` or `queue` gave --dataset DS and --set
#                before DS had runs: params.yaml plus these overrides (e.g. another precision for the
#                larger datasets), checked by loading it; runs of DS queued before it read it too. Once DS
#                has runs the same --set again changes nothing and another is refused
#   data/DS/     ingested data, graph and label tables, made from src/ when missing
#   venv.txt     the packages (pip freeze) of the first start; later starts warn where this .venv's differ
#   queue, queue.failed, queue.lock  the runs to start later (`queue`), those that could not start, the lock
#                one writer at a time holds
#   superseded/DATE/  folders (runs, queue) set aside by `unpark` for the park's copies further along
#   park-at.pid, park-at.log, park-at.lock  the sleeper `park --at` armed (its pid; park-at.pid.id: its identity and
#                the time it parks), what it said, and the lock one `park --at` at a time holds
#   longrun.sh   a copy of this script, written by each `start` that starts a run (and `park --at`): the runs' jobs
#                call it when they end (rebalance), and `park --at` parks with it, so checking out another commit in
#                the work tree meanwhile does not change the script they run
#   runs/DS/VARIANT/seedS/  `raptor train` outputs (pretrain/, rl/), resumed from their checkpoints, then
#                           eval/: `raptor evaluate` of rl/best.pt on test; train.log beside them, and run.id: the
#                           folder's identity, random, written by the start that begins it (see unpark)
#   runs/DS/ablation/pN/seedS/  the same for an arm of the pretraining-epochs ablation: RL-RAPTOR with N
#                           pretraining epochs (raptor:S:pN); the results page reads the arms with the set's
#                           Pure-RL runs as arm p0 and its RL-RAPTOR runs as the arm of their pretraining budget
#   runs/DS/sweeps/NAME/ARM/VARIANT/seedS/  the same for arm ARM of sweep NAME (VARIANT:SEED:NAME/ARM; the sweep
#                           declared in the pinned params.yaml): the run's params are sweeps/DS/NAME/ARM.yaml, its
#                           dataset's params with the sweep's base and the arm's overrides (written by each start;
#                           for RL-RAPTOR, an arm may not change the label tables' settings). `raptor collect .longruns/runs
#                           results/sweeps/NAME/DS --sweep NAME --params .longruns/params[-DS].yaml --dataset DS`
#                           records the tested ones in the sweep's results folder, with its tables, as `raptor sweep` does
# `raptor collect .longruns/runs results/paper-budget-DS/SITTING --dataset DS` (one folder per sitting or machine),
# `git add results/paper-budget-DS`, then `raptor results "paper budget=results/paper-budget-DS/*" ...` puts
# them on the results page.
#
#   scripts/longrun.sh start [--commit REV] [--dataset DS] [--set KEY=VALUE]... [--threads N]
#                            VARIANT:SEED... [raptor:SEED:pN]... [VARIANT:SEED:NAME/ARM]...
#   scripts/longrun.sh queue [--dataset DS] [--threads N] VARIANT:SEED... [raptor:SEED:pN]... [VARIANT:SEED:NAME/ARM]...
#                                   runs to start later, in this order, each with N threads (default 1; 0 = all
#                                   cores): the next one starts as soon as the alive runs leave it its cores (at
#                                   once if they do, and whenever a run ends: tested, or failed; the alive runs of
#                                   the other long-runs folders beside this one count on the CPUs they share with
#                                   this process), so a campaign
#                                   runs unattended; one thread count per queue; a run that cannot start goes to
#                                   queue.failed; `queue` alone lists it, `queue --clear` empties it. Takes
#                                   --commit and --set as `start` does, for a queue made before any start
#   scripts/longrun.sh resume [--threads N]  unpark, then start again every run of every dataset that is neither
#                                   alive nor tested (after a reboot or a session that ended: the same as naming
#                                   them to start; a dataset whose runs are all tested is left alone), then the
#                                   queue's runs that the freed cores allow; a dataset whose runs cannot start is
#                                   named (exit 1) and the others go on
#   scripts/longrun.sh status       one line per run: epochs done, best validation MRR, running, stopped,
#                                   failed (its job's exit status) or tested (its test MRR), and the
#                                   training time left at its recent pace (the test evaluation not included);
#                                   then the queue, and when each queued run would start and end (runs/forecast.py);
#                                   last, the other folders of long runs beside this one (.longruns, .longruns-*)
#   scripts/longrun.sh stop         SIGTERM to the runs' process groups, then wait until they have ended (each
#                                   resumes from its last checkpoint); a group still alive after LONGRUN_STOP_WAIT
#                                   seconds (default 300) makes it exit 1 naming its pid (park SIGKILLs it: a
#                                   checkpoint is written under a temporary name and renamed)
#   scripts/longrun.sh rescore [--dataset DS] [--threads N] --set KEY=VALUE...  evaluate every tested variant run's (not the
#                                   ablation's or sweeps' arms') best model again
#                                   under an evaluation-only reading (`raptor rescore`, docs/evaluation.md) into
#                                   runs/DS/VARIANT/seedS/rescore/KEY=VALUE/, in the foreground, by this working
#                                   tree's code (the pinned commit may predate the command); `raptor collect` keeps it
#   scripts/longrun.sh rescore --sweep NAME [--dataset DS] [--threads N]  the runs of sweep NAME's evaluation-only arms
#                                   (params that differ from its default arm's in eval.beam_size, eval.score_rule or
#                                   eval.rank_last_expansions alone: not trained, `queue` refuses them): the default
#                                   arm's tested runs re-scored under each such arm, test and validation splits, into
#                                   runs/DS/sweeps/NAME/default/VARIANT/seedS/rescore/; `raptor collect --sweep NAME`
#                                   records them as the arm's runs (docs/sweeps.md)
#   scripts/longrun.sh park         stop the runs, then copy every run not yet tested, with its last checkpoints
#                                   (a .prev only where its latest is missing), every tested run without them (its
#                                   records and best model: the only copy that travels until `raptor collect` and a
#                                   commit), the pinned commit, the params files and the queue, into
#                                   longruns-parked/ (with LONGRUN_DIR=X: X-parked; LONGRUN_PARK names another),
#                                   replacing what was there, each run's
#                                   files under a SHA256SUMS and the runs listed in RUNS. The folder is not
#                                   git-ignored: it travels with a work tree that is kept when the machine changes,
#                                   as .longruns/ does not; where only commits travel, commit it (an ICEWS14 arm
#                                   in RL: 62 MB; two ICEWS18 runs in RL: 191 MB; docs/deployment.md). Refused
#                                   while it holds runs not restored here, further along than here, or of another
#                                   start of the run (run.id; see unpark): they would be lost. Each copy is
#                                   checked against the run's files. A folder of queued runs none of which has
#                                   started parks its pin, params and queue alone (see unpark)
#   scripts/longrun.sh park --at HH:MM  a safety net: `park` at the next HH:MM, local time (today's while it is still
#                                   ahead, else tomorrow's), by a sleeper detached from the shell (it outlives it)
#                                   whose output goes to park-at.log; says when, in how many seconds, and its pid
#                                   (`status` names it too). Another --at replaces it, `park --at cancel` (or
#                                   --cancel) cancels it; --plan only says when it would park
#   scripts/longrun.sh unpark       put back the parked runs that .longruns/ has no folder of, or one less far
#                                   along (tested, then pretraining epochs, then RL epochs: a folder left on a
#                                   machine the runs moved on from; it and the queue here go to superseded/), or
#                                   one of another start of the run, whatever its progress (both have a run.id and
#                                   they differ: a run forgotten and started anew, then parked; set aside the same;
#                                   where either has none, made before run.id, progress alone decides)
#                                   (`resume` does it first; with none, it does nothing), and a parked queue of
#                                   runs none of which had started where this folder has no source (a new
#                                   machine; `start` and `queue` refuse until then): the park's list, commit,
#                                   params and queue and every file of each run it restores checked against the
#                                   sums (a file changed, missing or unlisted, or a park without its RUNS, is
#                                   refused, nothing restored; `park` refuses such a folder too), the source pinned
#                                   at their commit where none is (another pin is refused), the params files, queue
#                                   and queue.failed copied where missing (a params file that differs but for
#                                   train.num_threads is refused; a queue here is kept as it is, unless runs here
#                                   were behind).
#                                   A folder here as far along wins; a run moved away to start anew comes back from
#                                   the park unless `forget` removed it there. `start` makes the data, graph and
#                                   labels again (the runs' fingerprints check that they hash the same). `start` and
#                                   `queue` refuse while the park holds runs to restore (exit 3: the queue waits,
#                                   whole, and rebalance stops no run)
#   scripts/longrun.sh forget --dataset DS VARIANT:SEED   remove one run from the park (its copy, its line in RUNS;
#                                   the sums kept whole): a run to start anew (move its folder here away first).
#                                   Refused for a run tested here: the park does not remember what it forgot (a
#                                   folder of the run left on another machine would train again), so tested runs
#                                   stay parked, without checkpoints, until the campaign's park is retired
#                                   (docs/deployment.md)
#   scripts/longrun.sh rebalance [--plan]  the queue's next runs, if the alive runs leave them their cores;
#                                   with nothing queued, when exactly one run is alive and it has fewer threads
#                                   than the machine has cores: stop it and start it again on all cores (it
#                                   resumes from its last checkpoint); --plan only says what it would do. The job
#                                   of a run that ends (tested or failed) calls it, so freed cores are not left idle:
#                                   what this folder's queue leaves of them goes to the queues of the other
#                                   long-runs folders beside it (their runs are not restarted). Cores are counted on
#                                   the CPUs the caller may use: a run kept to others (`taskset`) holds none of them
#
# Runs start in the background with nohup, each in its own session at the lowest CPU priority (nice 19,
# and its scheduler autogroup too, so work started from a shell is not slowed), one job per VARIANT:SEED:
# train, resuming from the checkpoint, then test. Starting a run that is alive, or finished and tested,
# does nothing. A run whose checkpoints another configuration or code wrote is never deleted: it fails
# (train --resume-only), and its log says why; move its folder away (and `forget` it) to start it anew.
# Precision `auto` is refused (it resolves by the CPU; give --set train.precision=float32 or bfloat16; runs started
# with it before this check: LONGRUN_ALLOW_AUTO=1), and so is
# a pinned commit whose `raptor train`/`evaluate` lack an option the jobs pass. A job's pid is kept with its boot
# id and start time (pid.id), so a pid reused after the job ended is not taken for it.
# --threads N sets train.num_threads (torch threads per run; not in a run's fingerprint, so runs continue under
# another value, though the last bits of float rounding may differ) in the params file of the runs this call
# starts (params.yaml, or their dataset's params-DS.yaml): one run on 2 cores, --threads 2; two at once,
# --threads 1 (a run already alive keeps its threads: stop it and start it again).
# Example, the paper's budget in float32, two runs at once with one thread each:
#   scripts/longrun.sh start --set train.precision=float32 --threads 1 raptor:0 pure_rl:0
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"  # this script ($0 may be relative to the caller's folder)
# the work tree: this one's, or for the copy of it in the long-runs folder that the jobs run (install_self), the one
# its caller names (LONGRUN_ROOT)
if [ "$(basename "$(dirname "$self")")" = scripts ]; then cd "$(dirname "$self")/.."; else cd "${LONGRUN_ROOT:-$(dirname "$self")/..}"; fi
root=$PWD
dir="${LONGRUN_DIR:-$root/.longruns}"; dir=$(realpath -m -s "$dir")  # (relative: to the work tree, as before; absolute
# from here on, since park checks its copies from inside the run folders)
cmd="${1:-}"; [ $# -gt 0 ] && shift
commit=HEAD; dataset=ICEWS14; dataset_given=0; sets=(); runs=(); threads=; plan=0; clear=0; at=; sweep=
while [ $# -gt 0 ]; do
  case "$1" in
    --commit|--dataset|--set|--threads|--sweep)  # (then the option's own case below)
      [ $# -ge 2 ] || { echo "longrun.sh: $1 needs a value (see --help)" >&2; exit 2; } ;;&
    --commit) commit="$2"; shift 2 ;;
    --sweep) sweep="$2"; shift 2 ;;
    --dataset) dataset="$2"; dataset_given=1; shift 2 ;;
    --set) sets+=("$2"); shift 2 ;;
    --plan) plan=1; shift ;;
    --clear) clear=1; shift ;;
    --at) at="${2:-}"; shift $(($# > 1 ? 2 : 1))
      [ "$at" = cancel ] || [[ "$at" =~ ^([01]?[0-9]|2[0-3]):[0-5][0-9]$ ]] || {
        echo "longrun.sh park --at '$at': expected HH:MM (a local time, 00:00 to 23:59) or cancel" >&2; exit 2; } ;;
    --cancel) at=cancel; shift ;;
    --threads) threads="$2"; shift 2
      [[ "$threads" =~ ^[0-9]+$ ]] || { echo "longrun.sh: --threads '$threads': expected a number of threads (0 = all cores)" >&2; exit 2; }
      threads=$((10#$threads)) ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "longrun.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) runs+=("$1"); shift ;;
  esac
done
case "$cmd" in start|queue|resume|status|stop|rebalance|rescore|park|unpark|forget) ;; -h|--help|"") awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "longrun.sh: unknown command '$cmd' (start, queue, resume, status, stop, rebalance, rescore, park, unpark, forget)" >&2; exit 2 ;; esac

[ -z "$at" ] || [ "$cmd" = park ] || { echo "longrun.sh $cmd: --at and --cancel are park's options" >&2; exit 2; }
[ "$plan" = 0 ] || [ "$cmd" = rebalance ] || [ "$cmd" = park ] || {
  echo "longrun.sh $cmd: --plan is rebalance's and park --at's option (nothing was done)" >&2; exit 2; }
[ "$clear" = 0 ] || [ "$cmd" = queue ] || { echo "longrun.sh $cmd: --clear is queue's option (nothing was done)" >&2; exit 2; }
[ -z "$sweep" ] || [ "$cmd" = rescore ] || { echo "longrun.sh $cmd: --sweep is rescore's option (nothing was done)" >&2; exit 2; }

queue_file="$dir/queue"; cores=$(nproc); py="$root/.venv/bin/python"
# the park of this folder: longruns-parked/ in the work tree for the default folder; beside the folder for another
# (LONGRUN_DIR=X parks into X-parked, so two folders never restore each other's runs; LONGRUN_PARK names any)
if [ -n "${LONGRUN_PARK:-}" ]; then park="$LONGRUN_PARK"
elif [ "$(realpath -m "$dir")" != "$(realpath -m "$root/.longruns")" ]; then park="$dir-parked"
else park="$root/longruns-parked"; fi
[ -n "$park" ] || { echo "longrun.sh: LONGRUN_PARK names no folder" >&2; exit 2; }
park=$(realpath -m -s "$park")
name_re='[A-Za-z0-9][A-Za-z0-9_.=+,-]*'  # a sweep's or an arm's name (raptor.pipeline.sweep.ARM_NAME): folder names
check_specs() {  # before anything is made
  local spec
  for spec in "$@"; do
    [[ "$spec" =~ ^[a-z_]+:[0-9]+$ || "$spec" =~ ^raptor:[0-9]+:p[0-9]+$ || "$spec" =~ ^[a-z_]+:[0-9]+:$name_re/$name_re$ ]] || {
      echo "longrun.sh: '$spec': expected VARIANT:SEED (e.g. pure_rl:0), raptor:SEED:pN for the ablation's arm" \
           "with N pretraining epochs, or VARIANT:SEED:NAME/ARM for arm ARM of sweep NAME" >&2; exit 2; }
  done
}
run_dir() {  # the folder of run $2 (VARIANT:SEED, raptor:SEED:pN or VARIANT:SEED:NAME/ARM) of dataset $1
  local variant seed arm
  IFS=: read -r variant seed arm <<< "$2"
  if [[ "$arm" == */* ]]; then echo "$dir/runs/$1/sweeps/$arm/$variant/seed$seed"
  elif [ -n "$arm" ]; then echo "$dir/runs/$1/ablation/$arm/seed$seed"; else echo "$dir/runs/$1/$variant/seed$seed"; fi
}
run_dirs() {  # every run folder (of dataset $1 only, where given), one per line, in each layout; some may not exist
  local ds="${1:-*}" out
  for out in "$dir"/runs/$ds/*/seed*; do  # (not a sweep or an ablation arm's folder whose name starts with seed)
    case "$(basename "$(dirname "$out")")" in sweeps|ablation) ;; *) printf '%s\n' "$out" ;; esac
  done
  printf '%s\n' "$dir"/runs/$ds/ablation/p*/seed* "$dir"/runs/$ds/sweeps/*/*/*/seed*
}
run_spec() {  # the VARIANT:SEED (raptor:SEED:pN, VARIANT:SEED:NAME/ARM) and dataset of run folder $1 (under $dir or
  local rel="$1" parts  # the park): "DATASET SPEC", read from its place under runs/ (the layouts have 3, 4 and 6 parts)
  case "$rel" in "$dir"/runs/*) rel="${rel#"$dir"/runs/}" ;; "$park"/runs/*) rel="${rel#"$park"/runs/}" ;; esac
  IFS=/ read -r -a parts <<< "$rel"
  case "${#parts[@]}" in
    3) echo "${parts[0]} ${parts[1]}:${parts[2]#seed}" ;;
    4) echo "${parts[0]} raptor:${parts[3]#seed}:${parts[2]}" ;;
    6) echo "${parts[0]} ${parts[4]}:${parts[5]#seed}:${parts[2]}/${parts[3]}" ;;
    *) echo "? $1" ;;
  esac
}
boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
proc_start() {  # when process $1 started (clock ticks since boot: field 22 of /proc/PID/stat, after its "(name)")
  local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }
  set -- $s; [ -n "${20:-}" ] && echo "${20}"
}
same_process() {  # whether pid $1 is still the process identity file $2 names (boot id, start time, then anything:
  # pids wrap within hours, and a pid file outlives its process); prints the rest of $2's line. With $3 = group, a
  # pid no longer alive passes (a leader gone while its group lives keeps the group's id from reuse)
  local b st rest now
  read -r b st rest < "$2" || true
  [ "$b" = "$boot_id" ] || return 1
  if now=$(proc_start "$1"); then [ "$now" = "$st" ] || return 1; else [ "${3:-}" = group ] || return 1; fi
  echo "$rest"
}
live_pid() {  # the pid of run folder $1's job while it is alive, else nothing (status 1): its process group exists
  # (or the job itself, in the moment before its setsid) and, where `start` recorded the job's identity (pid.id),
  # that pid is still the job (same_process)
  local pid
  [ -f "$1/pid" ] || return 1
  pid=$(cat "$1/pid"); [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 -- "-$pid" 2>/dev/null || kill -0 "$pid" 2>/dev/null || return 1
  [ ! -f "$1/pid.id" ] || same_process "$pid" "$1/pid.id" group > /dev/null || return 1
  echo "$pid"
}
alive_runs() {  # one line per run alive and not yet tested: its folder (a tested run is done, even while its job ends;
  local out  # so is the run whose ending job calls rebalance, tested or failed: LONGRUN_ENDING)
  while IFS= read -r out; do
    [ -f "$out/pid" ] && [ ! -f "$out/eval/metrics.json" ] && [ "$out" != "${LONGRUN_ENDING:-}" ] || continue
    live_pid "$out" > /dev/null && echo "$out"
  done < <(run_dirs)
  return 0
}
cpu_set() {  # the CPUs of an affinity list ("0-3,6", as /proc/PID/status's Cpus_allowed_list), one per line
  local part parts
  IFS=, read -r -a parts <<< "$1"
  for part in ${parts[@]+"${parts[@]}"}; do
    if [[ "$part" =~ ^([0-9]+)-([0-9]+)$ ]]; then seq "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
    elif [[ "$part" =~ ^[0-9]+$ ]]; then echo "$part"; fi
  done
}
proc_cpus() {  # the CPUs process $1 may run on, one per line, sorted (nothing where /proc cannot tell)
  local l; l=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null) || return 0
  cpu_set "$l" | LC_ALL=C sort -u
}
run_held() {  # the cores alive run folder $1 holds among the CPUs $2 (one per line, sorted): its threads (0 = all), at
  # most as many as its job's CPUs share with them (the union over its process group: `taskset` may have moved them);
  # $2 empty (/proc cannot tell): its threads, at most this process's cores
  local pid t n=$cores
  t=$(cat "$1/threads" 2>/dev/null || echo 0); [[ "$t" =~ ^[0-9]+$ ]] || t=0
  if [ -n "$2" ]; then
    pid=$(cat "$1/pid")
    n=$( { for p in $(pgrep -g "$pid" 2>/dev/null || true) "$pid"; do proc_cpus "$p"; done; } | LC_ALL=C sort -u |
         LC_ALL=C comm -12 - <(echo "$2") | wc -l)
  fi
  { [ "$t" = 0 ] || [ "$t" -gt "$n" ]; } && t=$n
  echo "$t"
}
cores_held() {  # the cores of this process's CPUs that this folder's alive runs hold (run_held): a run kept to other
  # CPUs (`taskset`) leaves this process's to the queue
  local out mine sum=0
  mine=$(proc_cpus $$)
  while read -r out; do
    [ -n "$out" ] && sum=$((sum + $(run_held "$out" "$mine")))
  done <<< "$(alive_runs)"
  echo "$sum"
}
sibling_folders() {  # the other long-runs folders beside this one (two pins at once, e.g. a campaign's and a sweep's),
  local f  # one per line: .longruns and .longruns-* with a runs/ folder or a queue (none started yet), not parks
  for f in "$(dirname "$dir")"/.longruns "$(dirname "$dir")"/.longruns-*/; do
    f=$(realpath -m -s "${f%/}"); [[ "$f" == *-parked ]] && continue  # (a park: `resume` restores it)
    { [ -d "$f/runs" ] || [ -s "$f/queue" ]; } && [ "$f" != "$dir" ] && echo "$f"
  done
  return 0
}
others_held() {  # the cores of this process's CPUs (of process $1's, where given) that the alive runs of the other
  # long-runs folders beside this one hold (run_held). Each folder's `queue` and `rebalance` would count only their own
  # runs otherwise, and one started from a shell that sees every core would take the core the other folder's run is on
  local f out mine sum=0
  mine=$(proc_cpus "${1:-$$}")
  [ -n "$mine" ] || { echo 0; return 0; }
  while read -r f; do
    [ -n "$f" ] || continue
    while read -r out; do
      [ -n "$out" ] && sum=$((sum + $(run_held "$out" "$mine")))
    done <<< "$(dir=$f; alive_runs)"  # (not the ending run whose job offers its cores: LONGRUN_ENDING)
  done <<< "$(sibling_folders)"
  [ "$sum" -gt "$cores" ] && sum=$cores
  echo "$sum"
}
fill_others() {  # the cores a run of this folder freed as it ended, offered to the queues of the other long-runs folders
  # beside it (each filled by its own lock, in this job's CPUs, never restarting their runs: LONGRUN_FILL_ONLY; the
  # ending run, LONGRUN_ENDING, holds no core there either);
  # $1 = 1: only say what each would start
  local f
  while read -r f; do
    [ -n "$f" ] && [ -s "$f/queue" ] || continue
    echo "rebalance: the queue of $f (another long-runs folder here):"
    env -u LONGRUN_PARK LONGRUN_DIR="$f" LONGRUN_ROOT="$root" LONGRUN_FILL_ONLY=1 \
      bash "$self" rebalance $( [ "${1:-0}" = 1 ] && echo --plan ) 9>&- || true
  done <<< "$(sibling_folders)"
  return 0
}
# LONGRUN_LOCKED=PID: the caller (fill, rebalance: PID, this process's parent) holds the lock for this `start`; never
# passed on to the jobs, and taken from no other process (a job's environment may carry an older version's value)
locked=0
[ "$cmd" = start ] && [ "${LONGRUN_LOCKED:-}" = "$PPID" ] && locked=1
inherited_lock=$locked; unset LONGRUN_LOCKED
lock_queue() {  # one writer of the queue at a time (two runs may finish together); fd 9 is closed in every
  mkdir -p "$dir"  # job started under it, or the job would hold the lock for hours
  [ "$locked" = 1 ] || { exec 9>"$dir/queue.lock"; flock 9; locked=1; }
}
unlock_queue() { [ "$locked" = 1 ] && { exec 9>&-; locked=0; }; return 0; }
fill() {  # start the queue's runs in order, while the alive runs leave each its cores; $1 = 1: only say what
  local ds spec t need held others why rc  # would start. A run that fails to start goes to queue.failed, not back in the queue;
  # while the park holds runs to restore here, nothing starts and the queue stays as it is
  [ -s "$queue_file" ] || return 0
  why=$(park_blocks)
  if [ -n "$why" ]; then echo "queue: nothing started: $why" >&2; return 0; fi
  while [ -s "$queue_file" ]; do
    read -r ds spec t < "$queue_file" || true
    if ! [[ "$t" =~ ^[0-9]+$ ]] || [ -z "$spec" ]; then  # not a line `queue` wrote
      echo "queue: first line '$(head -n 1 "$queue_file")' is not 'DATASET SPEC THREADS'; moved to $queue_file.failed" >&2
      head -n 1 "$queue_file" >> "$queue_file.failed"; sed -i 1d "$queue_file"; continue
    fi
    need=$t; { [ "$need" = 0 ] || [ "$need" -gt "$cores" ]; } && need=$cores
    others=$(others_held); held=$(( $(cores_held) + others ))
    if [ $((held + need)) -gt "$cores" ]; then
      echo "queue: $ds $spec waits ($held of $cores cores held$( [ "$others" = 0 ] || echo ", $others by another long-runs folder's runs"), it takes $need)"; return 0
    fi
    if [ "${1:-0}" = 1 ]; then echo "queue: would start $ds $spec, threads: $t"; return 0; fi
    rc=0; LONGRUN_LOCKED=$$ "$self" start --dataset "$ds" --threads "$t" "$spec" 9>&- || rc=$?
    if [ "$rc" = 3 ]; then echo "queue: $ds $spec waits: the park holds runs to restore here (above)" >&2; return 0; fi
    if [ "$rc" != 0 ]; then  # not retried: it would block the queue
      echo "queue: $ds $spec did not start (above); moved to $queue_file.failed, the queue goes on" >&2
      echo "$ds $spec $t" >> "$queue_file.failed"
    fi
    sed -i 1d "$queue_file"
  done
  return 0
}

pin_source() {  # the pinned worktree and the runs' params: made by the first start, checked by the later ones
  mkdir -p "$dir"
  if [ ! -d "$dir/src" ]; then
    # (no `git worktree prune` here: it would cut the link of a long-runs folder moved without `git worktree repair`)
    git worktree add --detach "$dir/src" "$commit" >/dev/null || {
      echo "longrun.sh: could not pin $commit in $dir/src (above). If git still registers that folder because a" \
           "long-runs folder was moved, run \`git worktree repair NEW_FOLDER/src\`; if it was deleted with a machine" \
           "that parked its runs, \`scripts/longrun.sh resume\` restores them at their own pin; else \`git worktree prune\`" >&2; exit 1; }
    echo "pinned $(git -C "$dir/src" rev-parse --short HEAD) in $dir/src"
  elif [ "$commit" != HEAD ] && [ "$(git rev-parse "$commit")" != "$(git -C "$dir/src" rev-parse HEAD)" ]; then
    echo "longrun.sh: $dir/src is pinned at $(git -C "$dir/src" rev-parse --short HEAD), not $commit; stop the runs" \
       "and remove it (git worktree remove $dir/src) to pin another commit" >&2; exit 1
  fi
  if [ ! -f "$dir/params.yaml" ]; then
    write_params "$dir/params.yaml" ""
    echo "wrote $dir/params.yaml (overrides: ${sets[*]:-none})"
  elif [ ${#sets[@]} -gt 0 ]; then
    local own="$dir/params-$dataset.yaml" existed=1 has_runs=0
    [ -n "$(dataset_runs "$dataset")" ] && has_runs=1
    if [ "$dataset_given" = 0 ] || { [ ! -f "$own" ] && [ "$has_runs" = 1 ]; }; then
      echo "longrun.sh: $dir/params.yaml exists; --set is only read by the first start, or with --dataset DS for a" \
           "dataset with no runs yet (its own params file; edit the file, or remove it and the runs)" >&2
      exit 1
    fi
    [ -f "$own" ] || existed=0
    write_params "$own" "$dir/params.yaml" "$has_runs"
    [ "$existed" = 1 ] || echo "wrote $own (the runs of $dataset: $dir/params.yaml with overrides ${sets[*]})"
  fi
}
write_params() {  # $1: the params file to write: $2 (a params file; none: the pinned params.yaml) with --set
  # added to its overrides, and loaded by the pinned code before it replaces $1. An existing $1 with these --set
  # values already is kept; with others it is rewritten while $3 (its dataset has runs) is 0, else refused.
  # Written to $1.tmp, then renamed: a half-written file is never read as the runs' params
  rm -f "$1.tmp"  # (left by a start killed midway: never taken for this one's)
  PYTHONPATH="$dir/src" "$py" -P - "$dir/src/params.yaml" "$1" "$2" "${3:-0}" "${sets[@]+"${sets[@]}"}" <<'PY' || exit 1
import os
import sys
import yaml
MARK = "\n# longrun.sh --set\noverrides:"
src, dst, base, has_runs, sets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5:]
new = {}
for s in sets:
    key, sep, value = s.partition("=")
    if not sep:
        sys.exit(f"longrun.sh: --set {s!r}: expected KEY=VALUE")
    new[key] = yaml.safe_load(value)
if os.path.exists(dst):  # a dataset's own params, written before: the same --set again is no change
    have = (yaml.safe_load(open(dst)) or {}).get("overrides") or {}
    differ = [f"{k}: {have.get(k, '(unset)')!r} there, {v!r} here" for k, v in new.items()
              if k not in have or have[k] != v or type(have[k]) is not type(v)]
    if not differ:
        sys.exit(0)
    if has_runs:
        sys.exit(f"longrun.sh: {dst} exists with other overrides ({'; '.join(differ)}); its runs were made with it "
                 "(edit it, or remove it and the dataset's runs)")
    base = dst  # no run has read it yet: these values replace its own
text = open(base or src).read()
over = dict((yaml.safe_load(text) or {}).get("overrides") or {}) if base else {}
over.update(new)
if MARK in text:  # the body as it is (hand edits kept), its overrides block written anew
    text = text[:text.index(MARK)] + "\n"
if over:
    text += "\n# longrun.sh --set\noverrides:\n" + "".join(f"  {k}: {yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}\n"
                                                          for k, v in over.items())
with open(dst + ".tmp", "w") as fh:
    fh.write(text)
try:  # a misspelt key or a bad value is refused here, not hours later by a queued run
    from raptor.config import load_params
    load_params(dst + ".tmp")
except Exception as exc:
    os.unlink(dst + ".tmp")
    sys.exit(f"longrun.sh: --set {' '.join(sets)}: {type(exc).__name__}: {exc}")
PY
  [ -f "$1.tmp" ] || return 0  # (the same --set as before: nothing written)
  # precision `auto` refused as for a run, whatever LONGRUN_ALLOW_AUTO says (it is for runs started so before, not for
  # a params file written now: new)
  if ! (run_params_check "$1.tmp" "$1" new > /dev/null); then rm -f "$1.tmp"; exit 1; fi
  mv -f "$1.tmp" "$1"
}
dataset_runs() {  # the run folders of dataset $1 (empty: none yet)
  local out
  while IFS= read -r out; do [ -d "$out" ] && echo "$out"; done < <(run_dirs "$1")
  return 0
}
params_of() {  # the params file of dataset $1's runs: its own (params-DS.yaml, from --set with --dataset) or the folder's
  if [ -f "$dir/params-$1.yaml" ]; then echo "$dir/params-$1.yaml"; else echo "$dir/params.yaml"; fi
}

write_arm_params() {  # sweeps/DS/NAME/ARM.yaml: the params of run VARIANT:SEED ($3, $4) of arm NAME/ARM ($2) of dataset
  # $1, from the dataset's params (raptor.pipeline.sweep.write_arm_params, by the pinned code). Refused, writing
  # nothing: an unknown sweep or arm, a variant or seed the sweep does not train (`raptor collect --sweep` would
  # not record it), and for a pretrained variant an arm that changes the label tables' settings (one per dataset)
  PYTHONPATH="$dir/src" "$py" -P - "$(params_of "$1")" "${2%%/*}" "${2#*/}" "$dir/sweeps/$1/$2.yaml" "$3" "$4" <<'PY' || exit 1
import sys
try:
    from raptor.pipeline.sweep import arm_run_params, labeling_settings, write_arm_params
except ImportError:
    sys.exit("longrun.sh: the pinned source predates sweep arms (raptor.pipeline.sweep.write_arm_params): pin a later commit")
from raptor.agents.variants import get
from raptor.config import ConfigError, load_params
params, name, arm, out, variant, seed = sys.argv[1:7]
try:
    _, p, sweep = arm_run_params(params, name, arm)
except ConfigError as exc:
    sys.exit(f"longrun.sh: {exc}")
variants = sweep.variants or tuple(p.train.variants)
if variant not in variants or int(seed) not in p.train.seeds:
    sys.exit(f"longrun.sh: sweep {name} trains variants {', '.join(variants)} with seeds "
             f"{', '.join(map(str, p.train.seeds))}: not {variant} seed {seed}")
try:  # (a pinned source before evaluation-only arms trains them, as it did)
    from raptor.pipeline.sweep import evaluation_only_arms, load_sweep
except ImportError:
    evaluation_only_arms = None
if evaluation_only_arms is not None and arm in evaluation_only_arms(load_sweep(params, name)[1]):
    sys.exit(f"longrun.sh: arm {arm} of sweep {name} is evaluation-only (its params differ from the default arm's in "
             "evaluation params alone): it trains nothing of its own; once the default arm's runs are tested, "
             f"`scripts/longrun.sh rescore --sweep {name}` scores them under it")
if get(variant).pretrained and labeling_settings(p) != labeling_settings(load_params(params)):
    sys.exit(f"longrun.sh: arm {arm} of sweep {name} changes the label tables' settings; the long runs of a dataset share "
             "one label table (run this arm with `raptor sweep`)")
write_arm_params(params, name, arm, out)
PY
}

refuse_while_parked() {  # $1: the command. Runs parked and not restored here (a new machine), or restored less far
  # along than the park (a machine left behind): a start now would pin anew or train them again from an older
  # checkpoint, and the next park would replace the parked copies
  local ahead queued
  check_park
  ahead=$(parked_ahead); queued=$(queue_ahead)
  if [ -n "$queued" ]; then  # (a park with a queue of its own holds no runs: queue_ahead)
    echo "longrun.sh $1: $park holds a queue not restored here, $queued, pinned at" \
         "$(cut -c1-7 "$park/runs/COMMIT"): \`scripts/longrun.sh resume\` restores and starts it (\`unpark\` restores" \
         "only). Nothing was started" >&2
    exit 3
  fi
  [ -n "$ahead" ] || return 0
  echo "longrun.sh $1: $park holds runs not restored here:" >&2; sed 's/^/  /; s/\t/: /' <<< "$ahead" >&2
  echo "\`scripts/longrun.sh resume\` restores and continues them (\`unpark\` restores only); to start one of them anew," \
       "\`forget\` it first; a park of runs tested and collected is retired as docs/deployment.md says. Nothing was started" >&2
  exit 3  # (fill tells this refusal from a run that cannot start: the queue waits, whole)
}
park_blocks() {  # why the park keeps runs from starting here, in a line (nothing: it does not)
  local ahead
  if ! (check_park) > /dev/null 2>&1; then echo "$park fails its checks (\`scripts/longrun.sh unpark\` says why)"; return 0; fi
  ahead=$(parked_ahead)
  [ -z "$ahead" ] || echo "$park holds runs not restored here ($(cut -f1 <<< "$ahead" | paste -sd, -)): \`scripts/longrun.sh resume\`"
  ahead=$(queue_ahead)  # (never both: a park with a queue of its own holds no runs)
  [ -z "$ahead" ] || echo "$park holds a queue not restored here, $ahead: \`scripts/longrun.sh resume\`"
  return 0
}
run_params_check() {  # the params file $1 (named $2 in messages, where given) as the pinned code loads it: prints
  # train.num_threads; refuses precision `auto` (it resolves by the CPU, and long runs move between CPUs with and
  # without native bfloat16), unless LONGRUN_ALLOW_AUTO=1 (runs started so before); $3 = new: $1 is about to be
  # written as $2 (write_params), and auto is refused whatever LONGRUN_ALLOW_AUTO says
  PYTHONPATH="$dir/src" "$py" -P - "$1" "${2:-$1}" "${3:-}" <<'PY' || exit 1
import os
import sys
from raptor.config import load_params
path, name, new = sys.argv[1], sys.argv[2], sys.argv[3] == "new"
try:
    p = load_params(path)
except Exception as exc:
    sys.exit(f"longrun.sh: {name}: {type(exc).__name__}: {exc}")
auto = [f"{k}.precision" for k in ("train", "titer") if getattr(getattr(p, k, None), "precision", None) == "auto"]
allow = os.environ.get("LONGRUN_ALLOW_AUTO") == "1"
why = (f"{name}: {', '.join(auto)} {'would be' if new else 'is'} auto, which resolves by the CPU (bfloat16 "
       "where it is native), and long runs move between machines")
if auto and new:
    sys.exit(f"longrun.sh: {why}: add --set " + " ".join(f"{k}=float32" for k in auto) + " (or bfloat16)")
elif auto and allow:  # runs started so before the refusal existed
    print(f"longrun.sh: warning: {why} (LONGRUN_ALLOW_AUTO=1)", file=sys.stderr)
elif auto:
    sys.exit(f"longrun.sh: {why}: give --set " + " ".join(f"{k}=float32" for k in auto) + " (or bfloat16) to the first "
             "start, or to a start or queue with --dataset for a dataset with no runs yet (runs started with auto before "
             "this check: LONGRUN_ALLOW_AUTO=1)")
print(p.train.num_threads)
PY
}


stop_runs() {  # $1: who says it; $2 = kill: SIGKILL what SIGTERM did not end. SIGTERM to every run's process group
  # (setsid made the job's shell its leader: the shell and its python), then up to LONGRUN_STOP_WAIT s for each group to
  # end; then, with kill (park: a park that does not happen loses the session's work, and a checkpoint is written to a
  # temporary name and renamed, so a kill leaves the last whole one), SIGKILL and 10 s more; exits 1 if one lives on
  local out pid i n wait_s="${LONGRUN_STOP_WAIT:-300}" pids=() outs=()
  [[ "$wait_s" =~ ^[0-9]+$ ]] || { echo "longrun.sh $1: LONGRUN_STOP_WAIT='$wait_s' is not a whole number of seconds" >&2; exit 2; }
  while IFS= read -r out; do
    pid=$(live_pid "$out") || continue
    # (|| true: a group that ends between the two kills must not end this script under set -e)
    kill -TERM -- "-$pid" 2>/dev/null || true; echo "stopped pid $pid ($out)"; pids+=("$pid"); outs+=("$out")
  done < <(run_dirs)
  for i in "${!pids[@]}"; do
    pid=${pids[$i]}; out=${outs[$i]}
    for ((n = 0; n < 2 * wait_s; n++)); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 -- "-$pid" 2>/dev/null && [ "${2:-}" = kill ]; then
      echo "longrun.sh $1: pid $pid ($out) did not stop in $wait_s s (LONGRUN_STOP_WAIT): SIGKILL" >&2
      kill -KILL -- "-$pid" 2>/dev/null || true
      for ((n = 0; n < 20; n++)); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.5; done
    fi
    if kill -0 -- "-$pid" 2>/dev/null; then
      echo "longrun.sh $1: pid $pid ($out) did not stop in $wait_s s (LONGRUN_STOP_WAIT); end it with kill -KILL -- -$pid" >&2
      exit 1
    fi
  done
  return 0
}

park_at_time() {  # "EPOCH SECONDS": the next local time $1 (HH:MM) after now (LONGRUN_NOW, epoch seconds, for the
  # tests) and the seconds until then: today's if still ahead, else tomorrow's (the calendar's next day, never now
  # minus a time of day: a sleep that went negative after midnight parked at once; a clock change is counted)
  local now="${LONGRUN_NOW:-$(date +%s)}" day t
  [[ "$now" =~ ^[0-9]+$ ]] || { echo "longrun.sh park --at: LONGRUN_NOW='$now' is not epoch seconds" >&2; return 2; }
  day=$(date -d "@$now" +%F)
  t=$(date -d "$day $1" +%s 2>/dev/null) || t=$now  # (a time a clock change skips today: tomorrow's)
  if [ "$t" -le "$now" ]; then
    day=$(date -d "@$(( $(date -d "$day 12:00" +%s) + 86400 ))" +%F)  # (noon + 24 h: the next day, clock change or not)
    t=$(date -d "$day $1" +%s 2>/dev/null) || {
      echo "longrun.sh park --at $1: no such local time on $day (a clock change skips it): give another" >&2; return 2; }
  fi
  echo "$t $((t - now))"
}
park_at_pid() {  # "PID TIME" of the sleeper `park --at` armed while it is alive (park-at.pid; its identity in
  local pid t  # park-at.pid.id as for a run's job, then the time it parks: same_process), else nothing
  [ -f "$dir/park-at.pid" ] && [ -f "$dir/park-at.pid.id" ] || return 1
  pid=$(cat "$dir/park-at.pid"); [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  t=$(same_process "$pid" "$dir/park-at.pid.id") || return 1
  echo "$pid $t"
}
install_self() {  # this script, copied to $dir/longrun.sh for what runs later to call (the jobs' rebalance, park --at's
  # park): a checkout of another commit in the work tree meanwhile must not change the script they run. Written beside
  # it, then renamed, so a copy that bash is reading (it reads as it goes) keeps its old file
  [ "$self" -ef "$dir/longrun.sh" ] && return 0  # (the copy itself: a rebalance's start, say)
  cmp -s "$self" "$dir/longrun.sh" 2>/dev/null && return 0
  { cp "$self" "$dir/longrun.sh.tmp-$$" && chmod +x "$dir/longrun.sh.tmp-$$" && mv -f "$dir/longrun.sh.tmp-$$" "$dir/longrun.sh"; } || {
    rm -f "$dir/longrun.sh.tmp-$$"; echo "longrun.sh: could not copy $self to $dir/longrun.sh (above; nothing was started)" >&2; exit 1; }
}
park_at() {  # park --at HH:MM: a detached sleeper that parks then (replacing one armed before); --at cancel: none
  local armed pid t delay when=""
  [ "$at" = cancel ] || when=$(park_at_time "$at") || exit 2  # (before an armed one is replaced: none is lost for it)
  if [ "$plan" = 1 ]; then  # only when it would park: nothing is armed, cancelled or written
    [ "$at" != cancel ] || { echo "longrun.sh park --at cancel: takes no --plan" >&2; exit 2; }
    read -r t delay <<< "$when"
    echo "park --at $at: would park at $(date -d "@$t" '+%F %H:%M %Z'), in $delay s"; return 0
  fi
  mkdir -p "$dir"
  exec 8>"$dir/park-at.lock"; flock 8  # (one `park --at` at a time: never two sleepers)
  if armed=$(park_at_pid); then
    read -r pid t <<< "$armed"
    kill -TERM -- "-$pid" 2>/dev/null || true  # (its session: the shell and its sleep)
    echo "park --at: $([ "$at" = cancel ] && echo cancelled || echo replaced) the park armed for" \
         "$(date -d "@$t" '+%F %H:%M %Z') (pid $pid)"
  elif [ "$at" = cancel ]; then echo "park --at: no park armed in $dir"; fi
  rm -f "$dir/park-at.pid" "$dir/park-at.pid.id"
  [ "$at" != cancel ] || return 0
  read -r t delay <<< "$when"
  install_self
  # detached (its own session, SIGHUP ignored): it outlives the shell that armed it; it forgets its pid before it
  # parks, so a cancel never kills a park under way; it runs the copy of this script (install_self)
  (LONGRUN_DIR="$dir" LONGRUN_PARK="$park" LONGRUN_ROOT="$root" nohup setsid sh -c 'sleep "$1" && rm -f "$2" "$2.id" &&
     echo "$(date "+%F %T %Z"): park --at: parking" && exec "$0" park' "$dir/longrun.sh" "$delay" "$dir/park-at.pid" \
     >> "$dir/park-at.log" 2>&1 < /dev/null 8>&- 9>&- & echo $! > "$dir/park-at.pid")
  pid=$(cat "$dir/park-at.pid")
  echo "$boot_id $(proc_start "$pid" || echo '?') $t" > "$dir/park-at.pid.id"
  echo "$(date "+%F %T %Z"): park --at $at: armed (pid $pid), parks at $(date -d "@$t" '+%F %H:%M %Z')" >> "$dir/park-at.log"
  echo "park --at $at: parks at $(date -d "@$t" '+%F %H:%M %Z'), in $delay s (pid $pid; its output goes to" \
       "$dir/park-at.log; \`scripts/longrun.sh park --at cancel\` cancels it)"
}

recover_park() {  # a park cut short between its two renames: the previous park put back where it was missing (under
  local old  # the lock only: a park in progress holds it between its renames, which this must never fall between)
  [ "$locked" = 1 ] || return 0
  for old in "$park".tmp-old-*; do
    [ -d "$old" ] || continue
    if [ -e "$park" ]; then rm -rf "$old"  # the swap was done: this is the park it replaced
    else mv "$old" "$park"; echo "longrun.sh: $park was missing; the park before it ($old, left by a park cut short) is back" >&2; fi
  done
  return 0
}
park_cut() { compgen -G "$park.tmp-old-*" > /dev/null; }  # the park before one cut short between its renames is there
park_present() { [ -d "$park" ] || park_cut; }  # a park, or what a park cut short left
keep_park_hint="rename it inside the work tree (e.g. mv $park $park-hold), never delete it: it may hold the only copy of runs"
check_park() {  # a park folder that exists must be whole at its top: RUNS, COMMIT and the params as park wrote them
  local bad
  recover_park
  [ -d "$park" ] && [ -n "$(ls -A "$park")" ] || return 0
  [ -f "$park/SHA256SUMS" ] && [ -f "$park/RUNS" ] && [ -f "$park/runs/COMMIT" ] || {
    echo "longrun.sh: $park lacks SHA256SUMS, RUNS or runs/COMMIT: not a park that longrun.sh wrote, or a damaged one" \
         "(nothing was done; $keep_park_hint)" >&2; exit 1; }
  bad=$(cd "$park" && sha256sum --strict --quiet -c SHA256SUMS 2>&1) || {
    echo "longrun.sh: $park: files differ from their SHA256SUMS (nothing was done; $keep_park_hint):" >&2; echo "$bad" >&2; exit 1; }
  return 0
}
any_py() { if [ -x "$py" ]; then "$py" "$@"; else python3 "$@"; fi; }  # (json and yaml only: no .venv needed)
parked_ahead() {  # the parked runs (as the park's RUNS lists them) that $dir has no folder of, or a folder less far
  # along than the parked copy (left on a machine the runs have since moved on from), or a folder of another start of
  # the run (both have a run.id, and they differ: the park's wins whatever its progress; a run forgotten and started
  # anew, parked, and an older folder of it left on a machine): "REL<tab>WHY", one per line.
  # How far: tested, then the pretraining epochs, then the RL epochs (the rows of their history.json)
  [ -f "$park/RUNS" ] || return 0
  any_py - "$park" "$dir" <<'PY'
import json
import sys
from pathlib import Path
park, here = Path(sys.argv[1]), Path(sys.argv[2])
def rows(path):
    try:
        history = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0
    return len(history) if isinstance(history, list) else 0
def progress(run):
    return ((run / "eval" / "metrics.json").is_file(), rows(run / "pretrain" / "history.json"), rows(run / "rl" / "history.json"))
def words(p):
    return "tested" if p[0] else (f"pretraining epoch {p[1]}, " if p[1] else "") + f"RL epoch {p[2]}"
def ident(run):  # the run.id the start that began it wrote (none: a folder made before run.id existed)
    try:
        return (run / "run.id").read_text().strip() or None
    except OSError:
        return None
for rel in (park / "RUNS").read_text().splitlines():
    if not rel:
        continue
    if not (here / rel).exists():
        print(f"{rel}\tno folder here")
    elif ident(park / rel) and ident(here / rel) and ident(park / rel) != ident(here / rel):
        print(f"{rel}\there run.id {ident(here / rel)[:8]} at {words(progress(here / rel))}, parked run.id "
              f"{ident(park / rel)[:8]} at {words(progress(park / rel))}: another start of the run, which replaces it")
    elif progress(park / rel) > progress(here / rel):
        print(f"{rel}\there at {words(progress(here / rel))}, parked at {words(progress(park / rel))}")
PY
}
queue_ahead() {  # the park's queue, where the park holds no runs and this folder is not pinned here (a folder of
  # queued runs none of which had started when it was parked, on a new machine): "N runs (DS SPEC, ...)"; nothing
  # where the park has runs (its queue comes back with them), no queue, or this folder has its source (its own queue
  # stands, cleared or not)
  [ -s "$park/queue" ] && [ ! -s "$park/RUNS" ] && [ ! -e "$dir/src" ] || return 0
  echo "$(wc -l < "$park/queue") runs ($(awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }' "$park/queue"))"
}
same_params() {  # params files $1 and $2 the same but for train.num_threads (a no-effect key that `start --threads`
  # rewrites, adding an overrides block where there was none)
  any_py - "$1" "$2" <<'PY'
import sys
import yaml
def load(path):
    params = yaml.safe_load(open(path)) or {}
    over = dict(params.get("overrides") or {})
    over.pop("train.num_threads", None)
    params["overrides"] = over
    if isinstance(params.get("train"), dict):
        params["train"] = {k: v for k, v in params["train"].items() if k != "num_threads"}
    return params
sys.exit(0 if load(sys.argv[1]) == load(sys.argv[2]) else 1)
PY
}
unpark() {  # the parked runs that $dir has no folder of, or one less far along, back into it (see `unpark` in the
  recover_park; [ -d "$park" ] || return 0  # header); says what it did
  local ahead restore behind rel f pinned bad listed kept queued aside="" n=0
  check_park
  ahead=$(parked_ahead); queued=$(queue_ahead)
  [ -n "$ahead" ] || [ -n "$queued" ] || {
    echo "unpark: every run parked in $park has a folder here, as far along; nothing to restore"; return 0; }
  restore=$(cut -f1 <<< "$ahead"); behind=$(awk -F'\t' '$2 != "no folder here" { print $1 }' <<< "$ahead")
  for rel in $behind; do
    echo "unpark: $(run_spec "$dir/$rel"): $(awk -F'\t' -v r="$rel" '$1 == r { print $2 }' <<< "$ahead")"
    ! live_pid "$dir/$rel" > /dev/null || {
      echo "longrun.sh unpark: $(run_spec "$dir/$rel") is training here, behind its parked copy (or another start of it):" \
           "\`scripts/longrun.sh stop\`," \
           "then unpark (nothing was restored)" >&2; exit 1; }
  done
  # every file checked, none missing and none unlisted (a folder cut short in transit is refused whole)
  for f in $restore; do
    [ -f "$park/$f/SHA256SUMS" ] || { echo "longrun.sh unpark: $park/$f has no SHA256SUMS (nothing was restored)" >&2; exit 1; }
    bad=$(cd "$park/$f" && sha256sum --strict --quiet -c SHA256SUMS 2>&1) || {
      echo "longrun.sh unpark: $park/$f: files differ from their SHA256SUMS (nothing was restored):" >&2
      echo "$bad" >&2; exit 1; }
    listed=$(sed 's/^[0-9a-f]*  //' "$park/$f/SHA256SUMS" | sort); kept=$(cd "$park/$f" && find . -type f ! -name SHA256SUMS | sort)
    [ "$listed" = "$kept" ] || { echo "longrun.sh unpark: $park/$f holds other files than its SHA256SUMS lists (nothing was restored)" >&2; exit 1; }
  done
  pinned=$(cat "$park/runs/COMMIT")
  git cat-file -e "$pinned^{commit}" 2>/dev/null || {
    echo "longrun.sh unpark: the parked runs are pinned at $pinned, which this repository does not have" >&2; exit 1; }
  if [ -d "$dir/src" ]; then
    [ "$(git -C "$dir/src" rev-parse HEAD 2>/dev/null)" = "$pinned" ] || {
      echo "longrun.sh unpark: $dir/src is pinned at $(git -C "$dir/src" rev-parse --short HEAD 2>/dev/null || echo '?'), the" \
           "parked runs ($(echo $restore | tr ' ' ',')) at ${pinned:0:7}: finish the runs here and move $dir aside" \
           "(docs/deployment.md), or $keep_park_hint" >&2; exit 1; }
  fi
  for f in "$park"/params*.yaml; do
    [ -f "$f" ] && [ -f "$dir/$(basename "$f")" ] && ! same_params "$f" "$dir/$(basename "$f")" && {
      echo "longrun.sh unpark: $dir/$(basename "$f") differs from the parked one: the parked runs were made with" \
           "$f (nothing was restored)" >&2; exit 1; }
  done
  mkdir -p "$dir/runs"
  if [ ! -d "$dir/src" ]; then
    # (-f: git may still register this path for a folder since deleted; `git worktree prune` would also cut the
    # link of long-runs folders moved aside, docs/sweeps.md)
    git worktree add -f --quiet --detach "$dir/src" "$pinned"
    echo "unpark: pinned ${pinned:0:7} in $dir/src"
  fi
  # where runs here are behind the park, this folder was left behind: its queue too (runs it lists may have started
  # elsewhere since), so the park's replaces it; what is replaced is kept under superseded/
  [ -z "$behind" ] || aside="$dir/superseded/$(date -u +%Y%m%dT%H%M%SZ)"
  if [ -n "$aside" ]; then  # (the park's queue replaces it, or none where the park has none: cleared there since)
    for f in queue queue.failed; do
      [ -f "$dir/$f" ] || continue
      mkdir -p "$aside"; mv "$dir/$f" "$aside/$f"; echo "unpark: the $f here was older than the park: moved to $aside/$f"
    done
  fi
  for f in $(sed 's/^[0-9a-f]*  //' "$park/SHA256SUMS" | grep -E '^(params.*\.yaml|queue|queue\.failed|venv\.txt)$'); do  # (listed ones only)
    [ ! -f "$dir/$f" ] && { cp "$park/$f" "$dir/" || exit 1; echo "unpark: $f"; }
  done
  [ -f "$dir/runs/COMMIT" ] || echo "$pinned" > "$dir/runs/COMMIT"
  for rel in $restore; do
    # copied beside it under a hidden name (no run glob matches it), then renamed: a copy cut short is never a run
    f="$(dirname "$dir/$rel")/.unpark-$(basename "$rel")"
    mkdir -p "$(dirname "$dir/$rel")"; rm -rf "$f"
    cp -a "$park/$rel" "$f" && rm -f "$f/SHA256SUMS" || { rm -rf "$f"; echo "longrun.sh unpark: copying $park/$rel to $f failed" >&2; exit 1; }
    if [ -e "$dir/$rel" ]; then  # behind the park: kept, out of the runs' tree
      mkdir -p "$(dirname "$aside/$rel")"; mv "$dir/$rel" "$aside/$rel"; echo "unpark: the folder here moved to $aside/$rel"
    fi
    mv "$f" "$dir/$rel"
    n=$((n + 1)); echo "unpark: $(run_spec "$dir/$rel") restored"
  done
  if [ -z "$queued" ]; then echo "unpark: $n runs restored from $park"
  else echo "unpark: the queue of a folder none of whose runs had started, $queued, restored from $park"; fi
}

if [ "$cmd" = queue ]; then
  if [ "$clear" = 1 ]; then
    [ ${#runs[@]} -eq 0 ] || { echo "longrun.sh queue --clear: takes no runs" >&2; exit 2; }
    lock_queue; n=0; [ -f "$queue_file" ] && n=$(wc -l < "$queue_file"); rm -f "$queue_file"
    echo "queue: $n runs removed"; exit 0
  fi
  if [ ${#runs[@]} -eq 0 ]; then
    [ -s "$queue_file" ] || { echo "queue: empty"; exit 0; }
    echo "queue (in order; each starts when the alive runs leave it its cores):"
    while read -r ds spec t; do echo "  $ds $spec, threads: $t"; done < "$queue_file"; exit 0
  fi
  check_specs "${runs[@]}"
  if [ -s "$queue_file" ] && [ "$(awk '{ print $3 }' "$queue_file" | sort -u)" != "${threads:-1}" ]; then
    # a run reads train.num_threads from its params file when it starts: two runs started together with
    # different counts could both read the second's
    echo "longrun.sh queue: the queue's runs have threads $(awk '{ print $3 }' "$queue_file" | sort -u | paste -sd,)," \
         "not ${threads:-1}: one thread count per queue (queue --clear, then queue them all again)" >&2; exit 2
  fi
  # pin the source and write the params now (start's refusals, before anything is queued): the queued
  # runs start later with neither --commit nor --set
  [ -x "$py" ] || { echo "longrun.sh: no .venv: run scripts/setup.sh first" >&2; exit 1; }
  lock_queue  # (before the park is read: a park cut short is put back under it)
  refuse_while_parked queue
  pin_source
  run_params_check "$(params_of "$dataset")" > /dev/null
  for spec in "${runs[@]}"; do  # a sweep's arm: refused now, not when the queue reaches it, if its params are
    IFS=: read -r variant seed arm <<< "$spec"
    if [[ "$arm" == */* ]]; then
      write_arm_params "$dataset" "$arm" "$variant" "$seed"; run_params_check "$dir/sweeps/$dataset/$arm.yaml" > /dev/null
    fi
  done
  lock_queue
  for spec in "${runs[@]}"; do
    out=$(run_dir "$dataset" "$spec")
    if [ -f "$queue_file" ] && awk -v d="$dataset" -v s="$spec" '$1 == d && $2 == s { f = 1 } END { exit !f }' "$queue_file"; then echo "queue: $dataset $spec is queued already"; continue; fi
    if [ -f "$out/eval/metrics.json" ]; then echo "queue: $dataset $spec is finished and tested; not queued"; continue; fi
    if live_pid "$out" > /dev/null; then echo "queue: $dataset $spec is running; not queued"; continue; fi
    echo "$dataset $spec ${threads:-1}" >> "$queue_file"; echo "queue: $dataset $spec, threads: ${threads:-1}"
  done
  fill
  exit $?
fi

if [ "$cmd" = unpark ]; then
  [ ${#runs[@]} -eq 0 ] && [ ${#sets[@]} -eq 0 ] || { echo "longrun.sh unpark: takes no runs and no --set" >&2; exit 2; }
  park_present || { echo "nothing parked in $park"; exit 0; }
  lock_queue; unpark; exit 0
fi

if [ "$cmd" = forget ]; then
  [ ${#runs[@]} -eq 1 ] && [ ${#sets[@]} -eq 0 ] || { echo "longrun.sh forget: name one run (--dataset DS VARIANT:SEED)" >&2; exit 2; }
  check_specs "${runs[@]}"
  lock_queue  # (park takes it too)
  check_park  # (which puts back a park cut short)
  [ -f "$park/RUNS" ] || { echo "forget: nothing parked in $park"; exit 0; }
  rel="$(run_dir "$dataset" "${runs[0]}")"; rel="${rel#"$dir"/}"
  grep -qxF "$rel" "$park/RUNS" || { echo "forget: $dataset ${runs[0]} is not parked"; exit 0; }
  if [ -f "$dir/$rel/eval/metrics.json" ]; then  # (jobs started by older versions of this script call forget once
    # their run is tested: where the parked copy is not, the park is the only copy of its records that travels)
    echo "longrun.sh forget: $dataset ${runs[0]} is tested here: a tested run stays parked until the campaign's park is" \
         "retired (docs/deployment.md), as the park does not remember what it forgot; \`scripts/longrun.sh park\` keeps" \
         "its records (to start it anew, move its folder away first); nothing removed" >&2
    exit 1
  fi
  # the list first, so a forget cut short leaves a copy that is only left over, never a listed run half gone
  grep -vxF "$rel" "$park/RUNS" > "$park/RUNS.tmp-$$" || true
  mv "$park/RUNS.tmp-$$" "$park/RUNS"
  sum=$(cd "$park" && sha256sum RUNS)
  awk -v line="$sum" '$2 == "RUNS" { print line; next } { print }' "$park/SHA256SUMS" > "$park/SHA256SUMS.tmp-$$"
  mv "$park/SHA256SUMS.tmp-$$" "$park/SHA256SUMS"
  rm -rf "${park:?}/$rel"
  echo "forget: $dataset ${runs[0]} removed from $park"
  exit 0
fi

if [ "$cmd" = park ]; then
  [ ${#runs[@]} -eq 0 ] && [ ${#sets[@]} -eq 0 ] || { echo "longrun.sh park: takes no runs and no --set" >&2; exit 2; }
  if [ -n "$at" ]; then park_at; exit 0; fi
  [ "$plan" = 0 ] || { echo "longrun.sh park: --plan only with --at (a park has no plan: it parks)" >&2; exit 2; }
  # (a folder of queued runs none of which has started has no runs/COMMIT: its pin, params and queue travel alone)
  if [ -f "$dir/runs/COMMIT" ]; then pinned=$(cat "$dir/runs/COMMIT")
  elif [ -s "$queue_file" ] && pinned=$(git -C "$dir/src" rev-parse HEAD 2>/dev/null); then :
  else echo "no long runs under $dir to park"; exit 0; fi
  lock_queue  # no ending job's rebalance starts a queued run while the runs are stopped and copied
  check_park
  ahead=$(parked_ahead)
  [ -z "$ahead" ] || { echo "longrun.sh park: $park holds runs not restored here, which replacing it would lose:" >&2
    sed 's/^/  /; s/\t/: /' <<< "$ahead" >&2
    echo "\`scripts/longrun.sh unpark\` (or resume) first; nothing was parked or stopped" >&2; exit 1; }
  stop_runs "park (nothing parked)" kill
  rm -rf "$park".tmp-[0-9]*  # what a park killed midway left (git-ignored: *.tmp-*; a tmp-old-* is recover_park's)
  tmp="$park.tmp-$$"; mkdir -p "$tmp/runs"
  trap 'rm -rf "$tmp"' EXIT  # a half-written park is never left to be trusted
  echo "$pinned" > "$tmp/runs/COMMIT"
  for f in "$dir"/params*.yaml "$queue_file" "$queue_file.failed" "$dir/venv.txt"; do [ -f "$f" ] && cp "$f" "$tmp/"; done
  n=0; : > "$tmp/RUNS"
  while IFS= read -r out; do
    [ -d "$out" ] || continue
    rel="${out#"$dir"/}"; mkdir -p "$tmp/$rel"; skip=(! -name pid ! -name pid.id ! -name '*.prev' ! -name '*.tmp*'); what=""
    # a tested run (the only copy of its records until `raptor collect` and a commit) goes without what training
    # resumes from: its test, histories, summaries, configs and best model (which rescore reads)
    # (eval/predictions.parquet stays: `raptor collect` makes the record's ranks from it; a re-score's predictions,
    # hundreds of MB on ICEWS18, stay behind where its ranks.parquet lies beside them, which collect reads instead)
    if [ -f "$out/eval/metrics.json" ]; then skip+=(! -name 'checkpoint.pt*' ! -name final.pt ! -path './pretrain/*.pt'); what="tested, "
      while IFS= read -r -d '' f; do skip+=(! -path "./${f#./}/predictions.parquet"); done < <(cd "$out" && find ./rescore -name ranks.parquet -printf '%h\0' 2>/dev/null)
    fi
    (cd "$out" && find . -type f "${skip[@]}" -print0 | tar cf - --null -T -) | (cd "$tmp/$rel" && tar xf -)
    # a .prev whose latest file is missing goes too (code before 2026-11-29 moved the latest aside for a moment
    # while writing the next: a run stopped then has only its .prev to resume from)
    [ -n "$what" ] || while IFS= read -r -d '' f; do
      [ -e "$out/${f%.prev}" ] || { mkdir -p "$(dirname "$tmp/$rel/$f")" && cp -p "$out/$f" "$tmp/$rel/$f"; } || exit 1
    done < <(cd "$out" && find . -type f -name '*.prev' -print0)
    # the sums of the copies, checked against the run's own files (a copy that went wrong is not parked as whole)
    (cd "$tmp/$rel" && find . -type f ! -name SHA256SUMS | sort > ../.files-$$ && xargs -d '\n' -r sha256sum < ../.files-$$ > SHA256SUMS) || {
      echo "longrun.sh park: could not checksum the copy of $out (above); nothing was parked (the previous park is kept)" >&2; exit 1; }
    rm -f "$tmp/$(dirname "$rel")/.files-$$"
    if [ ! -s "$tmp/$rel/SHA256SUMS" ]; then rm -rf "${tmp:?}/$rel"; echo "park: $(run_spec "$out") has nothing to resume from: not parked"; continue; fi
    bad=$(cd "$out" && sha256sum --strict --quiet -c "$tmp/$rel/SHA256SUMS" 2>&1) || {
      echo "longrun.sh park: the copy of $out differs from it (nothing was parked; the previous park is kept):" >&2; echo "$bad" >&2; exit 1; }
    echo "$rel" >> "$tmp/RUNS"
    n=$((n + 1)); echo "park: $(run_spec "$out") (${what}$(du -sh "$tmp/$rel" | cut -f1))"
  done < <(run_dirs)
  (cd "$tmp" && sha256sum RUNS runs/COMMIT $(ls params*.yaml queue queue.failed venv.txt 2>/dev/null) > SHA256SUMS)
  old="$park.tmp-old-$$"  # (the earlier park, moved aside for the moment of the swap; git-ignored too)
  if [ -d "$park" ]; then mv "$park" "$old"; fi
  mv -T "$tmp" "$park"; trap - EXIT; rm -rf "$old"  # (-T: never into a folder of that name, whatever put one there)
  if [ "$n" = 0 ] && [ -s "$park/queue" ]; then  # (a folder of queued runs none of which has started)
    echo "park: no run started yet; the queue ($(wc -l < "$park/queue") runs), the pin and the params in $park" \
         "($(du -sh "$park" | cut -f1)); \`scripts/longrun.sh resume\` starts them on any machine with this repository"
  else
    echo "park: $n runs in $park ($(du -sh "$park" | cut -f1)); \`scripts/longrun.sh resume\` continues them on any machine with this repository"
  fi
  exit 0
fi

if [ "$cmd" = resume ]; then
  [ ${#runs[@]} -eq 0 ] && [ ${#sets[@]} -eq 0 ] || { echo "longrun.sh resume: takes no runs and no --set (it resumes every run under $dir/runs)" >&2; exit 2; }
  if park_present; then
    lock_queue; unpark; unlock_queue  # (each start below takes the lock for itself)
  fi
  found=0; failed=()
  for ds_dir in "$dir"/runs/*/; do
    [ -d "$ds_dir" ] || continue
    specs=(); tested=0
    while IFS= read -r out; do
      [ -d "$out" ] || continue
      # (a tested run is done: a dataset with no other is not started, which would make its data again)
      if [ -f "$out/eval/metrics.json" ]; then tested=$((tested + 1)); continue; fi
      specs+=("$(run_spec "$out" | cut -d' ' -f2)")
    done < <(run_dirs "$(basename "$ds_dir")")
    [ ${#specs[@]} -gt 0 ] || [ "$tested" -gt 0 ] || continue
    found=1
    if [ ${#specs[@]} -eq 0 ]; then echo "resume: $(basename "$ds_dir"): every run is tested ($tested); nothing to start"; continue; fi
    # (one dataset's failure, e.g. its raw data missing on this machine, does not keep the others from resuming)
    "$self" start --dataset "$(basename "$ds_dir")" ${threads:+--threads "$threads"} "${specs[@]}" ||
      { failed+=("$(basename "$ds_dir")"); echo "resume: the runs of $(basename "$ds_dir") did not start (above)" >&2; }
  done
  [ "$found" = 1 ] || echo "no long runs under $dir to resume"
  if [ -s "$queue_file" ]; then lock_queue; fill; fi
  [ ${#failed[@]} -eq 0 ] || { echo "longrun.sh resume: the runs of ${failed[*]} did not start" >&2; exit 1; }
  exit 0
fi

[ -x "$py" ] || { echo "longrun.sh: no .venv: run scripts/setup.sh first" >&2; exit 1; }

if [ "$cmd" = rescore ]; then
  [ ${#runs[@]} -eq 0 ] || { echo "longrun.sh rescore: takes no runs (it re-scores every tested run under $dir/runs)" >&2; exit 2; }
  if [ -n "$sweep" ]; then
    [ ${#sets[@]} -eq 0 ] || { echo "longrun.sh rescore --sweep: takes no --set (the readings are the sweep's evaluation-only arms)" >&2; exit 2; }
  else
    [ ${#sets[@]} -gt 0 ] || { echo "longrun.sh rescore: give the reading with --set KEY=VALUE (e.g. --set eval.rank_last_expansions=true)" >&2; exit 2; }
  fi
  [ "$commit" = HEAD ] || { echo "longrun.sh rescore: takes no --commit (it runs this working tree's code)" >&2; exit 2; }
  found=0
  for ds_dir in "$dir"/runs/*/; do
    [ -d "$ds_dir" ] || continue
    [ "$dataset_given" = 0 ] || [ "$(basename "$ds_dir")" = "$dataset" ] || continue
    name="$(basename "$ds_dir")"
    args=(); for kv in "${sets[@]}"; do args+=(--set "$kv"); done
    if [ -n "$sweep" ]; then  # (a dataset without the sweep's default arm's runs is not this sweep's)
      [ -d "$ds_dir/sweeps/$sweep/default" ] || continue
      args=(--sweep "$sweep")
    fi
    found=1
    nice -n 10 "$py" -m raptor.cli rescore "${ds_dir%/}" --data "$dir/data/$name/ingested" --graph "$dir/data/$name/graph.npz" \
      --params "$(params_of "$name")" --threads "${threads:-1}" "${args[@]}" || exit 1
  done
  [ "$found" = 1 ] || echo "no long runs under $dir to re-score${sweep:+ (of the default arm of sweep $sweep)}"
  exit 0
fi
# Relative paths in params (a dataset's raw_dir) are read from the repository root, as in the pipeline.
raptor() { PYTHONPATH="$dir/src" "$py" -P -m raptor.cli "$@"; }
params=$(params_of "$dataset")

if [ "$cmd" = status ]; then
  show_queue() {
    if [ -s "$queue_file" ]; then
      echo "queued, in order: $(awk '{ printf "%s%s %s (threads: %s)", (NR > 1 ? ", " : ""), $1, $2, $3 }' "$queue_file")"
    fi
    if [ -s "$queue_file.failed" ]; then echo "failed to start (not retried): $(tr '\n' ';' < "$queue_file.failed")"; fi
  }
  if [ ! -d "$park" ] && park_cut; then
    echo "a park was cut short: $(compgen -G "$park.tmp-old-*" | head -n 1) holds the one before it (the next start, queue, resume, unpark, park or forget puts it back)"
  fi
  if armed=$(park_at_pid); then
    read -r pid t <<< "$armed"
    echo "a park is armed for $(date -d "@$t" '+%F %H:%M %Z') (pid $pid; \`park --at cancel\` cancels it)"
  fi
  waiting=(); behind=()  # parked runs with no folder here, or one less far along: what `resume` would restore
  while IFS=$'\t' read -r rel why; do
    [ -n "$rel" ] || continue
    if [ "$why" = "no folder here" ]; then waiting+=("$(run_spec "$park/$rel")"); else behind+=("$(run_spec "$park/$rel") ($why)"); fi
  done <<< "$(parked_ahead)"
  [ ${#waiting[@]} -eq 0 ] || echo "parked in $park, not here yet (\`resume\` restores them): $(IFS=,; echo "${waiting[*]}" | sed 's/,/, /g')"
  queued=$(queue_ahead)
  [ -z "$queued" ] || echo "parked in $park, not here yet (\`resume\` restores and starts it): the queue of a folder none of whose runs had started, $queued"
  [ ${#behind[@]} -eq 0 ] || echo "parked in $park further along than here, or started anew (\`resume\` restores them, the folders here set aside): $(IFS=';'; echo "${behind[*]}" | sed 's/;/; /g')"
  [ -d "$dir/runs" ] || { echo "no long runs under $dir"; show_queue; exit 0; }
  echo "source: $(git -C "$dir/src" rev-parse --short HEAD 2>/dev/null || echo '?') ($dir/src)"
  args=()  # (folder, state, threads) of every run; one python reads them all (raptor/runs/forecast.py)
  while IFS= read -r out; do
    [ -d "$out" ] || continue
    if pid=$(live_pid "$out"); then alive="running (pid $pid)"
    elif [ -f "$out/exit" ] && [ "$(cat "$out/exit")" != 0 ]; then alive="failed (exit status $(cat "$out/exit"); see its train.log)"
    elif [ -f "$out/eval/metrics.json" ]; then alive=tested  # (done: neither resume nor the queue restarts it)
    else alive=stopped; fi
    args+=("$out" "$alive" "$(cat "$out/threads" 2>/dev/null || echo 0)")
  done < <(run_dirs)
  # the cores another folder's runs hold among those of this folder's running job (of this process, when none runs)
  ref=$$; for out in $(alive_runs); do ref=$(cat "$out/pid"); break; done
  # (if python fails, the lines it printed stand and the queue is listed after them)
  LONGRUN_OTHERS_HELD=$(others_held "$ref") \
  "$py" - "$dir" "$dir/params.yaml" "$cores" "$queue_file" "$(show_queue)" "$root" ${args[@]+"${args[@]}"} <<'PY' || show_queue
import datetime, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `status | head`: end quietly, no traceback
from pathlib import Path
import re
from raptor.runs.forecast import Folder, job_cores, queue_lines, run_line, started_cores
root, params, cores, queue_file = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
queue_text, checkout = sys.argv[5], Path(sys.argv[6])
runs = [(Path(o), s, int(t) if t.isdigit() else 0) for o, s, t in zip(*[iter(sys.argv[7:])] * 3)]
# the cores the folder's jobs may use (their affinity, which `rebalance` counts), not this process's
# (a stopped folder: the cores its last start saw, so one resumed under `taskset -c 1` is timed on one)
cores = job_cores([int(m.group(1)) for _, s, _ in runs if (m := re.match(r"running \(pid (\d+)\)", s))],
                  started_cores(root, cores))
import os
others = int(os.environ.get("LONGRUN_OTHERS_HELD", "0") or 0)  # held by another long-runs folder's runs
# every core held by them: the queue starts only as their runs end, which this folder's forecast cannot time
blocked = others >= cores
if others and not blocked:
    print(f"(another long-runs folder's runs hold {others} of the {cores} cores this folder's runs "
          f"may use: the forecast counts {cores - others})")
    cores -= others
now = datetime.datetime.now(datetime.timezone.utc)
try:
    folder = Folder.load(root, params, cores, records=[checkout / "results"])
except Exception as exc:  # status lines, never an error: say why there are no estimates
    print(f"(no estimates: {params}: {type(exc).__name__}: {exc})")
    folder = None
for out, state, _ in runs:
    print(run_line(folder, out, state, now))
if queue_text:
    print(queue_text)
queued = []
if queue_file.exists():
    for line in queue_file.read_text().splitlines():
        f = line.split()
        if len(f) == 3 and f[2].isdigit():
            queued.append((f[0], f[1], int(f[2])))
# the runs not yet tested hold their cores: the running ones, and the stopped ones that `resume` restarts
# before it fills the queue
waiting = [(o, s, t) for o, s, t in runs if not (o / "eval" / "metrics.json").exists()]
if queued and blocked:
    print(f"queue forecast: none while the other long-runs folders' runs hold all {cores} cores this folder's runs "
          "may use: the queue starts as they end (their `status` times them)")
elif folder and queued:
    try:
        print("\n".join(queue_lines(folder, [(o, t) for o, _, t in waiting], queued, now,
                                    stopped=sum(1 for _, s, _ in waiting if not s.startswith("running")))))
    except Exception as exc:
        print(f"queue forecast: none ({type(exc).__name__}: {exc})")
PY
  others=()  # folders of long runs beside this one (two pins at once: docs/sweeps.md), each with its own status
  while read -r f; do [ -n "$f" ] && others+=("$(basename "$f")"); done <<< "$(sibling_folders)"
  [ ${#others[@]} -eq 0 ] || echo "other long-runs folders here: ${others[*]} (LONGRUN_DIR=$(dirname "$dir")/NAME scripts/longrun.sh status)"
  exit 0
fi

if [ "$cmd" = rebalance ]; then
  # a run's ending job calls it: once this folder has taken what it can of the freed cores, the other folders' queues
  # are offered the rest
  if [ -n "${LONGRUN_ENDING:-}" ] && [ -z "${LONGRUN_FILL_ONLY:-}" ]; then trap 'unlock_queue; fill_others "$plan"' EXIT; fi
  lock_queue
  if [ -s "$queue_file" ]; then fill "$plan"; exit $?; fi  # a queued run takes the freed cores
  [ -z "${LONGRUN_FILL_ONLY:-}" ] || exit 0  # (another folder's ending run: its queue only, no restart of a run here)
  alive=(); while read -r out; do [ -n "$out" ] && alive+=("$out"); done <<< "$(alive_runs)"
  if [ ${#alive[@]} -ne 1 ]; then echo "rebalance: ${#alive[@]} runs alive, nothing to do"; exit 0; fi
  out="${alive[0]}"; read -r ds spec <<< "$(run_spec "$out")"
  t=$(cat "$out/threads" 2>/dev/null || echo 0)
  if [ "$t" = 0 ] || [ "$t" -ge "$cores" ]; then echo "rebalance: $ds $spec has all $cores cores"; exit 0; fi
  others=$(others_held)  # cores another long-runs folder's runs are on are not this run's to take
  if [ "$t" -ge $((cores - others)) ]; then
    echo "rebalance: $ds $spec has the $t of $cores cores that another long-runs folder's runs leave free"; exit 0
  fi
  why=$(park_blocks)  # (before the run is stopped: a start refused after it would leave it stopped)
  if [ -n "$why" ]; then echo "rebalance: $ds $spec left as it is: $why" >&2; exit 1; fi
  free=$((cores - others)); rthreads=0; [ "$free" -lt "$cores" ] && rthreads=$free  # (0: all cores)
  echo "rebalance: restart $ds $spec with $free threads (it has $t)"
  [ "$plan" = 1 ] && exit 0
  pid=$(cat "$out/pid"); kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 600); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 -- "-$pid" 2>/dev/null; then echo "rebalance: pid $pid did not stop in 300 s; left as it is" >&2; exit 1; fi
  LONGRUN_LOCKED=$$ "$self" start --dataset "$ds" --threads "$rthreads" "$spec" 9>&-  # not exec: the lock is held until the run exists
  exit $?
fi

if [ "$cmd" = stop ]; then  # returns once they have ended, so a `start` right after it finds them stopped
  stop_runs stop; exit 0
fi

[ ${#runs[@]} -gt 0 ] || { echo "longrun.sh start: name at least one VARIANT:SEED (e.g. raptor:0)" >&2; exit 2; }
check_specs "${runs[@]}"
# one start at a time, and none while a park stops and copies the runs (fill and rebalance hold the lock already)
lock_queue
refuse_while_parked start
pin_source
params=$(params_of "$dataset")  # (a --set with --dataset may have just written the dataset's own)
if [ -n "$threads" ]; then  # a no-effect key: rewritten in place, so the runs' fingerprints stay as they were
  "$py" - "$params" "$threads" <<'PY'
import os
import re
import sys
path, n = sys.argv[1], sys.argv[2]
lines = open(path).read().splitlines()
key = re.compile(r"^  train\.num_threads:")
if any(key.match(x) for x in lines):
    lines = [f"  train.num_threads: {n}" if key.match(x) else x for x in lines]
elif "overrides:" in lines:
    lines.insert(lines.index("overrides:") + 1, f"  train.num_threads: {n}")
else:
    lines += ["", "# longrun.sh --set", "overrides:", f"  train.num_threads: {n}"]
with open(path + ".tmp", "w") as fh:  # atomically: the runs read this file
    fh.write("\n".join(lines) + "\n")
os.replace(path + ".tmp", path)
PY
  echo "train.num_threads: $threads in $params"
fi
# Fail here, with the key named, rather than in every background run; the runs' thread count (rebalance reads it).
run_threads=$(run_params_check "$params")
# The packages the runs train with (the .venv is this work tree's lock, not the pin's; a new machine's setup may
# bring other versions, which no fingerprint records): kept by the first start, compared by every later one
freeze=$("$py" -m pip freeze 2>/dev/null | grep -v -e '^#' -e '^-e ' | sort) || true
if [ -n "$freeze" ]; then
  if [ ! -f "$dir/venv.txt" ]; then printf '%s\n' "$freeze" > "$dir/venv.txt"
  elif [ "$freeze" != "$(cat "$dir/venv.txt")" ]; then
    echo "longrun.sh: warning: this .venv's packages differ from those of the runs' first start ($dir/venv.txt):" \
         "$(diff <(cat "$dir/venv.txt") <(printf '%s\n' "$freeze") | grep '^[<>]' | head -6 | paste -sd' ')" >&2
  fi
fi

data="$dir/data/$dataset"
mkdir -p "$data" "$dir/runs"
git -C "$dir/src" rev-parse HEAD > "$dir/runs/COMMIT"  # the commit `raptor results` names for these runs
# the data, graph and label tables (once per folder and dataset) made without the lock, so that a park (the session's
# safety net) is not held up by them; the runs are launched under it
[ "$inherited_lock" = 1 ] || unlock_queue
[ -f "$data/ingested/meta.json" ] || raptor ingest --dataset "$dataset" --params "$params" --out "$data/ingested"
[ -f "$data/graph.npz" ] || raptor graph --data "$data/ingested" --out "$data/graph.npz"
if [[ " ${runs[*]} " == *" raptor:"* ]] && [ ! -f "$data/labels/summary.json" ]; then
  raptor label --data "$data/ingested" --params "$params" --out "$data/labels"
fi
lock_queue
# The options the jobs give the pinned code, checked against its own --help now (an older pin may lack one: the job
# would fail at once, with only its train.log to say so). A run whose fingerprint changed (code, params, data) must
# fail, not start afresh over hours of epochs: --resume-only, where the pin has it.
for sub in train evaluate; do
  help=$(raptor "$sub" --help 2>&1) || {  # (an import that fails on this machine, not a missing option)
    echo "longrun.sh: the pinned source could not run \`raptor $sub --help\` (nothing was started):" >&2
    tail -n 5 <<< "$help" >&2; exit 1; }
  if [ "$sub" = train ]; then train_opts=$(grep -o -- '--[a-z-]*' <<< "$help" | sort -u); else eval_opts=$(grep -o -- '--[a-z-]*' <<< "$help" | sort -u); fi
done
need=(train:--data train:--graph train:--out train:--variant train:--seed train:--params train:--no-progress
      evaluate:--model evaluate:--data evaluate:--graph evaluate:--params evaluate:--split evaluate:--out)
for spec in "${runs[@]}"; do
  [[ "$spec" == raptor:* ]] && need+=(train:--labels)
  [[ "$spec" =~ ^raptor:[0-9]+:p[0-9]+$ ]] && need+=(train:--pretrain-epochs)
done
for opt in "${need[@]}"; do
  if [ "${opt%%:*}" = train ]; then have=$train_opts; else have=$eval_opts; fi
  grep -qxF -- "${opt#*:}" <<< "$have" || {
    echo "longrun.sh: the pinned source ($(git -C "$dir/src" rev-parse --short HEAD)) has no \`raptor ${opt%%:*} ${opt#*:}\`," \
         "which these runs need: pin a later commit (nothing was started)" >&2; exit 1; }
done
guard=--resume-only
grep -qxF -- --resume-only <<< "$train_opts" || {
  guard=""; echo "longrun.sh: warning: the pinned source predates --resume-only; a run whose code or params changed restarts" >&2; }
for spec in "${runs[@]}"; do
  IFS=: read -r variant seed arm <<< "$spec"
  out=$(run_dir "$dataset" "$spec"); name="$variant seed $seed"; extra="$guard"; run_params="$params"
  if [[ "$arm" == */* ]]; then  # a sweep's arm: its params file, from the dataset's, written anew by each start
    name="sweep ${arm%%/*} arm ${arm#*/} $variant seed $seed"; run_params="$dir/sweeps/$dataset/$arm.yaml"
    write_arm_params "$dataset" "$arm" "$variant" "$seed"; run_params_check "$run_params" > /dev/null
  elif [ -n "$arm" ]; then name="ablation $arm seed $seed"; extra="--pretrain-epochs ${arm#p} $guard"; fi
  labels=()
  if [ "$variant" = raptor ]; then
    labels=(--labels "$data/labels")
  fi
  # a run folder's identity: a random run.id, written when it is begun (no run.id, nothing trained: a first start,
  # or a start anew after its folder was moved away), kept with it by park and unpark (parked_ahead)
  fresh=0; [ -e "$out/run.id" ] || [ -e "$out/pretrain" ] || [ -e "$out/rl" ] || fresh=1
  mkdir -p "$out"
  if pid=$(live_pid "$out"); then echo "$name: already running (pid $pid)"; continue; fi
  if [ -f "$out/eval/metrics.json" ]; then echo "$name: finished and evaluated"; continue; fi
  if [ -f "$out/threads" ] && [ "$(cat "$out/threads")" != "$run_threads" ]; then  # (no result changes: a note)
    echo "$name: ran with $(cat "$out/threads") threads, continues with $run_threads (train.num_threads in $params; --threads N sets it)"
  fi
  # train (resuming from the checkpoint), then test the best-validation model, then record the exit status (status
  # tells a failed run from a stopped one: a stopped job never gets there) and give the freed cores to the queue's
  # next run or a run left alone (rebalance, also after a failure; `stop` ends the whole job): one background job.
  # (The run's parked copy stays until the next park replaces it with the tested run's records.)
  # (The job's rebalance runs this script's copy in the long-runs folder, told the work tree: install_self.)
  echo "$run_threads" > "$out/threads"; rm -f "$out/exit" "$out/pid.id"
  echo "$cores" > "$dir/cores.tmp" && mv -f "$dir/cores.tmp" "$dir/cores"  # what a stopped folder's status counts
  if [ "$fresh" = 1 ]; then
    { printf '%s\n' "$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')" > "$out/run.id.tmp" && mv -f "$out/run.id.tmp" "$out/run.id"; } || exit 1
  fi
  install_self
  (PYTHONPATH="$dir/src" nohup setsid nice -n 19 sh -c 'echo 19 > /proc/$$/autogroup 2>/dev/null || true; "$0" -P -m raptor.cli train --data "$1" --graph "$2" --out "$3" \
       --variant "$4" --seed "$5" --params "$6" $7 --no-progress && "$0" -P -m raptor.cli evaluate \
       --model "$3/rl/best.pt" --data "$1" --graph "$2" --params "$6" --split test --out "$3/eval"; echo $? > "$3/exit"; LONGRUN_ENDING="$3" LONGRUN_ROOT="$9" "$8" rebalance' \
     "$py" "$data/ingested" "$data/graph.npz" "$out" "$variant" "$seed" "$run_params" "${labels[*]+${labels[*]}} $extra" \
     "$dir/longrun.sh" "$root" >> "$out/train.log" 2>&1 9>&- & echo $! > "$out/pid")
  pid=$(cat "$out/pid")
  # the job's identity beside its pid (live_pid): a pid reused once the job has ended is not the job
  if st=$(proc_start "$pid"); then echo "$boot_id $st" > "$out/pid.id"; fi
  # (the job's shell lowers its own autogroup, after setsid made it one: writing it from here raced
  # with setsid and once lowered the caller's group to 19 and left the run's at 0)
  echo "$name: started (pid $pid), log $out/train.log"
done
