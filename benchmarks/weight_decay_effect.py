"""What TITer's weight decay and gradient clipping did to a trained policy (issue 39, sweep `titer-defaults`).

For each model given as LABEL=RUN_FOLDER (a long run's `runs/.../seedS/`, its `rl/best.pt` read) with the
sweep arm's resolved params (`results/sweeps/titer-defaults/ICEWS14/params/ARM.json`):
- the norms of its entity embeddings, by how often the entity occurs in the training quadruples (as subject or
  object): Adam normalises each coordinate's step, so an L2 term coupled to the gradient (`torch.optim.Adam`'s
  `weight_decay`, TITer's) pulls an embedding the loss rarely touches towards zero at about the learning rate
  per step, whatever its size;
- the relation embeddings' mean norm and the norm of all parameters together;
- the total gradient 2-norm of `--batches` training batches of 512 (the library's loss at the entropy
  coefficient of the model's epoch; no optimiser step), against `rl.clip_gradient` = 10: how often
  TITer's clipping would act on this model.

Usage (the sweep's long runs, `.longruns-sweep39/`):
  python benchmarks/weight_decay_effect.py --data .longruns-sweep39/data/ICEWS14/ingested \
      --graph .longruns-sweep39/data/ICEWS14/graph.npz --out benchmarks/results/weight_decay_effect.json \
      default:results/sweeps/titer-defaults/ICEWS14/params/default.json=RUNS/default/pure_rl/seed0 ...
Each model argument is ARM:PARAMS_JSON=RUN_FOLDER.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch

from raptor.agents.actor_critic.rl import actor_critic_loss, entropy_coefficient
from raptor.agents.rollout import rollout
from raptor.config import load_resolved
from raptor.agents.base import load_model
from raptor.runs.context import load_context

#: Training-frequency bins of an entity (occurrences as subject or object in train), inclusive.
BINS = ((0, 0), (1, 5), (6, 50), (51, 500), (501, None))
CLIP = 10.0  # TITer's trainer.py clip_grad_norm_ threshold


def entity_counts(ctx) -> np.ndarray:
    """int64 ``[E]``: occurrences of each entity in the training quadruples (subject or object)."""
    train = ctx.dataset.splits["train"]
    return np.bincount(np.concatenate([train[:, 0], train[:, 2]]).astype(np.int64),
                       minlength=ctx.dataset.num_entities)


def norms_by_bin(emb: torch.Tensor, counts: np.ndarray) -> list[dict]:
    """Mean 2-norm of the rows of ``emb`` ``[E(+1), d]`` per bin of :data:`BINS`."""
    norms = emb[: len(counts)].float().norm(dim=1).numpy()
    out = []
    for lo, hi in BINS:
        m = (counts >= lo) & ((counts <= hi) if hi is not None else True)
        out.append({"occurrences": f"{lo}-{hi}" if hi is not None else f">={lo}", "entities": int(m.sum()),
                    "mean_norm": float(norms[m].mean()) if m.any() else None})
    return out


def gradient_norms(policy, ctx, params, epoch: int, batches: int, seed: int) -> np.ndarray:
    """float64 ``[batches]``: total gradient 2-norm of random training batches (no optimiser step)."""
    q = ctx.train_queries.astype(np.int64)
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    bs = params.rl.batch_size
    beta = entropy_coefficient(params.rl, epoch, 0, math.ceil(len(q) / bs))
    policy.train()
    out = []
    for _ in range(batches):
        batch = q[rng.choice(len(q), size=bs, replace=False)]
        ro = rollout(policy, ctx.env, batch, gen)
        loss, _ = actor_critic_loss(ro, params.rl.gamma, beta)
        policy.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad for p in policy.parameters() if p.grad is not None]
        out.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
    return np.asarray(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--data", required=True)
    ap.add_argument("--graph", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("models", nargs="+", help="ARM:PARAMS_JSON=RUN_FOLDER")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    rows = []
    ctx = counts = None
    for spec in a.models:
        head, _, folder = spec.partition("=")
        arm, _, params_path = head.partition(":")
        if not folder or not params_path:
            ap.error(f"{spec!r}: expected ARM:PARAMS_JSON=RUN_FOLDER")
        params = load_resolved(params_path)
        if ctx is None:
            ctx = load_context(a.data, a.graph, params)
            counts = entity_counts(ctx)
        summary = json.loads((Path(folder) / "rl" / "summary.json").read_text())
        policy, meta = load_model(Path(folder) / "rl" / "best.pt")
        sd = policy.state_dict()
        g = gradient_norms(policy, ctx, params, int(summary["best_epoch"]), a.batches, a.seed)
        row = {"arm": arm, "run": str(folder), "seed": summary["seed"], "best_epoch": summary["best_epoch"],
               "weight_decay": params.rl.weight_decay, "clip_gradient": params.rl.clip_gradient,
               "entity_norms": norms_by_bin(sd["entity_emb.weight"], counts),
               "relation_mean_norm": float(sd["relation_emb.weight"].float().norm(dim=1).mean()),
               "all_params_norm": float(math.sqrt(sum(float(v.float().norm()) ** 2 for v in sd.values()))),
               "grad_norm": {"batches": a.batches, "mean": float(g.mean()), "median": float(np.median(g)),
                             "max": float(g.max()), f"share_over_{CLIP:g}": float((g > CLIP).mean())}}
        rows.append(row)
        bins = " ".join(f"{b['occurrences']}:{b['mean_norm']:.3f}" for b in row["entity_norms"])
        print(f"{arm} seed {row['seed']} (epoch {row['best_epoch']}): entity norms by train occurrences {bins}; "
              f"relations {row['relation_mean_norm']:.3f}; all params {row['all_params_norm']:.1f}; grad norm "
              f"mean {g.mean():.2f} max {g.max():.2f}, over {CLIP:g} in {(g > CLIP).mean():.0%} of {a.batches} "
              "batches", flush=True)
    out = Path(a.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({"models": rows, "bins": [list(b) for b in BINS],
                               "machine": os.uname().machine, "torch": torch.__version__}, indent=1) + "\n")
    os.replace(tmp, out)
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
