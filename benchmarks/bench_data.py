"""Benchmark the data stages: ingest + graph wall time and peak RSS, per dataset.

Each dataset runs in a fresh subprocess so peak RSS is that dataset's alone.
Usage: python benchmarks/bench_data.py [--raw-root ../shared/data] [--out benchmarks/results/data.json]
       [--layout names]  (first rewrites each dataset in the id-free names layout with dates, untimed,
                          then times the ingest of that: benchmarks/results/data_names.json)
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
import raptor.data.ingest, raptor.data.graph
t_import = time.perf_counter() - t0
raw, work = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
res = raptor.data.ingest.ingest(raw, work + "/ingested")
t1 = time.perf_counter()
summary = raptor.data.graph.build_graph(work + "/ingested", work + "/graph.npz")
t2 = time.perf_counter()
print(json.dumps({
    "counts": res.counts, "edges": summary["num_edges"], "import_s": round(t_import, 3),
    "ingest_s": round(t1 - t0, 3), "graph_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3),
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
}))
"""


START_DATES = {"ICEWS14": "2014-01-01", "ICEWS18": "2018-01-01", "ICEWS05-15": "2005-01-01"}


def to_names_layout(raw: Path, out: Path, start_date: str) -> Path:
    """Rewrite an ids-layout folder as the names layout (names and ISO dates in the splits)."""
    import datetime as dt

    import numpy as np

    from raptor.data.ingest import read_dictionary, read_quadruples

    ents = np.array(read_dictionary(raw / "entity2id.txt", "entity"), dtype=object)
    rels = np.array(read_dictionary(raw / "relation2id.txt", "relation"), dtype=object)
    splits = {s: read_quadruples(raw / f"{s}.txt") for s in ("train", "valid", "test")}
    t0 = min(int(q[:, 3].min()) for q in splits.values())
    step = 24 if raw.name == "ICEWS18" else 1  # raw hours (ICEWS18) or days
    start = dt.date.fromisoformat(start_date)
    out.mkdir(parents=True)
    for s, q in splits.items():
        days = (q[:, 3] - t0) // step
        dates = [(start + dt.timedelta(days=int(d))).isoformat() for d in days]
        lines = ["\t".join(x) for x in zip(ents[q[:, 0]], rels[q[:, 1]], ents[q[:, 2]], dates)]
        (out / f"{s}.txt").write_text("\n".join(lines) + "\n")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--raw-root", default="../shared/data")
    ap.add_argument("--datasets", nargs="+", default=["ICEWS14", "ICEWS18"])
    ap.add_argument("--out", default="benchmarks/results/data.json")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layout", choices=["ids", "names"], default="ids")
    args = ap.parse_args()
    if args.layout == "names" and args.out == ap.get_default("out"):
        args.out = "benchmarks/results/data_names.json"
    tmp_root = tempfile.TemporaryDirectory()
    results = {"load_avg_at_start": os.getloadavg()[0], "layout": args.layout, "datasets": {}}
    for name in args.datasets:
        raw = Path(args.raw_root) / name
        if args.layout == "names":
            raw = to_names_layout(raw, Path(tmp_root.name) / name, START_DATES[name])
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as work:
                out = subprocess.run([sys.executable, "-c", CHILD, str(raw), work],
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
