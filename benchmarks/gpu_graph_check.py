"""Issue 37, item 2 on a GPU: the library's RL epoch with ``train.cuda_graph: auto`` (the step replayed
from a CUDA graph, :mod:`raptor.agents.actor_critic.graph_step`) against ``off`` (eager), for one seed
(:func:`raptor.agents.actor_critic.rl.train_epoch`) and ``S`` seeds stacked
(:func:`raptor.agents.actor_critic.seeds.train_epoch`), on ICEWS14 at the paper's configuration.

Per mode and ``S``: seconds of each of ``--epochs`` epochs (the first includes the capture), the epochs'
mean rewards, batches redone exactly (a row overflowed the fixed scan), and after the last epoch the
largest weight difference between the two modes (the same batches and uniforms; the eager step's
candidate tensors are narrower, so sums may round differently, and a GPU's scatter-adds are not
ordered).

Run: ``python benchmarks/gpu_graph_check.py --raw .gpu/ICEWS14 --out $OUT/graph_check.json`` (about a
minute on one H200; ``--device cpu --epochs 2 --train-queries 2000 --force-step`` is a CPU try of the
script). ``--pretrain-seeds 1 5``: pretraining epochs too (the labels of the training pairs first).
``python benchmarks/gpu_graph_check.py --table FILE``: the docs' table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu_env import setup, summarize_profile, sync  # noqa: E402

from raptor.agents.actor_critic import rl as rl_mod  # noqa: E402
from raptor.agents.actor_critic import seeds as seeds_mod  # noqa: E402
from raptor.agents.actor_critic.graph_step import GraphStep, graph_step, rl_forward  # noqa: E402
from raptor.agents.actor_critic.stack import StackedPolicy  # noqa: E402
from raptor.agents.policy import Policy  # noqa: E402
from raptor.common.io import atomic_write_json  # noqa: E402
from raptor.common.runtime import deterministic_algorithms  # noqa: E402
from raptor.config import ModelConfig, RLConfig  # noqa: E402
from raptor.mdp.device_env import on_device  # noqa: E402
from raptor.runs.rundir import RunOptions  # noqa: E402


def run_mode(env, queries, E, R, S, mode, args, device, profiler=None):
    """``args.epochs`` epochs of ``S`` seeds in ``mode``; ``profiler``: a torch.profiler that runs over
    the last epoch only (the first captures the graph)."""
    rl = RLConfig()
    pols = []
    for s in range(S):
        torch.manual_seed(s)
        pols.append(Policy(E, R, ModelConfig(), env.K).to(device))
    model = pols[0] if S == 1 else StackedPolicy(pols).to(device)
    opt = rl_mod.make_optimizer(model, rl)
    runs = [RunOptions(seed=s, device=device, precision=args.precision, progress=False, cuda_graph=mode,
                       env_backend="torch") for s in range(S)]
    env_dev = on_device(env, device, "torch")
    if S == 1:
        terms = lambda ro, beta: rl_mod.actor_critic_terms(ro, rl.gamma, beta)  # noqa: E731
    else:
        terms = lambda ro, beta: rl_mod.grouped_actor_critic_terms(ro, rl.gamma, beta, S)  # noqa: E731
    forward = rl_forward(model, terms, args.precision, device)
    if args.compile and mode == "auto":  # issue 37, item 2's other option: Inductor's fused kernels in the graph
        compiled, plain = torch.compile(forward, dynamic=False), forward

        def forward(env_, queries, uniforms, beta):  # the fixed-shape step compiled; a redone batch as it is
            return (compiled if getattr(env_, "scan_pad", None) is not None else plain)(env_, queries, uniforms, beta)
    step = graph_step(model, env_dev, env, S * rl.batch_size, forward, runs[0])
    if args.force_step and mode == "auto" and not isinstance(step, GraphStep):  # a CPU try of the step's path
        from raptor.mdp.device_env import DeviceEnv
        step = GraphStep(model, DeviceEnv(env, device, scan_pad=256), env_dev, S * rl.batch_size, forward,
                         capture=False)
    seconds, rewards = [], []
    for epoch in range(args.epochs):
        if profiler is not None and epoch == args.epochs - 1:
            profiler.start()
        sync(device)
        t = time.perf_counter()
        if S == 1:
            row = rl_mod.train_epoch(model, opt, step, queries, epoch, rl, runs[0])
            rewards.append(row["reward"])
        else:
            rows = seeds_mod.train_epoch(model, opt, step, queries, epoch, rl, runs)
            rewards.append(float(np.mean([r["reward"] for r in rows])))
        sync(device)
        seconds.append(time.perf_counter() - t)
        if profiler is not None and epoch == args.epochs - 1:
            profiler.stop()
        print(f"S={S} {mode} epoch {epoch}: {seconds[-1]:.2f} s, reward {rewards[-1]:.4f}", flush=True)
    out = {"seconds_per_epoch": seconds, "mean_reward": rewards, "graph": isinstance(step, GraphStep),
           "batches_redone_exactly": getattr(step, "redone", None)}
    return out, [p.detach().float().cpu() for p in model.parameters()]


def profile_step(env, queries, E, R, S, args, device) -> dict:
    """torch.profiler over an epoch of ``args.profile_batches`` replayed batches of ``S`` stacked seeds
    (after a warm-up epoch of as many batches that captures the graph): what bounds the replayed step."""
    from torch.profiler import ProfilerActivity, profile as tprofile

    part = queries[:args.profile_batches * RLConfig().batch_size]
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    prof = tprofile(activities=acts)
    res, _ = run_mode(env, part, E, R, S, "auto", argparse.Namespace(**{**vars(args), "epochs": 2}), device, prof)
    return {"seeds": S, **summarize_profile(prof, res["seconds_per_epoch"][-1], args.profile_batches)}


def pretrain_case(env, queries, E, R, table, S, args, device) -> dict:
    """``args.epochs`` pretraining epochs of ``S`` seeds (alone when ``S = 1``, else stacked) through the
    library (:func:`raptor.agents.actor_critic.pretrain.pretrain` / ``pretrain_seeds``), replayed and
    eager: seconds per epoch from each history, the mean BCE, and the largest weight difference."""
    from raptor.agents.actor_critic.pretrain import pretrain
    from raptor.agents.actor_critic.pretrain_seeds import pretrain_seeds
    from raptor.config import PretrainConfig

    case, weights = {}, {}
    for mode in ("auto", "off"):
        pols = []
        for s in range(S):
            torch.manual_seed(s)
            pols.append(Policy(E, R, ModelConfig(), env.K).to(device))
        runs = [RunOptions(seed=s, epochs=args.epochs, device=device, precision=args.precision, progress=False,
                           resume=False, cuda_graph=mode, env_backend="torch") for s in range(S)]
        if S == 1:
            histories = [pretrain(pols[0], env, table, queries, PretrainConfig(), runs[0])]
        else:
            histories = pretrain_seeds(pols, env, table, queries, PretrainConfig(), runs)
        case[mode] = {"seconds_per_epoch": [row["seconds"] for row in histories[0]],
                      "bce": [float(np.mean([h[e]["bce"] for h in histories])) for e in range(args.epochs)]}
        weights[mode] = [p.detach().float().cpu() for pol in pols for p in pol.parameters()]
        print(f"pretrain S={S} {mode}: {case[mode]}", flush=True)
    case["max_weight_diff"] = max(float((a - b).abs().max()) for a, b in zip(weights["auto"], weights["off"]))
    return case


def table(path: str) -> str:
    """The docs' table of a result file: per ``S``, seconds per epoch after the first, both modes."""
    import json

    d = json.loads(Path(path).read_text())
    det = "deterministic kernels" if d.get("deterministic") else "non-deterministic kernels"
    rows = [f"Device: {d['device']}, PyTorch {d['torch']}, {d['precision']}, {det}, {d['train_queries']:,} training "
            "queries (both directions), batch 512 per seed; epochs after the first (which captures the graph).", "",
            "| seeds at once | replayed (s/epoch) | eager (s/epoch) | speed-up | replayed, per seed-epoch (s) "
            "| batches redone exactly | mean reward, last epoch (replayed / eager) |", "|---|---|---|---|---|---|---|"]
    for S, c in sorted(d["cases"].items(), key=lambda kv: int(kv[0])):
        a, o = c["auto"], c["off"]
        ta, to = np.mean(a["seconds_per_epoch"][1:]), np.mean(o["seconds_per_epoch"][1:])
        rows.append(f"| {S} | {ta:.2f} | {to:.2f} | {to / ta:.2f}x | {ta / int(S):.2f} | {a['batches_redone_exactly']} "
                    f"| {a['mean_reward'][-1]:.4f} / {o['mean_reward'][-1]:.4f} |")
    for S, prof in sorted(d.get("profile", {}).items(), key=lambda kv: int(kv[0])):
        if prof.get("busy_share") is None:
            continue
        top = "; ".join(f"{k['name'][:60]} {100 * k['share']:.0f}%" for k in prof["top_kernels"][:4] if k["share"])
        rows += ["", f"Profile of {prof['batches']} replayed batches of {S} seed(s): the device busy "
                 f"{100 * prof['busy_share']:.0f}% of the wall time, {prof['launches_per_batch']:.0f} launches and "
                 f"{prof['host_device_copies_per_batch']:.0f} host-device copies per batch; top kernels: {top or 'none'}."]
    if d.get("pretrain"):
        rows += ["", "| pretraining, seeds at once | replayed (s/epoch) | eager (s/epoch) | speed-up | largest weight "
                 "difference |", "|---|---|---|---|---|"]
        for S, c in sorted(d["pretrain"].items(), key=lambda kv: int(kv[0])):
            ta = np.mean(c["auto"]["seconds_per_epoch"][1:] or [np.nan])
            to = np.mean(c["off"]["seconds_per_epoch"][1:] or [np.nan])
            rows.append(f"| {S} | {ta:.2f} | {to:.2f} | {to / ta:.2f}x | {c['max_weight_diff']:.3g} |")
    return "\n".join(rows)


