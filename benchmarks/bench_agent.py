"""Benchmark: the agent's hot paths at the paper's configuration on ICEWS14 (or ``--raw`` another dataset).

* training: seconds per RL epoch (149,690 queries with inverses, batch 512, K = 3, 150 actions,
  128-dim embeddings), measured over ``--batches`` batches after a warm-up and extrapolated to the
  293 batches of an epoch (``--full-epoch`` times a real one);
* evaluation: milliseconds per test query of beam search (beam 100), over ``--queries`` test queries
  (both directions) searched ``--chunk`` at a time.

Both for float32 and bfloat16 autocast. Records wall and process CPU time, the thread count and the
``uptime`` load average before and after (the cores are shared). With each, the distance to the
hardware limit: the FLOPs of an epoch and of a query counted from the configuration
(``raptor/agents/flops.py``), the achieved GFLOP/s, and the ratio of the measured time to the time the
machine's own GEMM rate at the model's shapes (measured in the same run) would need for them. Writes
``benchmarks/results/agent.json``.

Run: ``.venv/bin/python benchmarks/bench_agent.py [--threads 2] [--batches 40] [--queries 1024]
[--compare-epochs 3 --compare-seeds 0 1]`` (the last part trains full epochs in both precisions from
the same initialisation and compares validation MRR: the bfloat16 check).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from raptor.agents.beam import SearchOptions, beam_search
from raptor.config import EnvConfig, EvalConfig, ModelConfig, RLConfig
from raptor.data.dataset import with_inverse_queries
from raptor.mdp.env import TemporalEnv
from raptor.data.graph import TemporalGraph
from raptor.common.io import atomic_write_json
from raptor.agents.policy import Policy
from raptor.agents.actor_critic.rl import actor_critic_loss, make_optimizer
from raptor.agents.rollout import rollout
from raptor.common.runtime import autocast, configure_runtime, native_bf16

RAW = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "ICEWS14"


def load_raw(raw: Path):
    """ICEWS14 straight from the published text files (times shifted to start at 0)."""
    splits = {s: np.loadtxt(raw / f"{s}.txt", dtype=np.int64, usecols=(0, 1, 2, 3)) for s in ("train", "valid", "test")}
    tmin = min(int(a[:, 3].min()) for a in splits.values())
    for a in splits.values():
        a[:, 3] -= tmin
    E = sum(1 for _ in open(raw / "entity2id.txt"))
    R = sum(1 for _ in open(raw / "relation2id.txt"))
    return splits, E, R


def source_commit() -> str:
    """The commit of the code measured (``HEAD`` of this checkout, ``+dirty`` with uncommitted changes)."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def bench_train(env, policy, queries, precision, batches, warmup, full_epoch, seed=0):
    rl = RLConfig()
    opt = make_optimizer(policy, rl)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(queries))
    gen = torch.Generator().manual_seed(seed)
    bs = rl.batch_size
    n_batches = int(np.ceil(len(queries) / bs))

    def step(i):
        b = queries[order[(i % n_batches) * bs:((i % n_batches) + 1) * bs]]
        with autocast(precision):
            ro = rollout(policy, env, b, gen)
        loss, parts = actor_critic_loss(ro, rl.gamma, rl.entropy_beta0)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return parts["reward"]

    for i in range(warmup):
        step(i)
    n = n_batches if full_epoch else batches
    t, c = time.perf_counter(), time.process_time()
    rewards = [step(warmup + i) for i in range(n)]
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return {
        "batches_timed": n,
        "ms_per_batch": 1e3 * wall / n,
        "cpu_ms_per_batch": 1e3 * cpu / n,
        "seconds_per_epoch": wall / n * n_batches,
        "cpu_seconds_per_epoch": cpu / n * n_batches,
        "batches_per_epoch": n_batches,
        "mean_reward": float(np.mean(rewards)),
        "extrapolated": not full_epoch,
    }


