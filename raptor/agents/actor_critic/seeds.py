"""Several seeds of the actor-critic agent trained at once, in one process, as one batched step.

A GPU runs one seed's RL step far below its arithmetic rate: the step is a few hundred small
kernels, each waiting for its launch (issue 37). ``S`` seeds trained at once make every kernel ``S``
times wider instead of ``S`` times as many: their parameters are stacked along a leading seed axis
(:class:`StackedPolicy`), their batches stacked along the rows (seed ``s`` owns rows
``[s B, (s + 1) B)``), and one rollout in one environment, one loss and one optimizer step serve all
of them.

Each seed trains what it would train alone (:func:`raptor.agents.actor_critic.rl.train`):

* its batches: the shuffling order of epoch ``n`` from ``(seed, n)``, as alone;
* its episodes: the environment treats every row alone, and each seed's uniforms are drawn from its
  own generator, seeded as alone, in the same calls (:class:`SeedUniforms`);
* its gradient: the loss is the sum of the seeds' losses
  (:func:`raptor.agents.actor_critic.rl.grouped_actor_critic_terms`), and no parameter is shared, so
  seed ``s``'s slice gets the gradient of its own batch; gradient clipping is per seed
  (:func:`clip_per_seed`);
* its update: Adam (and its weight decay) is elementwise, so the stacked update is each seed's own.

What differs is floating-point order: a stacked product sums in another order than an unstacked one
(the tests check the same episodes and gradients equal within rounding, on CPU). The checkpoints are
each seed's own, in the format of a run trained alone (:func:`seed_optimizer_state`), so a stacked
run resumes alone and the other way round.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from raptor.agents.actor_critic.graph_step import GraphStep, draw_uniforms, graph_step, rl_forward
from raptor.agents.actor_critic.rl import (CHECKPOINT_FORMAT, LOSS_PARTS, _write_history, entropy_coefficient,
                                           grouped_actor_critic_terms, make_optimizer, train)
from raptor.agents.actor_critic.stack import (SeedUniforms, StackedPolicy, check_stackable, clip_per_seed,  # noqa: F401
                                              aligned_resume_epochs, not_alone, resume_epoch, seed_optimizer_state,
                                              stack_optimizer_states)
from raptor.agents.policy import Policy
from raptor.agents.rollout import rollout
from raptor.common.runtime import autocast, epoch_seed
from raptor.config import EvalConfig, RLConfig
from raptor.mdp.device_env import on_device
from raptor.mdp.env import TemporalEnv
from raptor.runs.checkpoints import model_meta
from raptor.runs.loop import Phase, Selection, TrainResult, end_epoch, mark_resumed, resume
from raptor.runs.rundir import RunOptions

# ------------------------------------------------------------------------------------------------
# One epoch of S seeds
# ------------------------------------------------------------------------------------------------


def train_epoch(stack: StackedPolicy, optimizer: torch.optim.Optimizer, env: TemporalEnv, queries: np.ndarray,
                epoch: int, rl: RLConfig, runs: Sequence[RunOptions]) -> list[dict[str, float]]:
    """One pass over ``queries`` for each run's seed at once (each shuffled by ``(seed, epoch)``, as
    :func:`raptor.agents.actor_critic.rl.train_epoch` alone); returns each seed's epoch means. The
    device, precision and progress bar are the first run's (the same for all)."""
    from raptor.common.progress import progress_bar

    run, seeds = runs[0], [r.seed for r in runs]
    S, device = len(seeds), run.device
    stack.train()
    orders = [np.random.default_rng(epoch_seed(seed, epoch, 0)).permutation(len(queries)) for seed in seeds]
    gens = [torch.Generator(device=device).manual_seed(epoch_seed(seed, epoch, 1)) for seed in seeds]
    # Summed where they are made (parts: on the host from a GraphStep, else on the device; the norms on
    # the device) and read once, after the epoch: no device sync per batch for the history.
    part_sums: Optional[torch.Tensor] = None  # [S, 4] float64, the LOSS_PARTS
    norm_sums = torch.zeros(S, dtype=torch.float64, device=device)
    n_total = 0
    bs = rl.batch_size
    n_batches = math.ceil(len(queries) / bs)
    beta0 = entropy_coefficient(rl, epoch, 0, n_batches)
    bar = progress_bar(range(n_batches), desc=f"epoch {epoch}", enabled=run.progress, nested=True, mininterval=1.0)
    for i in bar:
        rows = [queries[order[i * bs:(i + 1) * bs]] for order in orders]
        n = len(rows[0])
        beta = beta0 if rl.entropy_decay_per == "epoch" else entropy_coefficient(rl, epoch, i, n_batches)
        if isinstance(env, GraphStep):  # the same step replayed from a CUDA graph (graph_step.py)
            parts = env(np.concatenate(rows), draw_uniforms(gens, n, env.fixed.K, device), beta)
        else:
            with autocast(run.precision, device):
                ro = rollout(stack, env, np.concatenate(rows), device=device, uniforms=SeedUniforms(gens, n, device))
            loss, parts = grouped_actor_critic_terms(ro, rl.gamma, beta, S)
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
        norms = clip_per_seed(stack, rl.clip_gradient) if rl.clip_gradient else torch.zeros(S, device=parts.device)
        optimizer.step()
        part_sums = parts.double() * n if part_sums is None else part_sums + parts.double() * n
        norm_sums += norms.double() * n
        n_total += n
    if part_sums is None:  # no queries
        part_sums = torch.zeros(S, len(LOSS_PARTS), dtype=torch.float64)
    sums = torch.cat([part_sums.cpu(), norm_sums.cpu()[:, None]], 1)
    means = (sums / max(n_total, 1)).tolist()
    keys = LOSS_PARTS + (("grad_norm",) if rl.clip_gradient else ())
    return [{**dict(zip(keys, row)), "entropy_beta": beta0} for row in means]


