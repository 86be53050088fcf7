"""Issue 37, item 4: a run folder moves between machines and resumes from its checkpoint.

Two parts, written to one JSON file:

* ``size``: the bytes of an RL checkpoint (``checkpoint.pt``: weights, Adam's two moments, history)
  and of a model file (``best.pt``: weights) at the paper's configuration on ICEWS14 (the ``--raw``
  text files give the entity and relation counts), written by :mod:`raptor.runs.checkpoints`.
  Runs anywhere.
* ``resume`` (needs CUDA): on a small synthetic dataset, a run trained 2 epochs on the CPU is copied
  and resumed on the GPU to 3 epochs, that folder copied and resumed on the CPU to 4; every leg must
  continue the history it found. And on the GPU, a 4-epoch run interrupted after epoch 2 and resumed
  must equal the uninterrupted one bit for bit (the same kind of device).

Run: ``python benchmarks/cross_device_resume.py --raw DIR_OF_ICEWS14_TXT --out results.json``
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_agent import RAW, load_raw  # noqa: E402

from raptor.agents.actor_critic import rl as rl_mod  # noqa: E402
from raptor.agents.policy import Policy  # noqa: E402
from raptor.common.io import atomic_write_json  # noqa: E402
from raptor.config import EnvConfig, EvalConfig, ModelConfig, RLConfig  # noqa: E402
from raptor.data.dataset import with_inverse_queries  # noqa: E402
from raptor.data.graph import TemporalGraph  # noqa: E402
from raptor.data.synthetic import SyntheticSpec, generate  # noqa: E402
from raptor.mdp.env import TemporalEnv  # noqa: E402
from raptor.runs import checkpoints  # noqa: E402
from raptor.runs.rundir import RunOptions  # noqa: E402


def size(raw: Path, tmp: Path) -> dict:
    """Bytes of a paper-configuration checkpoint and model file on ICEWS14 (after one Adam step)."""
    _, E, R = load_raw(raw)
    torch.manual_seed(0)
    policy = Policy(E, R, ModelConfig(), EnvConfig().max_path_length)
    opt = rl_mod.make_optimizer(policy, RLConfig())
    for p in policy.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    history = [{"epoch": e, "reward": 0.4, "actor_loss": 0.1, "critic_loss": 0.1, "entropy": 1.0, "val_mrr": None,
                "seconds": 5.0} for e in range(440)]
    checkpoints.save(tmp / "checkpoint.pt", {"format": rl_mod.CHECKPOINT_FORMAT, "epoch": 439, "n_epochs": 440,
                                             "policy": policy.state_dict(), "optimizer": opt.state_dict(),
                                             "history": history, "meta": {"seed": 0}})
    checkpoints.save_model(tmp / "best.pt", policy, {"seed": 0})
    n = sum(p.numel() for p in policy.parameters())
    return {"entities": E, "relations": R, "parameters": n,
            "checkpoint_bytes": (tmp / "checkpoint.pt").stat().st_size,
            "model_bytes": (tmp / "best.pt").stat().st_size, "history_epochs": len(history)}


def synthetic():
    spec = SyntheticSpec()
    splits = generate(spec)
    E, R = spec.num_entities, spec.num_relations
    graph = TemporalGraph.from_quadruples(np.concatenate(list(splits.values())), E, R)
    env = TemporalEnv(graph, EnvConfig(max_actions=50))
    return env, with_inverse_queries(splits["train"], R).astype(np.int64), E, R


SMALL = ModelConfig(entity_dim=32, relation_dim=32, time_dim=8, step_dim=8, mlp_hidden_dim=64)


def leg(env, queries, E, R, out: Path, device: str, epochs: int, init: int = 0) -> list[dict]:
    """Train (or resume) the run in ``out`` to ``epochs`` epochs on ``device``. ``init``: the seed of the
    initial weights, another one on a resumed leg (which must take its weights from the checkpoint)."""
    torch.manual_seed(init)
    policy = Policy(E, R, SMALL, 3)
    res = rl_mod.train(policy, env, queries, RLConfig(epochs=10, batch_size=256), EvalConfig(valid_every=100),
                       RunOptions(seed=1, epochs=epochs, out_dir=out, device=device, progress=False))
    return res.history


def resume(tmp: Path, gpu: str = "cuda") -> dict:
    env, queries, E, R = synthetic()
    out: dict = {}
    a, b, c = tmp / "cpu", tmp / "gpu", tmp / "back"
    h_cpu = leg(env, queries, E, R, a, "cpu", 2)
    shutil.copytree(a, b)
    h_gpu = leg(env, queries, E, R, b, gpu, 3, init=7)
    shutil.copytree(b, c)
    h_back = leg(env, queries, E, R, c, "cpu", 4, init=8)
    out["cpu_gpu_cpu"] = {
        "epochs": [[r["epoch"] for r in h] for h in (h_cpu, h_gpu, h_back)],
        "history_continued": h_gpu[:2] == h_cpu and h_back[:3] == h_gpu,
        "rewards": [r["reward"] for r in h_back],
    }
    full = leg(env, queries, E, R, tmp / "g-full", gpu, 4)
    leg(env, queries, E, R, tmp / "g-part", gpu, 2)
    resumed = leg(env, queries, E, R, tmp / "g-part", gpu, 4, init=9)
    strip = lambda h: [{k: v for k, v in r.items() if "seconds" not in k} for r in h]  # noqa: E731
    w_full = checkpoints.load(tmp / "g-full" / "final.pt", checkpoints.MODEL_FORMAT, "model")["policy"]
    w_res = checkpoints.load(tmp / "g-part" / "final.pt", checkpoints.MODEL_FORMAT, "model")["policy"]
    out["gpu_resume_bit_identical"] = {
        "history_equal": strip(full) == strip(resumed),
        "weights_equal": all(torch.equal(w_full[k], w_res[k]) for k in w_full),
    }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", default=str(RAW))
    ap.add_argument("--out", default="benchmarks/results/cross_device_resume.json")
    ap.add_argument("--gpu", default="cuda", help="the device of the GPU legs (cpu: a dry run of the script)")
    args = ap.parse_args()
    result = {"torch": torch.__version__,
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    with tempfile.TemporaryDirectory() as tmp:
        result["size"] = size(Path(args.raw), Path(tmp))
        print("size", json.dumps(result["size"]), flush=True)
        if torch.cuda.is_available() or args.gpu == "cpu":
            result["resume"] = resume(Path(tmp), args.gpu)
            result["resume"]["gpu_legs_on"] = args.gpu
            print("resume", json.dumps(result["resume"]), flush=True)
    atomic_write_json(args.out, result)


if __name__ == "__main__":
    main()
