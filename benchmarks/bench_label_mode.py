"""Benchmark: ``labeling.visited`` = ``target`` (Algorithm 1 as printed, visited set ``{o_q}``) vs.
``target_and_subject`` (visited ``{o_q, e_q}`` per training query) on a dataset (default ICEWS14).

For N = 200 (the default) and exact labels, in both modes:

* the label table: pairs, rows, hop-2 rows whose best paths all run through one intermediate
  (``via != -1``), on-disk bytes, in-memory bytes, end-to-end ``write_labels`` time and compute-only
  time (best of ``--repeats``, the two modes interleaved), one labeling thread;
* step-0 labels of the environment's candidates (``EnvConfig`` defaults: 150 most recent actions,
  ``t' < t_q``) for the training queries in both directions (as pretraining sees them): over all of
  them, and over random samples (``--samples``, seed ``--seed``): the fraction of candidates
  labeled reachable (pooled over the queries: "candidates"; averaged per query: "per_query_mean"),
  the fraction of queries with at least one reachable candidate, and STOP's positive rate;
* a spot check: for ``--check`` random training queries, the subject-mode table's list of the query
  (``LabelTable.get_for_query``) equals Algorithm 1 run for that query with the visited set
  ``{o_q, e_q}`` (``reference_labels(..., query_subject=e_q)``).

Writes ``benchmarks/results/label_mode_<dataset>.json`` and prints a Markdown summary (the one
quoted in docs/labeling.md). One thread throughout (it shares the machine with training runs):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_label_mode.py [--data DIR --graph FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RAW = Path("/work/shared/data")
MODES = ("target", "target_and_subject")


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def table_bytes(table) -> int:
    arrays = [table.pair_target, table.pair_time, table.pair_ptr, table.entity, table.hops, table.latest_time]
    if table.via is not None:
        arrays += [table.via, table.latest_time_without_via]
    return int(sum(a.nbytes for a in arrays))


def step0_stats(table, env, queries: np.ndarray, batch: int = 4096) -> dict:
    """Step-0 labels of the environment's candidates of ``queries`` (``[Q, 4]``)."""
    from raptor.labeling.actions import ActionCandidates, action_labels

    pos = cands = stop_pos = 0
    with_any = 0
    per_query = []
    for lo in range(0, len(queries), batch):
        q = queries[lo:lo + batch]
        state = env.reset(q)
        c = env.candidates(state)
        cands = ActionCandidates(c.entity, c.time, relation=c.relation, num_relations=env.num_relations,
                                 mask=c.mask, current_entity=state.entity)
        y = action_labels(table, state.answer, state.query_time, 0, cands, query_subject=state.query_entity)
        edges = c.mask.copy()
        edges[:, 0] = False  # slot 0 is STOP
        yp = (y.astype(bool) & edges)
        n_edges = edges.sum(1)
        n_pos = yp.sum(1)
        pos += int(n_pos.sum())
        cands += int(n_edges.sum())
        stop_pos += int(y[:, 0].sum())
        with_any += int((n_pos > 0).sum())
        has = n_edges > 0
        per_query.extend((n_pos[has] / n_edges[has]).tolist())
    return {
        "queries": int(len(queries)),
        "queries_with_candidates": int(len(per_query)),
        "candidates": cands,
        "reachable": pos,
        "reachable_fraction_candidates": round(pos / max(cands, 1), 4),
        "reachable_fraction_per_query_mean": round(float(np.mean(per_query)) if per_query else 0.0, 4),
        "queries_with_a_reachable_candidate": round(with_any / max(len(queries), 1), 4),
        "stop_reachable_fraction": round(stop_pos / max(len(queries), 1), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="ICEWS14")
    ap.add_argument("--data", help="ingested dataset folder (default: ingest RAW/<dataset> into a temporary folder)")
    ap.add_argument("--graph", help="graph.npz of --data (default: built from --data)")
    ap.add_argument("--samples", type=int, nargs="+", default=[150, 10000])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=5,
                    help="compute-only timings, the two modes interleaved (the best is reported)")
    ap.add_argument("--check", type=int, default=200, help="queries of the reference spot check")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from raptor.labeling.actions import ActionCandidates, action_labels
    from raptor.labeling.compute import ChunkOptions, InAdjacency, compute_labels, iter_label_chunks, label_pairs
    from raptor.labeling.reference import reference_labels
    from raptor.labeling.store import load_label_table, write_labels
    from raptor.config import EnvConfig, LabelingConfig
    from raptor.data.dataset import load_dataset, with_inverse_queries
    from raptor.mdp.env import TemporalEnv
    from raptor.data.graph import TemporalGraph

    tmp = tempfile.TemporaryDirectory(prefix="bench-label-mode-")
    data = Path(args.data) if args.data else None
    if data is None:
        from raptor.data.ingest import ingest

        data = Path(tmp.name) / "ingested"
        ingest(RAW / args.dataset, data)
    ds = load_dataset(data)
    if args.graph:
        graph = TemporalGraph.load(args.graph)
    else:
        graph = TemporalGraph.from_quadruples(ds.all_quadruples(), ds.num_entities, ds.num_relations)
    env = TemporalEnv(graph, EnvConfig())
    tg, tq = label_pairs(ds.splits["train"])
    queries = with_inverse_queries(ds.splits["train"], ds.num_relations).astype(np.int64)
    rng = np.random.default_rng(args.seed)
    samples = {n: np.sort(rng.choice(len(queries), size=min(n, len(queries)), replace=False)) for n in args.samples}
    adj = InAdjacency.from_graph(graph)
    # Warm the kernels (numba cache) before timing.
    tiny = TemporalGraph.from_quadruples(np.array([[0, 0, 1, 0], [1, 0, 2, 1]]), 3, 1)
    for mode in MODES:
        for n in (None, 200):
            t = compute_labels(tiny, [2, 1], [2, 2], max_path_length=3,
                               config=LabelingConfig(max_in_edges=n, workers=1, visited=mode))
            action_labels(t, [2], [2], 0, ActionCandidates(np.array([[1]]), np.array([[1]])), query_subject=[0])

    result: dict = {
        "dataset": args.dataset,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS")},
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "labeling_workers": 1,
        "env": {"max_path_length": env.K, "max_actions": env.config.max_actions,
                "strict_history": env.config.strict_history},
        "training_queries_both_directions": int(len(queries)),
        "seed": args.seed,
        "runs": [],
    }
    for n in (200, None):
        # Compute-only timings, the two modes interleaved (the machine's load drifts).
        compute: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                t0 = time.perf_counter()
                for _ch in iter_label_chunks(graph, tg, tq, max_path_length=3,
                                             config=LabelingConfig(max_in_edges=n, workers=1, visited=mode),
                                             options=ChunkOptions(adjacency=adj)):
                    pass
                compute[mode].append(time.perf_counter() - t0)
        for mode in MODES:
            cfg = LabelingConfig(max_in_edges=n, workers=1, visited=mode)
            la0 = loadavg()
            out_dir = Path(tmp.name) / f"labels-{mode}-{n}"
            t0 = time.perf_counter()
            summary = write_labels(out_dir, graph, tg, tq, max_path_length=3, config=cfg)
            write_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            table = load_label_table(out_dir)
            load_s = time.perf_counter() - t0
            run = {
                "mode": "exact" if n is None else f"top{n}",
                "max_in_edges": n,
                "visited": mode,
                "format_version": summary["format_version"],
                "pairs": summary["pairs"],
                "rows": summary["rows"],
                "hop2_rows": int((table.hops == 2).sum()),
                "hop2_rows_with_unique_via": None if table.via is None else int((table.via >= 0).sum()),
                "hop2_rows_with_no_path_avoiding_via": None if table.via is None else int(
                    ((table.via >= 0) & (table.latest_time_without_via < 0)).sum()),
                "bytes_on_disk": summary["bytes_on_disk"],
                "bytes_in_memory": table_bytes(table),
                "write_labels_s": round(write_s, 3),
                "compute_only_s_best": round(min(compute[mode]), 3),
                "compute_only_s_all": [round(x, 3) for x in compute[mode]],
                "load_s": round(load_s, 3),
                "step0_all_training_queries": step0_stats(table, env, queries),
                "step0_samples": {str(k): step0_stats(table, env, queries[idx]) for k, idx in samples.items()},
                "loadavg_before": la0,
                "loadavg_after": loadavg(),
            }
            if mode == "target_and_subject" and args.check:
                pick = np.random.default_rng(args.seed + 1).choice(len(queries), size=args.check, replace=False)
                t0 = time.perf_counter()
                same = sum(table.get_for_query(int(q[2]), int(q[3]), int(q[0]))
                           == reference_labels(graph, int(q[2]), int(q[3]), 2, n, query_subject=int(q[0]))
                           for q in queries[pick])
                run["reference_check"] = {"queries": int(args.check), "identical": int(same),
                                          "seed": args.seed + 1, "seconds": round(time.perf_counter() - t0, 1)}
            result["runs"].append(run)
            print(json.dumps({k: run[k] for k in ("mode", "visited", "rows", "compute_only_s_best")}), flush=True)
            del table
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"label_mode_{args.dataset}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    print(f"-> {out}")


