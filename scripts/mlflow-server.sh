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
# Credentials (MLflow's basic-auth app; needs Flask-WTF). Set MLFLOW_AUTH_ADMIN_PASSWORD and every request but
# /health needs a user and password; clients set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD:
#   MLFLOW_AUTH_ADMIN_USERNAME   the admin user created on first start (default admin)
#   MLFLOW_AUTH_ADMIN_PASSWORD   its password (12+ characters; used only while the user store has no admin)
#   MLFLOW_AUTH_DATABASE_URI     the user store (default sqlite:///<repo>/basic_auth.db)
#   MLFLOW_AUTH_CONFIG_PATH      your own basic_auth.ini instead (then MLFLOW_AUTH_DATABASE_URI is ignored)
#   MLFLOW_FLASK_SERVER_SECRET_KEY  CSRF key of the UI's forms (default: a new random one each start)
# Without a password the server has no authentication: the script then refuses to listen beyond loopback.
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

if [ -n "${MLFLOW_AUTH_ADMIN_PASSWORD:-}" ]; then
  python -c 'import flask_wtf' 2>/dev/null || {
    echo "mlflow-server: credentials need MLflow's basic-auth app, which needs Flask-WTF: pip install Flask-WTF==1.3.0" >&2
    exit 1; }
  export MLFLOW_AUTH_ADMIN_USERNAME="${MLFLOW_AUTH_ADMIN_USERNAME:-admin}"
  if [ -z "${MLFLOW_AUTH_CONFIG_PATH:-}" ]; then
    # No secret in this file: the admin's password stays in the environment (MLflow reads it there).
    MLFLOW_AUTH_CONFIG_PATH="$(mktemp "${TMPDIR:-/tmp}/mlflow-auth.XXXXXX.ini")"
    export MLFLOW_AUTH_CONFIG_PATH
    printf '[mlflow]\ndefault_permission = READ\ndatabase_uri = %s\nauthorization_function = %s\n' \
      "${MLFLOW_AUTH_DATABASE_URI:-sqlite:///$_root/basic_auth.db}" \
      "mlflow.server.auth:authenticate_request_basic_auth" > "$MLFLOW_AUTH_CONFIG_PATH"
  fi
  # One key for all workers of this server (they inherit it); the basic-auth app refuses to start without.
  if [ -z "${MLFLOW_FLASK_SERVER_SECRET_KEY:-}" ]; then
    MLFLOW_FLASK_SERVER_SECRET_KEY="$(python -c 'import secrets; print(secrets.token_hex(32))')"
    export MLFLOW_FLASK_SERVER_SECRET_KEY
  fi
  args+=(--app-name basic-auth)
  auth="basic auth (admin user $MLFLOW_AUTH_ADMIN_USERNAME)"
else
  case "$host" in
    127.*|localhost|::1) ;;
    *) echo "mlflow-server: refusing to listen on $host without credentials: set MLFLOW_AUTH_ADMIN_PASSWORD" >&2
       exit 1 ;;
  esac
  auth="no authentication (loopback only)"
fi

echo "mlflow-server: http://$host:$port  store=$(printf %s "$store" | sed 's#://[^/@]*@#://***@#')  artifacts=$artifacts  workers=$workers  $auth" >&2
exec mlflow server "${args[@]}" "$@"
