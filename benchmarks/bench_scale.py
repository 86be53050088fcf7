"""Scale benchmark: every data stage and one training epoch on a GDELT-sized synthetic TKG.

Each step runs in a fresh subprocess so its peak RSS is its own; results go to one JSON file,
updated after every step (a long run can be read while it goes on, and re-running skips the steps
already measured unless --redo names them).

Steps: ``generate`` (raptor synthetic --preset), ``ingest``, ``graph``, ``label_sample`` (label a
random sample of pairs exactly and with N = labeling.max_in_edges, for rows, bytes and time per pair,
and the extrapolation to all pairs), ``label`` (the full N-pruned table in ``--partitions`` parts,
``raptor label`` under ``/usr/bin/time -v``), ``label_load`` (the largest part loaded, as pretraining
with ``labels_in_memory: part`` holds it), ``rl_epoch`` and ``pretrain_epoch`` (``--batches``
batches of the paper's configuration, float32, time extrapolated to a whole epoch).

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
STEPS = ("generate", "ingest", "graph", "label_sample", "label", "label_load", "rl_epoch", "pretrain_epoch")

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
from raptor.data.synthetic import SCALE_PRESETS, write_scaled_raw
spec = SCALE_PRESETS[ARG["preset"]]
write_scaled_raw(W + "/raw", spec)
done(seconds=round(time.perf_counter() - t0, 2), spec=dataclasses.asdict(spec))
""",
    "ingest": """
from raptor.data.ingest import IngestOptions, ingest
r = ingest(W + "/raw", W + "/ingested", IngestOptions(dataset=ARG["preset"]))
done(seconds=round(time.perf_counter() - t0, 2), counts=r.counts, time_step=r.time_step)
""",
    "graph": """
from raptor.data.graph import build_graph
s = build_graph(W + "/ingested", W + "/graph.npz")
done(seconds=round(time.perf_counter() - t0, 2), edges=s["num_edges"])
""",
    "label_sample": """
import numpy as np
from raptor.data.dataset import load_dataset
from raptor.data.graph import TemporalGraph
from raptor.config import LabelingConfig
from raptor.labeling.compute import ChunkOptions, InAdjacency, iter_label_chunks, label_pairs
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
                                config=LabelingConfig(max_in_edges=n, workers=0),
                                options=ChunkOptions(adjacency=adj)):
        rows += int(ch.counts.sum())
    sec = time.perf_counter() - t
    per_pair = rows / len(pick)
    out[mode] = {"rows_per_pair": round(per_pair, 1), "seconds_sample": round(sec, 2),
                 "est_rows": int(per_pair * len(pairs)),
                 "est_table_gb_in_memory": round(per_pair * len(pairs) * 7 / 1e9, 2),
                 "est_label_hours_here": round(sec / len(pick) * len(pairs) / 3600, 2)}
done(**out)
""",
    "label_load": """
from raptor.labeling.store import PartitionedLabels, load_label_table
import json as _j
s = _j.load(open(W + "/labels/summary.json"))
if s.get("parts"):
    parts = PartitionedLabels(W + "/labels")
    sizes = [_j.load(open(p / "summary.json"))["rows"] for p in parts.parts]
    table = parts.load(max(range(len(sizes)), key=sizes.__getitem__))  # the largest part
else:
    table = load_label_table(W + "/labels")
done(load_seconds=round(time.perf_counter() - t0, 2), rows_loaded=int(table.num_rows),
     table_bytes_in_memory=int(table.entity.nbytes + table.hops.nbytes + table.latest_time.nbytes),
     pairs=s["pairs"], rows=s["rows"], rows_per_pair=s["rows_per_pair"], bytes_on_disk=s["bytes_on_disk"],
     parts=len(s.get("parts") or []))
""",
    "rl_epoch": """
import math, numpy as np, torch
from raptor.config import Params
from raptor.pipeline.experiment import load_context
from raptor.agents.policy import Policy
from raptor.agents.actor_critic.rl import make_optimizer, train_epoch
from raptor.common.runtime import configure_runtime
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
from raptor.pipeline.experiment import load_context
from raptor.labeling.store import load_label_table
from raptor.agents.policy import Policy
from raptor.agents.actor_critic.pretrain import pretrain
from raptor.common.runtime import configure_runtime
p = Params(); configure_runtime(0)
ctx = load_context(W + "/ingested", W + "/graph.npz", p)
from raptor.labeling.store import PartitionedLabels
import json as _j
partitioned = bool(_j.load(open(W + "/labels/summary.json")).get("parts"))
q = ctx.train_queries.astype(np.int64)
if partitioned:
    # Batches are timed on the largest part held in memory (its queries only), the per-epoch label
    # I/O on its own: reading every part once. Subtracting one from a mixed run is not robust when
    # the reading dominates (16 parts x 15 s against 200 batches).
    parts = PartitionedLabels(W + "/labels")
    sizes = [_j.load(open(d / "summary.json"))["rows"] for d in parts.parts]
    big = max(range(len(sizes)), key=sizes.__getitem__)
    table = parts.load(big)
    lo, hi = parts.target_ranges[big]
    pool = q[(q[:, 2] >= lo) & (q[:, 2] < hi)]
else:
    table = load_label_table(W + "/labels")
    pool = q
load_s = time.perf_counter() - t0
torch.manual_seed(0)
policy = Policy(ctx.dataset.num_entities, ctx.dataset.num_relations, p.model, p.env.max_path_length)
n = min(len(pool), ARG["batches"] * p.pretrain.batch_size)
sub = pool[np.random.default_rng(0).permutation(len(pool))[:n]]
t = time.perf_counter()
hist = pretrain(policy, ctx.env, table, sub, PretrainConfig(epochs=1), seed=0, progress=False)
sec = time.perf_counter() - t
del table
t = time.perf_counter()
for i in range(parts.num_parts if partitioned else 0):
    parts.load(i)
parts_s = time.perf_counter() - t
batches = math.ceil(n / p.pretrain.batch_size)
per_batch = sec / batches
total_batches = math.ceil(len(q) / p.pretrain.batch_size)
done(load_seconds=round(load_s, 2), batches=batches, seconds=round(sec, 2), part_loading_seconds=round(parts_s, 2),
     seconds_per_batch=round(per_batch, 4), queries_per_epoch=int(len(q)),
     est_epoch_minutes=round((parts_s + per_batch * total_batches) / 60, 1),
     labels_in_memory="part" if partitioned else "all", bce=hist[0]["bce"])
""",
}


