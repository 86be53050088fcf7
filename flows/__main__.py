"""``python -m flows STAGE ...``: run one stage of :mod:`raptor.pipeline.stages` through its flow (what
``dvc.yaml`` calls, with every path given explicitly): a Prefect flow where a Prefect API is
configured (``python -m flows.server -- dvc repro``, the pipeline flow), else its function without
Prefect (a plain ``dvc repro``: :mod:`flows.invocation`).

    python -m flows label --dataset ICEWS14 --params build/params.json \\
        --in data=data/ICEWS14/ingested --in graph=data/ICEWS14/graph.npz --out out=data/ICEWS14/labels

``python -m flows pipeline`` runs the whole DVC stage graph (what a scheduled deployment runs);
``python -m flows sweep NAME --dataset D`` runs a sweep declared in params.yaml (docs/sweeps.md), as
``raptor sweep NAME --dataset D --prefect`` does; ``python -m flows results SOURCE...`` logs the runs of result
sets (``raptor results``' sources) to MLflow (:mod:`flows.results`). A stage's options are those of ``raptor STAGE``
(:mod:`raptor.commands.stage`); every path defaults to the one dvc.yaml gives it.
"""

from __future__ import annotations

import argparse
import json
import sys


def build_parser() -> argparse.ArgumentParser:
    from raptor.cli import Parser
    from raptor.commands.stage import add_stage_arguments, declaration, kind_help
    from raptor.config import LOCAL_PARAMS
    from raptor.pipeline.stages import PARAMS_SOURCE

    parser = Parser(prog="python -m flows", description="Run one pipeline stage through its flow: a Prefect flow where a "
                    "Prefect API is configured, else without Prefect (`raptor STAGE` runs the same, with the same "
                    "options).")
    sub = parser.add_subparsers(dest="stage", required=True)
    for kind, stages in declaration().items():
        if not stages[0].per_dataset:  # the params stage: `python -m raptor.pipeline.stages resolve`
            continue
        line, description = kind_help(kind, stages)
        p = sub.add_parser(kind, help=line, description=description)
        add_stage_arguments(p, kind, stages)
    p = sub.add_parser("pipeline", help="every stage of dvc.yaml that DVC reports as changed, in order, "
                       "then `dvc commit` (what a scheduled deployment runs)")
    p.add_argument("--root", default=".", help="project root (default: %(default)s)")
    p.add_argument("--target", action="append", help="only this stage and what it depends on (repeatable), "
                   "e.g. report@ICEWS14")
    p = sub.add_parser("sweep", help="train, validate and test every arm of a sweep declared in params.yaml "
                       "(`sweeps: NAME:`), one MLflow comparison", description="Run a sweep of params.yaml as one "
                       "Prefect flow: labels, pretraining, training and test evaluation of every (arm, variant, "
                       "seed); resumes where it stopped. See docs/sweeps.md.")
    p.add_argument("name", help="the sweep (a key of `sweeps` in params.yaml)")
    p.add_argument("--dataset", required=True, help="dataset name; its ingested data and graph must exist "
                   "(`dvc repro graph@NAME`)")
    p.add_argument("--params", default=PARAMS_SOURCE, help="params file declaring the sweep (default: %(default)s)")
    p.add_argument("--local", default=LOCAL_PARAMS, help="local overrides under the sweep's base "
                   "(default: %(default)s; missing = none)")
    p.add_argument("--out", help="sweep folder (default: runs/DATASET/sweeps/NAME)")
    p.add_argument("--results", help="results folder: the tables and every finished run's record, small enough "
                   "for git; a run whose record matches is not trained again (default: results/sweeps/NAME/DATASET)")
    p.add_argument("--list", action="store_true", help="print the arms and the jobs they need, and exit")
    p.add_argument("--from-records", action="store_true", help="train nothing: log the runs recorded in --results "
                   "to MLflow as one comparison and write the table from them (no data, graph or pretraining "
                   "needed: a fresh clone shows a committed sweep in seconds)")
    p.add_argument("--dvc", action="store_true", help="print one `dvc exp run --queue` per arm (the same grid as "
                   "DVC experiments of the main pipeline; run them, then `dvc queue start`), and exit")
    p = sub.add_parser("results", help="log the runs of result sets (the records `raptor results` reads) to MLflow: "
                       "one comparison per set and dataset, training nothing", description="Log the runs of result "
                       "sets to MLflow, training nothing: per set and dataset the experiment raptor/DATASET/results-SET, "
                       "a parent run with each system's mean test metrics, and one run per (system, seed) and ablation "
                       "arm with its params, RL curves per epoch, test metrics and re-scored readings. A run logged "
                       "before gets only the readings it lacks, and untested runs wait, so it is run again as a "
                       "campaign grows.")
    p.add_argument("sources", nargs="+", metavar="[NAME=]FOLDER[+FOLDER...]",
                   help="as for `raptor results`: a folder of records (a wildcard pools every sitting of a campaign: "
                        "\"paper budget=results/paper-budget-ICEWS14/*\")")
    return parser


