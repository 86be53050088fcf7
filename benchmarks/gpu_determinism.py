"""Issue 37, items 3 and 4 on a GPU: does the same RL training, run twice on the same device, give the
same weights bit for bit, and which ops stand in the way where it does not?

For ``train.cuda_graph`` auto (replayed) and off (eager), ``--batches`` RL batches of one seed on ICEWS14
(the paper's configuration, float32, :func:`raptor.agents.actor_critic.rl.train_epoch` on a prefix of
the training queries) are trained twice from the same seed; recorded: whether the two runs' weights are
equal, and the largest difference. Then, with ``torch.use_deterministic_algorithms(True,
warn_only=True)``, one eager batch lists the ops PyTorch names as nondeterministic on the device, and
the eager and the replayed pairs are repeated under that mode (``CUBLAS_WORKSPACE_CONFIG`` set before CUDA starts).

Run: ``python benchmarks/gpu_determinism.py --raw .gpu/ICEWS14 --out $OUT/determinism.json``
(``--device cpu`` is a try of the script; ``--table FILE``: the docs' table).
"""

from __future__ import annotations

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu_env import setup, sync  # noqa: E402

from raptor.agents.actor_critic import rl as rl_mod  # noqa: E402
from raptor.agents.actor_critic.graph_step import graph_step, rl_forward  # noqa: E402
from raptor.agents.policy import Policy  # noqa: E402
from raptor.common.io import atomic_write_json  # noqa: E402
from raptor.config import ModelConfig, RLConfig  # noqa: E402
from raptor.mdp.device_env import on_device  # noqa: E402
from raptor.runs.rundir import RunOptions  # noqa: E402


def train_once(env, queries, E, R, mode, device):
    rl = RLConfig()
    torch.manual_seed(0)
    pol = Policy(E, R, ModelConfig(), env.K).to(device)
    opt = rl_mod.make_optimizer(pol, rl)
    run = RunOptions(seed=0, device=device, precision="float32", progress=False, cuda_graph=mode, env_backend="torch")
    step = graph_step(pol, on_device(env, device, "torch"), env, rl.batch_size,
                      rl_forward(pol, lambda ro, beta: rl_mod.actor_critic_terms(ro, rl.gamma, beta), "float32", device),
                      run)
    sync(device)
    t = time.perf_counter()
    row = rl_mod.train_epoch(pol, opt, step, queries, 0, rl, run)
    sync(device)
    return [p.detach().cpu().clone() for p in pol.parameters()], row, time.perf_counter() - t


def pair(env, queries, E, R, mode, device):
    (w1, r1, s1), (w2, r2, s2) = (train_once(env, queries, E, R, mode, device) for _ in range(2))
    diff = max(float((a - b).abs().max()) for a, b in zip(w1, w2))
    return {"weights_equal": all(torch.equal(a, b) for a, b in zip(w1, w2)), "max_weight_diff": diff,
            "rows_equal": r1 == r2, "seconds": [s1, s2], "reward": [r1["reward"], r2["reward"]]}


def table(path: str) -> str:
    """The docs' table of a result file."""
    import json

    d = json.loads(Path(path).read_text())
    rows = [f"Device: {d['device']}, PyTorch {d['torch']}; {d['batches']} RL batches of 512, float32, trained twice.", "",
            "| step | deterministic algorithms | weights equal | largest weight difference | seconds (first / second run) |",
            "|---|---|---|---|---|"]
    for key, step, det in (("auto", "replayed (CUDA graph)", "no"), ("off", "eager", "no"),
                           ("auto_deterministic_algorithms", "replayed (CUDA graph)", "yes"),
                           ("off_deterministic_algorithms", "eager", "yes")):
        r = d.get(key)
        if r is None or "error" in r:
            rows.append(f"| {step} | {det} | {r['error'][:80] if r else 'not run'} | | |")
            continue
        rows.append(f"| {step} | {det} | {'yes' if r['weights_equal'] else 'no'} | {r['max_weight_diff']:.3g} "
                    f"| {r['seconds'][0]:.2f} / {r['seconds'][1]:.2f} |")
    return "\n".join(rows)


def main():
    if sys.argv[1:2] == ["--table"]:
        print(table(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", default="/tmp/determinism.json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", type=int, default=60, help="RL batches of 512 per run")
    args = ap.parse_args()
    device = torch.device(args.device)
    env, queries, E, R = setup(Path(args.raw))
    queries = queries[:args.batches * RLConfig().batch_size]
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "batches": args.batches}
    for mode in ("auto", "off"):
        out[mode] = pair(env, queries, E, R, mode, device)
        print(mode, out[mode], flush=True)
        atomic_write_json(args.out, out)
    torch.use_deterministic_algorithms(True, warn_only=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_once(env, queries[:RLConfig().batch_size], E, R, "off", device)
    out["nondeterministic_ops"] = sorted({str(w.message).split("\n")[0][:300] for w in caught})
    print("nondeterministic ops:", out["nondeterministic_ops"], flush=True)
    atomic_write_json(args.out, out)
    out["off_deterministic_algorithms"] = pair(env, queries, E, R, "off", device)
    print("off, deterministic algorithms:", out["off_deterministic_algorithms"], flush=True)
    atomic_write_json(args.out, out)
    try:  # a deterministic kernel may not be capturable: the error is the finding
        out["auto_deterministic_algorithms"] = pair(env, queries, E, R, "auto", device)
    except Exception as exc:
        out["auto_deterministic_algorithms"] = {"error": repr(exc)[:1000]}
    print("auto, deterministic algorithms:", out["auto_deterministic_algorithms"], flush=True)
    atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
