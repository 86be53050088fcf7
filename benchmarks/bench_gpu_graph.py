"""Prototype for the next GPU session (issue 37, item 2): one RL training step captured as a CUDA graph.

NOT YET RUN ON A GPU: written on 2026-11-26 after that session's device time was spent; its eager mode
(``--eager``, the same step uncaptured) runs on the CPU. Nothing in ``raptor/`` depends on it.

The step that a graph can hold, because it has fixed shapes and reads nothing back: the fixed-shape
device environment (``DeviceEnv(scan_pad=...)``), uniforms drawn before the step (``rollout(...,
uniforms=...)``), the loss with its logged parts as a tensor (``actor_critic_terms``). The graph holds
zeroing the gradients, the rollout, the loss and the backward; after a replay one read takes the loss
parts and the overflow flag; then the optimizer steps (fused Adam, outside the graph), unless a row
overflowed the fixed scan: that batch is redone exactly, uncaptured, with the same uniforms.

Records seconds per RL epoch (batch 512, every full batch of an epoch; the last, smaller batch is
left out), batches that overflowed, and the exact step's time in the same run for comparison. If the
capture fails, the error is recorded (the op that synchronised or is not capturable).

Run: ``python benchmarks/bench_gpu_graph.py --raw DIR_OF_ICEWS14_TXT --out results.json [--eager]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu_env import setup, sync  # noqa: E402

from raptor.config import ModelConfig, RLConfig  # noqa: E402
from raptor.mdp.device_env import DeviceEnv  # noqa: E402
from raptor.common.io import atomic_write_json  # noqa: E402
from raptor.agents.policy import Policy  # noqa: E402
from raptor.agents.actor_critic.rl import LOSS_PARTS, actor_critic_terms  # noqa: E402
from raptor.agents.rollout import rollout  # noqa: E402
from raptor.common.runtime import autocast  # noqa: E402


class Step:
    """One training step over static buffers (``queries [B, 4]``, ``uniforms [K, B]``)."""

    def __init__(self, policy, env_fixed, env_exact, device, precision, batch_size, rl: RLConfig):
        self.policy, self.fixed, self.exact = policy, env_fixed, env_exact
        self.device, self.precision, self.rl = device, precision, rl
        self.queries = torch.zeros((batch_size, 4), dtype=torch.int64, device=device)
        self.uniforms = torch.zeros((env_fixed.K, batch_size), dtype=torch.float64, device=device)
        fused = device.type == "cuda"
        self.opt = torch.optim.Adam(policy.parameters(), lr=rl.learning_rate, fused=fused)
        self.graph = None
        self.redone = 0

    def forward_backward(self, env):
        self.opt.zero_grad(set_to_none=False)
        with autocast(self.precision, self.device):
            ro = rollout(self.policy, env, self.queries, device=self.device, uniforms=self.uniforms)
        loss, parts = actor_critic_terms(ro, self.rl.gamma, self.rl.entropy_beta0)
        loss.backward()
        flag = ro.overflow if ro.overflow is not None else torch.zeros((), dtype=torch.bool, device=self.device)
        return torch.cat([parts, flag.float()[None]])

    def capture(self, warmup: int = 3):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warmup):
                self.forward_backward(self.fixed)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.forward_backward(self.fixed)

    def __call__(self, batch: np.ndarray, gen: torch.Generator) -> dict[str, float]:
        self.queries.copy_(torch.from_numpy(batch))
        self.uniforms.copy_(torch.rand(self.uniforms.shape, generator=gen, dtype=torch.float64, device=self.device))
        if self.graph is not None:
            self.graph.replay()
            out = self.out.tolist()
        else:
            out = self.forward_backward(self.fixed).tolist()
        if out[-1]:  # a row's candidates were cut short: redo the batch exactly
            self.redone += 1
            out = self.forward_backward(self.exact).tolist()
        self.opt.step()
        return dict(zip(LOSS_PARTS, out[:-1]))


def epoch(step: Step, queries: np.ndarray, batch_size: int, n: int, gen) -> tuple[float, float]:
    order = np.random.default_rng(0).permutation(len(queries))
    rewards = []
    sync(step.device)
    t = time.perf_counter()
    for i in range(n):
        rewards.append(step(queries[order[i * batch_size:(i + 1) * batch_size]], gen)["reward"])
    sync(step.device)
    return time.perf_counter() - t, float(np.mean(rewards))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", default="/tmp/gpu_graph.json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--scan-pad", type=int, default=256, help="edges to visited entities a fixed scan may pass")
    ap.add_argument("--batches", type=int, default=0, help="batches timed (0: every full batch of an epoch)")
    ap.add_argument("--eager", action="store_true", help="run the same step without capturing it")
    args = ap.parse_args()
    device = torch.device(args.device)
    env, queries, E, R = setup(Path(args.raw))
    bs = 512
    n = args.batches or len(queries) // bs
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "torch": torch.__version__,
           "precision": args.precision, "scan_pad": args.scan_pad, "batches": n,
           "batches_per_epoch": int(np.ceil(len(queries) / bs))}
    rl = RLConfig(batch_size=bs)
    exact = DeviceEnv(env, device)
    for mode in (["eager-fixed"] if args.eager else ["eager-fixed", "graph"]):
        torch.manual_seed(0)
        policy = Policy(E, R, ModelConfig(), env.K).to(device)
        step = Step(policy, DeviceEnv(env, device, scan_pad=args.scan_pad), exact, device, args.precision, bs, rl)
        gen = torch.Generator(device=device).manual_seed(0)
        try:
            if mode == "graph":
                step.capture()
            for i in range(3):  # warm-up (outside the timing)
                step(queries[i * bs:(i + 1) * bs], gen)
            sec, reward = epoch(step, queries, bs, n, gen)
            out[mode] = {"seconds_per_epoch": sec / n * out["batches_per_epoch"], "ms_per_batch": 1e3 * sec / n,
                         "mean_reward": reward, "batches_redone_exactly": step.redone}
        except Exception as exc:  # the finding is the error itself (which op cannot be captured)
            out[mode] = {"error": repr(exc), "traceback": traceback.format_exc()[-3000:]}
        print(mode, json.dumps(out[mode])[:1500], flush=True)
    atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