# ------------------------------------------------------------------------------------------------
# The runs
# ------------------------------------------------------------------------------------------------


def train_seeds(policies: Sequence[Policy], env: TemporalEnv, train_queries: np.ndarray, rl: RLConfig = RLConfig(),
                eval_cfg: EvalConfig = EvalConfig(), runs: Sequence[RunOptions] = ()) -> list[TrainResult]:
    """:func:`raptor.agents.actor_critic.rl.train` of ``policies[s]`` with ``runs[s]`` for every ``s``,
    trained at once (the module docstring). The runs differ only in their seed, folder, hooks and
    ``meta``; each run folder ends as the run alone would leave it (checkpoints, history, ``best.pt``,
    ``final.pt``), its history rows saying how many seeds trained that epoch at once
    (``stacked_seeds``). Runs that an interrupted stack left a checkpoint apart go on stacked
    (:func:`raptor.agents.actor_critic.stack.aligned_resume_epochs`); runs resumed at other different epochs,
    or a single run, are trained alone."""
    from raptor.common.progress import progress_bar

    check_stackable("train_seeds", policies, runs)
    n_epochs = rl.epochs if runs[0].epochs is None else runs[0].epochs
    runs = [replace(r, epochs=n_epochs, out_dir=Path(r.out_dir) if r.out_dir is not None else None,
                    meta=model_meta(p, r.meta, r.seed)) for p, r in zip(policies, runs)]
    if len(runs) == 1 or len(set(aligned_resume_epochs(runs, CHECKPOINT_FORMAT, "RAPTOR RL checkpoint"))) > 1:
        # alone (seeds resumed apart, not by an interrupted stack): the summary still says how many seeds
        # trained the epochs that were stacked
        return [_most_stacked(train(p, env, train_queries, rl, eval_cfg, r)) for p, r in zip(policies, runs)]
    device = runs[0].device
    for policy in policies:
        policy.to(device)
    alone = [make_optimizer(p, rl) for p in policies]
    selections = [Selection(p, r.evaluate_fn, eval_cfg.valid_every, eval_cfg.patience, r.out_dir, r.meta,
                            early=(eval_cfg.valid_every_early, eval_cfg.valid_early_epochs))
                  for p, r in zip(policies, runs)]
    phases = [Phase("train", CHECKPOINT_FORMAT, "RAPTOR RL checkpoint", run_epoch=not_alone, write_history=_write_history,
                    after_epoch=sel.after_epoch, after_checkpoint=sel.commit, state=sel.state, done=sel.done)
              for sel in selections]
    resumed = [resume(ph, p, opt, r) for ph, p, opt, r in zip(phases, policies, alone, runs)]
    starts = {start for _, start in resumed}
    histories = [h for h, _ in resumed]
    queries = np.ascontiguousarray(train_queries, dtype=np.int64)
    host_env, env = env, on_device(env, device, runs[0].env_backend)
    active = [s for s in range(len(runs)) if not selections[s].done()]
    stack, optimizer = _stack(policies, alone, active, rl)
    step = _graph_step(stack, env, host_env, rl, runs[0])
    start = starts.pop()
    # counted by hand, as raptor.runs.loop.run_epochs does (a bar in a log file counts lazily)
    bar = progress_bar(desc=f"train {len(runs)} seeds", enabled=runs[0].progress, initial=start, total=n_epochs)
    for epoch in range(start, n_epochs):
        if not active:
            break
        t0 = time.perf_counter()
        rows = train_epoch(stack, optimizer, step, queries, epoch, rl, [runs[s] for s in active])
        seconds = time.perf_counter() - t0
        stack.unstack_into([policies[s] for s in active])
        opt_state = optimizer.state_dict()
        for j, s in enumerate(active):
            row = {"epoch": epoch, **rows[j], "seconds": seconds, "stacked_seeds": len(active)}
            mark_resumed(row, start)
            end_epoch(phases[s], runs[s], row, histories[s],
                      lambda s=s, j=j: (policies[s].state_dict(), seed_optimizer_state(opt_state, j)))
        bar.update(1)
        bar.set_postfix(reward=f"{np.mean([row['reward'] for row in rows]):.3f}")
        still = [s for s in active if not selections[s].done()]
        if still != active:  # early stopping ended some seeds: the others go on as a smaller stack
            for j, s in enumerate(active):
                alone[s].load_state_dict(seed_optimizer_state(opt_state, j))
            active = still
            if active:
                stack, optimizer = _stack(policies, alone, active, rl)
                step = _graph_step(stack, env, host_env, rl, runs[0])
    bar.close()
    return [_most_stacked(sel.finish(h, n_epochs)) for sel, h in zip(selections, histories)]


