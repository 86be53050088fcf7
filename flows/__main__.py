"""``python -m flows STAGE ...``: run one pipeline stage as a Prefect flow (what ``dvc.yaml`` calls).

Every stage reads ``params.yaml`` (``--params``) and writes under the project root (``--root``)
in the layout of :mod:`raptor.layout`.
"""

from __future__ import annotations

import argparse
import json
import sys

STAGES = {
    "ingest": "raw splits -> data/<dataset>/ingested (Parquet)",
    "graph": "ingested dataset -> data/<dataset>/graph.npz",
    "label": "graph + train queries -> data/<dataset>/labels (reachability label tables)",
    "finetune": "train one variant for every seed -> runs/<dataset>/<variant>/train (needs --variant)",
    "evaluate": "beam-search test evaluation of every seed -> runs/<dataset>/<variant>/eval (needs --variant)",
    "significance": "RL-RAPTOR vs Pure-RL tests -> reports/<dataset>/significance.json",
    "report": "tables and figures -> reports/<dataset>/report/",
    "ablation": "pretraining-epochs ablation -> runs/<dataset>/ablation, reports/<dataset>/ablation/",
    "pipeline": "every stage above in order, in one flow (what a scheduled deployment runs)",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows", description="Run one pipeline stage as a Prefect flow.")
    sub = parser.add_subparsers(dest="stage", required=True)
    for name, help_ in STAGES.items():
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("--params", default="params.yaml", help="params file (default: %(default)s)")
        p.add_argument("--root", default=".", help="project root for the artifact layout (default: %(default)s)")
        if name in ("finetune", "evaluate"):
            p.add_argument("--variant", required=True, choices=["pure_rl", "raptor"])
        if name == "ingest":
            p.add_argument("--raw", default=None, help="override data.raw_dir")
    args = parser.parse_args(argv)

    from raptor import layout
    from raptor.config import load_params

    from . import stages
    from .pipeline import ablation_flow, pipeline_flow

    ds = load_params(args.params).data.dataset
    if args.stage == "ingest":
        result = stages.ingest_flow(out_dir=str(layout.ingested(args.root, ds)), params_path=args.params,
                                    raw_dir=args.raw)
    elif args.stage == "graph":
        result = stages.graph_flow(data_dir=str(layout.ingested(args.root, ds)),
                                   out_path=str(layout.graph(args.root, ds)))
    elif args.stage == "label":
        result = stages.label_flow(params_path=args.params, root=args.root)
    elif args.stage == "finetune":
        result = stages.with_runner(stages.finetune_flow, args.params)(args.variant, args.params, args.root)
    elif args.stage == "evaluate":
        result = stages.with_runner(stages.evaluate_flow, args.params)(args.variant, args.params, args.root)
    elif args.stage == "significance":
        result = stages.significance_flow(params_path=args.params, root=args.root)
    elif args.stage == "report":
        result = stages.report_flow(params_path=args.params, root=args.root)
    elif args.stage == "ablation":
        result = stages.with_runner(ablation_flow, args.params)(args.params, args.root)
    else:
        result = pipeline_flow(args.params, args.root)
    print(json.dumps(result, default=str)[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
