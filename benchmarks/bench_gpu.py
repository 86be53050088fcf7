"""Benchmark (issue 37, item 5): the GPU path at the paper's configuration on ICEWS14, in one JSON.

Everything on the device the run finds (``--device``, default CUDA when there is one), with the device
environment (:mod:`raptor.mdp.device_env`) wherever ``train.env_backend: auto`` would use it:

* ``gemm_rate``: the device's GEMM rate at the training step's shapes (``raptor/agents/flops.py``);
* ``rl_epoch[precision][S]``: seconds per RL epoch (batch 512 per seed) of one seed alone (a
  ``Policy``) and of ``S`` seeds at once (``StackedPolicy``, :mod:`raptor.agents.actor_critic.seeds`),
  from ``--batches`` timed batches after a warm-up, scaled to a whole epoch; with the ratio to the
  bound (the epoch's FLOPs over the GEMM rate);
* ``pretrain_epoch[precision][S]``: seconds per pretraining epoch of one seed alone and of ``S`` seeds
  stacked (:mod:`raptor.agents.actor_critic.pretrain_seeds`; labels looked up on the device when the
  environment is there), timed the same way;
* ``titer_epoch``: seconds per epoch of TITer-150's REINFORCE (float32, reward shaping), one seed;
* ``validation`` / ``test[precision]``: seconds for the whole split (17,028 / 14,742 queries with
  inverses, beam 100): the beam search and the time-aware filtered ranks
  (:func:`raptor.agents.beam.search_and_rank`);
* ``profile``: torch.profiler over ``--profile-batches`` RL batches (float32, one seed): the share of
  wall time the device spends in kernels, kernel launches and host-device copies per batch.

Each section is written to ``--out`` as soon as it is measured, so a run cut short keeps what it did.
``--quick``: a few batches and queries of each, float32 only (a CPU try of the script; with
``--env-backend torch`` it runs the device environment's path on the CPU).

Run: ``python benchmarks/bench_gpu.py --raw DIR_OF_ICEWS14_TXT --out bench_gpu.json`` (about 6 minutes on
one H100/H200; ``benchmarks/bench_gpu.sh`` wraps it). The docs' table against issue 37's targets:
``python benchmarks/bench_gpu.py --table bench_gpu.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_agent import RAW, bound, load_raw  # noqa: E402
from bench_gpu_env import profile, sync, timed_steps  # noqa: E402
from bench_seeds import time_epoch  # noqa: E402

from raptor.agents.actor_critic.pretrain import pretrain_batch  # noqa: E402
from raptor.agents.actor_critic.pretrain_seeds import pretrain_batch_seeds  # noqa: E402
from raptor.agents.actor_critic.seeds import StackedPolicy  # noqa: E402
from raptor.agents.beam import SearchOptions, search_and_rank  # noqa: E402
from raptor.agents.policy import Policy  # noqa: E402
from raptor.common.io import atomic_write_json  # noqa: E402
from raptor.common.runtime import adam, autocast  # noqa: E402
from raptor.config import EnvConfig, EvalConfig, LabelingConfig, ModelConfig, PretrainConfig, RLConfig  # noqa: E402
from raptor.data.dataset import with_inverse_queries  # noqa: E402
from raptor.data.graph import TemporalGraph  # noqa: E402
from raptor.evaluation.ranking import build_filter  # noqa: E402
from raptor.labeling.compute import compute_labels, label_pairs  # noqa: E402
from raptor.mdp.device_env import on_device  # noqa: E402
from raptor.mdp.env import TemporalEnv  # noqa: E402


def pretrain_seconds(env, table, queries, E, R, S, precision, device, batches, warmup):
    """Seconds of ``batches`` pretraining batches (after ``warmup``) of one seed alone (``S = 1``) or of
    ``S`` seeds stacked (:func:`raptor.agents.actor_critic.pretrain_seeds.pretrain_batch_seeds`), and the
    mean BCE."""
    cfg = PretrainConfig()
    pols = []
    for s in range(S):
        torch.manual_seed(s)
        pols.append(Policy(E, R, ModelConfig(), env.K).to(device))
    model = pols[0] if S == 1 else StackedPolicy(pols).to(device)
    opt = adam(model.parameters(), cfg.learning_rate)
    orders = [np.random.default_rng(s).permutation(len(queries)) for s in range(S)]
    gens = [torch.Generator(device=device).manual_seed(s) for s in range(S)]
    bs = cfg.batch_size
    n_batches = len(queries) // bs

    def step(i):
        j = i % n_batches
        rows = np.concatenate([queries[o[j * bs:(j + 1) * bs]] for o in orders])
        with autocast(precision, device):
            if S == 1:
                pb = pretrain_batch(model, env, table, rows, gens[0], device, cfg)
                bce = pb.stats["bce"]
            else:
                pb = pretrain_batch_seeds(model, env, table, rows, gens, device, cfg)
                bce = float(np.mean([x["bce"] for x in pb.stats]))
        opt.zero_grad(set_to_none=False)
        pb.loss.backward()
        opt.step()
        return bce

    seconds, bce = timed_steps(step, warmup, batches, device)
    return seconds, float(np.mean(bce))


def titer_seconds(env, queries, E, R, device, batches, warmup):
    """Seconds of ``batches`` batches of TITer-150's REINFORCE (its params' defaults: float32, reward
    shaping with its Dirichlet prior) after ``warmup``, and the mean reward."""
    from raptor.agents.titer.dirichlet import fit_time_prior
    from raptor.agents.titer.training import ReactiveBaseline, Reinforce, TITerPolicy, make_optimizer, train_epoch
    from raptor.config import TITerConfig
    from raptor.runs.rundir import RunOptions

    cfg = TITerConfig()
    torch.manual_seed(0)
    policy = TITerPolicy(E, R, cfg, env.K).to(device)
    opt = make_optimizer(policy, cfg)
    prior = fit_time_prior(queries, E, R, cfg) if cfg.reward_shaping else None
    algo = Reinforce(cfg, prior, ReactiveBaseline(cfg.baseline_lambda))
    run = RunOptions(device=device, precision=cfg.precision, progress=False)
    sub = queries[np.random.default_rng(0).permutation(len(queries))[:(warmup + batches) * cfg.batch_size]]
    train_epoch(policy, opt, env, sub[:warmup * cfg.batch_size], 0, algo, run)
    sync(device)
    t = time.perf_counter()
    row = train_epoch(policy, opt, env, sub[warmup * cfg.batch_size:], 1, algo, run)
    sync(device)
    return time.perf_counter() - t, row["reward"]


#: Issue 37's targets on one H100/H200 (seconds): an RL epoch of one seed and of five at once,
#: a validation, five seeds of one system at the paper's budget.
TARGETS = {"rl_1": 1.0, "rl_5": 1.5, "validation": 2.0, "paper_budget_5": 15 * 60}
#: Queries (with inverses) of ICEWS14's validation and test splits.
FULL_SPLITS = {"validation": 17028, "test": 14742}
#: The paper's budget: pretraining and RL epochs, and validation rounds (every 20 RL epochs).
PAPER_BUDGET = {"pretrain": 40, "rl": 400, "validations": 400 // 20}


def paper_budget_seconds(d: dict, precision: str) -> float | None:
    """Five seeds of RL-RAPTOR at the paper's budget, from the measured parts: 40 pretraining epochs
    and 400 RL epochs of the five stacked, and 20 validations of the whole split per seed (scaled from
    the queries timed): an estimate, not a run."""
    try:
        S = str(d["seeds"])
        return (PAPER_BUDGET["pretrain"] * d["pretrain_epoch"][precision][S]["seconds_per_epoch"]
                + PAPER_BUDGET["rl"] * d["rl_epoch"][precision][S]["seconds_per_epoch"]
                + PAPER_BUDGET["validations"] * int(S) * d["validation"][precision]["seconds"]
                * FULL_SPLITS["validation"] / d["validation"][precision]["queries"])
    except KeyError:
        return None


def target_table(path: str) -> str:
    """The docs' table of one result file against issue 37's targets (``--table FILE``)."""
    import json

    d = json.load(open(path))

    def cell(value, target=None):
        if value is None:
            return "not measured"
        text = f"{value:.2f}" if value < 100 else f"{value:.0f}"
        return text + ("" if target is None else (" (target met)" if value <= target else " (target missed)"))

    rows = [f"Device: {d['device']}, PyTorch {d['torch']}, environment {d['environment']}; {d['batches_timed']} "
            f"batches timed per number.", "",
            "| precision | RL epoch, 1 seed (s) | RL epoch, " + str(d["seeds"]) + " seeds at once (s) | pretraining "
            "epoch, 1 / " + str(d["seeds"]) + " seeds (s) | TITer-150 epoch (s) | validation (s) | test (s) | "
            "ratio to the GEMM bound | " + str(d["seeds"]) + " seeds at the paper's budget, estimated (s) |",
            "|" + "---|" * 9]
    S = str(d["seeds"])
    for precision, rl in d.get("rl_epoch", {}).items():
        pre = d.get("pretrain_epoch", {}).get(precision, {})
        get = lambda section, key="seconds": d.get(section, {}).get(precision, {}).get(key)  # noqa: E731
        ratio = rl.get("bound", {}).get("train", {}).get("ratio_to_bound")

        def split_cell(section, target=None):  # a target holds for the whole split only
            queries = get(section, "queries")
            whole = queries == FULL_SPLITS[section]
            return cell(get(section), target if whole else None) + ("" if whole or queries is None else
                                                                   f" ({queries} queries)")

        titer = d.get("titer_epoch", {}).get("seconds_per_epoch") if precision == "float32" else None
        rows.append(f"| {precision} | {cell(rl.get('1', {}).get('seconds_per_epoch'), TARGETS['rl_1'])} "
                    f"| {cell(rl.get(S, {}).get('seconds_per_epoch'), TARGETS['rl_5'])} "
                    f"| {cell(pre.get('1', {}).get('seconds_per_epoch'))} / {cell(pre.get(S, {}).get('seconds_per_epoch'))} "
                    f"| {cell(titer)} | {split_cell('validation', TARGETS['validation'])} | {split_cell('test')} "
                    f"| {cell(ratio)} | {cell(paper_budget_seconds(d, precision), TARGETS['paper_budget_5'])} |")
    prof = d.get("profile")
    if prof and prof.get("busy_share") is not None:
        rows += ["", f"Profile of {prof['batches']} float32 RL batches: the device busy {100 * prof['busy_share']:.0f}% "
                 f"of the wall time, {prof['launches_per_batch']:.0f} kernel launches and "
                 f"{prof['host_device_copies_per_batch']:.0f} host-device copies per batch."]
    return "\n".join(rows)


def main():
    if sys.argv[1:2] == ["--table"]:
        print(target_table(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", default=str(RAW))
    ap.add_argument("--out", default="benchmarks/results/bench_gpu.json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seeds", type=int, default=5, help="seeds at once (besides one alone)")
    ap.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--batches", type=int, default=40, help="RL and pretraining batches timed")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile-batches", type=int, default=10)
    ap.add_argument("--queries", type=int, default=0, help="validation/test queries (0: the whole split)")
    ap.add_argument("--env-backend", default="auto", choices=["auto", "numpy", "torch"],
                    help="the training environment (train.env_backend): auto = the device's on CUDA")
    ap.add_argument("--quick", action="store_true", help="2 batches, 128 queries, float32: a CPU try")
    args = ap.parse_args()
    if args.quick:
        args.batches, args.warmup, args.profile_batches, args.queries, args.precisions = 2, 1, 2, 128, ["float32"]
    device = torch.device(args.device)
    t0 = time.perf_counter()
    splits, E, R = load_raw(Path(args.raw))
    quads = np.concatenate(list(splits.values()))
    graph = TemporalGraph.from_quadruples(quads, E, R)
    env = TemporalEnv(graph, EnvConfig())
    denv = on_device(env, device, args.env_backend)
    train = with_inverse_queries(splits["train"], R).astype(np.int64)
    time_rows = int(quads[:, 3].max()) + 2
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "environment": type(denv).__name__, "train_queries": len(train),
           "batches_timed": args.batches, "seeds": args.seeds}

    def save(section, value):
        out[section] = value
        out["seconds_so_far"] = time.perf_counter() - t0
        atomic_write_json(args.out, out)
        print(section, value if not isinstance(value, dict) else {k: v for k, v in value.items()}, flush=True)

    # the training step: one seed alone, then S seeds as one stacked step
    n_epoch = len(train) / RLConfig().batch_size
    rl = {}
    for precision in args.precisions:
        rl[precision] = {}
        for S, stacked in ((1, False), (args.seeds, True)):
            sec, reward = time_epoch(denv, train, E, R, S, precision, device, args.batches, args.warmup, stacked)
            per_epoch = sec / args.batches * n_epoch
            rl[precision][str(S)] = {"stacked": stacked, "seconds_per_epoch": per_epoch,
                                     "seconds_per_seed_epoch": per_epoch / S, "mean_reward": reward}
        try:  # the bound is a reading aid; never lose the run's numbers over it
            b = bound({"seconds_per_epoch": rl[precision]["1"]["seconds_per_epoch"]}, {}, precision, E, R, time_rows,
                      len(train), device)
            rl[precision]["bound"] = b
        except Exception as exc:  # noqa: BLE001
            rl[precision]["bound"] = {"error": repr(exc)}
        save("rl_epoch", rl)

    # pretraining, one seed (labels of the training pairs, the pipeline's exact table)
    t = time.perf_counter()
    targets, times = label_pairs(splits["train"])
    table = compute_labels(graph, targets, times, max_path_length=env.K, config=LabelingConfig())
    out["labels_seconds"] = time.perf_counter() - t
    n_pre = len(train) / PretrainConfig().batch_size
    pre = {}
    for precision in args.precisions:
        pre[precision] = {}
        for S in (1, args.seeds):
            sec, bce = pretrain_seconds(denv, table, train, E, R, S, precision, device, args.batches, args.warmup)
            per_epoch = sec / args.batches * n_pre
            pre[precision][str(S)] = {"stacked": S > 1, "seconds_per_epoch": per_epoch,
                                      "seconds_per_seed_epoch": per_epoch / S, "mean_bce": bce}
            save("pretrain_epoch", pre)

    # TITer-150's training step (its own precision, float32), one seed
    sec, reward = titer_seconds(denv, train, E, R, device, args.batches, args.warmup)
    save("titer_epoch", {"seconds_per_epoch": sec / args.batches * len(train) / 512, "mean_reward": reward})

    # validation and test: beam search and filtered ranks of the whole split
    fi = build_filter(quads, R)
    torch.manual_seed(0)
    policy = Policy(E, R, ModelConfig(), env.K).to(device)
    options = {p: SearchOptions(precision=p, device=device) for p in args.precisions}
    for split in ("valid", "test"):
        q = with_inverse_queries(splits[split], R).astype(np.int64)
        if args.queries:
            q = q[:args.queries]
        res = {}
        for precision in args.precisions:
            search_and_rank(policy, env, q[:64], fi, EvalConfig(), options[precision])  # warm-up
            sync(device)
            t = time.perf_counter()
            _, ranks = search_and_rank(policy, env, q, fi, EvalConfig(), options[precision])
            sync(device)
            res[precision] = {"queries": len(q), "seconds": time.perf_counter() - t, "mrr": float(np.mean(1 / ranks))}
        save("validation" if split == "valid" else "test", res)

    # where a training step's wall time goes
    torch.manual_seed(0)
    policy = Policy(E, R, ModelConfig(), env.K).to(device)
    save("profile", profile(denv, policy, train, device, args.profile_batches))


if __name__ == "__main__":
    main()
