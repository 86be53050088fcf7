"""Benchmark: how to train two seeds at once on the cores there are (issue 13 item 3).

Three ways to spend the machine's cores on two independent training runs (RL training batches of 512
ICEWS14 queries at the paper's configuration, ``benchmarks/bench_agent.py``'s ``bench_train``):

* ``one_run``: one run with all ``--threads`` torch threads (the runs one after the other);
* ``threads``: two runs as two Python threads of one process, ``--threads / 2`` torch threads each:
  what a pipeline stage does with ``train.parallel_runs: 2`` on Prefect's thread-pool task runner;
* ``processes``: two runs as two processes, ``--threads / 2`` torch threads each.

Each mode runs ``--batches`` timed batches per run after ``--warmup`` (numba's compilation is cached
on disk, so warm-up is short); the modes alternate for ``--rounds`` rounds. Reports wall time per
batch of each run and the throughput (batches per second over all runs), with the load average.
Writes ``benchmarks/results/parallel_runs.json``.

Run on an otherwise idle machine: ``.venv/bin/python benchmarks/bench_parallel_runs.py [--threads 2]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_agent import RAW, bench_train, load_avg, load_raw  # noqa: E402

from raptor.config import EnvConfig, ModelConfig  # noqa: E402
from raptor.data.dataset import with_inverse_queries  # noqa: E402
from raptor.mdp.env import TemporalEnv  # noqa: E402
from raptor.data.graph import TemporalGraph  # noqa: E402
from raptor.common.io import atomic_write_json  # noqa: E402
from raptor.agents.policy import Policy  # noqa: E402
from raptor.common.runtime import configure_runtime, seeded_init  # noqa: E402


def _setup(raw: Path):
    splits, E, R = load_raw(raw)
    graph = TemporalGraph.from_quadruples(np.concatenate(list(splits.values())), E, R)
    return TemporalEnv(graph, EnvConfig()), with_inverse_queries(splits["train"], R).astype(np.int64), E, R


def _run(env, train_q, E, R, seed, precision, batches, warmup, out, key):
    with seeded_init(seed):
        policy = Policy(E, R, ModelConfig(), 3)
    t = time.perf_counter()
    r = bench_train(env, policy, train_q, precision, batches, warmup, False, seed=seed)
    out[key] = {"ms_per_batch": r["ms_per_batch"], "cpu_ms_per_batch": r["cpu_ms_per_batch"],
                "wall_seconds": time.perf_counter() - t}


def child(args) -> None:
    """One run of the ``processes`` mode (a subprocess): prints its result as JSON."""
    configure_runtime(args.threads)
    env, train_q, E, R = _setup(args.raw)
    out = {}
    _run(env, train_q, E, R, args.seed, args.precision, args.batches, args.warmup, out, "run")
    print(json.dumps(out["run"]), flush=True)


def mode_threads(env, train_q, E, R, args) -> list[dict]:
    configure_runtime(max(1, args.threads // 2))
    out: dict = {}
    ts = [threading.Thread(target=_run, args=(env, train_q, E, R, s, args.precision, args.batches, args.warmup, out, s))
          for s in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return [out[0], out[1]]


def mode_processes(args) -> list[dict]:
    cmd = [sys.executable, __file__, "--child", "--raw", str(args.raw), "--threads", str(max(1, args.threads // 2)),
           "--batches", str(args.batches), "--warmup", str(args.warmup), "--precision", args.precision]
    procs = [subprocess.Popen(cmd + ["--seed", str(s)], stdout=subprocess.PIPE, text=True) for s in (0, 1)]
    outs = []
    for p in procs:
        stdout, _ = p.communicate()
        if p.returncode:
            raise SystemExit(f"child run failed ({p.returncode})")
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    return outs


def mode_one_run(env, train_q, E, R, args) -> list[dict]:
    configure_runtime(args.threads)
    out: dict = {}
    _run(env, train_q, E, R, 0, args.precision, args.batches, args.warmup, out, 0)
    return [out[0]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", type=Path, default=RAW)
    ap.add_argument("--threads", type=int, default=2, help="cores to spend (split between two parallel runs)")
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "parallel_runs.json")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    env, train_q, E, R = _setup(args.raw)
    result = {"benchmark": "parallel_runs", "dataset": "ICEWS14", "precision": args.precision,
              "threads": args.threads, "batches": args.batches, "cores": os.cpu_count(),
              "torch": torch.__version__, "rounds": []}
    for i in range(args.rounds):
        rnd = {"round": i + 1}
        for mode in ("one_run", "threads", "processes"):
            load = load_avg()
            t = time.perf_counter()
            runs = (mode_one_run(env, train_q, E, R, args) if mode == "one_run"
                    else mode_threads(env, train_q, E, R, args) if mode == "threads" else mode_processes(args))
            wall = time.perf_counter() - t
            rnd[mode] = {"runs": runs, "load_before": load,
                         "batches_per_second": sum(1e3 / r["ms_per_batch"] for r in runs)}
            per_batch = ", ".join(f"{r['ms_per_batch']:.1f}" for r in runs)
            print(f"round {i + 1} {mode}: {rnd[mode]['batches_per_second']:.2f} batches/s "
                  f"({per_batch} ms per batch; load {load}; {wall:.0f} s)", flush=True)
        result["rounds"].append(rnd)
    atomic_write_json(args.out, result)
    print(f"-> {args.out}")


if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    main()
