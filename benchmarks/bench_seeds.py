"""Benchmark (issue 37, item 3): seeds trained at once as one batched step
(:mod:`raptor.agents.actor_critic.seeds`) against one seed alone, at the paper's configuration on
ICEWS14 (batch 512 per seed, K = 3, 150 actions, 128-dim embeddings). Written for one GPU; runs on
the CPU too (``--device cpu``).

Records, per precision and number of seeds ``S`` (``--seeds``, default 1 and 5):

* ``seconds_per_epoch``: the machine time of one RL epoch of all ``S`` seeds together (every batch
  of ``--batches`` timed after a warm-up, scaled to a whole epoch), and per seed;
* for ``S = 1``, the same epoch trained by :func:`raptor.agents.actor_critic.rl.train_epoch`'s step
  (one ``Policy``, not a stack): what stacking one seed costs;
* ``same_as_alone``: one stacked batch of ``max(--seeds)`` seeds against each seed's batch alone on
  the same device: equal episodes (paths, rewards) and the largest gradient difference.

Run: ``python benchmarks/bench_seeds.py --raw DIR_OF_ICEWS14_TXT --out results.json`` (the device
environment is used on CUDA, the host's on the CPU, as ``train.env_backend: auto`` does).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu_env import setup, timed_steps  # noqa: E402
from bench_agent import RAW  # noqa: E402

from raptor.agents.actor_critic import rl as rl_mod  # noqa: E402
from raptor.agents.actor_critic.seeds import SeedUniforms, StackedPolicy  # noqa: E402
from raptor.agents.policy import Policy  # noqa: E402
from raptor.agents.rollout import rollout  # noqa: E402
from raptor.common.io import atomic_write_json  # noqa: E402
from raptor.common.runtime import autocast  # noqa: E402
from raptor.config import ModelConfig, RLConfig  # noqa: E402
from raptor.mdp.device_env import on_device  # noqa: E402


def policies(E, R, K, seeds, device):
    out = []
    for s in seeds:
        torch.manual_seed(s)
        out.append(Policy(E, R, ModelConfig(), K).to(device))
    return out


def time_epoch(env, queries, E, R, S, precision, device, batches, warmup, stacked=True):
    """Seconds of ``batches`` steps of ``S`` seeds (after ``warmup``) and the mean reward."""
    rl = RLConfig()
    bs = rl.batch_size
    pols = policies(E, R, env.K, range(S), device)
    model = StackedPolicy(pols).to(device) if stacked else pols[0]
    opt = rl_mod.make_optimizer(model, rl)
    orders = [np.random.default_rng(s).permutation(len(queries)) for s in range(S)]
    gens = [torch.Generator(device=device).manual_seed(s) for s in range(S)]
    n_batches = len(queries) // bs  # full batches only

    def step(i):
        j = i % n_batches
        rows = np.concatenate([queries[o[j * bs:(j + 1) * bs]] for o in orders])
        with autocast(precision, device):
            if stacked:
                ro = rollout(model, env, rows, device=device, uniforms=SeedUniforms(gens, bs, device))
            else:
                ro = rollout(model, env, rows, gens[0], device)
        loss, parts = rl_mod.grouped_actor_critic_terms(ro, rl.gamma, rl.entropy_beta0, S if stacked else 1)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return parts

    seconds, parts = timed_steps(step, warmup, batches, device)
    return seconds, float(torch.stack([x[:, 3].mean() for x in parts]).mean())


def same_as_alone(env, queries, E, R, S, device):
    """One stacked batch of ``S`` seeds against each seed alone (float32): episodes and gradients."""
    bs = RLConfig().batch_size
    pols = policies(E, R, env.K, range(S), device)
    stack = StackedPolicy(pols).to(device)
    batches = [queries[s * bs:(s + 1) * bs] for s in range(S)]
    gens = [torch.Generator(device=device).manual_seed(100 + s) for s in range(S)]
    ro = rollout(stack, env, np.concatenate(batches), device=device, uniforms=SeedUniforms(gens, bs, device))
    loss, _ = rl_mod.grouped_actor_critic_terms(ro, 0.95, 0.01, S)
    loss.backward()
    out = {"paths_equal": True, "rewards_equal": True, "max_grad_abs_diff": 0.0, "max_grad_abs": 0.0}
    as_np = lambda x: x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    for s, p in enumerate(pols):
        alone = rollout(p, env, batches[s], torch.Generator(device=device).manual_seed(100 + s), device)
        rows = slice(s * bs, (s + 1) * bs)
        out["paths_equal"] &= bool(np.array_equal(as_np(ro.final.path_entity)[rows], as_np(alone.final.path_entity)))
        out["rewards_equal"] &= bool(torch.equal(ro.reward[rows], alone.reward))
        loss1, _ = rl_mod.actor_critic_terms(alone, 0.95, 0.01)
        loss1.backward()
        for g_stack, q in zip(stack.parameters(), p.parameters()):
            out["max_grad_abs_diff"] = max(out["max_grad_abs_diff"], float((g_stack.grad[s] - q.grad).abs().max()))
            out["max_grad_abs"] = max(out["max_grad_abs"], float(q.grad.abs().max()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", default=str(RAW))
    ap.add_argument("--out", default="benchmarks/results/seeds.json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 5], help="numbers of seeds at once")
    ap.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--batches", type=int, default=20, help="batches timed (0: one whole epoch)")
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    device = torch.device(args.device)
    env, queries, E, R = setup(Path(args.raw))
    env = on_device(env, device, "auto")
    n_epoch = len(queries) / RLConfig().batch_size
    n = args.batches or int(n_epoch)
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "threads": torch.get_num_threads(), "train_queries": len(queries),
           "batches_per_epoch": n_epoch, "batches_timed": n, "epochs": {}}
    t = time.perf_counter()
    out["same_as_alone"] = same_as_alone(env, queries, E, R, max(args.seeds), device)
    out["same_as_alone"]["seeds"] = max(args.seeds)
    out["same_as_alone"]["seconds"] = time.perf_counter() - t
    print("same_as_alone", json.dumps(out["same_as_alone"]), flush=True)
    for precision in args.precisions:
        for S in args.seeds:
            for stacked in ([False, True] if S == 1 else [True]):
                sec, reward = time_epoch(env, queries, E, R, S, precision, device, n, args.warmup, stacked)
                key = f"{precision}/{S}" + ("" if stacked else "/policy")
                out["epochs"][key] = {"seeds": S, "stacked": stacked, "seconds_per_epoch": sec / n * n_epoch,
                                      "seconds_per_seed_epoch": sec / n * n_epoch / S, "mean_reward": reward}
                print(key, json.dumps(out["epochs"][key]), flush=True)
                atomic_write_json(args.out, out)
    atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
