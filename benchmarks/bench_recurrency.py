"""Benchmark: the recurrency baseline (``raptor.agents.recurrency.method``) on ICEWS14, fit on valid, scored on test.

Reads the raw published splits (``train/valid/test.txt``, tab-separated ids) from
``--data`` (default ``../shared/data/ICEWS14`` beside the repository), shifts times to start at 0
and divides them by their spacing (ICEWS18's hours -> days), selects ``lambda``/``alpha`` per relation
on the validation split (``recurrency.fit``), then ranks every test query in both directions with
the history = every fact (train + valid + test) before the query time (single-step setting) and
reports the time-aware filtered MRR / Hits@{1,3,10} (``raptor.evaluation.ranking``, realistic ties) and the
seconds of each stage. Writes ``benchmarks/results/recurrency_<dataset>.json``.

Published (Gastinger et al. 2024, README of nec-research/recurrency_baseline_tkg after the 2025
fixes): ICEWS14 combined MRR 37.4, Hits@10 51.5; strict only MRR 36.0.

Run: ``.venv/bin/python benchmarks/bench_recurrency.py [--data DIR] [--dataset ICEWS14]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from raptor.data.dataset import with_inverse_queries
from raptor.common.io import atomic_write_json
from raptor.evaluation.ranking import build_filter, evaluation_metrics, filtered_ranks
from raptor.config import RecurrencyConfig
from raptor.agents.recurrency.method import build_history, fit, rank_queries, score

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = {  # combined and strict-only, README of nec-research/recurrency_baseline_tkg after the 2025 fixes
    "ICEWS14": {"mrr": 0.374, "hits@10": 0.515, "strict_mrr": 0.360, "strict_hits@10": 0.479},
    "ICEWS18": {"mrr": 0.287, "hits@10": 0.436, "strict_mrr": 0.273, "strict_hits@10": 0.407},
}


def load_raw(folder: Path):
    splits = {n: np.loadtxt(folder / f"{n}.txt", dtype=np.int64, usecols=(0, 1, 2, 3), ndmin=2) for n in ("train", "valid", "test")}
    allq = np.concatenate(list(splits.values()))
    times = np.unique(allq[:, 3])
    t0 = times[0]
    step = int(np.gcd.reduce(times - t0)) or 1
    for q in splits.values():
        q[:, 3] = (q[:, 3] - t0) // step
    num_entities = sum(1 for _ in open(folder / "entity2id.txt", encoding="utf-8"))
    num_relations = sum(1 for _ in open(folder / "relation2id.txt", encoding="utf-8"))
    num_entities = max(num_entities, int(allq[:, [0, 2]].max()) + 1)
    num_relations = max(num_relations, int(allq[:, 1].max()) + 1)
    return splits, num_entities, num_relations, step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="ICEWS14")
    ap.add_argument("--data", type=Path, help="dataset folder (default ../shared/data/<dataset> beside the repo)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--check-candidates", type=int, default=2000, help="test queries re-ranked via score()+filtered_ranks as a cross-check (0: none)")
    args = ap.parse_args()
    folder = args.data or (ROOT / ".." / "shared" / "data" / args.dataset)
    if not (folder / "train.txt").exists():
        print(f"no dataset at {folder}; nothing to do")
        return
    out = args.out or ROOT / "benchmarks" / "results" / f"recurrency_{args.dataset.lower()}.json"
    splits, E, R, step = load_raw(folder)
    cfg = RecurrencyConfig()
    timings = {}

    t = time.perf_counter()
    model = fit(splits["train"], splits["valid"], E, R, cfg)
    timings["fit_s"] = time.perf_counter() - t

    all_quads = np.concatenate([splits["train"], splits["valid"], splits["test"]])
    t = time.perf_counter()
    history = build_history(all_quads, E, R)
    fi = build_filter(all_quads, R)
    queries = with_inverse_queries(splits["test"], R).astype(np.int64)
    ranks = rank_queries(model, history, queries, fi)
    timings["test_rank_s"] = time.perf_counter() - t
    metrics = evaluation_metrics(ranks, queries[:, 1], R)

    check = None
    if args.check_candidates:
        rng = np.random.default_rng(0)
        sel = np.sort(rng.choice(queries.shape[0], min(args.check_candidates, queries.shape[0]), replace=False))
        t = time.perf_counter()
        ent, sc = score(model, history, queries[sel])
        r2 = filtered_ranks(ent, sc, queries[sel, 2], queries[sel][:, [0, 1, 3]], fi, E)
        check = {
            "queries": int(sel.size),
            "max_abs_rank_diff": float(np.abs(r2 - ranks[sel]).max()),
            "candidates_width": int(ent.shape[1]),
            "seconds": time.perf_counter() - t,
        }

    # strict recurrency alone (alpha = 1 everywhere, psi with the selected lambdas)
    t = time.perf_counter()
    psi_only = type(model)(model.lambdas, np.ones_like(model.alphas), E, R, model.window)
    strict = evaluation_metrics(rank_queries(psi_only, history, queries, fi), queries[:, 1], R)
    timings["strict_rank_s"] = time.perf_counter() - t

    lam_vals, lam_counts = np.unique(model.lambdas[model.valid_queries > 0], return_counts=True)
    al_vals, al_counts = np.unique(model.alphas[model.valid_queries > 0], return_counts=True)
    result = {
        "dataset": args.dataset,
        "data": str(folder.resolve()),
        "entities": E,
        "relations": R,
        "time_step_raw_units": step,
        "queries": int(queries.shape[0]),
        "setting": "single-step (history: all facts before the query time), lambda/alpha per relation on valid",
        "tie_rule": "realistic: 1 + #greater + #equal / 2",
        "combined": metrics,
        "strict_only_selected_lambda": strict,
        "published": PUBLISHED.get(args.dataset),
        "timings_s": timings,
        "score_vs_rank_check": check,
        "lambda_selected_counts": {str(v): int(c) for v, c in zip(lam_vals, lam_counts)},
        "alpha_selected_counts": {str(v): int(c) for v, c in zip(al_vals, al_counts)},
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_end": os.getloadavg()},
    }
    atomic_write_json(out, result)
    print(json.dumps({k: result[k] for k in ("combined", "strict_only_selected_lambda", "timings_s", "score_vs_rank_check")}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
