#!/usr/bin/env bash
# Create .venv/ in the repo root with the pinned stack (requirements.lock) and the project installed.
# Idempotent: a second run with an unchanged lock file does nothing but check.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PYTHON="$cand"; break
    fi
  done
fi
[ -n "$PYTHON" ] || { echo "setup: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi

stamp=.venv/.raptor-setup-stamp
want="$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the pinned stack into .venv (a few minutes the first time)"
  # torch is pinned to 2.13.0 (CPU wheel); any other version would pull a multi-GB CUDA build.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
  echo "$want" > "$stamp"
fi

# DVC analytics off for this repo (a background process per command otherwise).
if [ -d .dvc ] && [ -d .git ]; then
  DVC_NO_ANALYTICS=1 .venv/bin/dvc config --local core.analytics false >/dev/null 2>&1 || true
fi
echo "setup: ok ($(.venv/bin/python -c 'import torch, prefect, mlflow, dvc.version as v; print(f"torch {torch.__version__}, prefect {prefect.__version__}, mlflow {mlflow.__version__}, dvc {v.__version__}")'))"
