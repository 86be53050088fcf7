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

  with ``beta_n = beta_0 * zeta^n`` for epoch ``n`` (constant within an epoch). The critic reads a
  detached ``u`` (its loss trains the critic MLP ``phi`` only, the paper's ``min_phi``), so the
  critic term's weight does not interact with the actor's; Adam on all parameters jointly.

Reproducibility: the shuffling order and the action-sampling generator of epoch ``n`` are derived
from ``(seed, n)`` only, and checkpoints are written at epoch boundaries with the optimizer state,
so a run resumed from a checkpoint repeats exactly the epochs an uninterrupted run would have done
(bit-identical on the same machine and thread count).

Building blocks reused by the pretraining loop: :func:`query_tensors`, :func:`score_candidates`,
:func:`sample_actions`, :func:`advance`, :func:`rollout`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numba
import numpy as np
import torch

from . import checkpoints
from .config import EvalConfig, RLConfig
from .env import Candidates, State, TemporalEnv
from .loop import Phase, Selection, TrainResult, run_epochs, write_history
from .policy import Policy
from .checkpoints import model_meta
from .runtime import autocast, epoch_seed

CHECKPOINT_FORMAT = checkpoints.RL_CHECKPOINT_FORMAT


# ------------------------------------------------------------------------------------------------
# Building blocks
# ------------------------------------------------------------------------------------------------


def query_embedding(policy: Policy, state: State, device) -> torch.Tensor:
    """``[Emb_E(e_q); r(r_q, 0)]`` of the rows of ``state`` (computed once per rollout)."""
    return policy.query_embedding(torch.from_numpy(state.query_entity).to(device),
                                  torch.from_numpy(state.query_relation).to(device))


def query_context(policy: Policy, state: State, device) -> dict[str, torch.Tensor]:
    """What the heads need from the query, once per rollout (:meth:`Policy.precompute_query`)."""
    return policy.precompute_query(query_embedding(policy, state, device))


@dataclass
class CandidateTensors:
    entity: torch.Tensor  # int64 [B, A]
    relation: torch.Tensor  # int64 [B, A]
    dt: torch.Tensor  # int64 [B, A], t_q - t'
    mask: torch.Tensor  # bool [B, A]


def candidate_tensors(state: State, cands: Candidates, device) -> CandidateTensors:
    dt = state.query_time[:, None] - cands.time
    # real actions have t' <= t_q and padding has time 0, so dt >= 0 always; the clip is a guard
    np.maximum(dt, 0, out=dt)
    return CandidateTensors(
        entity=torch.from_numpy(cands.entity).to(device),
        relation=torch.from_numpy(cands.relation).to(device),
        dt=torch.from_numpy(dt).to(device),
        mask=torch.from_numpy(cands.mask).to(device),
    )


def score_candidates(policy: Policy, state: State, ct: CandidateTensors, h: torch.Tensor,
                     q: dict[str, torch.Tensor], critic: bool = True):
    """Policy forward over the candidates of ``state``: ``(logits [B, A] masked -inf, V [B] or None)``.

    ``q`` is :func:`query_context`; ``logits`` are the raw ``z(a)`` (the pretraining loss applies
    a sigmoid to them).
    """
    s, v = policy.heads(q, h, state.step, critic=critic)
    z = policy.candidate_logits(s, ct.entity, ct.relation, ct.dt, ct.mask)
    return z, (v.float() if v is not None else None)


def sample_actions(logits: torch.Tensor, generator: Optional[torch.Generator] = None,
                   allowed: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Sample one slot per row from ``softmax(logits)`` (restricted to ``allowed`` if given; a row
    with nothing allowed falls back to all valid slots). Returns int64 ``[B]``."""
    z = logits.detach().float()
    if allowed is not None:
        restricted = z.masked_fill(~allowed, float("-inf"))
        ok = torch.isfinite(restricted).any(dim=1, keepdim=True)
        z = torch.where(ok, restricted, z)
    # Inverse-CDF sampling: one uniform per row (torch.multinomial draws one per candidate).
    p = torch.softmax(z, dim=1)
    cdf = torch.cumsum(p, dim=1)
    u = torch.rand((z.shape[0], 1), generator=generator, device=z.device, dtype=cdf.dtype) * cdf[:, -1:]
    choice = torch.searchsorted(cdf, u, right=True).squeeze(1)
    # Guard against rounding at the top end and zero-probability slots.
    last_valid = (p > 0).to(torch.int64).cumsum(1).argmax(1)
    choice = torch.minimum(choice, last_valid)
    return choice


def advance(policy: Policy, env: TemporalEnv, state: State, cands: Candidates, choice: torch.Tensor,
            hc, need_path: bool = True):
    """Take ``choice``; returns ``(next_state, next_hc)`` (``hc`` unchanged when ``need_path`` is false,
    e.g. after the last action, whose ``h_K`` nobody reads)."""
    ch = choice.cpu().numpy()
    nxt = env.step(state, cands, ch)
    if need_path:
        dev = hc[0].device
        e = torch.from_numpy(nxt.entity).to(dev)
        r = torch.from_numpy(nxt.path_relation[:, -1].copy()).to(dev)
        dt = torch.from_numpy(nxt.query_time - nxt.time).to(dev)
        hc = policy.advance_path(hc, e, r, dt)
    return nxt, hc


@numba.njit(cache=True, nogil=True)
def _sample_fwd(z, mask, u, choice, logp_c, ent, p):  # pragma: no cover - compiled
    B, A = z.shape
    for b in range(B):
        m = -np.inf
        last = 0
        for a in range(A):
            if mask[b, a]:
                last = a
                if z[b, a] > m:
                    m = z[b, a]
        tot = 0.0
        for a in range(A):
            if mask[b, a]:
                e = np.exp(z[b, a] - m)
                p[b, a] = e
                tot += e
            else:
                p[b, a] = 0.0
        lse = m + np.log(tot)
        target = u[b] * tot
        cum = 0.0
        ch = -1
        h = 0.0
        for a in range(A):
            if mask[b, a]:
                cum += p[b, a]
                if ch < 0 and cum > target:
                    ch = a
                pa = p[b, a] / tot
                p[b, a] = pa
                h -= pa * (z[b, a] - lse)
        if ch < 0:
            ch = last
        choice[b] = ch
        logp_c[b] = z[b, ch] - lse
        ent[b] = h


@numba.njit(cache=True, nogil=True)
def _sample_bwd(gl, ge, z, mask, p, choice, logp_c, ent, dz):  # pragma: no cover - compiled
    B, A = z.shape
    for b in range(B):
        lse = z[b, choice[b]] - logp_c[b]
        h = ent[b]
        for a in range(A):
            if mask[b, a]:
                pa = p[b, a]
                dz[b, a] = -gl[b] * pa - ge[b] * pa * (z[b, a] - lse + h)
            else:
                dz[b, a] = 0.0
        dz[b, choice[b]] += gl[b]


class _SampleStep(torch.autograd.Function):
    """Sample ``a ~ softmax(z)`` over ``mask`` (inverse CDF with one uniform ``u`` per row) and return
    ``(choice, log pi(choice), H(pi))`` in one pass, with the analytic backward. Same distribution
    and values as ``log_softmax`` + :func:`sample_actions` + the entropy formula (tests check it)."""

    @staticmethod
    def forward(ctx, z, mask, u):
        z_ = z.detach().float().contiguous()
        B = z_.shape[0]
        choice = torch.empty(B, dtype=torch.int64)
        logp_c = torch.empty(B, dtype=torch.float32)
        ent = torch.empty(B, dtype=torch.float32)
        p = torch.empty_like(z_)
        _sample_fwd(z_.numpy(), mask.contiguous().numpy(), u.contiguous().numpy(), choice.numpy(), logp_c.numpy(),
                    ent.numpy(), p.numpy())
        ctx.save_for_backward(z_, mask, p, choice, logp_c, ent)
        ctx.mark_non_differentiable(choice)
        return choice, logp_c, ent

    @staticmethod
    def backward(ctx, _gc, gl, ge):
        z_, mask, p, choice, logp_c, ent = ctx.saved_tensors
        B = z_.shape[0]
        gl = torch.zeros(B) if gl is None else gl.float().contiguous()
        ge = torch.zeros(B) if ge is None else ge.float().contiguous()
        dz = torch.empty_like(z_)
        _sample_bwd(gl.numpy(), ge.numpy(), z_.numpy(), mask.numpy(), p.numpy(), choice.numpy(), logp_c.numpy(),
                    ent.numpy(), dz.numpy())
        return dz, None, None


def sample_step(z: torch.Tensor, mask: torch.Tensor, generator: Optional[torch.Generator] = None):
    """``(choice [B], log pi(choice) [B], entropy [B])`` of one step (CPU: one fused kernel)."""
    u = torch.rand(z.shape[0], generator=generator, device=z.device, dtype=torch.float64)
    if z.device.type == "cpu":
        return _SampleStep.apply(z, mask, u)
    logp = torch.log_softmax(z.float(), dim=1)
    p = logp.exp()
    cdf = torch.cumsum(p.double(), dim=1)
    choice = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)
    choice = torch.minimum(choice, mask.sum(1) - 1)
    ent = -(p * logp.masked_fill(~mask, 0.0)).sum(1)
    return choice, logp.gather(1, choice[:, None]).squeeze(1), ent


@dataclass
class Rollout:
    log_prob: torch.Tensor  # [B, K] log pi(a_k | s_k)
    entropy: torch.Tensor  # [B, K]
    value: torch.Tensor  # [B, K]
    final: State
    reward: torch.Tensor  # [B]


def rollout(policy: Policy, env: TemporalEnv, queries: np.ndarray, generator: Optional[torch.Generator] = None,
            device="cpu") -> Rollout:
    """Run ``K`` sampled steps for a batch of ``[B, 4]`` training queries (one episode each)."""
    state = env.reset(queries)
    B = state.batch_size
    q = query_context(policy, state, device)
    hc = policy.initial_path_state(B)
    logps, ents, vals = [], [], []
    for k in range(env.K):
        cands = env.candidates(state)
        ct = candidate_tensors(state, cands, device)
        z, v = score_candidates(policy, state, ct, hc[0], q)
        choice, logp, ent = sample_step(z, ct.mask, generator)
        logps.append(logp)
        ents.append(ent)
        vals.append(v)
        state, hc = advance(policy, env, state, cands, choice, hc, need_path=k < env.K - 1)
    reward = torch.from_numpy(env.reward(state)).to(device)
    return Rollout(torch.stack(logps, 1), torch.stack(ents, 1), torch.stack(vals, 1), state, reward)


def actor_critic_loss(ro: Rollout, gamma: float, beta: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Appendix C loss of one batch (see the module docstring); also returns its parts."""
    K = ro.log_prob.shape[1]
    disc = torch.tensor([gamma ** (K - 1 - k) for k in range(K)], dtype=torch.float32, device=ro.reward.device)
    g = ro.reward[:, None] * disc[None, :]  # [B, K]
    adv = (g - ro.value).detach()
    actor = -(ro.log_prob * adv).sum(1).mean()
    entropy = ro.entropy.sum(1).mean()
    critic = ((ro.value - g) ** 2).sum(1).mean()
    loss = actor - beta * entropy + critic
    parts = {"actor_loss": float(actor.detach()), "critic_loss": float(critic.detach()),
             "entropy": float(entropy.detach()) / K,
             "reward": float(ro.reward.mean())}
    return loss, parts


# ------------------------------------------------------------------------------------------------
# Training loop
# ------------------------------------------------------------------------------------------------


def train_epoch(policy: Policy, optimizer: torch.optim.Optimizer, env: TemporalEnv, queries: np.ndarray,
                epoch: int, seed: int, rl: RLConfig, precision: str = "float32", device="cpu",
                progress: bool = False) -> dict[str, float]:
    """One pass over ``queries`` (shuffled by ``(seed, epoch)``); returns epoch means."""
    from .progress import progress_bar

    policy.train()
    beta = rl.entropy_beta0 * rl.entropy_decay ** epoch
    order = np.random.default_rng(epoch_seed(seed, epoch, 0)).permutation(len(queries))
    gen = torch.Generator(device=device).manual_seed(epoch_seed(seed, epoch, 1))
    sums: dict[str, float] = {}
    n_total = 0
    bs = rl.batch_size
    n_batches = math.ceil(len(queries) / bs)
    bar = progress_bar(range(n_batches), desc=f"epoch {epoch}", enabled=progress, nested=True, mininterval=1.0)
    for i in bar:
        batch = queries[order[i * bs:(i + 1) * bs]]
        with autocast(precision, device):
            ro = rollout(policy, env, batch, gen, device)
        loss, parts = actor_critic_loss(ro, rl.gamma, beta)
        # Keep the gradient buffers (zeroed in place): re-allocating the [E, d] entity gradient each
        # batch cost more than the rest of its backward (page faults on fresh memory).
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        n = len(batch)
        n_total += n
        for key, val in parts.items():
            sums[key] = sums.get(key, 0.0) + val * n
        if progress and i % 20 == 0:
            bar.set_postfix(reward=f"{sums['reward'] / n_total:.3f}")
    out = {key: val / max(n_total, 1) for key, val in sums.items()}
    out["entropy_beta"] = beta
    return out


def make_optimizer(policy: Policy, rl: RLConfig) -> torch.optim.Optimizer:
    """Adam (fused single-kernel update where torch supports it for the device)."""
    try:
        return torch.optim.Adam(policy.parameters(), lr=rl.learning_rate, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(policy.parameters(), lr=rl.learning_rate, foreach=True)


HISTORY_FIELDS = ("epoch", "reward", "actor_loss", "critic_loss", "entropy", "entropy_beta", "val_mrr",
                  "seconds", "val_seconds")


def _write_history(out: Path, history: list[dict[str, Any]]) -> None:
    write_history(out, history, HISTORY_FIELDS)


def load_checkpoint(path: Path) -> dict | None:
    """The RL checkpoint at ``path`` (or the one before it, if the latest is unreadable)."""
    return checkpoints.load_latest(path, CHECKPOINT_FORMAT, "RAPTOR RL checkpoint")


def train(
    policy: Policy,
    env: TemporalEnv,
    train_queries: np.ndarray,
    rl: RLConfig = RLConfig(),
    eval_cfg: EvalConfig = EvalConfig(),
    seed: int = 0,
    *,
    precision: str = "float32",
    device="cpu",
    out_dir: str | Path | None = None,
    evaluate_fn: Optional[Callable[[Policy], dict[str, float]]] = None,
    resume: bool = False,
    epochs: Optional[int] = None,
    on_epoch_end: Optional[Callable[[int, dict[str, Any]], None]] = None,
    meta: Optional[dict] = None,
    progress: bool = True,
    checkpoint_every: int = 1,
) -> TrainResult:
    """Actor-critic training for ``epochs`` (default ``rl.epochs``) epochs.

    Args:
        train_queries: int ``[n, 4]`` queries, both directions (see ``data.with_inverse_queries``).
        evaluate_fn: ``policy -> {"mrr": ..., ...}`` on the validation split (beam search); called
            after every ``eval_cfg.valid_every``-th epoch and after the last one. The best-MRR
            weights go to ``out_dir/best.pt``. With ``eval_cfg.patience > 0`` training ends after
            that many validation rounds in a row without a better MRR (the history then ends early).
        out_dir: where ``checkpoint.pt`` (latest, atomic), ``best.pt``, ``final.pt``, ``history.json``
            and ``history.csv`` are written; ``None`` writes nothing.
        resume: continue from ``out_dir/checkpoint.pt`` if it exists.
        on_epoch_end: ``(epoch, metrics)`` hook (e.g. MLflow logging by the orchestration layer).
    """
    n_epochs = rl.epochs if epochs is None else epochs
    out = Path(out_dir) if out_dir is not None else None
    meta = model_meta(policy, meta, seed)
    policy.to(device)
    optimizer = make_optimizer(policy, rl)
    queries = np.ascontiguousarray(train_queries, dtype=np.int64)
    selection = Selection(policy, evaluate_fn, eval_cfg.valid_every, eval_cfg.patience, out, meta)

    def run_epoch(epoch: int) -> dict[str, Any]:
        return train_epoch(policy, optimizer, env, queries, epoch, seed, rl, precision, device, progress)

    phase = Phase("train", CHECKPOINT_FORMAT, "RAPTOR RL checkpoint", run_epoch, _write_history,
                  selection.after_epoch, postfix=postfix, state=selection.state, done=selection.done)
    history = run_epochs(phase, policy, optimizer, n_epochs, seed=seed, meta=meta, out=out, resume=resume,
                         on_epoch_end=on_epoch_end, progress=progress, checkpoint_every=checkpoint_every)
    return selection.finish(history, n_epochs)


def postfix(row: dict[str, Any]) -> dict[str, Any]:
    """The epoch bar's postfix of an RL phase."""
    return {"reward": f"{row['reward']:.3f}", "mrr": row["val_mrr"] if row["val_mrr"] is not None else "-"}
