"""Benchmark (issue 37, item 1): validation's beam search on the device (``SearchOptions(backend="device")``:
:func:`raptor.agents.beam.search_beams_on_device`) against the host search, on ICEWS14's validation
split (17,028 queries with inverses, beam 100, the paper's model shapes, a randomly initialised policy).

Records seconds per validation for each backend (and device chunk size): the search and the
time-aware filtered ranks (:func:`raptor.agents.beam.search_and_rank`: on the device for the device
search), how many queries got the same candidates (entities in the same order, scores within 1e-5) and
the same rank from both, and each backend's MRR.

Run: ``python benchmarks/bench_beam_device.py --raw DIR_OF_ICEWS14_TXT --out results.json``
(``--queries N``: the first N validation queries only).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_agent import RAW, load_raw  # noqa: E402
from bench_gpu_env import sync  # noqa: E402

from raptor.agents.beam import SearchOptions, search_and_rank  # noqa: E402
from raptor.agents.policy import Policy  # noqa: E402
from raptor.common.io import atomic_write_json  # noqa: E402
from raptor.config import EnvConfig, EvalConfig, ModelConfig  # noqa: E402
from raptor.data.dataset import with_inverse_queries  # noqa: E402
from raptor.data.graph import TemporalGraph  # noqa: E402
from raptor.evaluation.ranking import build_filter  # noqa: E402
from raptor.mdp.env import TemporalEnv  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", default=str(RAW))
    ap.add_argument("--out", default="benchmarks/results/beam_device.json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--queries", type=int, default=0, help="validation queries searched (0: all)")
    ap.add_argument("--chunks", nargs="+", type=int, default=[512, 2048], help="device chunk sizes timed")
    ap.add_argument("--precision", default="float32")
    args = ap.parse_args()
    device = torch.device(args.device)
    splits, E, R = load_raw(Path(args.raw))
    env = TemporalEnv(TemporalGraph.from_quadruples(np.concatenate(list(splits.values())), E, R), EnvConfig())
    queries = with_inverse_queries(splits["valid"], R).astype(np.int64)
    fi = build_filter(np.concatenate(list(splits.values())), R)
    if args.queries:
        queries = queries[:args.queries]
    torch.manual_seed(0)
    policy = Policy(E, R, ModelConfig(), env.K).to(device)
    ev = EvalConfig()
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "queries": len(queries), "beam_size": ev.beam_size, "precision": args.precision,
           "seconds": {}}
    results = {}
    # the device searches first, the host one last (the slowest): each run's time is written as it ends
    runs = [(f"device/{c}", SearchOptions(args.precision, device, backend="device", device_chunk_size=c))
            for c in args.chunks] + [("host", SearchOptions(args.precision, device, backend="host"))]
    for name, options in runs:
        search_and_rank(policy, env, queries[:64], fi, ev, options)  # warm-up (kernels, caches, device copies)
        sync(device)
        t = time.perf_counter()
        results[name] = search_and_rank(policy, env, queries, fi, ev, options)
        sync(device)
        out["seconds"][name] = time.perf_counter() - t
        print(name, f"{out['seconds'][name]:.2f} s", flush=True)
        atomic_write_json(args.out, out)
    host, host_ranks = results["host"]
    for name, (res, ranks) in results.items():
        same = (res.cand_entity == host.cand_entity).all(1) & \
            np.isclose(res.cand_score, host.cand_score, rtol=0, atol=1e-5, equal_nan=True).all(1)
        out.setdefault("same_candidates_as_host", {})[name] = {"queries": int(same.sum()), "of": len(queries)}
        out.setdefault("same_rank_as_host", {})[name] = {"queries": int((ranks == host_ranks).sum()), "of": len(queries)}
        out.setdefault("mrr", {})[name] = float(np.mean(1.0 / ranks))
    print(json.dumps({k: out[k] for k in ("same_candidates_as_host", "same_rank_as_host", "mrr")}))
    atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
