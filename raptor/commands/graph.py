"""`raptor graph`: ingested dataset -> inverse-augmented CSR temporal graph."""

from __future__ import annotations

import argparse

from raptor.data.graph import build_graph

NAME = "graph"
HELP = (
    "Read an ingested dataset (--data) and write the inverse-augmented temporal graph of all three "
    "splits as CSR arrays sorted per entity by time (one .npz, --out)."
)


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="ingested dataset folder (output of `raptor ingest`)")
    p.add_argument("--out", required=True, help="output graph file (.npz)")


def run(args: argparse.Namespace) -> int:
    s = build_graph(args.data, args.out)
    print(
        f"graph: {s['num_entities']:,} entities, {s['num_quadruples']:,} quadruples -> {s['num_edges']:,} edges "
        f"(with inverses), times 0..{s['max_time']} -> {args.out} in {s['seconds']:.2f} s"
    )
    return 0
