"""Scale benchmark: every data stage and one training epoch on a GDELT-sized synthetic TKG.

Each step runs in a fresh subprocess so its peak RSS is its own; results go to one JSON file,
updated after every step (a long run can be read while it goes on, and re-running skips the steps
already measured unless --redo names them).

Steps: ``generate`` (raptor synthetic --preset), ``ingest``, ``graph``, ``label_sample`` (label a
random sample of pairs exactly and with N = labeling.max_in_edges, for rows, bytes and time per pair,
and the extrapolation to all pairs), ``label`` (the full N-pruned table, streamed to Parquet, then
loaded as the pretraining loads it), ``rl_epoch`` and ``pretrain_epoch`` (``--batches`` batches
of the paper's configuration, float32, time extrapolated to a whole epoch).

Usage: python benchmarks/bench_scale.py --work /tmp/scale [--preset gdelt] [--steps ...]
       [--batches 200] [--out benchmarks/results/scale_gdelt.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("generate", "ingest", "graph", "label_sample", "label", "rl_epoch", "pretrain_epoch")

PRELUDE = """
import json, resource, sys, time
W = sys.argv[1]; ARG = json.loads(sys.argv[2])
def peak_mb():
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
def done(**kw):
    print("RESULT " + json.dumps({**kw, "peak_rss_mb": peak_mb()}))
t0 = time.perf_counter()
"""

CHILD = {
    "generate": """
import dataclasses
from raptor.synthetic import SCALE_PRESETS, write_scaled_raw
spec = SCALE_PRESETS[ARG["preset"]]
write_scaled_raw(W + "/raw", spec)
done(seconds=round(time.perf_counter() - t0, 2), spec=dataclasses.asdict(spec))
""",
    "ingest": """
from raptor.ingest import ingest
r = ingest(W + "/raw", W + "/ingested", dataset=ARG["preset"])
done(seconds=round(time.perf_counter() - t0, 2), counts=r.counts, time_step=r.time_step)
""",
    "graph": """
from raptor.graph import build_graph
s = build_graph(W + "/ingested", W + "/graph.npz")
done(seconds=round(time.perf_counter() - t0, 2), edges=s["num_edges"])
""",
    "label_sample": """
import numpy as np
from raptor.data import load_dataset
from raptor.graph import TemporalGraph
from raptor.labeling import InAdjacency, iter_label_chunks, label_pairs
ds = load_dataset(W + "/ingested"); g = TemporalGraph.load(W + "/graph.npz")
tg, tm = label_pairs(ds.splits["train"])
pairs = np.unique(np.stack([tg, tm], 1), axis=0)
rng = np.random.default_rng(0)
pick = pairs[rng.choice(len(pairs), size=min(ARG["sample"], len(pairs)), replace=False)]
adj = InAdjacency.from_graph(g)
out = {"pairs_total": int(len(pairs)), "sample": int(len(pick))}
for mode, n in (("top%d" % ARG["max_in_edges"], ARG["max_in_edges"]), ("exact", None)):
    t = time.perf_counter(); rows = 0
    for ch in iter_label_chunks(g, pick[:, 0], pick[:, 1], max_path_length=ARG["max_path_length"],
                                max_in_edges=n, workers=0, adjacency=adj):
        rows += int(ch.counts.sum())
    sec = time.perf_counter() - t
    per_pair = rows / len(pick)
    out[mode] = {"rows_per_pair": round(per_pair, 1), "seconds_sample": round(sec, 2),
                 "est_rows": int(per_pair * len(pairs)),
                 "est_table_gb_in_memory": round(per_pair * len(pairs) * 7 / 1e9, 2),
                 "est_label_hours_here": round(sec / len(pick) * len(pairs) / 3600, 2)}
done(**out)
""",
    "label": """
from raptor.config import LabelingConfig
from raptor.labeling import label_dataset, load_label_table
s = label_dataset(W + "/ingested", W + "/labels", max_path_length=ARG["max_path_length"],
                  config=LabelingConfig(max_in_edges=ARG["max_in_edges"]), graph_path=W + "/graph.npz",
                  show_progress=False)
