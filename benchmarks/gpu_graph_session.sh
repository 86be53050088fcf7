#!/usr/bin/env bash
# Issue 37's next device command (prepared 2026-11-27, tried on the CPU with --quick): what bounds the
# step replayed from a CUDA graph, what deterministic kernels cost, pretraining replayed, and
# torch.compile inside the graph; one command of at most 9 minutes (run it with timeout_s 600), each
# part's JSON on $OUT as soon as it is written (benchmarks/gpu_graph_check.py; tables: --table FILE).
#   OUT=/tmp/out benchmarks/gpu_graph_session.sh [--quick]     (--quick: a tiny CPU try)
# Run from the repository root on the device machine with .gpu/ICEWS14 carried (carry: [".gpu"]).
set -u
OUT=${OUT:-/tmp/gpu-graph-session}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
RAW=${RAW:-.gpu/ICEWS14}
common=(--raw "$RAW" --epochs 3); t1=260; t2=100; t3=200
if [ "${1:-}" = "--quick" ]; then common=(--raw "$RAW" --epochs 2 --device cpu --train-queries 1500 --force-step); fi
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')"
run() {  # name, seconds, arguments...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 benchmarks/gpu_graph_check.py "${common[@]}" --out "$OUT/$name.json" "$@" 2>&1 \
    | grep -v "^W[0-9]" | tee "$OUT/$name.log" | tail -12
  echo "$name exit ${PIPESTATUS[0]} at ${SECONDS}s"
}
run graph_check_det "$t1" --seeds 1 5 --deterministic --profile-seeds 1 5 --pretrain-seeds 1 5
run graph_check_nondet "$t2" --seeds 1 5 --profile-seeds 5
run graph_check_compile "$t3" --seeds 1 5 --deterministic --compile
