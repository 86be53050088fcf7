"""Benchmark: time ``raptor.evaluation.ranking.filtered_ranks`` at evaluation scale.

Q = 100,000 queries, C = 300 candidates (beam output, unique per row, ~5 % padding),
E = 23,033 entities (ICEWS05-15-sized), a filter index built from 1,000,000 random quadruples
(plus inverses) whose keys cover every query. Also times ``raptor.evaluation.stats.per_query_tests`` (Wilcoxon + paired bootstrap, B = 10,000) on the
resulting 100,000 ranks against a perturbed copy. Writes ``benchmarks/results/ranking.json``.

Run: ``.venv/bin/python benchmarks/bench_ranking.py [--queries N] [--repeats K]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from raptor.common.io import atomic_write_json
from raptor.evaluation.ranking import build_filter, filtered_ranks, metrics_from_ranks
from raptor.evaluation.stats import per_query_tests


def make_case(q: int, c: int, e: int, r: int, t: int, n_quads: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    quads = np.stack(
        [rng.integers(0, e, n_quads), rng.integers(0, r, n_quads), rng.integers(0, e, n_quads), rng.integers(0, t, n_quads)],
        axis=1,
    )
    test = quads[rng.choice(n_quads, q, replace=q > n_quads)]
    # unique candidates per row: random offsets into a random permutation window
    base = rng.integers(0, e, size=(q, 1))
    step = rng.integers(1, 50, size=(q, 1))
    cand = (base + step * np.arange(c)[None, :]) % e  # distinct as long as c*step < e... enforce below
    cand = np.where(step * c < e, cand, (base + np.arange(c)[None, :]) % e)
    # put the gold in ~60 % of rows at a random slot
    has = rng.random(q) < 0.6
    slot = rng.integers(0, c, q)
    gold = test[:, 2]
    collide = (cand == gold[:, None]).any(axis=1)
    put = has & ~collide
    cand[put, slot[put]] = gold[put]
    score = np.sort(rng.standard_normal((q, c)), axis=1)[:, ::-1].copy()
    score = np.round(score, 2)  # create ties
    pad = rng.random((q, c)) < 0.05
    cand = np.where(pad, -1, cand).astype(np.int32)
    score = np.where(pad, -np.inf, score)
    keys = test[:, [0, 1, 3]].astype(np.int32)
    return quads.astype(np.int32), cand, score, gold.astype(np.int32), keys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=100_000)
    ap.add_argument("--candidates", type=int, default=300)
    ap.add_argument("--entities", type=int, default=23_033)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-stats", action="store_true", help="skip timing the per-query significance tests")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "ranking.json"))
    args = ap.parse_args()
    R, T, N = 251, 4017, 1_000_000
    quads, cand, score, gold, keys = make_case(args.queries, args.candidates, args.entities, R, T, N)
    t0 = time.perf_counter()
    fi = build_filter(quads, R)
    t_build = time.perf_counter() - t0
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        ranks = filtered_ranks(cand, score, gold, keys, fi, args.entities)
        times.append(time.perf_counter() - t0)
    stats_seconds = None
    if not args.no_stats:
        # a second "system": ~half the queries ranked differently
        rng = np.random.default_rng(1)
        other = np.where(rng.random(ranks.shape[0]) < 0.5, ranks, np.maximum(1.0, ranks - rng.integers(-3, 5, ranks.shape[0])))
        t0 = time.perf_counter()
        per_query_tests(other, ranks, from_ranks=True)  # Wilcoxon + bootstrap with B = 10,000
        stats_seconds = round(time.perf_counter() - t0, 3)
    result = {
        "function": "raptor.evaluation.ranking.filtered_ranks",
        "queries": args.queries,
        "candidates_per_query": args.candidates,
        "entities": args.entities,
        "filter_quadruples": N,
        "filter_keys": fi.num_keys,
        "build_filter_seconds": round(t_build, 3),
        "filtered_ranks_seconds": [round(x, 3) for x in times],
        "filtered_ranks_best_seconds": round(min(times), 3),
        "queries_per_second": round(args.queries / min(times)),
        "per_query_tests_seconds": stats_seconds,
        "metrics_sanity": metrics_from_ranks(ranks),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
                    "processor": platform.processor() or platform.machine()},
    }
    atomic_write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
