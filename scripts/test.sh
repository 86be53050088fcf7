#!/usr/bin/env bash
# Set up, then run the whole test suite on both cores. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
exec .venv/bin/python -m pytest -n 2 --dist loadgroup "$@"
