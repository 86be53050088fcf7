"""Actor-critic training of the policy (paper, Appendix C), with checkpoints, resume and validation.

One episode per training query (both directions), ``K`` actions each, batched ``batch_size`` queries
at a time:

* binary terminal reward ``R = 1[e_K = o_q]`` (STOP keeps the agent in place, so an agent that
  reached ``o_q`` early can stay there);
* return ``g_k = gamma^(K-1-k) R`` and advantage ``Adv_k = g_k - V(s_k)``;
* loss, averaged over the episodes of a batch and summed over steps::

      - sum_k log pi(a_k | s_k) * stopgrad(Adv_k)      (actor)
      - beta_n * sum_k H(pi(. | s_k))                   (entropy bonus)
      + sum_k (V(s_k) - g_k)^2                          (critic)

  with ``beta_n = beta_0 * zeta^n`` for epoch ``n`` (constant within an epoch; ``rl.entropy_decay_per:
  batch`` counts the batches trained before instead, as TITer's trainer). The critic reads a
  detached ``u`` (its loss trains the critic MLP ``phi`` only, the paper's ``min_phi``), so the
  critic term's weight does not interact with the actor's; Adam on all parameters jointly
  (``rl.weight_decay``, none by default), the gradient's norm clipped at ``rl.clip_gradient`` if set.

Reproducibility: the shuffling order and the action-sampling generator of epoch ``n`` are derived
from ``(seed, n)`` only, and checkpoints are written at epoch boundaries with the optimizer state,
so a run resumed from a checkpoint repeats exactly the epochs an uninterrupted run would have done
(bit-identical on the same machine and thread count).

Read top to bottom: the loss of one batch, one epoch, the run. The rollout it learns from is
:func:`raptor.agents.rollout.rollout`; the epoch loop (checkpoints, resume, history, validation and early
stopping) is :mod:`raptor.runs.loop`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from raptor.runs import checkpoints
from raptor.runs.rundir import RunOptions
from raptor.runs.checkpoints import model_meta
from raptor.config import EvalConfig, RLConfig
from raptor.mdp.env import TemporalEnv
from raptor.runs.loop import Phase, Selection, TrainResult, rl_postfix, run_epochs, write_history
from raptor.agents.actor_critic.graph_step import GraphStep, draw_uniforms, graph_step, rl_forward
from raptor.agents.policy import Policy
from raptor.mdp.device_env import on_device
from raptor.agents.rollout import Rollout, rollout
from raptor.common.runtime import adam, autocast, epoch_seed

CHECKPOINT_FORMAT = checkpoints.RL_CHECKPOINT_FORMAT


#: The parts of :func:`actor_critic_loss` in the order of :func:`actor_critic_terms`' second tensor.
LOSS_PARTS = ("actor_loss", "critic_loss", "entropy", "reward")


def actor_critic_loss(ro: Rollout, gamma: float, beta: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Appendix C loss of one batch (see the module docstring); also returns its parts (one read)."""
    loss, parts = actor_critic_terms(ro, gamma, beta)
    return loss, dict(zip(LOSS_PARTS, parts.tolist()))


