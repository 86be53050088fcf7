"""What `labeling.visited` does to training: the label-mode sweep's runs, summarised for docs/labeling.md.

Reads a finished ``label-mode`` sweep folder (``python -m flows sweep label-mode --dataset ICEWS14``:
RL-RAPTOR at the quick profile's budget, seeds 0 and 1, ``visited: target`` vs
``target_and_subject``) and reports, per arm, mean ± sample std over seeds of

* pretraining at its last epoch: the share of candidates labelled reachable, label accuracy and BCE
  against the arm's own labels (the two arms have different labels, so these say how learnable each
  table is, not which policy is better), and ``walk_reaches_answer``: the share of the pretraining
  walks (each action drawn from the policy among the actions labelled reachable) that end at the
  answer, i.e. how often following the labels leads where they promise;
* RL: best validation MRR and the test metrics of the best checkpoint (time-aware filtered);

and the comparison with the default arm: the paired t-test over seeds on test MRR and the per-query
tests (Wilcoxon, paired bootstrap) on the test reciprocal ranks averaged over seeds.
Writes ``benchmarks/results/label_mode_training_ICEWS14.json`` and prints the table docs/labeling.md shows.

Run: ``.venv/bin/python benchmarks/label_mode_training.py [--sweep runs/ICEWS14/sweeps/label-mode]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from raptor.common.io import atomic_write_json
from raptor.reporting.runs_reader import seed_ranks
from raptor.evaluation.stats import json_safe, paired_seed_ttest, per_query_tests

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ARM = "default"
PRETRAIN_KEYS = ("label_positive_rate", "label_accuracy", "bce", "walk_reaches_answer")
RUN_KEYS = ("best_val_mrr", "test_mrr", "test_hits@1", "test_hits@3", "test_hits@10")


def _mean_std(values: list[float]) -> dict:
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if a.size > 1 else 0.0, "n": int(a.size)}


def summarise(sweep_dir: Path) -> dict:
    plan = json.loads((sweep_dir / "sweep.json").read_text())
    results = json.loads((sweep_dir / "results.json").read_text())
    if results["missing"]:
        raise SystemExit(f"{sweep_dir}: runs not finished yet: {', '.join(results['missing'])}")
    arms = sorted({r["arm"] for r in results["runs"]}, key=lambda a: (a != DEFAULT_ARM, a))
    out: dict = {"sweep": str(sweep_dir.relative_to(ROOT) if sweep_dir.is_relative_to(ROOT) else sweep_dir),
                 "dataset": results["dataset"], "arms": {}}
    for arm in arms:
        pre = {k: [] for k in PRETRAIN_KEYS}
        pre_epochs = set()
        for job in plan["pretrain"]:
            if arm in job["arms"]:
                last = json.loads((ROOT / job["out_dir"] / "history.json").read_text())[-1]
                pre_epochs.add(last["epoch"] + 1)
                for k in PRETRAIN_KEYS:
                    pre[k].append(last[k])
        runs = [r for r in results["runs"] if r["arm"] == arm]
        out["arms"][arm] = {
            "seeds": sorted(r["seed"] for r in runs),
            "pretrain_epochs": sorted(pre_epochs),
            "rl_epochs": sorted({r["rl_epochs"] for r in runs}),
            "pretrain": {k: _mean_std(v) for k, v in pre.items()},
            **{k: _mean_std([r[k] for r in runs]) for k in RUN_KEYS},
            "test_mrr_by_seed": {r["seed"]: r["test_mrr"] for r in runs},
        }
    base_ranks = seed_ranks(sweep_dir / "eval" / DEFAULT_ARM / "raptor")
    for arm in arms:
        if arm == DEFAULT_ARM:
            continue
        ranks = seed_ranks(sweep_dir / "eval" / arm / "raptor")
        seeds = sorted(set(ranks) & set(base_ranks))
        pq = per_query_tests(np.stack([ranks[s] for s in seeds]), np.stack([base_ranks[s] for s in seeds]),
                             from_ranks=True)
        tt = paired_seed_ttest(out["arms"][arm]["test_mrr_by_seed"], out["arms"][DEFAULT_ARM]["test_mrr_by_seed"],
                               metric="test_mrr")
        out["arms"][arm]["vs_default"] = {"per_query": pq.to_dict(), "seed_ttest": tt.to_dict()}
    return out


def markdown(s: dict) -> str:
    def pct(d):
        return f"{100 * d['mean']:.2f} ± {100 * d['std']:.2f}"

    lines = ["| `visited` | seeds | labelled reachable | label accuracy | BCE | labelled walk reaches answer "
             "| best val MRR | test MRR | Hits@1 | Hits@3 | Hits@10 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm, a in s["arms"].items():
        name = "target (default)" if arm == DEFAULT_ARM else arm.split("=", 1)[-1]
        lines.append(f"| {name} | {', '.join(map(str, a['seeds']))} | {pct(a['pretrain']['label_positive_rate'])} | "
                     f"{pct(a['pretrain']['label_accuracy'])} | "
                     f"{a['pretrain']['bce']['mean']:.3f} ± {a['pretrain']['bce']['std']:.3f} | "
                     f"{pct(a['pretrain']['walk_reaches_answer'])} | {pct(a['best_val_mrr'])} | {pct(a['test_mrr'])} | "
                     f"{pct(a['test_hits@1'])} | {pct(a['test_hits@3'])} | {pct(a['test_hits@10'])} |")
    for arm, a in s["arms"].items():
        if "vs_default" not in a:
            continue
        pq, tt = a["vs_default"]["per_query"], a["vs_default"]["seed_ttest"]
        b = pq["bootstrap"]
        lines.append(f"\n{arm} vs default, test MRR: {100 * pq['mrr_diff']:+.2f} points; per query ({pq['n']:,} test "
                     f"queries, reciprocal ranks averaged over seeds): paired bootstrap 95% CI "
                     f"[{100 * b['ci_low']:+.2f}, {100 * b['ci_high']:+.2f}], p = {b['p_two_sided']:.3g}; Wilcoxon "
                     f"p = {pq['wilcoxon']['p_two_sided']:.3g}; over seeds (n = {tt['n']}): paired t-test "
                     f"p = {tt['p_two_sided']:.3g}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", type=Path, default=ROOT / "runs" / "ICEWS14" / "sweeps" / "label-mode",
                    help="the finished sweep folder (default: runs/ICEWS14/sweeps/label-mode)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "label_mode_training_ICEWS14.json")
    ap.add_argument("--print", action="store_true", help="print the table of the saved --out file, and exit")
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
