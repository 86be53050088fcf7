"""`raptor collect`: copy what the results page reads of a result folder into a small one, for git."""

from __future__ import annotations

import argparse

NAME = "collect"
#: One line for `raptor --help`.
SHORT = 'copy what `raptor results` reads of a result folder into a small one, for git'
HELP = ("copy what `raptor results` reads of a result folder (a pipeline workspace or a folder of "
        "`raptor train --out` runs) into a small folder of the same layout: histories, fingerprints, summaries "
        "(the ablation's arms too), test metrics, per-query ranks, significance, stage usage, and a COMMIT file naming the commit that trained them; no "
        "checkpoints, no predictions. Keep it under version control (results/ here) so the page can be made "
        "again from a clone.")


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="the result folder (e.g. a clone where `scripts/run.sh` ran)")
    p.add_argument("dest", help="the folder to copy into (e.g. results/quick-ICEWS14)")
    p.add_argument("--dataset", action="append", metavar="DS",
                   help="only this dataset's runs (repeat for more; default: every dataset in the source): a "
                        "folder of long runs holds all of them, and each campaign keeps its own records folder")
    p.add_argument("--unfinished", action="store_true",
                   help="also copy runs not yet tested (still training, or not evaluated); by default they "
                        "are left out and named, since a partial record keeps the same seed, finished in a "
                        "later sitting's folder, from pooling with this one")
    p.add_argument("--sweep", metavar="NAME",
                   help="collect the runs of sweep NAME's arms trained as long runs (`scripts/longrun.sh start "
                        "VARIANT:SEED:NAME/ARM`): SOURCE is the long-runs folder's runs/ (e.g. .longruns/runs), DEST "
                        "the sweep's results folder (results/sweeps/NAME/DS), in the layout `raptor sweep` writes, "
                        "with its tables; needs --params and one --dataset")
    p.add_argument("--params", help="with --sweep: the params file the arms' runs were written from (the long-runs "
                        "folder's params.yaml, or its params-DS.yaml where the dataset has one)")


def run(args: argparse.Namespace) -> int:
    from raptor.reporting.results import collect

    if args.sweep or args.params:
        if not (args.sweep and args.params and args.dataset and len(args.dataset) == 1) or args.unfinished:
            raise ValueError("--sweep NAME needs --params FILE and one --dataset DS (and takes no --unfinished: an "
                             "arm's run is recorded once tested)")
        from raptor.pipeline.local_sweep import collect_arm_runs

        out = collect_arm_runs(args.source, args.params, args.sweep, args.dataset[0], args.dest)
        print(f"sweep {args.sweep} on {args.dataset[0]}: {len(out['saved'])} run(s) recorded in {out['results']}"
              + (f": {', '.join(out['saved'])}" if out["saved"] else ""))
        if out["unfinished"]:
            print(f"not yet tested (an evaluation-only arm's: not yet re-scored, `raptor rescore --sweep "
                  f"{args.sweep}`), left out: {', '.join(out['unfinished'])}")
        if out["undeclared"]:
            print(f"not runs of the sweep as declared (its variants and seeds), left out: {', '.join(out['undeclared'])}")
        return 0
    out = collect(args.source, args.dest, unfinished=args.unfinished, datasets=args.dataset)
    for dataset, vs in out["sets"]:
        print(f"{dataset}: {', '.join(vs)}")
    if out["skipped"]:
        print(f"left out, not yet tested (--unfinished copies them): {', '.join(out['skipped'])}")
    print(f"{len(out['files'])} files -> {out['dest']}" + (f" (commit {out['commit'][:12]})" if out["commit"] else ""))
    return 0