def markdown_table(result: dict, exact: dict | None = None) -> str:
    """The table of docs/data.md, from a results file (docs are generated from the artifact), and
    the rows of an ``--exact`` run's results file."""
    r = result["steps"]
    g, i, gr, ls, lab, ll, rl, pt = (r[k] for k in STEPS)
    gb = lambda mb: f"{mb / 1024:.2f} GB" if mb >= 1024 else f"{mb:.0f} MB"  # noqa: E731
    c = i["counts"]
    ex = ls["exact"]
    return f"""| stage | time | peak RSS | what |
|---|---|---|---|
| generate (`raptor synthetic --preset gdelt`) | {g['seconds']:.1f} s | {gb(g['peak_rss_mb'])} | {c['train']:,} / {c['valid']:,} / {c['test']:,} facts after de-duplication |
| ingest | {i['seconds']:.1f} s | {gb(i['peak_rss_mb'])} | time step {i['time_step']} raw minutes |
| graph | {gr['seconds']:.1f} s | {gb(gr['peak_rss_mb'])} | {gr['edges']:,} edges (with inverses) |
| labels, N = 200, {lab['parts']} parts | {lab['seconds'] / 60:.1f} min | {gb(lab['peak_rss_mb'])} | {lab['pairs']:,} pairs, {lab['rows']:,} rows, {lab['bytes_on_disk'] / 1e9:.1f} GB on disk |
| labels, exact (estimated from {ls['sample']:,} random pairs) | ~{ex['est_label_hours_here'] * 60:.0f} min compute | - | ~{ex['est_rows'] / 1e9:.1f} B rows, {ex['est_table_gb_in_memory']:.0f} GB as one table in memory |
| load the largest label part | {ll['load_seconds']:.1f} s | {gb(ll['peak_rss_mb'])} | {ll['rows_loaded']:,} rows, {ll['table_bytes_in_memory'] / 1e9:.2f} GB in memory |
| one RL epoch (paper config, float32) | ~{rl['est_epoch_minutes']:.1f} min | {gb(rl['peak_rss_mb'])} | {rl['batches']} batches timed ({rl['seconds']:.1f} s), {rl['queries_per_epoch']:,} queries per epoch |
| one pretraining epoch, `labels_in_memory: part` | ~{pt['est_epoch_minutes']:.1f} min | {gb(pt['peak_rss_mb'])} | {pt['batches']} batches timed ({pt['seconds_per_batch'] * 1000:.0f} ms each) + reading all {lab['parts']} parts ({pt['part_loading_seconds']:.0f} s per epoch) |
""" + (exact_rows(exact, gb) if exact else "")


