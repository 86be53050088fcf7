"""`raptor train`: train one variant for one seed (Pure-RL, or RAPTOR pretraining then RL)."""

from __future__ import annotations

import argparse
import json
import time

NAME = "train"
#: One line for `raptor --help`.
SHORT = 'one seed of a variant on given paths, pretraining then RL (the stages: pretrain, finetune)'
HELP = (
    "Train one seed of a variant on an ingested dataset (--data) and its graph (--graph): pure_rl "
    "(actor-critic from scratch), raptor (reachability pretraining from --labels into OUT/pretrain, then "
    "actor-critic RL), titer (TITer's agent and REINFORCE) or recurrency (the training-free baseline, fitted on "
    "the validation split), into OUT/rl: checkpoint.pt, best.pt = best validation MRR, final.pt, "
    "history.json/csv, summary.json. Resumes from --out when its checkpoints were written by the same "
    "configuration, data and code. Params: --params with the params.local.yaml beside it (--local), then "
    "--profile, --epochs, --pretrain-epochs."
)


def register(p: argparse.ArgumentParser) -> None:
    from raptor.agents.variants import VARIANTS
    from raptor.commands import add_local_option, non_negative_int

    p.add_argument("--data", required=True, help="ingested dataset folder (output of `raptor ingest`)")
    p.add_argument("--graph", required=True, help="graph file (output of `raptor graph`)")
    p.add_argument("--out", required=True, help="output folder for checkpoints, models and history")
    p.add_argument("--variant", default=next(iter(VARIANTS)), choices=list(VARIANTS), help="(default: %(default)s)")
    p.add_argument("--labels", help="label tables (output of `raptor label`); needed by pretrained variants")
    p.add_argument("--seed", type=non_negative_int, default=0, help="random seed (initialisation, shuffling, sampling; default: %(default)s)")
    p.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    add_local_option(p)
    p.add_argument("--profile", help="apply this profile of params.yaml (e.g. quick)")
    p.add_argument("--epochs", type=int, default=None, help="override rl.epochs")
    p.add_argument("--pretrain-epochs", type=int, default=None, help="override pretrain.epochs")
    p.add_argument("--fresh", action="store_true", help="ignore a checkpoint in --out (default: resume from it)")
    p.add_argument("--resume-only", action="store_true",
                   help="fail instead of deleting checkpoints in --out that were written by another configuration, "
                        "data or code (long runs: an edit must not throw hours away)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--dry-run", action="store_true",
                   help="train nothing, write nothing: say what the run would read and, per phase, whether it "
                        "would start, continue or start afresh in --out (and why), then exit")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from raptor.agents.variants import get
    from raptor.commands import command_params
    from raptor.pipeline.experiment import load_context, run_variant
    from raptor.runs.rundir import RunOptions

    overrides = {}
    if args.profile:
        overrides["profile"] = args.profile
    if args.epochs is not None:
        overrides["rl.epochs"] = args.epochs
    if args.pretrain_epochs is not None:
        overrides["pretrain.epochs"] = args.pretrain_epochs
    params, source = command_params(args, overrides)
    ctx = load_context(args.data, args.graph, params)
    out = Path(args.out)
    init, n_pre, pre_seconds = None, 0, 0.0
    pretrains = get(args.variant).pretrained and params.pretrain.epochs > 0
    print(_start_line(args, params, source, pretrains), flush=True)
    if args.dry_run:
        print("\n".join(_dry_run(args, ctx, pretrains)))
        return 0
    done_before = _progress(args.variant, out / "rl")[0] if not args.fresh else 0
    if pretrains:
        from raptor.agents.actor_critic.pretrain import pretrain_run

        if not args.labels:
            raise ValueError(f"variant {args.variant!r} pretrains on the reachability labels: give --labels")
        n_pre = params.pretrain.epochs
        started = time.perf_counter()
        init = pretrain_run(ctx, args.labels, [n_pre], RunOptions(
            seed=args.seed, out_dir=out / "pretrain", resume=not args.fresh, progress=not args.no_progress,
            resume_only=args.resume_only))[n_pre]
        pre_seconds = time.perf_counter() - started
    s = run_variant(ctx, args.variant, RunOptions(seed=args.seed, out_dir=out / "rl", resume=not args.fresh,
                                                  progress=not args.no_progress, resume_only=args.resume_only),
                    init_model=init, pretrain_epochs=n_pre)
    print(_end_line(args, s, pre_seconds, done_before))
    print(json.dumps(s, default=str))
    return 0


def _start_line(args: argparse.Namespace, params, source: str, pretrains: bool) -> str:
    """What a run reads and runs, before it starts: params, budget, device and precision, output."""
    from raptor.agents.variants import get
    from raptor.common.runtime import resolve_device
    from raptor.pipeline.experiment import effective_epochs, variant_precision

    n_rl = effective_epochs(params, args.variant, params.pretrain.epochs if pretrains else 0)
    budget = ((f"{params.pretrain.epochs} pretraining + " if pretrains else "") + f"{n_rl} RL epoch"
              + ("s" if n_rl != 1 else ""))
    if not get(args.variant).trained:
        budget = "no training (fitted on the validation split)"
    device = resolve_device(params.train.device)
    return (f"train {args.variant} seed {args.seed}: params {source}; {budget}; {device.type}, "
            f"{variant_precision(params, args.variant, device)} -> {args.out}")


