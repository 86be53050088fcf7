"""`raptor report`: significance tests and the report of a finished pipeline run."""

from __future__ import annotations

import argparse

NAME = "report"
HELP = ("Compare the variants of a dataset (paired t-test over seeds, per-query Wilcoxon and bootstrap) and "
        "write reports/<dataset>/significance.json and reports/<dataset>/report/ (tables, figures); "
        "`--where` only prints where every output of the pipeline is.")


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default="params.yaml", help="params file (default: %(default)s)")
    p.add_argument("--root", default=".", help="project root (default: %(default)s)")
    p.add_argument("--where", action="store_true", help="only list where the outputs are")


def run(args: argparse.Namespace) -> int:
    from .. import layout
    from ..config import load_params
    from ..io import atomic_write_json
    from ..report import significance, write_report

    params = load_params(args.params)
    ds, root = params.data.dataset, args.root
    variants = params.train.variants
    if args.where:
        rows = [("ingested dataset", layout.ingested(root, ds)), ("graph", layout.graph(root, ds)),
                ("label tables", layout.labels(root, ds))]
        for v in variants:
            rows += [(f"{v}: training runs (checkpoints, histories)", layout.train_dir(root, ds, v)),
                     (f"{v}: test predictions and metrics per seed", layout.eval_dir(root, ds, v)),
                     (f"{v}: metrics over seeds", layout.variant_dir(root, ds, v) / "metrics.json")]
        rows += [("significance tests", layout.significance(root, ds)), ("report", layout.report(root, ds)),
                 ("ablation report", layout.report(root, ds).parent / "ablation"),
                 ("MLflow", "mlflow.db (run: mlflow ui --backend-store-uri sqlite:///mlflow.db)"),
                 ("Prefect", ".prefect/ (run: prefect server start, then open http://127.0.0.1:4200)")]
        for what, where in rows:
            exists = "" if isinstance(where, str) else ("" if where.exists() else "  (not yet produced)")
            print(f"{what:<48} {where}{exists}")
        return 0
    evals = {v: layout.eval_dir(root, ds, v) for v in variants}
    sig_path = None
    if {"raptor", "pure_rl"} <= set(variants):
        sig_path = layout.significance(root, ds)
        atomic_write_json(sig_path, significance(evals))
    write_report(ds, {v: layout.train_dir(root, ds, v) for v in variants}, evals, layout.report(root, ds), sig_path)
    print(f"report -> {layout.report(root, ds)}")
    return 0
