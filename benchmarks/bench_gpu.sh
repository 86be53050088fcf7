#!/usr/bin/env bash
# Issue 37, item 5: the GPU path's numbers in one JSON, in one command of at most 8 minutes on one H100 or
# H200 (benchmarks/bench_gpu.py: RL epoch of one seed and of five seeds at once, pretraining epoch,
# validation and test, float32 and bfloat16, the profiler's busy share, the ratio to the GEMM bound).
# Run from the repository root with the ICEWS14 text files in RAW (default .gpu/ICEWS14, carried to the
# device machine; copy them from ../shared/data/ICEWS14):
#   OUT=/tmp/out benchmarks/bench_gpu.sh [--quick]      -> $OUT/bench_gpu.json (+ bench_gpu.log)
# --quick: a few batches and queries, float32 only (a CPU try of the script).
# The older one-process CLI timing (labels, train, evaluate through `raptor`): benchmarks/bench_gpu_cli.sh.
set -u
OUT=${OUT:-/tmp/bench-gpu}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
RAW=${RAW:-.gpu/ICEWS14}
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')"
timeout 480 python3 benchmarks/bench_gpu.py --raw "$RAW" --out "$OUT/bench_gpu.json" "$@" 2>&1 | tee "$OUT/bench_gpu.log" | grep -v "^ *$" | tail -20
echo "bench_gpu exit ${PIPESTATUS[0]}"
