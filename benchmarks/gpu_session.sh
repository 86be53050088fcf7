#!/usr/bin/env bash
# The next GPU session's device command (issue 37), prepared and tried on the CPU: one script, under
# 8 minutes on one H100/H200, every result written to $OUT as soon as it exists.
#   1. seeds stacked into one batched step (benchmarks/bench_seeds.py): one seed alone, 1 and 5 seeds
#      stacked, float32 and bfloat16, 40 batches each; and a 5-seed batch against each seed alone;
#   2. one RL step captured as a CUDA graph (benchmarks/bench_gpu_graph.py), float32;
#   3. a run folder moved CPU -> GPU -> CPU, and a GPU run resumed bit for bit (benchmarks/cross_device_resume.py).
# Run from the repository root on the device machine, with the ICEWS14 text files in .gpu/ICEWS14
# (carry: [".gpu"]; copy them from ../shared/data/ICEWS14):
#   OUT=/tmp/out benchmarks/gpu_session.sh [--quick]   (--quick: 2 batches each, float32 only: a CPU try)
set -u
OUT=${OUT:-/tmp/gpu-session}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
RAW=${RAW:-.gpu/ICEWS14}
batches=40; graph_batches=0; limit=240; precisions="float32 bfloat16"
if [ "${1:-}" = "--quick" ]; then batches=2; graph_batches=2; limit=600; precisions=float32; fi
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')"
timeout $limit python3 benchmarks/bench_seeds.py --raw "$RAW" --out "$OUT/seeds.json" --seeds 1 5 \
  --precisions $precisions --batches $batches --warmup 2 2>&1 | tee "$OUT/seeds.log" | grep -v "^ *$" | tail -12
echo "bench_seeds exit ${PIPESTATUS[0]}"
timeout $limit python3 benchmarks/bench_gpu_graph.py --raw "$RAW" --out "$OUT/graph.json" --batches $graph_batches \
  2>&1 | tee "$OUT/graph.log" | tail -12
echo "bench_gpu_graph exit ${PIPESTATUS[0]}"
timeout 180 python3 benchmarks/cross_device_resume.py --raw "$RAW" --out "$OUT/cross_device_resume.json" 2>&1 | tail -3
echo "cross_device_resume exit ${PIPESTATUS[0]}"
