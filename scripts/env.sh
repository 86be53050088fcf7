# Sourced by the scripts: the embedded defaults (raptor/pipeline/runenv.py: local Prefect, MLflow on SQLite,
# no telemetry). Anything already set in the environment wins.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$_root/.venv/bin:$PATH"
eval "$("$_root/.venv/bin/python" -m raptor.pipeline.runenv "$_root")"
