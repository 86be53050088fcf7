# Sourced by the scripts: the embedded defaults (local Prefect API, MLflow on SQLite, no telemetry).
# Anything already set in the environment wins.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$_root/.venv/bin:$PATH"
export PREFECT_HOME="${PREFECT_HOME:-$_root/.prefect}"
export PREFECT_SERVER_ANALYTICS_ENABLED="${PREFECT_SERVER_ANALYTICS_ENABLED:-false}"
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="${PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS:-90}"
export DO_NOT_TRACK="${DO_NOT_TRACK:-true}"
export MLFLOW_DISABLE_TELEMETRY="${MLFLOW_DISABLE_TELEMETRY:-true}"
export DVC_NO_ANALYTICS="${DVC_NO_ANALYTICS:-1}"
export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-sqlite:///$_root/mlflow.db}"
