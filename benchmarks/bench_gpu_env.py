"""Benchmark: RL training with the candidates built on the device (:mod:`raptor.mdp.device_env`) against the
host environment (numpy + numba), at the paper's configuration on ICEWS14 (batch 512, K = 3, 150
actions, 128-dim embeddings). Written for one GPU; runs on CPU too (``--device cpu``).

Records, per precision (float32, bfloat16 autocast) and environment backend (numpy, torch):
seconds per RL epoch (every batch of one epoch timed, after a warm-up) and the mean reward; then:

* ``candidates_equal``: the device environment's candidates against the host's on ICEWS14 training
  queries, every step of random walks (the exactness check of the tests, on the real graph);
* ``profile``: torch.profiler over ``--profile-batches`` batches per backend (float32): wall time, the
  time the device spent in kernels (its busy share), kernel launches and host-device copies per batch,
  and the ten largest kernels;
* ``batch_scaling``: microseconds per query of the torch backend at larger batches;
* ``seeds_at_once``: ``--seeds`` processes on the same device, each timing one RL epoch (torch
  backend, float32): the machine time per epoch when several seeds share one device;
* ``bound``: the epoch's FLOPs (``raptor/agents/flops.py``) over the device's GEMM rate at the model's shapes.

Run: ``python benchmarks/bench_gpu_env.py --raw DIR_OF_ICEWS14_TXT --out results.json``; the docs' table:
``python benchmarks/bench_gpu_env.py --table FILE.json...``
(``DIR`` holds ``train.txt``, ``valid.txt``, ``test.txt``, ``entity2id.txt``, ``relation2id.txt``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_agent import RAW, load_raw  # noqa: E402

from raptor.config import EnvConfig, ModelConfig, RLConfig  # noqa: E402
from raptor.data.dataset import with_inverse_queries  # noqa: E402
from raptor.mdp.device_env import DeviceEnv, on_device  # noqa: E402
from raptor.mdp.env import TemporalEnv  # noqa: E402
from raptor.data.graph import TemporalGraph  # noqa: E402
from raptor.common.io import atomic_write_json  # noqa: E402
from raptor.agents.policy import Policy  # noqa: E402
from raptor.agents.actor_critic.rl import actor_critic_loss, make_optimizer  # noqa: E402
from raptor.agents.rollout import rollout  # noqa: E402
from raptor.common.runtime import autocast  # noqa: E402


def setup(raw: Path):
    splits, E, R = load_raw(raw)
    graph = TemporalGraph.from_quadruples(np.concatenate(list(splits.values())), E, R)
    env = TemporalEnv(graph, EnvConfig())
    queries = with_inverse_queries(splits["train"], R).astype(np.int64)
    return env, queries, E, R


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_batches(env, policy, queries, device, precision, batch_size, n, warmup, seed=0):
    """Time ``n`` batches after ``warmup``; returns (seconds, mean reward, losses of the first 5)."""
    rl = RLConfig(batch_size=batch_size)
    opt = make_optimizer(policy, rl)
    order = np.random.default_rng(seed).permutation(len(queries))
    gen = torch.Generator(device=device).manual_seed(seed)
    n_batches = int(np.ceil(len(queries) / batch_size))

    def step(i):
        j = i % n_batches
        b = queries[order[j * batch_size:(j + 1) * batch_size]]
        with autocast(precision, device):
            ro = rollout(policy, env, b, gen, device)
        loss, parts = actor_critic_loss(ro, rl.gamma, rl.entropy_beta0)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return parts

    seconds, parts = timed_steps(step, warmup, n, device)
    return seconds, float(np.mean([x["reward"] for x in parts])), [x["actor_loss"] for x in parts[:5]]


def timed_steps(step, warmup: int, n: int, device) -> tuple[float, list]:
    """``step(i)`` for ``warmup`` untimed then ``n`` timed steps (the device synchronised around them):
    ``(seconds of the n, their results)``."""
    for i in range(warmup):
        step(i)
    sync(device)
    t = time.perf_counter()
    results = [step(warmup + i) for i in range(n)]
    sync(device)
    return time.perf_counter() - t, results


def check_candidates(env, queries, device, rows, seed=0):
    """Random walks of ``rows`` training queries: the device candidates equal the host's at every step."""
    rng = np.random.default_rng(seed)
    q = queries[rng.choice(len(queries), rows, replace=False)]
    dev = DeviceEnv(env, device)
    hs, ds = env.reset(q), dev.reset(q)
    compared, widths = 0, []
    for _ in range(env.K):
        hc, dc = env.candidates(hs), dev.candidates(ds)
        widths.append(dev.last_widths)
        for name in ("entity", "relation", "time", "mask", "count"):
            if not np.array_equal(getattr(dc, name).cpu().numpy(), getattr(hc, name)):
                return {"equal": False, "step": hs.step, "field": name}
        compared += int(hc.count.sum())
        # walk on a random real action of each row
        u = rng.random(len(q))
        n_valid = hc.mask.sum(1)
        pick = np.minimum((u * n_valid).astype(np.int64), n_valid - 1)
        choice = np.argsort(~hc.mask, axis=1, kind="stable")[np.arange(len(q)), pick]
        hs, ds = env.step(hs, hc, choice), dev.step(ds, dc, torch.from_numpy(choice).to(device))
    return {"equal": True, "queries": rows, "steps": env.K, "edges_compared": compared,
            "scan_and_candidate_width_per_step": widths}


