#!/usr/bin/env bash
# The next GPU session's device command (issue 37), prepared and tried on the CPU: one script, at most
# 9 minutes on one H100/H200 (run it with timeout_s 600), every result written to $OUT as soon as it exists.
#   1. seeds stacked into one batched step (benchmarks/bench_seeds.py): one seed alone, 1 and 5 seeds
#      stacked, float32 and bfloat16, 40 batches each; and a 5-seed batch against each seed alone;
#   2. one RL step captured as a CUDA graph (benchmarks/bench_gpu_graph.py), float32;
#   3. validation's beam search on the device against the host search (benchmarks/bench_beam_device.py,
#      17,028 queries, beam 100);
#   4. a run folder moved CPU -> GPU -> CPU, and a GPU run resumed bit for bit (benchmarks/cross_device_resume.py).
# Run from the repository root on the device machine, with the ICEWS14 text files in .gpu/ICEWS14
# (carry: [".gpu"]; copy them from ../shared/data/ICEWS14):
#   OUT=/tmp/out benchmarks/gpu_session.sh [--quick]   (--quick: 2 batches each, float32 only: a CPU try)
set -u
OUT=${OUT:-/tmp/gpu-session}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
RAW=${RAW:-.gpu/ICEWS14}
# per-step time limits (seconds), 9 minutes in all: each step's results are on $OUT when the next starts
batches=40; graph_batches=0; precisions="float32 bfloat16"; t_seeds=210; t_graph=120; t_beam=150; t_move=60
if [ "${1:-}" = "--quick" ]; then batches=2; graph_batches=2; precisions=float32; t_seeds=900; t_graph=900; t_beam=900; t_move=900; fi
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')"
timeout $t_seeds python3 benchmarks/bench_seeds.py --raw "$RAW" --out "$OUT/seeds.json" --seeds 1 5 \
  --precisions $precisions --batches $batches --warmup 2 2>&1 | tee "$OUT/seeds.log" | grep -v "^ *$" | tail -12
echo "bench_seeds exit ${PIPESTATUS[0]}"
timeout $t_graph python3 benchmarks/bench_gpu_graph.py --raw "$RAW" --out "$OUT/graph.json" --batches $graph_batches \
  2>&1 | tee "$OUT/graph.log" | tail -12
echo "bench_gpu_graph exit ${PIPESTATUS[0]}"
beam_queries=0; [ "${1:-}" = "--quick" ] && beam_queries=128
timeout $t_beam python3 benchmarks/bench_beam_device.py --raw "$RAW" --out "$OUT/beam_device.json" --queries $beam_queries \
  2>&1 | tee "$OUT/beam.log" | grep -v "^ *$" | tail -4
echo "bench_beam_device exit ${PIPESTATUS[0]}"
timeout $t_move python3 benchmarks/cross_device_resume.py --raw "$RAW" --out "$OUT/cross_device_resume.json" 2>&1 | tail -3
echo "cross_device_resume exit ${PIPESTATUS[0]}"
