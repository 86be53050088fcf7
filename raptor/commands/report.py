"""`raptor report`: where the pipeline's outputs are (``--where``), or significance and report by hand."""

from __future__ import annotations

import argparse

NAME = "report"
HELP = ("`--where` lists every output of the pipeline (from the stage declaration, raptor/stages.py) and "
        "whether it exists yet; without it, compare the variants of a dataset (significance) and write its "
        "report at the pipeline's paths, as the significance and report stages do.")


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default="params.yaml", help="params file (default: %(default)s)")
    p.add_argument("--local", default="params.local.yaml", help="local overrides (default: %(default)s, if present)")
    p.add_argument("--root", default=".", help="project root (default: %(default)s)")
    p.add_argument("--dataset", help="dataset (default: the only one in params)")
    p.add_argument("--where", action="store_true", help="only list where the outputs are")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..config import load_params
    from ..io import atomic_write_json
    from ..report import compare_variants, write_report
    from ..stages import main_stages, outputs

    root = Path(args.root)
    params = load_params(args.params, local=root / args.local)
    if args.where:
        for address, what, path in outputs(params):
            exists = "" if (root / path).exists() else "  (not yet produced)"
            print(f"{address:<34} {path:<44} {what}{exists}")
        print(f"{'MLflow':<34} mlflow.db, mlruns/ (`raptor ui` opens both UIs on these stores: "
              "http://127.0.0.1:5000/#/experiments?workflowType=machine_learning)")
        print(f"{'Prefect':<34} .prefect/ (`raptor ui`: http://127.0.0.1:4200; a plain `prefect server start` "
              "opens ~/.prefect instead)")
        return 0
    ds, _ = params.dataset(args.dataset)
    stage = {s.name: s for s in main_stages(params.train.variants)}
    report_paths = stage["report"].paths(ds)
    inputs = {k: root / v for k, v in report_paths["inputs"].items()}
    evals = {k[5:]: v for k, v in inputs.items() if k.startswith("eval_")}
    sig_path = inputs.get("significance")
    if sig_path is not None:
        atomic_write_json(sig_path, compare_variants(evals))
    out = root / report_paths["outputs"]["out"]
    write_report(ds, {k[6:]: v for k, v in inputs.items() if k.startswith("train_")}, evals, out, sig_path)
    print(f"report -> {out}")
    return 0
