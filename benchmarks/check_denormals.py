"""Time 8 float32 training batches of a saved model with denormal flushing off, on, off (issue 17: a
float32 run slowed 4x once denormals appeared). Usage: python benchmarks/check_denormals.py MODEL.pt
(paths below: the choices sweep of 2026-11-25 in .pipelines/sweep-choices)."""
import sys, time, numpy as np, torch
from raptor.config import load_resolved
from raptor.runs.context import load_context
from raptor.agents.base import load_model
from raptor.agents.actor_critic.rl import actor_critic_loss, make_optimizer
from raptor.agents.rollout import rollout
torch.set_num_threads(1)
S = "/work/main/.pipelines/sweep-choices/raptor-tkg/runs/ICEWS14/sweeps/choices"
p = load_resolved(f"{S}/params/train.precision=float32.json")
ctx = load_context("/work/main/data/ICEWS14/ingested", "/work/main/data/ICEWS14/graph.npz", p)
policy, _ = load_model(sys.argv[1])
tiny = sum(int(((t != 0) & (t.abs() < torch.finfo(torch.float32).tiny)).sum()) for t in policy.parameters())
print("denormal params:", tiny, "of", sum(t.numel() for t in policy.parameters()))
q = ctx.train_queries.astype(np.int64)
gen = torch.Generator().manual_seed(0)
for flush in (False, True, False):
    torch.set_flush_denormal(flush)
    opt = make_optimizer(policy, p.rl)
    t = time.perf_counter()
    for i in range(8):
        ro = rollout(policy, ctx.env, q[i * 512:(i + 1) * 512], gen)
        loss, parts = actor_critic_loss(ro, p.rl.gamma, 0.001)
        opt.zero_grad(); loss.backward(); opt.step()
    print(f"flush_denormal={flush}: {(time.perf_counter() - t) / 8 * 1e3:.0f} ms/batch")