def markdown(result: dict) -> str:
    """The summary tables quoted in docs/labeling.md."""
    lines = ["| N | visited | rows | hop-2 rows with a unique `via` | on disk | in memory | write_labels | "
             "compute only (best) |", "|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        u, h2 = r["hop2_rows_with_unique_via"], r["hop2_rows"]
        via = "—" if u is None else f"{u:,} ({u / max(h2, 1):.1%} of {h2:,})"
        lines.append(
            f"| {'exact' if r['max_in_edges'] is None else r['max_in_edges']} | `{r['visited']}` | {r['rows']:,} | "
            f"{via} | "
            f"{r['bytes_on_disk'] / 1e6:.1f} MB | {r['bytes_in_memory'] / 1e6:.0f} MB | {r['write_labels_s']:.2f} s | "
            f"{r['compute_only_s_best']:.2f} s |")
    lines += ["", "| N | visited | queries | step-0 candidates reachable | per-query mean | queries with one reachable |",
              "|---|---|---|---|---|---|"]
    for r in result["runs"]:
        rows = [("all", r["step0_all_training_queries"])] + [(k, v) for k, v in r["step0_samples"].items()]
        for name, s in rows:
            label = f"all {s['queries']:,}" if name == "all" else f"{s['queries']:,} random (seed {result['seed']})"
            lines.append(
                f"| {'exact' if r['max_in_edges'] is None else r['max_in_edges']} | `{r['visited']}` | {label} | "
                f"{s['reachable_fraction_candidates']:.1%} ({s['reachable']:,} / {s['candidates']:,}) | "
                f"{s['reachable_fraction_per_query_mean']:.1%} | {s['queries_with_a_reachable_candidate']:.1%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