def actor_critic_terms(ro: Rollout, gamma: float, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`actor_critic_loss` without reading anything back: ``(loss, parts)`` with ``parts`` float32
    ``[4]`` in the order of :data:`LOSS_PARTS` (entropy per step), for a step that must not sync."""
    loss, parts = grouped_actor_critic_terms(ro, gamma, beta, 1)
    return loss, parts[0]


def grouped_actor_critic_terms(ro: Rollout, gamma: float, beta: float, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss of ``groups`` independent batches stacked in one rollout (rows ``[g * B, (g + 1) * B)``
    are batch ``g``, e.g. one seed's: :mod:`raptor.agents.actor_critic.seeds`): the sum of each batch's
    loss, so each batch's parameters get the gradient of their own batch's mean; ``parts``
    ``[groups, 4]``. With ``groups = 1`` the same numbers, bit for bit, as one batch (tested)."""
    K = ro.log_prob.shape[1]
    # built on the device (float64 powers, as Python's, then float32): no host-to-device copy per batch
    disc = torch.pow(gamma, torch.arange(K - 1, -1, -1, dtype=torch.float64, device=ro.reward.device)).float()

    def per_group(x: torch.Tensor) -> torch.Tensor:  # [groups * B, ...] -> [groups, B, ...]
        return x.reshape(groups, -1, *x.shape[1:])

    reward, value = per_group(ro.reward), per_group(ro.value)
    g = reward[..., None] * disc  # [groups, B, K]
    adv = (g - value).detach()
    actor = -(per_group(ro.log_prob) * adv).sum(2).mean(1)
    entropy = per_group(ro.entropy).sum(2).mean(1)
    critic = ((value - g) ** 2).sum(2).mean(1)
    loss = (actor - beta * entropy + critic).sum()
    # one tensor for the numbers: one device-to-host copy (each float() would wait for the device)
    parts = torch.stack([actor.detach().float(), critic.detach().float(), entropy.detach().float() / K,
                         reward.float().mean(1)], 1)
    return loss, parts


# ------------------------------------------------------------------------------------------------
# Training loop
# ------------------------------------------------------------------------------------------------


def entropy_coefficient(rl: RLConfig, epoch: int, batch: int, batches_per_epoch: int) -> float:
    """``beta_n = beta_0 zeta^n`` of batch ``batch`` of epoch ``epoch``: ``n`` is the epoch
    (``rl.entropy_decay_per: epoch``) or the batches trained before this one (``batch``, TITer's)."""
    n = epoch * batches_per_epoch + batch if rl.entropy_decay_per == "batch" else epoch
    return rl.entropy_beta0 * rl.entropy_decay ** n


def train_epoch(policy: Policy, optimizer: torch.optim.Optimizer, env: TemporalEnv, queries: np.ndarray,
                epoch: int, rl: RLConfig, run: RunOptions = RunOptions(progress=False)) -> dict[str, float]:
    """One pass over ``queries`` (shuffled by ``(run.seed, epoch)``); returns epoch means (``run``: its
    seed, precision, device and progress bar). ``env``: the environment, or a
    :class:`raptor.agents.actor_critic.graph_step.GraphStep` that runs each batch's rollout, loss and
    backward (the same step, replayed from a CUDA graph)."""
    from raptor.common.progress import progress_bar

    seed, precision, device, progress = run.seed, run.precision, run.device, run.progress

    policy.train()
    order = np.random.default_rng(epoch_seed(seed, epoch, 0)).permutation(len(queries))
    gen = torch.Generator(device=device).manual_seed(epoch_seed(seed, epoch, 1))
    sums: dict[str, float] = {}
    norm_sum: Optional[torch.Tensor] = None
    n_total = 0
    bs = rl.batch_size
    n_batches = math.ceil(len(queries) / bs)
    beta0 = entropy_coefficient(rl, epoch, 0, n_batches)  # the epoch's (its first batch's, per batch)
    bar = progress_bar(range(n_batches), desc=f"epoch {epoch}", enabled=progress, nested=True, mininterval=1.0)
    for i in bar:
        batch = queries[order[i * bs:(i + 1) * bs]]
        beta = beta0 if rl.entropy_decay_per == "epoch" else entropy_coefficient(rl, epoch, i, n_batches)
        if isinstance(env, GraphStep):  # the same step replayed from a CUDA graph (graph_step.py)
            parts = dict(zip(LOSS_PARTS, env(batch, draw_uniforms([gen], len(batch), env.fixed.K, device),
                                             beta)[0].tolist()))
        else:
            with autocast(precision, device):
                ro = rollout(policy, env, batch, gen, device)
            loss, parts = actor_critic_loss(ro, rl.gamma, beta)
            # Keep the gradient buffers (zeroed in place): re-allocating the [E, d] entity gradient each
            # batch cost more than the rest of its backward (page faults on fresh memory).
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
        n = len(batch)
        if rl.clip_gradient:  # the norm before clipping goes to the history, summed on the device (no sync)
            norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), rl.clip_gradient).double() * n
            norm_sum = norm if norm_sum is None else norm_sum + norm
        optimizer.step()
        n_total += n
        for key, val in parts.items():
            sums[key] = sums.get(key, 0.0) + val * n
        if progress and i % 20 == 0:
            bar.set_postfix(reward=f"{sums['reward'] / n_total:.3f}")
    if norm_sum is not None:
        sums["grad_norm"] = float(norm_sum)
    out = {key: val / max(n_total, 1) for key, val in sums.items()}
    out["entropy_beta"] = beta0
    return out