def gemm_rate(gemms, precision: str, repeats: int = 5, min_seconds: float = 0.2, device="cpu") -> dict:
    """GFLOP/s of this machine at the GEMM shapes of ``gemms`` (forward ``[m,k]x[k,n]`` and the two
    backward products ``[m,n]x[n,k]``, ``[k,m]x[m,n]``), in ``precision``: FLOPs-weighted over the
    shapes, min/median over ``repeats`` timings of each."""
    from raptor.agents.flops import gemm_shapes

    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    shapes = {}
    for (m, k, n), f in gemm_shapes(gemms).items():
        for shp in ((m, k, n), (m, n, k), (k, m, n)):
            shapes[shp] = shapes.get(shp, 0.0) + f
    best_t, med_t, total = 0.0, 0.0, 0.0
    for (m, k, n), f in shapes.items():
        a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)
        reps = max(1, int(min_seconds / max(2 * m * k * n / 50e9, 1e-7)))
        times = []
        for _ in range(repeats):
            _sync(device)
            t = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b)
            _sync(device)
            times.append((time.perf_counter() - t) / reps)
        per = 2.0 * m * k * n
        best_t += f / per * min(times)
        med_t += f / per * float(np.median(times))
        total += f
    return {"gflops_best": total / best_t / 1e9, "gflops_median": total / med_t / 1e9, "shapes": len(shapes)}


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def bound(result_train: dict, result_beam: dict, precision: str, num_entities: int, num_relations: int,
          time_rows: int, train_queries: int, device="cpu") -> dict:
    """Distance to the hardware limit: counted FLOPs over measured seconds, against the machine's GEMM
    rate at the same shapes (``raptor/agents/flops.py``: the formula, tested against torch's FLOP counter)."""
    from raptor.agents.flops import beam_query_flops, training_epoch_flops, training_gemms

    cfg = ModelConfig()
    rate = gemm_rate(training_gemms(cfg, 512, 3, num_relations), precision, device=device)
    out = {"gemm_rate": rate}
    if result_train:
        w = training_epoch_flops(cfg, train_queries, 512, 3, 150, num_relations)
        sec = result_train["seconds_per_epoch"]
        lim = w.total / (rate["gflops_best"] * 1e9)
        out["train"] = {"tflop_per_epoch": w.total / 1e12, "gemm_share": w.gemm / w.total,
                        "achieved_gflops": w.total / sec / 1e9, "bound_seconds": lim, "ratio_to_bound": sec / lim}
    if result_beam:
        # the work the search did (live beams only; counted during the timed run) and, for reference,
        # the most it could do (every state with 151 actions)
        full = beam_query_flops(cfg, EnvConfig(max_path_length=3, max_actions=150), result_beam.get("beam", 100),
                                num_entities, num_relations, time_rows, result_beam["queries"]).total
        flop = result_beam.get("flop_per_query", full)
        sec = result_beam["ms_per_query"] / 1e3
        lim = flop / (rate["gflops_best"] * 1e9)
        out["beam"] = {"mflop_per_query": flop / 1e6, "mflop_per_query_full_beams": full / 1e6,
                       "achieved_gflops": flop / sec / 1e9, "bound_ms_per_query": lim * 1e3, "ratio_to_bound": sec / lim}
    return out


def count_beam_flops(policy, num_entities: int, num_relations: int, time_rows: int):
    """Wrap ``policy.candidate_logits`` to record every scoring call of one ``beam_search`` call; returns
    ``(calls, flops)``: ``flops(K)`` is the FLOPs of the recorded search (``raptor/agents/flops.py``, counted
    from the rows and actions each step actually scored, plus the LSTM input tables once)."""
    from raptor.agents.flops import beam_gemms, path_table_gemms, scoring_kernel_flops

    calls = []
    orig = policy.candidate_logits

    def wrapped(s, entity, relation, dt, mask=None, time_rows=None):
        calls.append((entity.shape[0], entity.shape[1]))
        return orig(s, entity, relation, dt, mask, time_rows)

    policy.candidate_logits = wrapped

    def flops(K: int) -> float:
        total = sum(g.forward for g in path_table_gemms(ModelConfig(), num_entities, num_relations, time_rows))
        for i in range(0, len(calls), K):
            chunk = calls[i:i + K]
            rows = [c[0] for c in chunk]
            total += sum(g.forward for g in beam_gemms(ModelConfig(), rows[0], rows, num_relations))
            total += sum(scoring_kernel_flops(ModelConfig(), r, a)[0] for r, a in chunk)
        return total

    return calls, flops


def bench_beam(env, policy, queries, precision, chunk, beam):
    cfg = EvalConfig(beam_size=beam)
    opts = SearchOptions(precision=precision, chunk_size=chunk)
    beam_search(policy, env, queries[:chunk], cfg, opts)  # warm-up
    calls, flops = count_beam_flops(policy, env.graph.num_entities, env.graph.num_relations,
                                    int(queries[:, -1].max()) + 1)
    t, c = time.perf_counter(), time.process_time()
    res = beam_search(policy, env, queries, cfg, opts)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    del policy.candidate_logits  # back to the class's method
    reached = (res.cand_entity >= 0).sum(1)
    hit = (res.cand_entity == queries[:, 2:3]).any(1)
    return {
        "queries": len(queries),
        "chunk": chunk,
        "beam": beam,
        "ms_per_query": 1e3 * wall / len(queries),
        "cpu_ms_per_query": 1e3 * cpu / len(queries),
        "flop_per_query": flops(env.K) / len(queries),
        "rows_per_query": sum(c[0] for c in calls) / len(queries),
        "mean_candidates": float(reached.mean()),
        "gold_reached": float(hit.mean()),
    }


