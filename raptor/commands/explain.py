"""`raptor explain`: answer one query given in names, with the paths that support each answer."""

from __future__ import annotations

import argparse
import math
from pathlib import Path


NAME = "explain"
#: One line for `raptor --help`.
SHORT = 'answer a query typed in names, with the temporal paths that support each answer'
HELP = ("Answer a query typed in names and a date (subject, relation, date) with a trained model: "
        "the top answers and the temporal paths that support them, in names and dates.")


def register(p: argparse.ArgumentParser) -> None:
    from raptor.agents.variants import PRETRAINED_VARIANT, VARIANTS
    from raptor.commands import add_local_option, non_negative_int, positive_int

    p.add_argument("subject", help='subject entity name, e.g. "Barack Obama" (or an id)')
    p.add_argument("relation", help='relation name, e.g. "Make statement"; prefix "inverse:" for r^-1 (or an id)')
    p.add_argument("date", help="query date YYYY-MM-DD, YYYY-MM-DD HH:MM for hourly or 15-minute data, or a "
                   "time step; only history before it is used")
    p.add_argument("--model", help="trained model (.pt; default: the pipeline's best.pt of --variant and --seed, "
                   "runs/<dataset>/<variant>/train/seed<seed>/best.pt)")
    p.add_argument("--variant", default=PRETRAINED_VARIANT, choices=[v for v in VARIANTS if VARIANTS[v].walks],
                   help="with no --model: whose model (default: %(default)s)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="with no --model: which seed's model (default: %(default)s)")
    p.add_argument("--data", help="ingested dataset folder (default: the pipeline's, data/<dataset>/ingested)")
    p.add_argument("--graph", help="graph file (default: the pipeline's, data/<dataset>/graph.npz)")
    p.add_argument("--params", default="params.yaml", help="params file (default: %(default)s)")
    add_local_option(p)
    p.add_argument("--dataset", help="dataset of params `datasets`: the pipeline's paths and the calendar "
                   "(default: the only one listed, or the data's name)")
    p.add_argument("--top", type=positive_int, default=10, help="answers to show (default: %(default)s)")
    p.add_argument("--paths", type=positive_int, default=2, help="supporting paths per answer (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from raptor.agents.beam import explain
    from raptor.commands import command_params
    from raptor.constants import inverse_relation, stop_relation
    from raptor.runs.context import load_context
    from raptor.runs.rundir import RunDir
    from raptor.data.names import date_to_step, resolve, step_to_date
    from raptor.agents.base import load_model
    from raptor.agents.variants import VARIANTS

    from raptor.constants import seed_dir
    from raptor.pipeline.stages import stage_output

    params, _ = command_params(args)
    default_name = args.dataset or (next(iter(params.datasets)) if len(params.datasets) == 1 else None)
    paths = {}
    for key, stage, what in (("data", "ingest", "the ingested data"), ("graph", "graph", "the graph"),
                             ("model", f"finetune-{args.variant}", "the trained model")):
        given = getattr(args, key)
        if given is None:
            if default_name is None:
                raise ValueError(f"--{key}: give it, or --dataset (params list {len(params.datasets)} datasets)")
            given = stage_output(stage, default_name)
            if key == "model":
                given = str(RunDir(seed_dir(given, args.seed)).best)
            if not Path(given).exists():
                raise FileNotFoundError(f"{what} not found at {given} (the pipeline's path for {default_name}): run the "
                                        f"pipeline first (scripts/run.sh), or give --{key}")
        paths[key] = given
    ctx = load_context(paths["data"], paths["graph"], params)
    ds = ctx.dataset
    R = ds.num_relations
    s = resolve(args.subject, ds.entity_names, "entity")
    inverse = args.relation.lower().startswith("inverse:")
    r = resolve(args.relation.split(":", 1)[1] if inverse else args.relation, ds.relation_names, "relation")
    if inverse:
        r = inverse_relation(r, R)
    # The calendar: --dataset's, else that of the data given with --data (it need not be the dataset
    # params list), else that of the pipeline's dataset whose data this is.
    name = args.dataset or (ds.meta.get("dataset") if args.data else None) or default_name
    # The params entry's calendar, else the one ingest read from dated raw files, else step numbers.
    entry = params.datasets.get(name)
    calendar = ds.meta.get("calendar") or {}
    start_date = (entry.start_date if entry else None) or calendar.get("start_date")
    granularity = (entry.granularity if entry and entry.start_date else None) or calendar.get("granularity") or "day"
    t = date_to_step(args.date, start_date, granularity)
    last = int(max(q[:, 3].max() for q in ds.splits.values()))
    if t <= 0:
        raise ValueError(f"{args.date}: no history before it (the data starts at "
                         f"{step_to_date(0, start_date, granularity)}, step 0)")
    from raptor.evaluation.stats import format_probability

    policy, meta = load_model(paths["model"], ctx=ctx)
    if not meta.get("max_path_length"):
        raise ValueError(f"{paths['model']}: a model of the {meta.get('variant') or meta.get('agent')!r} baseline, "
                         "which ranks without paths: explain needs a model that walks paths "
                         f"({', '.join(v for v in VARIANTS if VARIANTS[v].walks)})")
    policy.eval()
    answers = explain(policy, ctx.env, (s, r, t), params.eval, top_k=args.top, paths_per_entity=args.paths)

    rel_name = ds.relation_label

    rname = rel_name(r)
    print(f"query: ({ds.entity_names[s]}, {rname}, ?, {step_to_date(t, start_date, granularity)})")
    if t > last + 1:
        print(f"note: after the data's last day ({step_to_date(last, start_date, granularity)}): all history is used")
    meaning = ("the probability of the most probable path ending at the entity" if params.eval.score_rule == "max"
               else "the summed probability of the paths ending at the entity")
    print(f"model {paths['model']}; beam {params.eval.beam_size} (eval.beam_size); score: {meaning} "
          f"(eval.score_rule {params.eval.score_rule}); p: that path's probability")
    if not answers:
        print("no answer: the beam reached no entity (no history before this date?)")
        return 0
    if len(answers) < args.top:
        print(f"(the beam reached {len(answers)} entit{'y' if len(answers) == 1 else 'ies'})")
    for i, a in enumerate(answers, 1):
        print(f"{i:>2}. {ds.entity_names[a['entity']]}  (score {math.exp(a['score']):.3f})")
        # A STOP step (staying put) is not shown: paths that differ only in where they waited read the
        # same, so they are one line (the most probable), with how many others it stands for.
        lines: dict[str, list] = {}
        for path in a["paths"]:
            hops = [h for h in path["hops"] if h["relation"] != stop_relation(R)]
            text = " -> ".join(
                f"[{rel_name(h['relation'])} @ {step_to_date(h['time'], start_date, granularity)}] {ds.entity_names[h['to']]}"
                for h in hops
            ) or "(stays at the subject)"
            lines.setdefault(text, [path["log_prob"], 0])[1] += 1
        for text, (log_prob, n) in lines.items():
            also = f"  (and {n - 1} more the same but for where the walk stayed)" if n > 1 else ""
            print(f"      p={format_probability(math.exp(log_prob))}: {ds.entity_names[s]} {text}{also}")
    return 0