def make_optimizer(policy: Policy, rl: RLConfig) -> torch.optim.Optimizer:
    """Adam over all parameters jointly (the paper's single optimizer), with ``rl.weight_decay``."""
    return adam(policy.parameters(), rl.learning_rate, rl.weight_decay)


HISTORY_FIELDS = ("epoch", "reward", "actor_loss", "critic_loss", "entropy", "entropy_beta", "val_mrr",
                  "seconds", "val_seconds")


def _write_history(out: Path, history: list[dict[str, Any]]) -> None:
    write_history(out, history, HISTORY_FIELDS)


def load_checkpoint(path: Path) -> dict | None:
    """The RL checkpoint at ``path`` (or the one before it, if the latest is unreadable)."""
    return checkpoints.load_latest(path, CHECKPOINT_FORMAT, "RAPTOR RL checkpoint")


def train(policy: Policy, env: TemporalEnv, train_queries: np.ndarray, rl: RLConfig = RLConfig(),
          eval_cfg: EvalConfig = EvalConfig(), run: RunOptions = RunOptions(resume=False)) -> TrainResult:
    """Actor-critic training for ``run.epochs`` (default ``rl.epochs``) epochs.

    Args:
        train_queries: int ``[n, 4]`` queries, both directions (see ``data.with_inverse_queries``).
        run: the seed, precision, device, folder and hooks (:class:`raptor.agents.base.RunOptions`):
        evaluate_fn: ``policy -> {"mrr": ..., ...}`` on the validation split (beam search); called
            after every ``eval_cfg.valid_every``-th epoch and after the last one. The best-MRR
            weights go to ``out_dir/best.pt``. With ``eval_cfg.patience > 0`` training ends after
            that many validation rounds in a row without a better MRR (the history then ends early).
        out_dir: where ``checkpoint.pt`` (latest, atomic), ``best.pt``, ``final.pt``, ``history.json``
            and ``history.csv`` are written; ``None`` writes nothing.
        resume: continue from ``out_dir/checkpoint.pt`` if it exists.
        on_epoch_end: ``(epoch, metrics)`` hook (e.g. MLflow logging by the orchestration layer).
    """
    n_epochs = rl.epochs if run.epochs is None else run.epochs
    out = Path(run.out_dir) if run.out_dir is not None else None
    meta = model_meta(policy, run.meta, run.seed)
    run = replace(run, epochs=n_epochs, out_dir=out, meta=meta)
    policy.to(run.device)
    optimizer = make_optimizer(policy, rl)
    queries = np.ascontiguousarray(train_queries, dtype=np.int64)
    env = graph_step(policy, on_device(env, run.device, run.env_backend), env, rl.batch_size,
                     rl_forward(policy, lambda ro, beta: actor_critic_terms(ro, rl.gamma, beta), run.precision,
                                run.device), run)
    selection = Selection(policy, run.evaluate_fn, eval_cfg.valid_every, eval_cfg.patience, out, meta,
                          early=(eval_cfg.valid_every_early, eval_cfg.valid_early_epochs))

    def run_epoch(epoch: int) -> dict[str, Any]:
        return train_epoch(policy, optimizer, env, queries, epoch, rl, run)

    phase = Phase("train", CHECKPOINT_FORMAT, "RAPTOR RL checkpoint", run_epoch, _write_history,
                  selection.after_epoch, postfix=rl_postfix, state=selection.state, done=selection.done,
                  after_checkpoint=selection.commit)
    history = run_epochs(phase, policy, optimizer, run)
    return selection.finish(history, n_epochs)
