"""How often the action cap binds (issue 17, `env.cap_includes_stop`): per split, the share of step-0
states (e_q at t_0 = 0, window t' < t_q) whose candidate edges exceed the cap, and the number of edges
in the window (before the visited mask drops edges back to e_q). Step 0 only: later states depend on the policy.
Usage: python benchmarks/cap_usage.py DATA_DIR GRAPH [--cap 150]  (e.g. data/ICEWS14/ingested data/ICEWS14/graph.npz)
"""
import argparse
import json

import numpy as np

from raptor.data.dataset import load_dataset, with_inverse_queries
from raptor.data.graph import TemporalGraph

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("data")
ap.add_argument("graph")
ap.add_argument("--cap", type=int, default=150, help="env.max_actions (default: the paper's 150)")
args = ap.parse_args()
g = TemporalGraph.load(args.graph)
ds = load_dataset(args.data)
out = {}
for split, quads in ds.splits.items():
    q = with_inverse_queries(quads, ds.num_relations)
    start, stop = g.before(q[:, 0], q[:, 3])  # step 0, before the visited mask (edges back to e_q count)
    n = stop - start
    out[split] = {"queries": int(len(q)), "share_over_cap": round(float((n > args.cap).mean()), 4),
                  "share_at_least_cap": round(float((n >= args.cap).mean()), 4),
                  "median_edges": float(np.median(n)), "mean_edges": round(float(n.mean()), 1)}
print(json.dumps({"cap": args.cap, "splits": out}, indent=1))
