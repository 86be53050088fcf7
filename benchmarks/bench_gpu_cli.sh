#!/usr/bin/env bash
# Single-process timings at the paper configuration (ICEWS14) on whatever device `train.device: auto` finds
# (written for a GPU machine with PyTorch but without this repo's venv): labels, 2 pretraining epochs, 2 RL
# epochs validated after each, test evaluation; precision auto (bfloat16 where native) and float32; then
# TITer-150 and Pure-RL, 2 RL epochs each.
# Usage: benchmarks/bench_gpu_cli.sh [DATA_DIR (holds ingested/ and graph.npz; default data/ICEWS14)]
# Writes the histories, summaries and test metrics to $OUT/bench.tgz (OUT default: /tmp/bench-gpu).
# Results of 2026-11-25 on one H100: benchmarks/results/gpu_h100/, on one H200: benchmarks/results/gpu_h200/ (docs/deployment.md).
set -u
OUT=${OUT:-/tmp/bench-gpu}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
D=${1:-data/ICEWS14}
python3 - <<'PY'
import yaml
p = yaml.safe_load(open("params.yaml"))
p["eval"]["valid_every"] = 1
for name, prec in (("auto", "auto"), ("float32", "float32")):
    q = {**p, "train": {**p["train"], "precision": prec}}
    yaml.safe_dump(q, open(f"/tmp/p-{name}.yaml", "w"))
PY
/usr/bin/time -f "label: %e s wall" python3 -m raptor.cli label --data $D/ingested --graph $D/graph.npz --out /tmp/labels --local none --no-progress 2>&1 | tail -2
for prec in auto float32; do
  /usr/bin/time -f "train $prec: %e s wall" python3 -m raptor.cli train --variant raptor --data $D/ingested --graph $D/graph.npz \
     --labels /tmp/labels --out /tmp/b-$prec --params /tmp/p-$prec.yaml --local none --pretrain-epochs 2 --epochs 2 --no-progress 2>&1 | tail -3
  /usr/bin/time -f "test $prec: %e s wall" python3 -m raptor.cli evaluate --model /tmp/b-$prec/rl/best.pt --data $D/ingested \
     --graph $D/graph.npz --out /tmp/e-$prec --params /tmp/p-$prec.yaml --local none 2>&1 | tail -2
done
mkdir -p /tmp/keep
for v in titer pure_rl; do  # the other two systems, 2 RL epochs from scratch (precision auto: titer.precision for TITer)
  /usr/bin/time -f "train $v: %e s wall" python3 -m raptor.cli train --variant $v --data $D/ingested --graph $D/graph.npz \
     --out /tmp/b-$v --params /tmp/p-auto.yaml --local none --epochs 2 --no-progress 2>&1 | tail -3
  /usr/bin/time -f "test $v: %e s wall" python3 -m raptor.cli evaluate --model /tmp/b-$v/rl/best.pt --data $D/ingested \
     --graph $D/graph.npz --out /tmp/e-$v --params /tmp/p-auto.yaml --local none 2>&1 | tail -2
  cp /tmp/b-$v/rl/history.csv /tmp/keep/$v-rl-history.csv; cp /tmp/b-$v/rl/summary.json /tmp/keep/$v-rl-summary.json
  cp /tmp/e-$v/metrics.json /tmp/keep/$v-test-metrics.json
done
for prec in auto float32; do for f in pretrain/history.json rl/history.csv rl/summary.json; do
  [ -f /tmp/b-$prec/$f ] && cp /tmp/b-$prec/$f /tmp/keep/$prec-$(echo $f | tr / -); done
  cp /tmp/e-$prec/metrics.json /tmp/keep/$prec-test-metrics.json 2>/dev/null; done
tar czf $OUT/bench.tgz -C /tmp/keep .
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
