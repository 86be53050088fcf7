#!/usr/bin/env bash
# Set up, then run the main job: the whole pipeline with `dvc repro`.
#   scripts/run.sh                   quick profile (ICEWS14, both variants, 2 seeds; ~30 min on 2 cores)
#   scripts/run.sh --profile paper   the paper's budget (5 seeds, 40 + 400 epochs)
# The profile is written to params.yaml (`profile:`), as `dvc exp run -S profile=...` would; other
# arguments go to `dvc repro` (a stage name, --force, ...).
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
grep -q '^profile:' params.yaml || { echo "run: params.yaml has no top-level 'profile:' line" >&2; exit 1; }
sed -i "s/^profile:.*/profile: ${profile}/" params.yaml
python -c 'from raptor.config import load_params; p = load_params("params.yaml"); print(f"run: profile {p.profile!r}, dataset {p.data.dataset}")'
dvc repro "${args[@]+"${args[@]}"}"
raptor report --where
