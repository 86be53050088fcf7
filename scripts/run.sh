#!/usr/bin/env bash
# Set up, then run the main job: the whole pipeline with `dvc repro` (params.yaml: ICEWS14 by default).
# Extra arguments go to `dvc repro` (e.g. a stage name, or --force).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
dvc repro "$@"
echo "outputs: data/<dataset>/ (ingested Parquet, graph.npz); see README.md#outputs"
