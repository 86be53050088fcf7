"""`raptor sweep`: run a sweep of params.yaml, the one front door to sweeps (docs/sweeps.md).

Here in worker processes, without Prefect or MLflow (the default); or, with ``--prefect`` (and
``--from-records``, ``--list``, ``--dvc``), exactly what ``python -m flows sweep`` runs: the sweep as one
Prefect flow logged to MLflow as one comparison. Both resume from the records in ``--results``.
``scripts/pinned-sweep.sh`` runs this command from a pinned commit in the background."""

from __future__ import annotations

import argparse

NAME = "sweep"
#: One line for `raptor --help`.
SHORT = 'a sweep of params.yaml: here in worker processes, or as a Prefect flow (--prefect)'
HELP = ("run sweep NAME of params.yaml (`sweeps:`) on one dataset here, JOBS runs at a time in worker processes, "
        "with no orchestrator or tracking server (a GPU box, a batch node): labels, pretraining, then every "
        "(arm, variant, seed) trained, tested and recorded into --results. Runs already recorded are skipped. "
        "With --prefect: the same sweep as one Prefect flow, every run logged to MLflow as one comparison (what "
        "`python -m flows sweep NAME` runs); a run recorded by either way is not trained again by the other.")


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
    flow = p.add_argument_group("as a Prefect flow (`python -m flows sweep`, which these options run)")
    flow.add_argument("--prefect", action="store_true", help="run the sweep as one Prefect flow, logged to MLflow "
                      "(--jobs, --threads, --arms, --data and --graph do not apply: train.parallel_runs does)")
    flow.add_argument("--from-records", action="store_true", help="with --prefect: train nothing, log the runs "
                      "recorded in --results to MLflow as one comparison and write the table from them")
    flow.add_argument("--list", action="store_true", help="print the arms and the jobs they need, and exit")
    flow.add_argument("--dvc", action="store_true", help="print one `dvc exp run --queue` per arm, and exit")


def _flows_argv(args: argparse.Namespace) -> list[str]:
    """``python -m flows sweep`` 's arguments for these options (refused where they do not apply)."""
    local_only = [f for f, on in (("--jobs", args.jobs != 1), ("--threads", args.threads != 1), ("--arms", args.arms),
                                  ("--data", args.data), ("--graph", args.graph), ("--table-only", args.table_only))
                  if on]
    if local_only:
        raise ValueError(f"{', '.join(local_only)}: not with --prefect, --from-records, --list or --dvc "
                         "(those run the sweep's Prefect flow, `python -m flows sweep`)")
    argv = ["sweep", args.name, "--dataset", args.dataset, "--params", args.params, "--local", args.local]
    argv += [x for flag, v in (("--out", args.out), ("--results", args.results)) if v for x in (flag, v)]
    return argv + [f for f, on in (("--from-records", args.from_records), ("--list", args.list),
                                   ("--dvc", args.dvc)) if on]


def _check_dataset_name(args: argparse.Namespace, params: dict) -> None:
    """Refuse a ``--dataset`` that neither params (``datasets:``) nor the data's ``meta.json`` name: the
    records would carry a name of nothing. Checked before the plan writes anything."""
    from pathlib import Path

    from raptor.common.io import read_json_object
    from raptor.pipeline.stages import stage_output

    declared = next(iter(params.values())).datasets  # every arm has the file's datasets
    if args.dataset in declared:
        return
    meta = Path(args.data or stage_output("ingest", args.dataset)) / "meta.json"
    named = read_json_object(meta, "re-run `raptor ingest`").get("dataset") if meta.is_file() else None
    if named != args.dataset:
        held = (f"holds dataset {named!r}" if meta.is_file() else
                "is not an ingested dataset" if meta.parent.exists() else "does not exist")
        raise ValueError(f"--dataset {args.dataset}: no such dataset in {args.params} (`datasets:` lists "
                         f"{', '.join(declared) or 'none'}), and {meta.parent} {held}")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import sys

    from raptor.pipeline.local_sweep import JobsFailed, LocalOptions, run_plan
    from raptor.pipeline.stages import stage_output
    from raptor.pipeline.sweep import load_sweep, plan_sweep, results_dir, sweep_dir
    from raptor.reporting.sweep_page import declaration_differences, write_results

    if args.prefect or args.from_records or args.list or args.dvc:
        from raptor.commands.stage import import_flows

        return import_flows("flows.__main__").main(_flows_argv(args), prog="raptor")
    if args.jobs < 1 or args.threads < 1:
        raise ValueError(f"--jobs and --threads must be at least 1 (got {args.jobs}, {args.threads})")
    local = args.local if Path(args.local).exists() else None
    sweep, params = load_sweep(args.params, args.name, local)
    if not args.table_only:
        _check_dataset_name(args, params)
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
        run_plan(plan, data, graph, results, arms=arms,
                 options=LocalOptions(jobs=args.jobs, num_threads=args.threads, progress=not args.no_progress))
    except JobsFailed as exc:  # the finished runs are recorded: run the command again to retry the others
        print(f"raptor sweep: error: {exc}\n(finished runs are recorded in {results}; run again to retry the rest)",
              file=sys.stderr)
        return 1
    print((Path(results) / "results.md").read_text())  # names the missing runs, if any
    print(f"sweep {args.name} on {args.dataset} -> {results}")
    return 0
