"""Several seeds of reachability pretraining at once, in one process, as one batched step.

The pretraining counterpart of :mod:`raptor.agents.actor_critic.seeds` (read its docstring first):
``S`` seeds' parameters stacked along a leading seed axis (:class:`~raptor.agents.actor_critic.seeds.StackedPolicy`),
their batches stacked along the rows (seed ``s`` owns rows ``[s B, (s + 1) B)``), one labeled walk in
one environment, one label look-up per step for all ``S B`` rows, one loss and one Adam step.

Each seed trains what it would train alone (:func:`raptor.agents.actor_critic.pretrain.pretrain`):

* its batches: epoch ``n``'s order from ``epoch_seed(seed, n, 2)``, as alone;
* its walk: the environment and the labels treat every row alone, and the draw restricted to the
  reachable actions uses each seed's uniforms from its own generator (``epoch_seed(seed, n, 3)``), in
  the same calls (:class:`~raptor.agents.actor_critic.seeds.SeedUniforms`, float32 as
  :func:`raptor.agents.sampling.sample_actions` draws them);
* its gradient: the loss is the sum of the seeds' losses (each the sum over steps of the per-step
  mean BCE over its own rows) and no parameter is shared;
* its update: Adam is elementwise.

What differs is floating-point order (the tests check the same walks, and gradients and histories
equal within rounding, on the CPU). Each seed's run folder is its own, in the format of a run alone
(checkpoints in ``PRETRAIN_CHECKPOINT_FORMAT`` with that seed's optimizer state, snapshots,
``history.json``, ``pretrained.pt``), so a stacked run resumes alone and the other way round.

A partitioned label table (``pretrain.labels_in_memory: part``) is not stacked: each seed visits the
parts in its own order (:func:`raptor.agents.actor_critic.pretrain.epoch_blocks`), so the seeds'
batches of one step would need different parts at once; its seeds are pretrained one after another.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from raptor.agents.actor_critic.pretrain import (PRETRAIN_CHECKPOINT_FORMAT, _READ, prepare_pretrain_runs, pretrain,
                                                 graph_batch, pretrain_options, pretrain_step, pretrain_terms,
                                                 raise_unlabeled, read_stats, wanted_snapshots)
from raptor.agents.actor_critic.graph_step import GraphStep
from raptor.agents.actor_critic.stack import (SeedUniforms, StackedPolicy, aligned_resume_epochs, check_stackable, not_alone,
                                              seed_optimizer_state, stack_optimizer_states)
from raptor.agents.policy import Policy
from raptor.common.io import atomic_write_json
from raptor.common.runtime import adam, autocast, epoch_seed
from raptor.config import PretrainConfig
from raptor.labeling.device import DeviceLabels, device_labels
from raptor.labeling.store import PartitionedLabels
from raptor.labeling.table import LabelTable
from raptor.mdp.device_env import DeviceEnv, on_device
from raptor.mdp.env import TemporalEnv
from raptor.runs.checkpoints import model_meta, save_model
from raptor.runs.loop import Phase, end_epoch, mark_resumed, resume
from raptor.runs.rundir import RunDir, RunOptions

log = logging.getLogger("raptor")

_WHAT = "RAPTOR pretraining checkpoint"


@dataclass
class StackedPretrainBatch:
    #: scalar: the sum over seeds of each seed's loss (what one backward pass trains)
    loss: torch.Tensor
    #: float32 ``[S]``: each seed's loss, as :func:`raptor.agents.actor_critic.pretrain.pretrain_batch` alone
    seed_loss: torch.Tensor
    #: each seed's statistics, as :attr:`raptor.agents.actor_critic.pretrain.PretrainBatch.stats` alone
    stats: list[dict[str, float]]


def pretrain_batch_seeds(stack: StackedPolicy, env: TemporalEnv | DeviceEnv, table: LabelTable | DeviceLabels,
                         queries: np.ndarray, generators: Sequence[torch.Generator], device="cpu",
                         cfg: PretrainConfig = PretrainConfig()) -> StackedPretrainBatch:
    """:func:`raptor.agents.actor_critic.pretrain.pretrain_batch` of ``S = stack.seeds`` seeds at once.

    ``queries``: int64 ``[S B, 4]``, seed-major (seed ``s``'s batch in rows ``[s B, (s + 1) B)``);
    ``generators``: ``S``, seed ``s``'s draws come from ``generators[s]`` exactly as alone. Per step:
    one forward of ``stack`` over ``[S B, A]`` candidates, one label look-up of all ``S B`` rows (host
    or device, as alone), the per-row BCE ``[S B]`` averaged within each seed's rows (``[S]``), one
    draw. The statistics of all seeds are summed as ``[S, ...]`` tensors and read once, at the end.
    """
    S = stack.seeds
    if len(generators) != S or len(queries) % S:
        raise ValueError(f"pretrain_batch_seeds: {len(queries)} rows and {len(generators)} generators "
                         f"for {S} seeds")
    labels = device_labels(table, env.device) if isinstance(env, DeviceEnv) else table
    uniforms = SeedUniforms(generators, len(queries) // S, device, torch.float32)  # as sample_actions draws alone
    loss, seed_loss, read, _ = pretrain_terms(stack, env, labels, queries, uniforms, cfg, device)
    rows = read.tolist()  # the batch's one read, [S, 7]
    if rows[0][_READ.index("unlabeled")]:
        raise_unlabeled(labels, env, queries)
    return StackedPretrainBatch(loss=loss, seed_loss=seed_loss, stats=[read_stats(r, env.K) for r in rows])


def _pretrain_epoch_seeds(stack: StackedPolicy, optimizer: torch.optim.Optimizer, env: TemporalEnv | DeviceEnv,
                         table: LabelTable, queries: np.ndarray, epoch: int, cfg: PretrainConfig,
                         runs: Sequence[RunOptions]) -> list[dict[str, float]]:
    """One pretraining pass over ``queries`` (``[Q, 4]``) for each run's seed at once, each shuffled
    and sampled by ``(seed, epoch)`` as :func:`raptor.agents.actor_critic.pretrain.pretrain` alone;
    returns each seed's epoch means (``S`` rows). The device, precision and progress bar are the
    first run's (the same for all). ``table``: a label table in memory (not partitioned). ``env``: the
    environment, or a :class:`~raptor.agents.actor_critic.graph_step.GraphStep` (:func:`pretrain_step`)."""
    from raptor.common.progress import progress_bar

    run, seeds = runs[0], [r.seed for r in runs]
    S, device, bs = len(seeds), run.device, cfg.batch_size
    stack.train()
    # the permutation epoch_blocks gives alone for a table in memory (one block), from stream 2
    orders = [np.random.default_rng(epoch_seed(seed, epoch, 2)).permutation(len(queries)) for seed in seeds]
    gens = [torch.Generator(device=device).manual_seed(epoch_seed(seed, epoch, 3)) for seed in seeds]
    sums = np.zeros((S, 5))
    keys: tuple[str, ...] = ()
    n_total = 0
    n_batches = math.ceil(len(queries) / bs)
    for i in progress_bar(range(n_batches), desc=f"epoch {epoch}", enabled=run.progress, nested=True,
                          mininterval=1.0):
        rows = [queries[order[i * bs:(i + 1) * bs]] for order in orders]
        n = len(rows[0])
        if isinstance(env, GraphStep):  # the same batch replayed from a CUDA graph
            stats = graph_batch(env, table, np.concatenate(rows), gens, device)
        else:
            with autocast(run.precision, device):
                pb = pretrain_batch_seeds(stack, env, table, np.concatenate(rows), gens, device, cfg)
            optimizer.zero_grad(set_to_none=False)
            pb.loss.backward()
            stats = pb.stats
        optimizer.step()
        keys = tuple(stats[0])
        # summed in the order alone sums them (a float per key, times n), so the means match
        sums += np.array([[st[k] for k in keys] for st in stats]) * n
        n_total += n
    return [dict(zip(keys, (row / max(n_total, 1)).tolist())) for row in sums]


def pretrain_seeds(policies: Sequence[Policy], env: TemporalEnv, table: LabelTable | PartitionedLabels,
                   train_queries: np.ndarray, cfg: PretrainConfig = PretrainConfig(),
                   runs: Sequence[RunOptions] = (), *, snapshots: tuple[int, ...] = ()) -> list[list[dict[str, Any]]]:
    """:func:`raptor.agents.actor_critic.pretrain.pretrain` of ``policies[s]`` with ``runs[s]`` for every
    ``s``, trained at once (the module docstring); returns each seed's history. The runs differ only in
    their seed, folder, hooks and ``meta``; each run folder ends as the run alone would leave it
    (checkpoints, ``pretrained-e{n}.pt`` for ``n`` in ``snapshots``, ``history.json``, ``pretrained.pt``),
    its history rows saying how many seeds trained that epoch at once (``stacked_seeds``). One run,
    runs resumed at different epochs, or a partitioned label table: each seed alone."""
    from raptor.common.progress import progress_bar

    check_stackable("pretrain_seeds", policies, runs)
    n_epochs = cfg.epochs if runs[0].epochs is None else runs[0].epochs

    def alone(reason: str) -> list[list[dict[str, Any]]]:
        if reason:
            log.info("pretrain_seeds: %d seeds pretrained one after another: %s", len(runs), reason)
        return [pretrain(p, env, table, train_queries, cfg, r, snapshots=snapshots) for p, r in zip(policies, runs)]

    if len(runs) == 1:
        return alone("")
    if isinstance(table, PartitionedLabels):
        return alone("a partitioned label table (pretrain.labels_in_memory: part) is read part by part in "
                     "each seed's own order")
    if len(set(aligned_resume_epochs(runs, PRETRAIN_CHECKPOINT_FORMAT, _WHAT))) > 1:
        return alone("their runs resume at different epochs")
    metas = [{**model_meta(p, r.meta, r.seed), "phase": "pretrain"} for p, r in zip(policies, runs)]
    runs = [replace(r, epochs=n_epochs, out_dir=Path(r.out_dir) if r.out_dir is not None else None, meta=m)
            for r, m in zip(runs, metas)]
    device = runs[0].device
    for policy in policies:
        policy.to(device)
    optimizers = [adam(p.parameters(), cfg.learning_rate) for p in policies]

    def snapshot_of(s: int):
        def snapshot(epoch: int, row: dict[str, Any], last: bool) -> bool:
            out = runs[s].out_dir
            if out is not None and epoch + 1 in snapshots:  # before the checkpoint past it, as alone
                save_model(RunDir(out).snapshot(epoch + 1), policies[s], {**metas[s], "epoch": epoch})
            return False
        return snapshot

    def write_history(folder: Path, history: list[dict[str, Any]]) -> None:
        atomic_write_json(RunDir(folder).history, history)

    phases = [Phase("pretrain", PRETRAIN_CHECKPOINT_FORMAT, _WHAT, run_epoch=not_alone, write_history=write_history,
                    after_epoch=snapshot_of(s), budget_bound=False) for s in range(len(runs))]
    resumed = [resume(ph, p, opt, r) for ph, p, opt, r in zip(phases, policies, optimizers, runs)]
    histories = [h for h, _ in resumed]
    start = resumed[0][1]
    queries = np.ascontiguousarray(train_queries, dtype=np.int64)
    host_env, env = env, on_device(env, device, runs[0].env_backend)
    stack = StackedPolicy(policies).to(device)
    env = pretrain_step(stack, env, host_env, table, len(runs), cfg, runs[0])
    optimizer = adam(stack.parameters(), cfg.learning_rate)
    states = [opt.state_dict() for opt in optimizers]
    if states[0]["state"]:  # resumed: Adam's moments and step count, each seed's own
        optimizer.load_state_dict(stack_optimizer_states(states))
    # counted by hand, as raptor.runs.loop.run_epochs does (a bar in a log file counts lazily)
    bar = progress_bar(desc=f"pretrain {len(runs)} seeds", enabled=runs[0].progress, initial=start, total=n_epochs)
    for epoch in range(start, n_epochs):
        t0 = time.perf_counter()
        rows = _pretrain_epoch_seeds(stack, optimizer, env, table, queries, epoch, cfg, runs)
        seconds = time.perf_counter() - t0
        stack.unstack_into(policies)
        opt_state = optimizer.state_dict()
        for s in range(len(runs)):
            row = {"epoch": epoch, **rows[s], "seconds": seconds, "stacked_seeds": len(runs)}
            mark_resumed(row, start)
            end_epoch(phases[s], runs[s], row, histories[s],
                      lambda s=s: (policies[s].state_dict(), seed_optimizer_state(opt_state, s)))
        bar.update(1)
        bar.set_postfix(bce=f"{np.mean([row['bce'] for row in rows]):.3f}")
    bar.close()
    trained = start < n_epochs
    for s, run in enumerate(runs):
        out = run.out_dir
        if out is not None and (trained or not RunDir(out).pretrained.exists()):  # a finished run: left as it is
            save_model(RunDir(out).pretrained, policies[s], {**metas[s], "epoch": n_epochs - 1})
            atomic_write_json(RunDir(out).history, histories[s])
    return histories


def pretrain_runs(ctx, labels: LabelTable | str | Path, epochs: Sequence[int], runs: Sequence[RunOptions],
                  on_epoch_end: Optional[Sequence[Optional[Callable[[str, int, dict[str, Any]], None]]]] = None
                  ) -> list[dict[int, str]]:
    """:func:`raptor.agents.actor_critic.pretrain.pretrain_run` of every run in ``runs`` (one per seed,
    each with its folder; ``on_epoch_end[s]``: seed ``s``'s hook), trained at once
    (:func:`pretrain_seeds`): the folders are prepared against the same fingerprints as alone and the
    label table is loaded once. Returns each seed's ``{n: snapshot path}``."""
    wanted = wanted_snapshots(epochs)
    if not wanted or not runs:
        return [{} for _ in runs]
    hooks = list(on_epoch_end) if on_epoch_end is not None else [None] * len(runs)
    if len(hooks) != len(runs):
        raise ValueError(f"pretrain_runs: {len(hooks)} hooks for {len(runs)} runs")
    if len({r.seed for r in runs}) != len(runs):  # before any folder is prepared
        raise ValueError(f"pretrain_runs: repeated seeds {[r.seed for r in runs]}")
    table = prepare_pretrain_runs(ctx, labels, wanted, runs)
    built = [pretrain_options(ctx, r, wanted, hook) for r, hook in zip(runs, hooks)]
    pretrain_seeds([policy for policy, _ in built], ctx.env, table, ctx.train_queries, ctx.params.pretrain,
                   [options for _, options in built], snapshots=tuple(wanted))
    return [{n: str(RunDir(r.out_dir).snapshot(n)) for n in wanted} for r in runs]