def main():
    if sys.argv[1:2] == ["--table"]:
        print(table(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", default="/tmp/graph_check.json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 5], help="seeds at once (one value per case)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--train-queries", type=int, default=0, help="(a try) the first N training queries only")
    ap.add_argument("--force-step", action="store_true", help="(a CPU try) the uncaptured step for auto")
    ap.add_argument("--profile-seeds", type=int, nargs="*", default=[], help="then profile the replayed step of "
                    "these many seeds at once (one profile each)")
    ap.add_argument("--profile-batches", type=int, default=20)
    ap.add_argument("--deterministic", action="store_true", help="deterministic kernels (train.deterministic)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the replayed step's forward (and so its "
                    "backward) before capturing it")
    ap.add_argument("--pretrain-seeds", type=int, nargs="*", default=[], help="then pretraining epochs of these "
                    "many seeds at once, replayed and eager (labels of the training pairs computed first)")
    args = ap.parse_args()
    deterministic_algorithms(args.deterministic)  # before the first CUDA product (cuBLAS's workspace)
    device = torch.device(args.device)
    env, queries, E, R = setup(Path(args.raw))
    if args.train_queries:
        queries = queries[:args.train_queries]
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "precision": args.precision, "train_queries": len(queries),
           "deterministic": args.deterministic, "compile": args.compile, "cases": {}}
    for S in args.seeds:
        case = {}
        weights = {}
        # compiled: the eager case first, so that the CPU scorer's numba kernels are compiled before Dynamo meets them
        # (it breaks the graph at a compiled kernel, but fails tracing into numba's dispatcher at a kernel's first call)
        for mode in (("off", "auto") if args.compile else ("auto", "off")):
            case[mode], weights[mode] = run_mode(env, queries, E, R, S, mode, args, device)
            out["cases"][str(S)] = case
            atomic_write_json(args.out, out)
        diffs = [float((a - b).abs().max()) for a, b in zip(weights["auto"], weights["off"])]
        scale = max(float(b.abs().max()) for b in weights["off"])
        case["max_weight_diff"] = max(diffs)
        case["max_weight_abs"] = scale
        case["speedup_after_first_epoch"] = (float(np.mean(case["off"]["seconds_per_epoch"][1:] or [np.nan]))
                                             / float(np.mean(case["auto"]["seconds_per_epoch"][1:] or [np.nan])))
        print(f"S={S}: max weight diff {max(diffs):.3g} (max |w| {scale:.3g}); "
              f"speed-up {case['speedup_after_first_epoch']:.2f}x", flush=True)
        atomic_write_json(args.out, out)
    if args.pretrain_seeds:
        from bench_agent import load_raw

        from raptor.config import LabelingConfig
        from raptor.labeling.compute import compute_labels, label_pairs

        t = time.perf_counter()
        splits, _, _ = load_raw(Path(args.raw))
        targets, times = label_pairs(splits["train"])
        labels = compute_labels(env.graph, targets, times, max_path_length=env.K, config=LabelingConfig())
        out["labels_seconds"] = time.perf_counter() - t
        for S in args.pretrain_seeds:
            out.setdefault("pretrain", {})[str(S)] = pretrain_case(env, queries, E, R, labels, S, args, device)
            atomic_write_json(args.out, out)
    for S in args.profile_seeds:  # includes the build, the warm-up epoch's capture is outside it
        out.setdefault("profile", {})[str(S)] = profile_step(env, queries, E, R, S, args, device)
        print("profile", S, out["profile"][str(S)], flush=True)
        atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
