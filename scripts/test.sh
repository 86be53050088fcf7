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
exec .venv/bin/python -m pytest -n 2 --dist loadgroup "${args[@]+"${args[@]}"}"
