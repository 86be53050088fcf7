"""`raptor train`: Pure-RL actor-critic training of the policy (no pretraining)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

NAME = "train"
HELP = (
    "Train the policy with actor-critic RL from scratch (Pure-RL) on an ingested dataset (--data) "
    "and its graph (--graph); writes checkpoint.pt, best.pt (best validation MRR), final.pt and "
    "history.json/csv to --out."
)


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="ingested dataset folder (output of `raptor ingest`)")
    p.add_argument("--graph", required=True, help="graph file (output of `raptor graph`)")
    p.add_argument("--out", required=True, help="output folder for checkpoints, models and history")
    p.add_argument("--seed", type=int, default=0, help="random seed (initialisation, shuffling, sampling)")
    p.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    p.add_argument("--epochs", type=int, default=None, help="override rl.epochs")
    p.add_argument("--resume", action="store_true", help="continue from --out/checkpoint.pt if present")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def make_validator(policy_env, dataset, params, precision, device):
    """``policy -> metrics`` on the validation split: beam search + time-aware filtered ranks."""
    import numpy as np

    from ..beam import beam_search
    from ..data import with_inverse_queries
    from ..ranking import build_filter, filtered_ranks, metrics_from_ranks

    env = policy_env
    R, E = dataset.num_relations, dataset.num_entities
    queries = with_inverse_queries(dataset.splits["valid"], R).astype(np.int64)
    filt = build_filter(dataset.all_quadruples(), R)
    keys = queries[:, [0, 1, 3]]

    def evaluate(policy):
        res = beam_search(policy, env, queries, params.eval, precision=precision, device=device)
        ranks = filtered_ranks(res.cand_entity, res.cand_score, queries[:, 2], keys, filt, E)
        return metrics_from_ranks(ranks)

    return evaluate


def run(args: argparse.Namespace) -> int:
    import torch

    from ..config import load_params, params_to_dict
    from ..data import load_dataset, with_inverse_queries
    from ..env import TemporalEnv
    from ..graph import TemporalGraph
    from ..io import atomic_write_json
    from ..policy import Policy
    from ..rl import configure_runtime, resolve_device, train

    overrides = {"rl.epochs": args.epochs} if args.epochs is not None else None
    params = load_params(args.params, overrides)
    dataset = load_dataset(args.data)
    graph = TemporalGraph.load(args.graph)
    if graph.num_entities != dataset.num_entities or graph.num_relations != dataset.num_relations:
        raise ValueError(
            f"graph {args.graph} ({graph.num_entities} entities, {graph.num_relations} relations) does not "
            f"match dataset {args.data} ({dataset.num_entities}, {dataset.num_relations})"
        )
    configure_runtime(params.train.num_threads)
    device = resolve_device(params.train.device)
    precision = params.train.precision
    env = TemporalEnv(graph, params.env)
    torch.manual_seed(args.seed)
    policy = Policy(dataset.num_entities, dataset.num_relations, params.model, params.env.max_path_length)
    train_q = with_inverse_queries(dataset.splits["train"], dataset.num_relations)
    evaluate = make_validator(env, dataset, params, precision, device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "variant": "pure_rl",
        "dataset": dataset.meta.get("dataset", Path(args.data).name),
        "params": params_to_dict(params),
    }
    atomic_write_json(out / "run.json", {"seed": args.seed, "data": str(args.data), "graph": str(args.graph), **meta})
    t0 = time.perf_counter()
    result = train(
        policy, env, train_q, params.rl, params.eval, seed=args.seed, precision=precision, device=device,
        out_dir=out, evaluate_fn=evaluate, resume=args.resume, meta=meta, progress=not args.no_progress,
    )
    secs = time.perf_counter() - t0
    best = f"{result.best_mrr:.4f} at epoch {result.best_epoch}" if result.best_mrr is not None else "n/a"
    print(f"train: {len(result.history)} epochs in {secs:.1f} s, best validation MRR {best} -> {out}")
    print(json.dumps(result.history[-1] if result.history else {}, default=str))
    return 0