def _most_stacked(result: TrainResult) -> TrainResult:
    """``result`` saying the most seeds any of its epochs was trained with at once (its rows' ``stacked_seeds``)."""
    return replace(result, stacked_seeds=max([row.get("stacked_seeds", 1) for row in result.history] or [1]))


def _graph_step(stack: StackedPolicy, env, host_env: TemporalEnv, rl: RLConfig, run: RunOptions):
    """What :func:`train_epoch` steps through for ``stack``: ``env``, or its CUDA-graph step."""
    terms = lambda ro, beta: grouped_actor_critic_terms(ro, rl.gamma, beta, stack.seeds)  # noqa: E731
    return graph_step(stack, env, host_env, stack.seeds * rl.batch_size, rl_forward(stack, terms, run.precision,
                                                                                   run.device), run)


def _stack(policies: Sequence[Policy], optimizers: Sequence[torch.optim.Optimizer], active: Sequence[int],
           rl: RLConfig) -> tuple[StackedPolicy, torch.optim.Optimizer]:
    """The stack of ``policies[active]`` and its optimizer, holding their optimizers' states."""
    device = next(policies[active[0]].parameters()).device
    stack = StackedPolicy([policies[s] for s in active]).to(device)
    optimizer = make_optimizer(stack, rl)
    states = [optimizers[s].state_dict() for s in active]
    if states[0]["state"]:  # resumed (or continued after early stopping): Adam's moments and step count
        optimizer.load_state_dict(stack_optimizer_states(states))
    return stack, optimizer