def profile(env, policy, queries, device, batches):
    from torch.profiler import ProfilerActivity, profile as tprofile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    train_batches(env, policy, queries, device, "float32", 512, 2, 0)  # warm
    with tprofile(activities=acts) as prof:
        wall, _, _ = train_batches(env, policy, queries, device, "float32", 512, batches, 0, seed=1)
    return summarize_profile(prof, wall, batches)


def summarize_profile(prof, wall: float, batches: int) -> dict:
    """Device-busy share, launches and host-device copies per batch, and the top kernels of a
    torch.profiler run over ``batches`` batches that took ``wall`` seconds."""
    events = prof.key_averages()
    kernel_us, launches, copies, top = 0.0, 0, 0, []
    for ev in events:
        dev_us = getattr(ev, "self_device_time_total", getattr(ev, "self_cuda_time_total", 0.0))
        name = ev.key
        if "cudaLaunchKernel" in name or "cuLaunchKernel" in name:
            launches += ev.count
        if "Memcpy" in name and ("HtoD" in name or "DtoH" in name):
            copies += ev.count
        if dev_us and ev.device_type is not None and "cuda" in str(ev.device_type).lower():
            kernel_us += dev_us
            top.append((dev_us, name))
    top.sort(reverse=True)
    return {"batches": batches, "wall_s": wall, "kernel_s": kernel_us / 1e6,
            "busy_share": kernel_us / 1e6 / wall if wall else None,
            "launches_per_batch": launches / batches, "host_device_copies_per_batch": copies / batches,
            "top_kernels": [{"name": n[:90], "share": us / kernel_us if kernel_us else None} for us, n in top[:10]]}


def child(args):
    """One seed's epoch in its own process (``--child``): prints its seconds."""
    device = torch.device(args.device)
    env, queries, E, R = setup(Path(args.raw))
    torch.manual_seed(args.child_seed)
    policy = Policy(E, R, ModelConfig(), env.K).to(device)
    denv = on_device(env, device, args.child_backend)
    n = args.batches or int(np.ceil(len(queries) / 512))
    train_batches(denv, policy, queries, device, "float32", 512, 3, 0, seed=args.child_seed)
    print(json.dumps({"start": time.time()}), flush=True)
    sec, reward, _ = train_batches(denv, policy, queries, device, "float32", 512, n, 0, seed=args.child_seed)
    n_epoch = int(np.ceil(len(queries) / 512))
    print(json.dumps({"seconds": sec / n * n_epoch, "end": time.time(), "reward": reward}), flush=True)


def table(paths: list[str]) -> str:
    """The docs' markdown table of one or more result files (``--table``)."""
    rows = ["| file | device | precision | backend | RL epoch (s) | launches / batch | host-device copies / batch "
            "| device busy | 5 seeds at once (s/epoch each; machine s per seed-epoch) |", "|" + "---|" * 9]
    for path in paths:
        d = json.load(open(path))
        for key, r in d.get("rl_epoch", {}).items():
            precision, backend = key.split("/")
            prof = d.get("profile", {}).get(backend, {}) if precision == "float32" else {}
            busy = f"{100 * prof['busy_share']:.0f}%" if prof.get("busy_share") is not None else ""
            seeds = d.get("seeds_at_once" if backend == "torch" else f"seeds_at_once_{backend}")
            s5 = (f"{min(seeds['seconds_per_epoch_each']):.1f}-{max(seeds['seconds_per_epoch_each']):.1f}; "
                  f"{seeds['machine_seconds_per_seed_epoch']:.2f}") if seeds and precision == "float32" else ""
            rows.append(f"| {Path(path).name} | {d['device']} | {precision} | {backend} | {r['seconds_per_epoch']:.2f} "
                        f"| {prof.get('launches_per_batch', ''):} | {prof.get('host_device_copies_per_batch', '')} "
                        f"| {busy} | {s5} |")
        if "rl_epoch" not in d:  # a seeds-at-once measurement alone
            for backend in ("numpy", "torch"):
                seeds = d.get("seeds_at_once" if backend == "torch" else f"seeds_at_once_{backend}")
                if seeds:
                    rows.append(f"| {Path(path).name} | {d['device']} | float32 | {backend} | | | | "
                                f"| {min(seeds['seconds_per_epoch_each']):.1f}-{max(seeds['seconds_per_epoch_each']):.1f}; "
                                f"{seeds['machine_seconds_per_seed_epoch']:.2f} |")
    return "\n".join(rows)


