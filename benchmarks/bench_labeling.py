"""Benchmark: reachable-entity labeling on the full ICEWS training sets (ICEWS14 and ICEWS18 by default).

For each dataset (ingested from ``/work/shared/data`` into a temporary folder first, not timed):

* ``raptor label`` end to end (read the ingested Parquet, build the graph, label every training
  pair, write the Parquet label directory) in both modes -- pruned (N = 200, the default) and
  exact -- each in a fresh subprocess so peak RSS is that run's own; plus a compute-only pass
  (no writing) as a profile of where the time goes, and the time to load the table back;
* Algorithm 1 as printed (``reference``) on a random sample of 200 pairs, its projected time for
  all pairs, and the per-pair speed-up of the fast implementation (full run, and the same
  sample single-threaded); the sample's labels are checked equal to the fast ones.

Writes ``benchmarks/results/labeling.json`` (updating the datasets measured; the others' entries are
kept) with the machine load (``/proc/loadavg``) before and
after each run. Run when the machine is otherwise idle:

    .venv/bin/python benchmarks/bench_labeling.py [--datasets ICEWS14 ICEWS18] [--sample 200]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RAW = Path("/work/shared/data")
RESULTS = ROOT / "benchmarks" / "results" / "labeling.json"


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ------------------------------------------------------------------------------------------------
# One run in a child process (fresh peak RSS)
# ------------------------------------------------------------------------------------------------


def child(args: argparse.Namespace) -> None:
    from raptor.config import LabelingConfig
    from raptor.data.dataset import load_dataset
    from raptor.data.graph import TemporalGraph
    from raptor.labeling.compute import ChunkOptions, InAdjacency, compute_labels, iter_label_chunks, label_pairs
    from raptor.labeling.stage import label_dataset
    from raptor.labeling.store import load_label_table

    n = None if args.max_in_edges == "none" else int(args.max_in_edges)
    cfg = LabelingConfig(max_in_edges=n, workers=0)
    # Warm the numba kernels (load from cache, or compile) on a tiny graph; timed separately.
    t0 = time.perf_counter()
    tiny = TemporalGraph.from_quadruples(np.array([[0, 0, 1, 0], [1, 0, 2, 1]]), 3, 1)
    compute_labels(tiny, [2, 1], [2, 2], max_path_length=3, config=LabelingConfig(max_in_edges=n, workers=1))
    warm_s = time.perf_counter() - t0
    out: dict = {"kernel_warmup_s": round(warm_s, 3)}
    if args.what == "compute":
        ds = load_dataset(args.data)
        g = TemporalGraph.from_quadruples(ds.all_quadruples(), ds.num_entities, ds.num_relations)
        tg, tq = label_pairs(ds.splits["train"])
        adj = InAdjacency.from_graph(g)
        t0 = time.perf_counter()
        rows = 0
        for ch in iter_label_chunks(g, tg, tq, max_path_length=3, config=LabelingConfig(max_in_edges=n),
                                    options=ChunkOptions(adjacency=adj)):
            rows += len(ch.entity)
        out.update(compute_only_s=round(time.perf_counter() - t0, 3), rows=rows)
    elif args.what == "label":
        t0 = time.perf_counter()
        s = label_dataset(args.data, args.out, max_path_length=3, config=cfg, show_progress=False)
        out.update(
            end_to_end_s=round(time.perf_counter() - t0, 3),
            pairs=s["pairs"],
            rows=s["rows"],
            bytes_on_disk=s["bytes_on_disk"],
            rows_per_pair=s["rows_per_pair"],
            workers=s["workers"],
        )
    elif args.what == "load":
        t0 = time.perf_counter()
        table = load_label_table(args.out)
        out.update(
            load_s=round(time.perf_counter() - t0, 3),
            rows=table.num_rows,
            in_memory_bytes=int(
                table.entity.nbytes + table.hops.nbytes + table.latest_time.nbytes + table.pair_ptr.nbytes
            ),
        )
    out["peak_rss_mb"] = round(peak_rss_mb(), 1)
    print("RESULT " + json.dumps(out))


def run_child(what: str, data: Path, out: Path, max_in_edges: str) -> dict:
    before = loadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", what, "--data", str(data), "--out", str(out),
         "--max-in-edges", max_in_edges],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"child {what} failed:\n{proc.stderr}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    res = json.loads(line[len("RESULT ") :])
    res["process_wall_s"] = round(wall, 3)
    res["loadavg_before"] = before
    res["loadavg_after"] = loadavg()
    return res


# ------------------------------------------------------------------------------------------------
# Reference sample (in this process)
# ------------------------------------------------------------------------------------------------


def reference_sample(data: Path, sample: int, seed: int = 0) -> dict:
    from raptor.config import LabelingConfig
    from raptor.labeling.compute import ChunkOptions, InAdjacency, compute_labels, label_pairs
    from raptor.data.dataset import load_dataset
    from raptor.data.graph import TemporalGraph

    ds = load_dataset(data)
    g = TemporalGraph.from_quadruples(ds.all_quadruples(), ds.num_entities, ds.num_relations)
    tg, tq = label_pairs(ds.splits["train"])
    idx = np.sort(np.random.default_rng(seed).choice(len(tg), size=min(sample, len(tg)), replace=False))
    st, sq = tg[idx], tq[idx]
    before = loadavg()
    t0 = time.perf_counter()
    ref = compute_labels(g, st, sq, max_path_length=3,
                         config=LabelingConfig(max_in_edges=200, implementation="reference"))
    ref_s = time.perf_counter() - t0
    adj = InAdjacency.from_graph(g)
    fast_cfg, fast_opt = LabelingConfig(max_in_edges=200, workers=1), ChunkOptions(adjacency=adj)
    compute_labels(g, st[:2], sq[:2], max_path_length=3, config=fast_cfg, options=fast_opt)  # warm
    t0 = time.perf_counter()
    fast = compute_labels(g, st, sq, max_path_length=3, config=fast_cfg, options=fast_opt)
    fast_s = time.perf_counter() - t0
    equal = ref.to_dict() == fast.to_dict()
    return {
        "pairs_sampled": int(len(idx)),
        "seed": seed,
        "reference_s": round(ref_s, 3),
        "reference_per_pair_ms": round(1e3 * ref_s / len(idx), 3),
        "reference_projected_full_s": round(ref_s / len(idx) * len(tg), 1),
        "fast_same_sample_1thread_s": round(fast_s, 4),
        "speedup_same_sample_1thread": round(ref_s / max(fast_s, 1e-9), 1),
        "rows_sampled": ref.num_rows,
        "fast_equals_reference": bool(equal),
        "loadavg_before": before,
        "loadavg_after": loadavg(),
    }


def ingest_to(raw: Path, out: Path) -> None:
    from raptor.data.ingest import IngestOptions, ingest

    ingest(raw, out, IngestOptions(dataset=raw.name))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", nargs="+", default=["ICEWS14", "ICEWS18"])
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--child", choices=["compute", "label", "load"])
    ap.add_argument("--data")
    ap.add_argument("--out")
    ap.add_argument("--max-in-edges", default="200")
    args = ap.parse_args()
    if args.child:
        args.what = args.child
        child(args)
        return

    results: dict = {
        "machine": {
            "cpus": len(os.sched_getaffinity(0)),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "loadavg_start": loadavg(),
        "targets": {"ICEWS14_s": 15, "ICEWS18_s": 180, "peak_rss_gb": 8, "speedup_per_pair": 100},
        "datasets": {},
    }
    if RESULTS.is_file():  # keep the datasets measured before (each entry records its own machine load)
        results["datasets"] = json.loads(RESULTS.read_text()).get("datasets", {})
    import numba

    results["machine"]["numba"] = numba.__version__
    with tempfile.TemporaryDirectory(prefix="bench-label-") as work:
        work = Path(work)
        for name in args.datasets:
            data = work / f"{name}-data"
            ingest_to(RAW / name, data)
            entry: dict = {}
            for mode, n in (("top200", "200"), ("exact", "none")):
                out = work / f"{name}-{mode}"
                label = run_child("label", data, out, n)
                compute = run_child("compute", data, out, n)
                load = run_child("load", data, out, n)
                label["compute_only_s"] = compute["compute_only_s"]
                label["compute_only_peak_rss_mb"] = compute["peak_rss_mb"]
                label["load_s"] = load["load_s"]
                label["load_peak_rss_mb"] = load["peak_rss_mb"]
                label["in_memory_bytes"] = load["in_memory_bytes"]
                label["per_pair_us"] = round(1e6 * label["end_to_end_s"] / label["pairs"], 2)
                entry[mode] = label
                print(name, mode, json.dumps(label), flush=True)
                import shutil

                shutil.rmtree(out, ignore_errors=True)
            ref = reference_sample(data, args.sample)
            ref["speedup_full_run_per_pair_top200"] = round(
                ref["reference_projected_full_s"] / entry["top200"]["end_to_end_s"], 1
            )
            entry["reference_sample"] = ref
            print(name, "reference", json.dumps(ref), flush=True)
            results["datasets"][name] = entry
    results["loadavg_end"] = loadavg()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    from raptor.common.io import atomic_write_json

    atomic_write_json(RESULTS, results)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
