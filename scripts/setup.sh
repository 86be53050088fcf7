#!/usr/bin/env bash
# Create .venv/ in the repo root with the locked stack and the project installed.
# The lock (every package pinned with its sha256; docs/install.md) picks torch's build:
#   RAPTOR_TORCH=cpu             requirements.lock       torch 2.13.0+cpu (its wheel: RAPTOR_WHEELS folder,
#                                default /opt/wheels, or the PyTorch CPU index, RAPTOR_TORCH_INDEX)
#   RAPTOR_TORCH=cuda            requirements-cuda.lock  torch 2.13.0 with its CUDA 13 packages (.venv about 6 GB)
#   RAPTOR_TORCH=auto (default)  cpu where its wheel can be had, else cuda (said when it happens)
# .venv ends up holding exactly the lock's packages (others are removed), pip and the project.
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

mode="${RAPTOR_TORCH:-auto}"
case "$mode" in
  auto|cpu|cuda) ;;
  *) echo "setup: RAPTOR_TORCH must be cpu, cuda or auto, not '${RAPTOR_TORCH}'" >&2; exit 1 ;;
esac
stamp_of() { (echo "$1"; cat "$1" pyproject.toml) | sha256sum | cut -d' ' -f1; }
stamp=.venv/.raptor-setup-stamp
have="$(cat "$stamp" 2>/dev/null || true)"
case "$mode" in
  cpu) up_to_date=$([ "$have" = "$(stamp_of requirements.lock)" ] && echo y || true) ;;
  cuda) up_to_date=$([ "$have" = "$(stamp_of requirements-cuda.lock)" ] && echo y || true) ;;
  auto) up_to_date=$([ "$have" = "$(stamp_of requirements.lock)" ] || [ "$have" = "$(stamp_of requirements-cuda.lock)" ] \
                     && echo y || true) ;;
esac
if [ -z "$up_to_date" ]; then
  pip=(.venv/bin/python -m pip --disable-pip-version-check)
  quiet() {  # without the warning each of this machine's local index folders gives for a package it lacks
    "$@" 2> >(grep -v "^WARNING: Location 'file://.*' is ignored: it is neither a file nor a directory" >&2)
  }
  lock=requirements-cuda.lock
  if [ "$mode" != cuda ]; then
    # torch's CPU build (requirements.lock) is not on PyPI. It comes from a wheel folder (RAPTOR_WHEELS,
    # default /opt/wheels, or any find-links pip is configured with), else from the PyTorch CPU index
    # (RAPTOR_TORCH_INDEX), asked for torch alone with the hash the lock fixes. (Given for the whole lock,
    # an unreachable extra index would cost seconds per package.)
    torch_req="$(mktemp)"
    awk '/^torch==/{p=1} p{print} p&&!/\\$/{exit}' requirements.lock > "$torch_req"
    wheel="$(sed -n 's/^torch==\([^ ]*\)+cpu .*/torch-\1+cpu-*.whl/p' "$torch_req")"
    wheels="${RAPTOR_WHEELS:-/opt/wheels}"
    where=()
    if compgen -G "$wheels/$wheel" >/dev/null; then
      where=(--find-links "$wheels")
    else
      where=(--extra-index-url "${RAPTOR_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}")
    fi
    echo "setup: installing torch's CPU build (${where[*]})"
    if quiet "${pip[@]}" install --quiet --require-hashes --no-deps "${where[@]}" -r "$torch_req" 2>/dev/null; then
      lock=requirements.lock
    elif [ "$mode" = cpu ]; then
      echo "setup: torch's CPU build ($(head -1 "$torch_req" | cut -d' ' -f1)) is not available here: put its wheel in" \
           "RAPTOR_WHEELS or make RAPTOR_TORCH_INDEX reachable, or choose RAPTOR_TORCH=cuda (docs/install.md)" >&2
      rm -f "$torch_req"; exit 1
    else
      echo "setup: torch's CPU build is not available here (no wheel in $wheels, ${RAPTOR_TORCH_INDEX:-the PyTorch CPU index}" \
           "unreachable): installing requirements-cuda.lock instead (PyPI's CUDA build, a .venv of about 6 GB);" \
           "RAPTOR_TORCH=cuda chooses it without trying (docs/install.md)"
    fi
    rm -f "$torch_req"
  fi
  echo "setup: installing $lock into .venv (a few minutes the first time)"
  # Exactly the lock: every file's hash is checked and nothing unlisted is resolved or pulled.
  quiet "${pip[@]}" install --quiet --require-hashes --no-deps -r "$lock"
  # What the lock does not list goes (e.g. the CUDA packages after switching to RAPTOR_TORCH=cpu).
  extra="$(.venv/bin/python - "$lock" <<'EOF'
import re, sys
from importlib.metadata import distributions
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
locked = {norm(m[1]) for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", open(sys.argv[1]).read(), re.M)}
keep = locked | {"pip", "raptor-tkg"}
print(" ".join(sorted({norm(d.metadata["Name"]) for d in distributions() if d.metadata["Name"]} - keep)))
EOF
)"
  [ -z "$extra" ] || { echo "setup: removing packages not in $lock: $extra"; "${pip[@]}" uninstall --quiet -y $extra; }
  # The project itself, built with the lock's setuptools (no isolated build environment to download).
  "${pip[@]}" install --quiet --no-deps --no-build-isolation -e .
  "${pip[@]}" check
  stamp_of "$lock" > "$stamp"
fi

# DVC analytics off for this repo (a background process per command otherwise).
if [ -d .dvc ] && [ -d .git ]; then
  DVC_NO_ANALYTICS=1 .venv/bin/dvc config --local core.analytics false >/dev/null 2>&1 || true
fi
# The `params` stage depends on the untracked params.local.yaml (raptor/pipeline/stages.py): an empty one in a fresh clone.
[ -e params.local.yaml ] || .venv/bin/python -c 'from raptor.pipeline.stages import ensure_local_params; ensure_local_params(".")'
echo "setup: ok ($(.venv/bin/python -c 'import torch, prefect, mlflow, dvc.version as v; print(f"torch {torch.__version__}, prefect {prefect.__version__}, mlflow {mlflow.__version__}, dvc {v.__version__}")'))"
