#!/usr/bin/env bash
# Set up, then run the whole test suite on both cores (what CI runs). Extra arguments go to pytest.
#   scripts/test.sh             every test
#   scripts/test.sh --fast      all but the end-to-end tests (marker `slow`: real servers, whole pipelines)
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
for a in "$@"; do
  if [ "$a" = --fast ]; then args+=(-m "not slow"); else args+=("$a"); fi
done
scripts/setup.sh
source scripts/env.sh
# Keep bytecode: each process otherwise compiles the project's modules and pytest re-rewrites the asserts of
# every test module (about 3.5 s of CPU per process, in both workers and in every CLI subprocess). It lands
# in the checkout's git-ignored __pycache__/ folders only (the venv's modules are compiled at install).
unset PYTHONDONTWRITEBYTECODE
exec .venv/bin/python -m pytest -n 2 --dist loadgroup "${args[@]+"${args[@]}"}"