def seeds_at_once(args, backend: str) -> dict:
    """``args.seeds`` processes on the device at once, each timing one RL epoch (its own seed)."""
    cmd = [sys.executable, __file__, "--child", "--raw", args.raw, "--device", args.device,
           "--batches", str(args.batches), "--child-backend", backend]
    t = time.time()
    procs = [subprocess.Popen(cmd + ["--child-seed", str(s)], stdout=subprocess.PIPE, text=True)
             for s in range(args.seeds)]
    results = []
    for p in procs:
        lines = [json.loads(x) for x in p.communicate()[0].splitlines() if x.startswith("{")]
        results.append({k: v for d in lines for k, v in d.items()})
    return {"backend": backend, "processes": args.seeds,
            "seconds_per_epoch_each": [r["seconds"] for r in results],
            "all_timed_epochs_overlapped": max(r["start"] for r in results) < min(r["end"] for r in results),
            "wall_s": time.time() - t,
            "machine_seconds_per_seed_epoch": (max(r["end"] for r in results) - min(r["start"] for r in results))
            / args.seeds}


def main():
    if sys.argv[1:2] == ["--table"]:
        print(table(sys.argv[2:]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", default=str(RAW))
    ap.add_argument("--out", default="benchmarks/results/gpu_env.json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", type=int, default=0, help="batches timed per run (0: one whole epoch)")
    ap.add_argument("--profile-batches", type=int, default=10)
    ap.add_argument("--check-rows", type=int, default=8192)
    ap.add_argument("--seeds", type=int, default=5, help="processes in the seeds-at-once measurement (0: skip)")
    ap.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--scaling", nargs="*", type=int, default=[512, 2048, 8192], help="batch sizes timed")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--child-backend", default="torch", help=argparse.SUPPRESS)
    ap.add_argument("--seeds-backends", nargs="+", default=["torch"], choices=["numpy", "torch"],
                    help="environment backends of the seeds-at-once measurement")
    ap.add_argument("--only-seeds", action="store_true", help="measure the seeds at once only")
    args = ap.parse_args()
    if args.child:
        return child(args)
    device = torch.device(args.device)
    env, queries, E, R = setup(Path(args.raw))
    n_epoch = int(np.ceil(len(queries) / 512))
    n = args.batches or n_epoch
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "train_queries": len(queries), "batches_per_epoch": n_epoch,
           "batches_timed": n}
    if args.only_seeds:
        for backend in args.seeds_backends:
            key = "seeds_at_once" if backend == "torch" else f"seeds_at_once_{backend}"
            out[key] = seeds_at_once(args, backend)
            print(key, json.dumps(out[key]), flush=True)
        atomic_write_json(args.out, out)
        return
    t = time.perf_counter()
    out["candidates_equal"] = check_candidates(env, queries, device, args.check_rows)
    out["candidates_equal"]["seconds"] = time.perf_counter() - t
    print(json.dumps(out, indent=1), flush=True)
    epochs = {}
    for precision in args.precisions:
        for backend in ("numpy", "torch"):
            torch.manual_seed(0)
            policy = Policy(E, R, ModelConfig(), env.K).to(device)
            e = on_device(env, device, backend)
            sec, reward, losses = train_batches(e, policy, queries, device, precision, 512, n, 3)
            epochs[f"{precision}/{backend}"] = {"seconds_per_epoch": sec / n * n_epoch, "ms_per_batch": 1e3 * sec / n,
                                                "mean_reward": reward, "first_losses": losses}
            print(precision, backend, json.dumps(epochs[f"{precision}/{backend}"]), flush=True)
    out["rl_epoch"] = epochs
    out["profile"] = {}
    for backend in ("numpy", "torch"):
        torch.manual_seed(0)
        policy = Policy(E, R, ModelConfig(), env.K).to(device)
        out["profile"][backend] = profile(on_device(env, device, backend), policy, queries, device, args.profile_batches)
        print("profile", backend, json.dumps(out["profile"][backend])[:600], flush=True)
    scaling = {}
    for bs in args.scaling:
        torch.manual_seed(0)
        policy = Policy(E, R, ModelConfig(), env.K).to(device)
        nb = max(4, 16 * 512 // bs)
        sec, _, _ = train_batches(on_device(env, device, "torch"), policy, queries, device, "float32", bs, nb, 2)
        scaling[bs] = {"us_per_query": 1e6 * sec / (nb * bs), "batches": nb}
    out["batch_scaling"] = scaling
    print("scaling", json.dumps(scaling), flush=True)
    for backend in args.seeds_backends if args.seeds else []:
        key = "seeds_at_once" if backend == "torch" else f"seeds_at_once_{backend}"
        out[key] = seeds_at_once(args, backend)
        print(key, json.dumps(out[key]), flush=True)
    try:
        from bench_agent import bound
        out["bound"] = {p: bound({"seconds_per_epoch": epochs[f"{p}/torch"]["seconds_per_epoch"]}, {}, p, E, R,
                                 int(queries[:, -1].max()) + 1, len(queries), device) for p in args.precisions}
    except Exception as exc:  # the bound is a reading aid; never lose the run's numbers over it
        out["bound"] = {"error": repr(exc)}
    atomic_write_json(args.out, out)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
