#!/usr/bin/env bash
# Set up, then run the main job: the whole pipeline with `dvc repro`.
#   scripts/run.sh                   quick profile (ICEWS14, both variants, 2 seeds; ~30 min on 2 cores)
#   scripts/run.sh --profile paper   the paper's budget (5 seeds, 40 + 400 epochs)
# The profile goes to the untracked params.local.yaml (no tracked file is edited); the `params` stage
# resolves it, so DVC re-runs exactly the stages whose resolved params changed. Other arguments go to
# `dvc repro` (a stage name, --keep-going, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=quick
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="$2"; shift 2 ;;
    --profile=*) profile="${1#*=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
scripts/setup.sh
source scripts/env.sh
python -m raptor.stages profile "$profile"
dvc repro "${args[@]+"${args[@]}"}"
raptor report --where