def _dry_run(args: argparse.Namespace, ctx, pretrains: bool) -> list[str]:
    """Per phase (pretraining, RL), what a run with these arguments would do in its folder under --out:
    start, continue after epoch k, nothing (trained), or start afresh / refuse (--resume-only), and why,
    from the checks the run makes (the folder's fingerprint, its checkpoint) but the label table's fit."""
    from pathlib import Path

    from raptor.agents.variants import get
    from raptor.pipeline.experiment import effective_epochs, rl_verdict
    from raptor.runs.rundir import RunDir, RunOptions

    out, lines, init, n_pre = Path(args.out), [], None, 0
    if pretrains:
        from raptor.agents.actor_critic.pretrain import pretrain_verdict

        if not args.labels:
            raise ValueError(f"variant {args.variant!r} pretrains on the reachability labels: give --labels")
        n_pre = ctx.params.pretrain.epochs
        run = RunOptions(seed=args.seed, out_dir=out / "pretrain", resume=not args.fresh)
        why = pretrain_verdict(ctx, args.labels, [n_pre], run)
        lines.append(_phase_line(args, "pretraining", run.out_dir, n_pre, why))
        init = RunDir(run.out_dir).snapshot(n_pre)
        if why is not None and args.resume_only:
            return lines + [f"RL in {out / 'rl'}: not reached (pretraining would refuse)"]
        if why is not None or not init.is_file():
            return lines + [f"RL in {out / 'rl'}: decided once pretraining has written {init.name} (its weights "
                            "are the RL run's input)"]
    run = RunOptions(seed=args.seed, out_dir=out / "rl", resume=not args.fresh)
    why = rl_verdict(ctx, args.variant, run, init, n_pre)
    if not get(args.variant).trained:
        return [f"fit in {run.out_dir}: " + ("would fit on the validation split" if why is None else
                                             f"would delete what is there and fit again: {why}")]
    return lines + [_phase_line(args, "RL", run.out_dir, effective_epochs(ctx.params, args.variant, n_pre), why)]


def _phase_line(args: argparse.Namespace, phase: str, folder, epochs: int, why) -> str:
    """One phase's line of ``--dry-run`` (``why``: the folder's reason against continuing, or ``None``),
    counting the epochs its checkpoint holds, as the run does."""
    done, stopped = _progress(args.variant, folder, phase)
    head = f"{phase} in {folder}: "
    there = f"{done} epochs" if done else "files"
    if why is not None and args.resume_only:
        return f"{head}would refuse to start afresh (--resume-only; {there} there): {why}"
    if why is not None:
        return f"{head}would start afresh, deleting what is there ({there}): {why}"
    if done == 0:
        return f"{head}would start ({epochs} epochs)"
    if stopped:
        return f"{head}already trained (stopped early after {done} of {epochs} epochs): nothing to do"
    if done >= epochs:
        return f"{head}already trained ({done} of {epochs} epochs): nothing to do"
    return f"{head}would continue after epoch {done} of {epochs}"


def _progress(variant: str, folder, phase: str = "RL") -> tuple[int, bool]:
    """:func:`raptor.runs.loop.checkpoint_progress` of ``variant``'s ``phase`` (``RL`` or ``pretraining``)
    checkpoint in ``folder``: the epochs it holds and whether its run stopped early."""
    from raptor.agents import get_agent
    from raptor.agents.variants import get
    from raptor.runs.loop import checkpoint_progress

    if phase == "pretraining":
        from raptor.agents.actor_critic.pretrain import PRETRAIN_CHECKPOINT_FORMAT as fmt
    elif not get(variant).trained:
        return 0, False
    else:
        fmt = get_agent(get(variant).agent).checkpoint_format
    return checkpoint_progress(folder, fmt, f"{phase} checkpoint")


def _end_line(args: argparse.Namespace, s: dict, pre_seconds: float, done_before: int) -> str:
    """The run's outcome: epochs, time (pretraining and RL), best validation MRR, and whether the folder's
    run was continued or already complete (``done_before``: RL epochs its checkpoint held before)."""
    from raptor.agents.variants import get

    head = f"train {args.variant} seed {args.seed}: "
    if not get(args.variant).trained:
        return f"{head}fitted in {s['seconds']:.1f} s, validation MRR {s['best_val_mrr']:.4f} -> {args.out}"
    # best_epoch counts from 0 in summary.json; people (and the stage logs) count epochs from 1
    best = f"{s['best_val_mrr']:.4f} after RL epoch {s['best_epoch'] + 1}" if s["best_val_mrr"] is not None else "n/a"
    took = f"RL {s['seconds']:.1f} s" + (f", pretraining {pre_seconds:.1f} s" if s["pretrain_epochs"] else "")
    how = ""
    if not s["restarted"] and done_before >= s["epochs_trained"] > 0:
        how = " (already trained: nothing to do)"
    elif not s["restarted"] and 0 < done_before:
        how = f" (continued after RL epoch {done_before})"
    return (f"{head}{s['pretrain_epochs']} pretraining + {s['rl_epochs']} RL epochs ({took}){how}, best validation "
            f"MRR {best} -> {args.out}")
