"""What bfloat16 autocast does to training and evaluation: the precision sweep's runs, summarised for docs/agent.md.

Reads a finished ``precision`` sweep folder (``python -m flows sweep precision --dataset ICEWS14``:
Pure-RL and RL-RAPTOR at the quick profile's budget, seeds 0 and 1, ``train.precision`` float32 vs
bfloat16, nothing else changed) and reports, per variant and precision, mean ± sample std over seeds of
the best validation MRR (full validation set) and the test metrics of the best checkpoint, the test MRR
difference against float32 with the sweep's tests (paired t-test over seeds; per query: paired
bootstrap CI and Wilcoxon, :func:`raptor.reporting.sweep_page._vs_default`), the validation MRR at every validation
round, and the median seconds per RL epoch and per validation round (the runs' own clocks; two runs
shared the two cores, so these are throughput under load, not a benchmark).

Writes ``benchmarks/results/precision_training_ICEWS14.json`` and prints the tables docs/agent.md shows.

Run: ``.venv/bin/python benchmarks/precision_training.py [--sweep runs/ICEWS14/sweeps/precision]``;
``--print`` prints the tables of the saved results.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from raptor.common.io import atomic_write_json
from raptor.evaluation.stats import json_safe
from raptor.agents.variants import get as get_variant

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ARM = "default"


def _path(p: str) -> Path:
    """A path the sweep recorded (relative to the repository root it ran in, or absolute)."""
    return Path(p) if Path(p).is_absolute() else ROOT / p


def _arm_precision(plan: dict, arm: str) -> str:
    return json.loads(_path(plan["params_files"][arm]).read_text())["train"]["precision"]


def summarise(sweep_dir: Path) -> dict:
    plan = json.loads((sweep_dir / "sweep.json").read_text())
    results = json.loads((sweep_dir / "results.json").read_text())
    if results["missing"]:
        raise SystemExit(f"{sweep_dir}: runs not finished yet: {', '.join(results['missing'])}")
    out: dict = {"sweep": str(sweep_dir.relative_to(ROOT) if sweep_dir.is_relative_to(ROOT) else sweep_dir),
                 "dataset": results["dataset"], "rows": []}
    for a in results["arms"]:
        jobs = [j for j in plan["train"] if j["arm"] == a["arm"] and j["variant"] == a["variant"]]
        curves, rl_sec, val_sec = {}, [], []
        for j in jobs:
            hist = json.loads((_path(j["out_dir"]) / "history.json").read_text())
            curves[j["seed"]] = {h["epoch"] + 1: h["val_mrr"] for h in hist if h.get("val_mrr") is not None}
            rl_sec += [h["seconds"] for h in hist]
            val_sec += [h["val_seconds"] for h in hist if h.get("val_seconds")]
        epochs = sorted(set.intersection(*(set(c) for c in curves.values())))
        out["rows"].append({
            "variant": a["variant"], "arm": a["arm"], "precision": _arm_precision(plan, a["arm"]),
            "seeds": a["seeds"], "pretrain_epochs": sorted({j["pretrain_epochs"] for j in jobs}),
            "rl_epochs": sorted({r["rl_epochs"] for r in results["runs"]
                                 if r["arm"] == a["arm"] and r["variant"] == a["variant"]}),
            **{k: a[k] for k in a if k.endswith(("_mean", "_std"))},
            "delta_test_mrr": a["delta_test_mrr"], "vs_default": a.get("vs_default"),
            "val_mrr_by_epoch": {e: [curves[s][e] for s in sorted(curves)] for e in epochs},
            "median_rl_epoch_seconds": float(np.median(rl_sec)),
            "median_validation_seconds": float(np.median(val_sec)) if val_sec else None,
        })
    return out


def markdown(s: dict) -> str:
    def pct(r, k):
        return f"{100 * r[k + '_mean']:.2f} ± {100 * r[k + '_std']:.2f}"

    lines = ["| system | precision | seeds | best val MRR | test MRR | Hits@1 | Hits@3 | Hits@10 | Δ test MRR "
             "| t-test p (seeds) | per-query 95% CI of Δ | Wilcoxon p | s / RL epoch | s / validation |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        vs = r["vs_default"]
        tests = (f"{100 * r['delta_test_mrr']:+.2f} | {vs['seed_ttest_p']:.2g} | "
                 f"[{100 * vs['bootstrap_ci'][0]:+.2f}, {100 * vs['bootstrap_ci'][1]:+.2f}] | {vs['wilcoxon_p']:.2g}"
                 if vs else " |  |  | ")
        val = r["median_validation_seconds"]
        lines.append(f"| {get_variant(r['variant']).label} | {r['precision']} | {', '.join(map(str, r['seeds']))} | "
                     f"{pct(r, 'best_val_mrr')} | {pct(r, 'test_mrr')} | {pct(r, 'test_hits@1')} | "
                     f"{pct(r, 'test_hits@3')} | {pct(r, 'test_hits@10')} | {tests} | "
                     f"{r['median_rl_epoch_seconds']:.1f} | {'' if val is None else f'{val:.1f}'} |")
    epochs = sorted({int(e) for r in s["rows"] for e in r["val_mrr_by_epoch"]})
    lines += ["", "Validation MRR (%) at each validation round, seeds listed in order:", "",
              "| system | precision | " + " | ".join(f"RL epoch {e}" for e in epochs) + " |",
              "|---|---|" + "---|" * len(epochs)]
    for r in s["rows"]:
        by = {int(e): v for e, v in r["val_mrr_by_epoch"].items()}
        cells = [" / ".join(f"{100 * v:.2f}" for v in by[e]) if e in by else "" for e in epochs]
        lines.append(f"| {get_variant(r['variant']).label} | {r['precision']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", type=Path, default=ROOT / "runs" / "ICEWS14" / "sweeps" / "precision",
                    help="the finished sweep folder (default: runs/ICEWS14/sweeps/precision)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "precision_training_ICEWS14.json")
    ap.add_argument("--print", action="store_true", help="print the tables of the saved --out file, and exit")
    args = ap.parse_args()
    if args.print:
        print(markdown(json.loads(args.out.read_text())), end="")
        return
    s = summarise(args.sweep.resolve())
    atomic_write_json(args.out, json_safe(s))
    print(markdown(s), end="")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
