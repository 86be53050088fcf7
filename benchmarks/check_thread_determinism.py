"""Are two training runs started together as threads of one process (``train.parallel_runs``) each
bit-identical to the same run alone? Six RL batches of a fresh policy (seed 0) on ICEWS14 per run.

Run: ``.venv/bin/python benchmarks/check_thread_determinism.py`` (two runs as threads, in bfloat16
then float32; compare with ``... float32 bfloat16``, which runs them one after the other). Found on
2026-11-24 (AVX-512 BF16 CPU, torch 2.13.0): float32 threads equalled the lone run to the last digit;
bfloat16 threads did not (one thread's loss departed after a few batches, differently per repetition).
Cause: torch's autocast weight-cast cache is process-wide and emptied whenever any thread leaves its
outermost autocast region, so a weight used at several steps got one cast node or several and its
gradient was summed in bfloat16 or float32. Fixed by ``cache_enabled=False`` in
``raptor.common.runtime.autocast``: with it, both threads equal the lone run in bfloat16 too.
"""
import sys, numpy as np, torch
sys.path.insert(0, 'benchmarks')
from bench_agent import load_raw, RAW
from raptor.config import EnvConfig, ModelConfig, RLConfig
from raptor.data.dataset import with_inverse_queries
from raptor.mdp.env import TemporalEnv
from raptor.data.graph import TemporalGraph
from raptor.agents.policy import Policy
from raptor.agents.actor_critic.rl import actor_critic_loss, make_optimizer
from raptor.agents.rollout import rollout
from raptor.common.runtime import autocast, configure_runtime, seeded_init
configure_runtime(1)
splits,E,R=load_raw(RAW)
env=TemporalEnv(TemporalGraph.from_quadruples(np.concatenate(list(splits.values())),E,R),EnvConfig())
q=with_inverse_queries(splits["train"],R).astype(np.int64)
def run(prec):
    with seeded_init(0): pol=Policy(E,R,ModelConfig(),3)
    opt=make_optimizer(pol,RLConfig()); gen=torch.Generator().manual_seed(0)
    out=[]
    for i in range(6):
        with autocast(prec): ro=rollout(pol,env,q[i*512:(i+1)*512],gen)
        loss,parts=actor_critic_loss(ro,0.95,0.01); opt.zero_grad(set_to_none=False); loss.backward(); opt.step()
        out.append(round(loss.item(),7))
    return out
for p in sys.argv[1:]: print(p, run(p))
if not sys.argv[1:]:
    import threading
    res={}
    ts=[threading.Thread(target=lambda k=k: res.__setitem__(k, run('bfloat16'))) for k in (0,1)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print('threads bf16', res)
    res={}
    ts=[threading.Thread(target=lambda k=k: res.__setitem__(k, run('float32'))) for k in (0,1)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print('threads fp32', res)
