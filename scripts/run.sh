#!/usr/bin/env bash
# Set up, then run the main job: the whole DVC stage graph as one Prefect pipeline run, against one
# local Prefect server started for the job (its UI address is printed; python -m flows.server).
#   scripts/run.sh                   quick profile (ICEWS14, the three systems and the recurrency baseline, 2 seeds; time: README)
#   scripts/run.sh --profile paper   the paper's budget (5 seeds, 40 + 400 epochs)
# The profile goes to the untracked params.local.yaml (no tracked file is edited); the `params` stage
# resolves it, and the pipeline runs exactly the stages DVC reports as changed, then records them in
# dvc.lock (so `dvc repro` afterwards agrees). Other arguments are stage names: only those and what
# they depend on run (e.g. report@ICEWS14).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=quick
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="$2"; shift 2 ;;
    --profile=*) profile="${1#*=}"; shift ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) args+=(--target "$1"); shift ;;
  esac
done
scripts/setup.sh
source scripts/env.sh
python -m raptor.pipeline.stages profile "$profile"
python -m flows.server -- python -m flows pipeline "${args[@]+"${args[@]}"}"
raptor report --where
