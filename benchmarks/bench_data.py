"""Benchmark the data stages: ingest + graph wall time and peak RSS, per dataset.

Each dataset runs in a fresh subprocess so peak RSS is that dataset's alone.
Usage: python benchmarks/bench_data.py [--raw-root ../shared/data] [--out benchmarks/results/data.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import raptor.ingest, raptor.graph
t_import = time.perf_counter() - t0
raw, work = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
res = raptor.ingest.ingest(raw, work + "/ingested")
t1 = time.perf_counter()
summary = raptor.graph.build_graph(work + "/ingested", work + "/graph.npz")
t2 = time.perf_counter()
print(json.dumps({
    "counts": res.counts, "edges": summary["num_edges"], "import_s": round(t_import, 3),
    "ingest_s": round(t1 - t0, 3), "graph_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3),
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--raw-root", default="../shared/data")
    ap.add_argument("--datasets", nargs="+", default=["ICEWS14", "ICEWS18"])
    ap.add_argument("--out", default="benchmarks/results/data.json")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    results = {"load_avg_at_start": os.getloadavg()[0], "datasets": {}}
    for name in args.datasets:
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as work:
                out = subprocess.run([sys.executable, "-c", CHILD, str(Path(args.raw_root) / name), work],
                                     capture_output=True, text=True, check=True).stdout
                runs.append(json.loads(out.strip().splitlines()[-1]))
        best = min(runs, key=lambda r: r["total_s"])
        results["datasets"][name] = {**best, "runs_total_s": [r["total_s"] for r in runs]}
        print(name, json.dumps(results["datasets"][name]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
