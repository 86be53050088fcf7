"""Does ``torch.compile`` (Inductor's CPU backend) speed up the eager parts of a CPU training batch?

The profile of a float32 batch (docs/agent.md, "Where a training batch's time goes") leaves 11% to
elementwise work and 13% to dispatch, mostly the LSTM gates and the MLP heads' epilogues: what Inductor
fuses. The whole step cannot be compiled on the CPU as it is (Dynamo cannot trace the numba kernels of
the fused scorer), so this times the two pieces it could take, each forward and backward at the paper's
shapes (batch 512, ``d_a = d_h = 256``, MLP 256, three steps), eager against compiled, on one thread,
alternating ``--reps`` times:

* the library's :meth:`raptor.agents.policy.Policy.lstm_cell` over three steps;
* the actor and critic heads (:meth:`~raptor.agents.policy.Policy.actor`, :meth:`~raptor.agents.policy.Policy.critic`)
  on ``u`` of the model's width, three steps.

Run: ``python benchmarks/bench_compile_cpu.py --out benchmarks/results/compile_cpu.json`` (about 2 minutes).
Writes milliseconds per three-step forward + backward, median over ``--iters`` timings per rep.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from raptor.agents.policy import Policy
from raptor.common.io import atomic_write_json
from raptor.config import ModelConfig


def _time(fn, iters: int) -> float:
    for _ in range(3):  # warm-up (and the compile, on a compiled function's first call)
        fn()
    out = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/compile_cpu.json")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--batch", type=int, default=512)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = ModelConfig()
    policy = Policy(7128, 460, cfg)  # ICEWS14's entity and relation counts (inverses included)
    B, steps = args.batch, 3
    d_x = cfg.entity_dim + cfg.relation_dim
    d_h = policy.lstm_weight_hh.shape[1]
    d_u = policy.actor_mlp[0].in_features  # BlockLinear over u = [q; h; k]
    xs = [torch.randn(B, d_x, requires_grad=True) for _ in range(steps)]
    us = [torch.randn(B, d_u, requires_grad=True) for _ in range(steps)]

    def lstm(cell):
        def run():
            h, c = torch.zeros(B, d_h), torch.zeros(B, d_h)
            total = 0.0
            for x in xs:
                h, c = cell(x, (h, c))
                total = total + h.sum()
            (total + c.sum()).backward()
        return run

    def heads(actor, critic):
        def run():
            total = 0.0
            for u in us:
                total = total + actor(u).sum() + critic(u).sum()
            total.backward()
        return run

    cases = {
        "lstm_cell": (lstm(policy.lstm_cell), lstm(torch.compile(policy.lstm_cell, dynamic=False))),
        "actor_critic_heads": (heads(policy.actor, policy.critic),
                               heads(torch.compile(policy.actor, dynamic=False),
                                     torch.compile(policy.critic, dynamic=False))),
    }
    result = {"torch": torch.__version__, "machine": platform.processor() or platform.machine(),
              "load_average_start": os.getloadavg(), "batch": B, "steps": steps, "threads": 1,
              "d_x": d_x, "d_h": d_h, "d_u": d_u, "cases": {}}
    for name, (eager, compiled) in cases.items():
        rows = []
        for rep in range(args.reps):
            e, c = _time(eager, args.iters), _time(compiled, args.iters)
            rows.append({"eager_ms": round(e, 3), "compiled_ms": round(c, 3)})
            print(f"{name} rep {rep}: eager {e:.2f} ms, compiled {c:.2f} ms ({e / c:.2f}x)", flush=True)
        result["cases"][name] = {"reps": rows,
                                 "speedup_median": round(statistics.median(r["eager_ms"] / r["compiled_ms"]
                                                                           for r in rows), 3)}
    result["load_average_end"] = os.getloadavg()
    atomic_write_json(args.out, result)
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