def _list_sweep(args) -> dict:
    from .sweep import prepare

    plan = prepare(args.name, args.dataset, args.params, args.local, args.out, write=False)
    for arm in plan.sweep.arms:
        over = ", ".join(f"{k}={v!r}" for k, v in arm.overrides.items()) or "(base)"
        print(f"{arm.name:32s} {over}")
    return {"out": plan.out_dir, "arms": len(plan.sweep.arms), "label_tables": len(plan.labels),
            "pretraining_runs": len(plan.pretrain), "training_runs": len(plan.train)}


def main(argv: list[str] | None = None, prog: str = "python -m flows") -> int:
    """Run ``argv`` (default: the command line); 1 on a refused input or a busy project, each said in one
    line ``PROG STAGE: error: ...`` (``raptor sweep --prefect`` passes ``prog="raptor"``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    failed = f"{prog} {args.stage}: error:"
    from raptor.common.io import OutputError
    from raptor.pipeline.projectlock import ProjectBusy, project_lock

    if args.stage == "pipeline":
        try:
            # Taken here too (the flow takes it again: it nests), so that a busy project is refused
            # at once, before Prefect is even imported or a flow run created.
            with project_lock(args.root):
                from .pipeline import PipelineBusy, pipeline_flow

                try:
                    result = pipeline_flow(root=args.root, targets=args.target)
                except PipelineBusy as exc:
                    print(failed, exc, file=sys.stderr)
                    return 1
        except ProjectBusy as exc:
            print(failed, exc, file=sys.stderr)
            return 1
    elif args.stage == "sweep":
        from raptor.config import ConfigError

        try:
            if args.dvc:
                from raptor.pipeline.sweep import dvc_script, load_sweep

                print("\n".join(dvc_script(*load_sweep(args.params, args.name, args.local))))
                return 0
            if args.list:
                result = _list_sweep(args)
            elif args.from_records:
                from .sweep import sweep_records_flow

                with project_lock("."):  # it writes the sweep's tables and reads the pipeline's data
                    result = sweep_records_flow(name=args.name, dataset=args.dataset, source=args.params,
                                                local=args.local, out=args.out, results=args.results)
            else:
                from .sweep import sweep_flow

                with project_lock("."):
                    result = sweep_flow(name=args.name, dataset=args.dataset, source=args.params, local=args.local,
                                        out=args.out, results=args.results)
        except (ConfigError, FileNotFoundError, ProjectBusy) as exc:
            print(failed, exc, file=sys.stderr)
            return 1
    elif args.stage == "results":
        from raptor.reporting.results import parse_sources

        from .results import results_records_flow

        try:
            parse_sources(args.sources)  # a bad source is refused before a flow run (and Prefect's server) starts
            result = results_records_flow(sources=args.sources)
        except (ValueError, OSError) as exc:  # a source without runs, a pattern matching nothing, no MLflow store
            print(failed, exc, file=sys.stderr)
            return 1
    else:
        from raptor.commands.stage import StageArgumentError, execute
        from raptor.config import ConfigError

        try:
            result = execute(args.stage, args)  # what `raptor STAGE` runs too
        except (StageArgumentError, ConfigError, ProjectBusy, OutputError) as exc:
            # OutputError: a full disk or an unwritable folder, already one line naming the path
            # (Prefect's log above holds the traceback of the failed flow run)
            print(failed, exc, file=sys.stderr)
            return 1
    print(json.dumps(result, default=str))  # whole: the last line is read back as JSON
    return 0


if __name__ == "__main__":
    sys.exit(main())
