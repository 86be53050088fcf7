#!/usr/bin/env bash
# Regenerate the three hashed lock files from pyproject.toml (its pins plus the `test` extra):
#   requirements.lock         torch's CPU build (torch==X+cpu, the wheel of download.pytorch.org/whl/cpu)
#   requirements-cuda.lock    torch's CUDA build from PyPI, with its nvidia-*, cuda-* and triton packages
#   requirements-server.lock  the servers' image of docker/compose.yaml (prefect, mlflow, PostgreSQL drivers)
# All are for CPython 3.11 (any patch release: resolved as 3.11.0, so async-timeout, which redis needs before
# 3.11.3, is in; Debian 12 has 3.11.2) on x86_64 Linux (glibc >= 2.28) and list the sha256 of
# every file PyPI serves for each pinned version (wheels of all platforms and the sdist), so pip's hash
# check passes whichever file a machine picks. Packages they share are kept at the same versions.
#
#   UV=/path/to/uv scripts/lock.sh                          # re-lock, keeping every version that still fits
#   UV=/path/to/uv scripts/lock.sh --upgrade-package mlflow # move one package (pin it in pyproject.toml first)
#
# Needs uv 0.13.9 (any place, e.g. `python3 -m venv /tmp/uv && /tmp/uv/bin/pip install uv==0.13.9`) and
# PyPI. The CPU torch wheel comes from /opt/wheels when it lies there, else from the PyTorch CPU index.
set -euo pipefail
cd "$(dirname "$0")/.."

UV="${UV:-uv}"
command -v "$UV" >/dev/null || { echo "lock: uv not found (set UV=/path/to/uv; docs/install.md)" >&2; exit 1; }
case "$("$UV" --version)" in "uv 0.13.9"*) ;; *) echo "lock: warning: made with uv 0.13.9, this is $("$UV" --version)" >&2 ;; esac

torch_version="$(sed -n 's/^ *"torch==\([^"]*\)".*/\1/p' pyproject.toml)"
[ -n "$torch_version" ] || { echo "lock: no torch==... pin in pyproject.toml" >&2; exit 1; }
wheel="torch-${torch_version}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ -f "/opt/wheels/$wheel" ]; then
  cp "/opt/wheels/$wheel" "$tmp/"
else
  echo "lock: downloading $wheel from download.pytorch.org"
  python3 -m pip download --quiet --no-deps --no-cache-dir --isolated --dest "$tmp" \
    --index-url https://download.pytorch.org/whl/cpu "torch==${torch_version}+cpu"
fi
echo "torch==${torch_version}+cpu" > "$tmp/torch-cpu.txt"

common=(--python-version 3.11.0 --python-platform x86_64-manylinux_2_28
        --generate-hashes --no-config --no-cache --index-url https://pypi.org/simple
        --index-strategy unsafe-best-match --custom-compile-command scripts/lock.sh --quiet)

# CPU: PyPI plus the one CPU wheel (a flat --find-links folder holding nothing else).
"$UV" pip compile pyproject.toml --extra test "${common[@]}" --find-links "$tmp" -c "$tmp/torch-cpu.txt" -o requirements.lock "$@"
sed -i "s#-c $tmp/torch-cpu.txt#torch's CPU build (scripts/lock.sh)#" requirements.lock

# CUDA: PyPI only; every package the CPU lock also has stays at its version there.
grep -E '^[A-Za-z0-9]' requirements.lock | sed 's/ .*//' | grep -v '^torch==' > "$tmp/cpu-pins.txt"
"$UV" pip compile pyproject.toml --extra test "${common[@]}" -c "$tmp/cpu-pins.txt" -o requirements-cuda.lock "$@"
sed -i "s#-c $tmp/cpu-pins.txt#-c requirements.lock#" requirements-cuda.lock

# Servers (docker/compose.yaml's inline image): prefect, mlflow and asyncpg at the CPU lock's versions, and
# psycopg2 for MLflow on PostgreSQL, flask-wtf for its basic-auth app; no torch. Keep in step with compose.yaml.
printf '%s\n' prefect mlflow asyncpg psycopg2-binary==2.9.13 flask-wtf==1.3.0 wtforms==3.3.2 > "$tmp/server.in"
"$UV" pip compile "$tmp/server.in" "${common[@]}" -c "$tmp/cpu-pins.txt" -o requirements-server.lock "$@"
sed -i "s#-c $tmp/cpu-pins.txt#-c requirements.lock#; s#-r $tmp/server.in#scripts/lock.sh (servers)#" requirements-server.lock

grep -q "^torch==${torch_version}+cpu " requirements.lock
grep -q "^torch==${torch_version} " requirements-cuda.lock
echo "lock: requirements.lock $(grep -c '^[A-Za-z0-9]' requirements.lock) packages," \
     "requirements-cuda.lock $(grep -c '^[A-Za-z0-9]' requirements-cuda.lock)," \
     "requirements-server.lock $(grep -c '^[A-Za-z0-9]' requirements-server.lock);" \
     "torch CPU wheel sha256 $(sha256sum "$tmp/$wheel" | cut -c1-16)..."