write_s = round(time.perf_counter() - t0, 2); write_peak = peak_mb()
t1 = time.perf_counter(); table = load_label_table(W + "/labels")
done(seconds=write_s, write_peak_rss_mb=write_peak, load_seconds=round(time.perf_counter() - t1, 2),
     pairs=s["pairs"], rows=s["rows"], rows_per_pair=s["rows_per_pair"], bytes_on_disk=s["bytes_on_disk"],
     table_bytes_in_memory=int(table.entity.nbytes + table.hops.nbytes + table.latest_time.nbytes))
""",
    "rl_epoch": """
import math, numpy as np, torch
from raptor.config import Params
from raptor.experiment import load_context
from raptor.policy import Policy
from raptor.rl import configure_runtime, make_optimizer, train_epoch
p = Params(); configure_runtime(0)
ctx = load_context(W + "/ingested", W + "/graph.npz", p)
load_s = time.perf_counter() - t0
torch.manual_seed(0)
policy = Policy(ctx.dataset.num_entities, ctx.dataset.num_relations, p.model, p.env.max_path_length)
opt = make_optimizer(policy, p.rl)
q = ctx.train_queries.astype(np.int64)
n = min(len(q), ARG["batches"] * p.rl.batch_size)
sub = q[np.random.default_rng(0).permutation(len(q))[:n]]
t = time.perf_counter(); m = train_epoch(policy, opt, ctx.env, sub, 0, 0, p.rl)
sec = time.perf_counter() - t
done(load_seconds=round(load_s, 2), batches=math.ceil(n / p.rl.batch_size), seconds=round(sec, 2),
     queries_per_epoch=int(len(q)), est_epoch_minutes=round(sec * len(q) / n / 60, 1), reward=m.get("reward"))
""",
    "pretrain_epoch": """
import math, numpy as np, torch
from raptor.config import Params, PretrainConfig
from raptor.experiment import load_context
from raptor.labeling import load_label_table
from raptor.policy import Policy
from raptor.pretrain import pretrain
from raptor.rl import configure_runtime
p = Params(); configure_runtime(0)
ctx = load_context(W + "/ingested", W + "/graph.npz", p)
table = load_label_table(W + "/labels")
load_s = time.perf_counter() - t0
torch.manual_seed(0)
policy = Policy(ctx.dataset.num_entities, ctx.dataset.num_relations, p.model, p.env.max_path_length)
q = ctx.train_queries.astype(np.int64)
n = min(len(q), ARG["batches"] * p.pretrain.batch_size)
sub = q[np.random.default_rng(0).permutation(len(q))[:n]]
t = time.perf_counter()
hist = pretrain(policy, ctx.env, table, sub, PretrainConfig(epochs=1), seed=0, progress=False)
sec = time.perf_counter() - t
done(load_seconds=round(load_s, 2), batches=math.ceil(n / p.pretrain.batch_size), seconds=round(sec, 2),
     queries_per_epoch=int(len(q)), est_epoch_minutes=round(sec * len(q) / n / 60, 1))
""",
}


def run_step(step: str, work: Path, arg: dict) -> dict:
    code = PRELUDE + textwrap.dedent(CHILD[step])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, str(work), json.dumps(arg)], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"step {step} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, type=Path, help="scratch folder (several GB)")
    ap.add_argument("--preset", default="gdelt")
    ap.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    ap.add_argument("--redo", action="store_true", help="measure the --steps again even if recorded")
    ap.add_argument("--sample", type=int, default=2000, help="pairs labeled by label_sample")
    ap.add_argument("--max-in-edges", type=int, default=200)
    ap.add_argument("--max-path-length", type=int, default=3)
    ap.add_argument("--batches", type=int, default=200, help="batches timed by the epoch steps")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/scale_gdelt.json")
    args = ap.parse_args()
    from raptor.io import atomic_write_json

    args.work.mkdir(parents=True, exist_ok=True)
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.setdefault("machine", {"cpus": os.cpu_count(), "python": sys.version.split()[0]})
    arg = {"preset": args.preset, "sample": args.sample, "max_in_edges": args.max_in_edges,
           "max_path_length": args.max_path_length, "batches": args.batches}
    for step in STEPS:
        if step not in args.steps or (step in result.get("steps", {}) and not args.redo):
            continue
        print(f"{step} ...", flush=True)
        res = run_step(step, args.work, arg)
        print(f"{step}: {json.dumps(res)}", flush=True)
        result.setdefault("steps", {})[step] = res
        atomic_write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
