"""How many distinct entities a system's beam reaches per test query, and how often it reaches the gold,
under the default evaluation and under a re-scored reading (`raptor rescore`): why an evaluation-only
reading helps one system more than another.

Reads the predictions of a folder of long runs (``<dataset>/<variant>/seed<S>/eval/predictions.parquet`` and
``seed<S>/rescore/<reading>/predictions.parquet``); prints a table and writes JSON.

    python benchmarks/beam_reach.py .longruns/runs/ICEWS14 --reading eval.rank_last_expansions=true \
        --out benchmarks/results/beam_reach_paper_icews14.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from raptor.agents import variants as variant_registry
from raptor.common.io import atomic_write_json
from raptor.evaluation.ranking import read_predictions
from raptor.reporting.runs_reader import RESCORE_DIR, seed_dirs


def reach(path: Path) -> dict:
    """Candidates per query (distinct entities the beam ranks) and the share of queries whose gold is one."""
    p = read_predictions(path)
    counts = np.diff(p.cand_offsets)
    row = np.repeat(np.arange(len(p)), counts)
    gold_hit = np.zeros(len(p), bool)
    gold_hit[row[p.candidates == p.object[row]]] = True
    return {"queries": len(p), "candidates_median": float(np.median(counts)), "candidates_mean": float(counts.mean()),
            "gold_reached": float(gold_hit.mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="one dataset's folder of long runs")
    ap.add_argument("--reading", required=True, help="the reading's folder name under seed<S>/rescore/")
    ap.add_argument("--out", type=Path, help="JSON file to write")
    args = ap.parse_args()
    out = {"runs": str(args.runs), "reading": args.reading, "systems": {}}
    for v in variant_registry.VARIANTS:
        if not (args.runs / v).is_dir():
            continue
        for seed, d in seed_dirs(args.runs / v).items():
            default, reading = d / "eval/predictions.parquet", d / RESCORE_DIR / args.reading / "predictions.parquet"
            if not (default.is_file() and reading.is_file()):
                continue
            r = {"default": reach(default), "reading": reach(reading)}
            out["systems"].setdefault(v, {})[seed] = r
            print(f"{variant_registry.get(v).label:10s} seed {seed}: candidates per query median "
                  f"{r['default']['candidates_median']:.0f} -> {r['reading']['candidates_median']:.0f}, gold reached "
                  f"{100 * r['default']['gold_reached']:.1f}% -> {100 * r['reading']['gold_reached']:.1f}%")
    if args.out:
        atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
