"""`raptor report --where`: where the pipeline's outputs are (the direct form of the report stage)."""

from __future__ import annotations

import argparse

NAME = "report"
HELP = ("`--where` lists every output of the pipeline (from the stage declaration, raptor/pipeline/stages.py) and "
        "whether it exists yet. (Without it, `raptor report` is the report stage; its significance tests are "
        "the significance stage, `raptor significance`.)")


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default="params.yaml", help="params file, under --root (default: %(default)s)")
    p.add_argument("--local", default="params.local.yaml", help="local overrides, under --root (default: %(default)s, "
                   "if present)")
    p.add_argument("--root", default=".", help="project root (default: %(default)s)")
    p.add_argument("--where", action="store_true", help="only list where the outputs are")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from raptor.config import load_params
    from raptor.pipeline.stages import outputs

    if not args.where:
        raise ValueError("the direct form of report is --where (where every output is); the report stage takes "
                         "--dataset D and --out NAME=PATH (`raptor report --help`)")
    root = Path(args.root)
    params = load_params(root / args.params, local=root / args.local)
    for address, what, path in outputs(params):
        exists = "" if (root / path).exists() else "  (not yet produced)"
        print(f"{address:<34} {path:<44} {what}{exists}")
    print(f"{'MLflow':<34} mlflow.db, mlruns/ (`raptor ui` opens both UIs on these stores: "
          "http://127.0.0.1:5000/#/experiments?workflowType=machine_learning)")
    print(f"{'Prefect':<34} .prefect/ (`raptor ui`: http://127.0.0.1:4200; a plain `prefect server start` "
          "opens ~/.prefect instead)")
    return 0
