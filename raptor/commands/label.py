"""`raptor label`: ingested dataset -> reachable-entity labels of every training (o_q, t_q) pair."""

from __future__ import annotations

import argparse

from raptor.commands import add_local_option, command_params

NAME = "label"
HELP = (
    "Label every distinct (target, query time) pair of the training queries (both directions) with "
    "the entities that reach the target within K-1 hops before t_q (paper, Algorithm 1); read an "
    "ingested dataset (--data), write labels.parquet, pairs.parquet and summary.json to --out, atomically."
)


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="ingested dataset folder (output of `raptor ingest`)")
    p.add_argument("--out", required=True, help="output folder (replaced as a whole when complete)")
    p.add_argument("--params", default="params.yaml", help="params file (default: %(default)s)")
    add_local_option(p)
    p.add_argument("--graph", help="reuse a graph file from `raptor graph` (default: build it from --data)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--exact", action="store_true", help="exact reachability (labeling.max_in_edges = null)")
    mode.add_argument("--max-in-edges", type=int, metavar="N", help="override labeling.max_in_edges")
    hist = p.add_mutually_exclusive_group()
    hist.add_argument("--strict-history", dest="strict_history", action="store_true", default=None,
                      help="only edges with time < t_q (override labeling.strict_history)")
    hist.add_argument("--no-strict-history", dest="strict_history", action="store_false",
                      help="edges with time <= t_q (paper-literal)")
    p.add_argument("--implementation", choices=["fast", "reference"], help="override labeling.implementation")
    p.add_argument("--workers", type=int, help="override labeling.workers (0 = all cores)")
    p.add_argument("--partitions", type=int, metavar="P",
                   help="override labeling.partitions: label in P independent parts (disjoint target ranges)")
    part = p.add_mutually_exclusive_group()
    part.add_argument("--part", type=int, metavar="I",
                      help="label only part I of P into OUT.parts/ (one job of a cluster array); then --merge")
    part.add_argument("--merge", action="store_true", help="assemble the P parts in OUT.parts/ into --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from raptor.labeling.stage import label_dataset, label_part, merge_parts  # numba: not for --help
    from raptor.labeling.store import staging_dir_of

    overrides = {}
    if args.exact:
        overrides["labeling.max_in_edges"] = None
    elif args.max_in_edges is not None:
        overrides["labeling.max_in_edges"] = args.max_in_edges
    if args.strict_history is not None:
        overrides["labeling.strict_history"] = args.strict_history
    if args.implementation is not None:
        overrides["labeling.implementation"] = args.implementation
    if args.workers is not None:
        overrides["labeling.workers"] = args.workers
    if args.partitions is not None:
        overrides["labeling.partitions"] = args.partitions
    params, _ = command_params(args, overrides)
    if args.part is not None:
        s = label_part(args.data, args.out, args.part, max_path_length=params.env.max_path_length,
                       config=params.labeling, graph_path=args.graph, show_progress=not args.no_progress)
        print(f"labels part {args.part} of {params.labeling.partitions}: {s['pairs']:,} pairs, {s['rows']:,} rows "
              f"-> {staging_dir_of(args.out)}")
        return 0
    if args.merge:
        s = merge_parts(args.data, args.out, params.labeling)
        print(f"labels: {len(s['parts'])} parts, {s['pairs']:,} pairs, {s['rows']:,} rows -> {args.out}")
        return 0
    s = label_dataset(
        args.data,
        args.out,
        max_path_length=params.env.max_path_length,
        config=params.labeling,
        graph_path=args.graph,
        show_progress=not args.no_progress,
    )
    q = s["rows_per_pair"]
    print(
        f"labels ({s['mode']}, {'t < t_q' if s['strict_history'] else 't <= t_q'}, K={s['max_path_length']}): "
        f"{s['pairs']:,} pairs, {s['rows']:,} rows (per pair median {q['q50']:.0f}, p99 {q['q99']:.0f}, "
        f"max {q['q100']:.0f}), {s['bytes_on_disk'] / 1e6:.1f} MB -> {args.out} in {s['stage_wall_time_s']:.2f} s"
    )
    return 0