def exact_rows(result: dict, gb) -> str:
    """Rows of the same table for a run of the label, label_load and pretrain_epoch steps with
    ``--exact`` (exact reachability, no N)."""
    r = result["steps"]
    lab, ll, pt = r["label"], r["label_load"], r["pretrain_epoch"]
    return f"""| **labels, exact**, {lab['parts']} parts | {lab['seconds'] / 60:.1f} min | {gb(lab['peak_rss_mb'])} | {lab['pairs']:,} pairs, {lab['rows']:,} rows, {lab['bytes_on_disk'] / 1e9:.1f} GB on disk |
| load the largest exact part | {ll['load_seconds']:.1f} s | {gb(ll['peak_rss_mb'])} | {ll['rows_loaded']:,} rows, {ll['table_bytes_in_memory'] / 1e9:.2f} GB in memory |
| one pretraining epoch, exact labels, `part` | ~{pt['est_epoch_minutes']:.1f} min | {gb(pt['peak_rss_mb'])} | {pt['batches']} batches timed ({pt['seconds_per_batch'] * 1000:.0f} ms each) + reading all {lab['parts']} parts ({pt['part_loading_seconds']:.0f} s per epoch) |
"""


def label_step(work: Path, arg: dict, log: Path | None) -> dict:
    """``raptor label`` (partitioned) under ``/usr/bin/time -v``: wall time and peak RSS of the
    whole stage; or, with ``log``, the same numbers read from such a run's log."""
    if log is None:
        log = work / "label.log"
        params = work / "params.yaml"
        params.write_text(f"datasets:\n  {arg['preset']}: {{raw_dir: {work / 'raw'}}}\n")
        cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "raptor.cli", "label", "--params", str(params),
               "--data", str(work / "ingested"), "--graph", str(work / "graph.npz"), "--out", str(work / "labels"),
               *(["--exact"] if arg["exact"] else ["--max-in-edges", str(arg["max_in_edges"])]),
               "--partitions", str(arg["partitions"]), "--no-progress"]
        with open(log, "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
        if rc:
            raise SystemExit(f"label failed, see {log}")
    text = log.read_text()
    field = lambda name: text.split(name, 1)[1].splitlines()[0].strip()  # noqa: E731
    h, m, sec = ([0] + field("Elapsed (wall clock) time (h:mm:ss or m:ss):").split(":"))[-3:]
    summary = json.loads((work / "labels" / "summary.json").read_text())
    return {"seconds": round(int(h) * 3600 + int(m) * 60 + float(sec), 1),
            "peak_rss_mb": round(int(field("Maximum resident set size (kbytes):")) / 1024, 1),
            "user_cpu_seconds": float(field("User time (seconds):")),
            "mode": summary["mode"], "pairs": summary["pairs"], "rows": summary["rows"],
            "parts": len(summary.get("parts") or []), "bytes_on_disk": summary["bytes_on_disk"],
            "rows_per_pair": summary["rows_per_pair"]}


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
    ap.add_argument("--partitions", type=int, default=8, help="labeling.partitions of the label step")
    ap.add_argument("--exact", action="store_true", help="the label step labels exactly (no N)")
    ap.add_argument("--label-log", type=Path, help="adopt a finished `/usr/bin/time -v raptor label` run's log")
    ap.add_argument("--batches", type=int, default=200, help="batches timed by the epoch steps")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/scale_gdelt.json")
    ap.add_argument("--table", action="store_true", help="print the docs table of --out (and of --exact-out, "
                    "if it exists) and exit")
    ap.add_argument("--exact-out", type=Path, default=ROOT / "benchmarks/results/scale_gdelt_exact.json",
                    help="results of the --exact label run, for --table")
    args = ap.parse_args()
    if args.table:
        exact = json.loads(args.exact_out.read_text()) if args.exact_out.exists() else None
        print(markdown_table(json.loads(args.out.read_text()), exact), end="")
        return 0
    from raptor.common.io import atomic_write_json

    args.work.mkdir(parents=True, exist_ok=True)
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.setdefault("machine", {"cpus": os.cpu_count(), "python": sys.version.split()[0]})
    arg = {"preset": args.preset, "sample": args.sample, "max_in_edges": args.max_in_edges,
           "max_path_length": args.max_path_length, "batches": args.batches, "partitions": args.partitions,
           "exact": args.exact}
    for step in STEPS:
        if step not in args.steps or (step in result.get("steps", {}) and not args.redo):
            continue
        print(f"{step} ...", flush=True)
        res = label_step(args.work, arg, args.label_log) if step == "label" else run_step(step, args.work, arg)
        print(f"{step}: {json.dumps(res)}", flush=True)
        result.setdefault("steps", {})[step] = res
        atomic_write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