def bench_compare(env, splits, E, R, precisions, epochs, valid_queries, beam, seed=0):
    """Train ``epochs`` full epochs from the same initialisation in each precision; report seconds per
    epoch (measured, not extrapolated) and the validation metrics (time-aware filtered, beam search)."""
    from raptor.evaluation.ranking import build_filter, filtered_ranks, metrics_from_ranks
    from raptor.agents.actor_critic.rl import train

    train_q = with_inverse_queries(splits["train"], R).astype(np.int64)
    valid_q = with_inverse_queries(splits["valid"], R).astype(np.int64)
    valid_q = valid_q[np.random.default_rng(1).permutation(len(valid_q))[:valid_queries]]
    filt = build_filter(np.concatenate(list(splits.values())), R)
    out = {}
    for precision in precisions:
        torch.manual_seed(seed)
        policy = Policy(E, R, ModelConfig(), 3)

        def evaluate(p):
            res = beam_search(p, env, valid_q, EvalConfig(beam_size=beam), SearchOptions(precision=precision))
            ranks = filtered_ranks(res.cand_entity, res.cand_score, valid_q[:, 2], valid_q[:, [0, 1, 3]], filt, E)
            return metrics_from_ranks(ranks)

        res = train(policy, env, train_q, RLConfig(epochs=epochs), EvalConfig(beam_size=beam, valid_every=epochs),
                    seed=seed, precision=precision, evaluate_fn=evaluate, progress=False)
        out[precision] = {
            "epochs": epochs,
            "seconds_per_epoch": [h["seconds"] for h in res.history],
            "reward": [h["reward"] for h in res.history],
            "val_mrr": res.history[-1]["val_mrr"],
            "val_hits@1": res.history[-1].get("val_hits@1"),
            "val_hits@10": res.history[-1].get("val_hits@10"),
            "valid_queries": len(valid_q),
            "load_after": load_avg(),
        }
        print(precision, f"seed {seed} compare", json.dumps(out[precision]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", type=Path, default=RAW)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = all cores)")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--full-epoch", action="store_true")
    ap.add_argument("--queries", type=int, default=1024, help="test queries for beam search")
    ap.add_argument("--chunk", type=int, default=128)
    ap.add_argument("--beam", type=int, default=100)
    ap.add_argument("--precision", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-beam", action="store_true")
    ap.add_argument("--compare-epochs", type=int, default=0,
                    help="also train this many full epochs per precision and compare validation MRR")
    ap.add_argument("--valid-queries", type=int, default=2000)
    ap.add_argument("--compare-seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "agent.json")
    args = ap.parse_args()

    configure_runtime(args.threads)
    splits, E, R = load_raw(args.raw)
    graph = TemporalGraph.from_quadruples(np.concatenate(list(splits.values())), E, R)
    env = TemporalEnv(graph, EnvConfig())
    train_q = with_inverse_queries(splits["train"], R).astype(np.int64)
    test_q = with_inverse_queries(splits["test"], R).astype(np.int64)
    test_q = test_q[np.random.default_rng(0).permutation(len(test_q))[: args.queries]]

    result = {
        "benchmark": "agent",
        "dataset": args.raw.resolve().name,
        "commit": source_commit(),
        "config": {"max_actions": 150, "K": 3, "batch_size": 512, "model": ModelConfig().__dict__, "beam": args.beam},
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
                    "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT"),
                    "native_bf16": native_bf16("cpu")},
        "load_before": load_avg(),
        "train_queries": len(train_q),
        "runs": {},
    }
    for precision in args.precision:
        torch.manual_seed(0)
        policy = Policy(E, R, ModelConfig(), 3)
        run = {}
        if not args.skip_train:
            run["train"] = bench_train(env, policy, train_q, precision, args.batches, args.warmup, args.full_epoch)
            print(precision, "train", json.dumps(run["train"]), "load", load_avg(), flush=True)
        if not args.skip_beam:
            run["beam"] = bench_beam(env, policy, test_q, precision, args.chunk, args.beam)
            print(precision, "beam", json.dumps(run["beam"]), "load", load_avg(), flush=True)
        time_rows = int(max(int(a[:, 3].max()) for a in splits.values())) + 1
        run["bound"] = bound(run.get("train"), run.get("beam"), precision, E, R, time_rows, len(train_q))
        print(precision, "bound", json.dumps(run["bound"]), flush=True)
        result["runs"][precision] = run
    if args.compare_epochs:
        result["precision_comparison"] = {
            f"seed{seed}": bench_compare(env, splits, E, R, args.precision, args.compare_epochs, args.valid_queries,
                                         args.beam, seed=seed)
            for seed in args.compare_seeds
        }
    result["load_after"] = load_avg()
    result["uptime"] = os.popen("uptime").read().strip()
    atomic_write_json(args.out, result)
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
