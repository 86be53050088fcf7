"""`raptor evaluate`: beam-search evaluation of a trained model."""

from __future__ import annotations

import argparse

NAME = "evaluate"
HELP = ("Evaluate a trained model (--model) on a split with beam search and time-aware filtered ranks; "
        "writes metrics.json (MRR, Hits@1/3/10) and predictions.parquet to --out.")


def register(p: argparse.ArgumentParser) -> None:
    from raptor.commands import add_local_option

    p.add_argument("--model", required=True, help="trained model (.pt)")
    p.add_argument("--data", required=True, help="ingested dataset folder")
    p.add_argument("--graph", required=True, help="graph file")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--split", default="test", choices=["train", "valid", "test"],
                   help="the split whose queries are ranked (default: %(default)s)")
    p.add_argument("--params", default="params.yaml", help="params file (default: %(default)s): its eval "
                   "section sets the beam")
    add_local_option(p)


def run(args: argparse.Namespace) -> int:
    from raptor.commands import command_params
    from raptor.pipeline.experiment import evaluate_model, load_context

    params, source = command_params(args)
    ctx = load_context(args.data, args.graph, params)
    m = evaluate_model(ctx, args.model, args.out, split=args.split)
    e = params.eval
    print(f"{args.split}: MRR {m['mrr']:.4f}  Hits@1 {m['hits@1']:.4f}  Hits@3 {m['hits@3']:.4f}  "
          f"Hits@10 {m['hits@10']:.4f}  ({m['queries']['total']:,} queries, {m['ms_per_query']:.2f} ms/query; beam "
          f"{e.beam_size}, score rule {e.score_rule}; params {source}) -> {args.out}")
    return 0
