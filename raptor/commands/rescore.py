"""`raptor rescore`: evaluate finished runs' best models again under other evaluation params."""

from __future__ import annotations

import argparse

NAME = "rescore"
#: One line for `raptor --help`.
SHORT = "evaluate finished runs' best models again under other evaluation params (an evaluation-only reading)"
HELP = ("Evaluate again, on the test split, the best-validation model (best.pt) of every tested run in a "
        "dataset's folder of long runs (<variant>/seed<S>/, as scripts/longrun.sh lays them out) or in a pipeline "
        "workspace's runs/<dataset>/ (<variant>/train/seed<S>/ and <variant>/eval/seed<S>/), with the "
        "runs' own params and the --set overrides: an evaluation-only reading, measured on the same checkpoints "
        "without training again. Each goes to seed<S>/rescore/<reading>/ (in a workspace to "
        "<variant>/rescore/seed<S>/<reading>/, beside the stages' DVC outputs; metrics.json, predictions.parquet, "
        "reading.json); `raptor collect` keeps it and `raptor results` sets it beside the default evaluation. "
        "A reading already scored for the same model is kept. --valid scores the validation split too "
        "(into rescore/<reading>/valid/). --sweep NAME re-scores, instead, the tested runs of sweep NAME's default "
        "arm (under <runs>/sweeps/NAME/default/) under each of its evaluation-only arms (an arm whose params differ "
        "from the default's in eval.beam_size, eval.score_rule or eval.rank_last_expansions alone), on both "
        "splits, with --params the folder's params file: `raptor collect --sweep NAME` records them as that arm's "
        "runs (docs/sweeps.md). "
        "Examples: raptor rescore .longruns/runs/ICEWS14 --data .longruns/data/ICEWS14/ingested "
        "--graph .longruns/data/ICEWS14/graph.npz --params .longruns/params.yaml --set eval.rank_last_expansions=true; "
        "after `scripts/run.sh`: raptor rescore runs/ICEWS14 --data data/ICEWS14/ingested --graph data/ICEWS14/graph.npz "
        "--params build/params.json --set eval.rank_last_expansions=true")


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", help="one dataset's folder of long runs (e.g. .longruns/runs/ICEWS14) or a pipeline "
                                "workspace's (runs/ICEWS14)")
    p.add_argument("--data", required=True, help="the ingested dataset folder the runs trained on")
    p.add_argument("--graph", required=True, help="the graph file the runs trained on")
    p.add_argument("--params", required=True, help="the params file the runs trained with (e.g. .longruns/params.yaml; "
                                                   "a workspace's resolved build/params.json)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="an evaluation param of the reading (repeatable; required without --sweep): eval.beam_size, "
                        "eval.score_rule or eval.rank_last_expansions")
    p.add_argument("--valid", action="store_true", help="score the validation split too (rescore/<reading>/valid/)")
    p.add_argument("--sweep", metavar="NAME", help="re-score sweep NAME's default arm's runs under each of its "
                                                   "evaluation-only arms (both splits; no --set)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the params' train.num_threads)")


def run(args: argparse.Namespace) -> int:
    from raptor.config import ConfigError
    from raptor.pipeline.rescore import SPLITS, parse_overrides, rescore_runs, rescore_sweep

    if args.sweep:
        if args.overrides:
            raise ConfigError("--sweep takes no --set: the readings are the sweep's evaluation-only arms")
        done = rescore_sweep(args.runs, args.data, args.graph, args.params, args.sweep, num_threads=args.threads)
    else:
        done = rescore_runs(args.runs, args.data, args.graph, args.params, parse_overrides(args.overrides),
                            num_threads=args.threads, splits=SPLITS if args.valid else ("test",))
    for r in done:
        arm = f"arm {r['arm']}: " if "arm" in r else ""
        if "metrics" not in r:
            print(f"{arm}{r['run']}: {r['status']}")
            continue
        m = r["metrics"]
        print(f"{arm}{r['run']}: {r['status']} {r['reading']} ({r['split']}): MRR {m['mrr']:.4f}  "
              f"Hits@1 {m['hits@1']:.4f}  Hits@3 {m['hits@3']:.4f}  Hits@10 {m['hits@10']:.4f}")
    if not done:
        print(f"{args.runs}: no run to re-score")
    return 0
