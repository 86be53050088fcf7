#!/usr/bin/env bash
# Start an MLflow tracking server for the pipeline (foreground; Ctrl-C or SIGTERM stops it and its workers).
#
#   scripts/mlflow-server.sh                       # http://127.0.0.1:5000, SQLite store mlflow.db, artifacts mlartifacts/
#   export MLFLOW_TRACKING_URI=http://127.0.0.1:5000   # then run the pipeline as usual
#
# Settings (environment; extra arguments go to `mlflow server`):
#   MLFLOW_HOST                  address to listen on (default 127.0.0.1; 0.0.0.0 in a container)
#   MLFLOW_PORT                  port (default 5000)
#   MLFLOW_BACKEND_STORE_URI     run/metric store: default sqlite:///<repo>/mlflow.db (the same store the
#                                embedded default writes, so local runs show up); PostgreSQL:
#                                postgresql://USER:PASSWORD@HOST:5432/mlflow (needs psycopg2-binary)
#   MLFLOW_ARTIFACTS_DESTINATION where the server stores artifacts that clients upload through it
#                                (default <repo>/mlartifacts; a path or s3://..., gs://...)
#   MLFLOW_WORKERS               server worker processes (default 1: on 2 cores the default 4 takes ~35 s to start)
#   MLFLOW_ALLOWED_HOSTS         Host headers to accept, comma-separated; replaces mlflow's default (localhost and
#                                private IPs), so list those you need too: mlflow:5000,localhost:5000
#   MLFLOW_SERVER_ENABLE_JOB_EXECUTION  default false (no background job consumers; faster start)
set -euo pipefail
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -x "$_root/.venv/bin/mlflow" ]; then export PATH="$_root/.venv/bin:$PATH"; fi
export MLFLOW_DISABLE_TELEMETRY="${MLFLOW_DISABLE_TELEMETRY:-true}"
export DO_NOT_TRACK="${DO_NOT_TRACK:-true}"
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"

host="${MLFLOW_HOST:-127.0.0.1}"
port="${MLFLOW_PORT:-5000}"
store="${MLFLOW_BACKEND_STORE_URI:-sqlite:///$_root/mlflow.db}"
artifacts="${MLFLOW_ARTIFACTS_DESTINATION:-$_root/mlartifacts}"
workers="${MLFLOW_WORKERS:-1}"

case "$store" in
  postgresql*)
    python -c 'import psycopg2' 2>/dev/null || {
      echo "mlflow-server: a PostgreSQL store needs psycopg2: pip install psycopg2-binary" >&2; exit 1; } ;;
esac
case "$artifacts" in
  *://*) ;;
  *) mkdir -p "$artifacts" ;;
esac

args=(--host "$host" --port "$port" --workers "$workers"
      --backend-store-uri "$store" --serve-artifacts --artifacts-destination "$artifacts")
if [ -n "${MLFLOW_ALLOWED_HOSTS:-}" ]; then args+=(--allowed-hosts "$MLFLOW_ALLOWED_HOSTS"); fi

echo "mlflow-server: http://$host:$port  store=$(printf %s "$store" | sed 's#://[^/@]*@#://***@#')  artifacts=$artifacts  workers=$workers" >&2
exec mlflow server "${args[@]}" "$@"
