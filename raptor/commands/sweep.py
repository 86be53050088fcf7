"""`raptor sweep`: run a sweep of params.yaml here, in worker processes, without Prefect or MLflow."""

from __future__ import annotations

import argparse

NAME = "sweep"
HELP = ("run sweep NAME of params.yaml (`sweeps:`) on one dataset here, JOBS runs at a time in worker processes, "
        "with no orchestrator or tracking server (a GPU box, a batch node): labels, pretraining, then every "
        "(arm, variant, seed) trained, tested and recorded into --results, where `python -m flows sweep NAME` "
        "(the orchestrated, MLflow-logged way) finds the records and logs them. Runs already recorded are skipped.")


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the sweep's name under `sweeps:` in --params")
    p.add_argument("--dataset", required=True, help="dataset name (e.g. ICEWS14)")
    p.add_argument("--data", help="ingested dataset folder (default: the pipeline's, data/<dataset>/ingested)")
    p.add_argument("--graph", help="graph file (default: the pipeline's, data/<dataset>/graph.npz)")
    p.add_argument("--params", default="params.yaml", help="params file (default: %(default)s)")
    p.add_argument("--local", default="params.local.yaml",
                   help="local overrides applied to every arm when the file exists (default: %(default)s)")
    p.add_argument("--out", help="working folder: params, labels, checkpoints (default: runs/<dataset>/sweeps/<name>)")
    p.add_argument("--results", help="records and results table (default: results/sweeps/<name>/<dataset>)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time, each in its own process (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (default: %(default)s)")
    p.add_argument("--arms", help="comma-separated arms to run (default: all); the table covers all, missing runs named")
    p.add_argument("--table-only", action="store_true",
                   help="train nothing: write the results table from the records in --results now (a sweep that is "
                        "still running, or was stopped, names its missing runs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import sys

    from ..local_sweep import JobsFailed, run_plan
    from ..stages import stage_output
    from ..sweep import declaration_differences, load_sweep, plan_sweep, results_dir, sweep_dir, write_results

    if args.jobs < 1 or args.threads < 1:
        raise ValueError(f"--jobs and --threads must be at least 1 (got {args.jobs}, {args.threads})")
    local = args.local if Path(args.local).exists() else None
    sweep, params = load_sweep(args.params, args.name, local)
    plan = plan_sweep(sweep, params, args.dataset, args.out or sweep_dir(args.name, args.dataset))
    results = args.results or results_dir(args.name, args.dataset)
    if args.table_only:
        kept = declaration_differences(plan, results)
        write_results(plan, results, keep_declaration=True)
        print((Path(results) / "results.md").read_text())
        if kept:
            print(f"note: kept {len(kept)} declaration file(s) of {results} that differ from this checkout's "
                  f"(the runs' own params; other params or code here): {', '.join(kept)}", file=sys.stderr)
        return 0
    data = args.data or stage_output("ingest", args.dataset)
    graph = args.graph or stage_output("graph", args.dataset)
    for path in (Path(data) / "meta.json", Path(graph)):
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: make the dataset's ingested data and graph first "
                                    f"(`dvc repro graph@{args.dataset}`, or give --data and --graph)")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()] if args.arms else None
    try:
        run_plan(plan, data, graph, results, jobs=args.jobs, num_threads=args.threads, arms=arms,
                         progress=not args.no_progress)
    except JobsFailed as exc:  # the finished runs are recorded: run the command again to retry the others
        print(f"raptor sweep: error: {exc}\n(finished runs are recorded in {results}; run again to retry the rest)",
              file=sys.stderr)
        return 1
    print((Path(results) / "results.md").read_text())  # names the missing runs, if any
    print(f"sweep {args.name} on {args.dataset} -> {results}")
    return 0
