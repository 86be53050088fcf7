"""One episode batch of the agent in the environment: the building blocks of a rollout and the
sampled rollout that actor-critic training (:mod:`raptor.agents.actor_critic.rl`) learns from.

Per step ``k`` of ``K``: the environment lists the candidate actions of every row
(:meth:`TemporalEnv.candidates`), the policy scores them (:func:`score_candidates`), one is sampled
(:func:`raptor.agents.sampling.sample_step`) and taken (:func:`advance`, which also moves the LSTM path
state). Pretraining (:mod:`raptor.agents.actor_critic.pretrain`), beam search (:mod:`raptor.agents.beam`) and TITer's agent
(:mod:`raptor.agents.titer.training`) reuse the building blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from raptor.mdp.env import Candidates, State, TemporalEnv
from raptor.agents.policy import Policy
from raptor.agents.sampling import sample_step


def as_tensor(x, device) -> torch.Tensor:
    """A host array (copied) or a tensor (moved if needed) on ``device``: the building blocks serve both
    the host environment and :class:`raptor.mdp.device_env.DeviceEnv`."""
    return x.to(device) if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x)).to(device)


def query_embedding(policy: Policy, state: State, device) -> torch.Tensor:
    """``[Emb_E(e_q); r(r_q, 0)]`` of the rows of ``state`` (computed once per rollout)."""
    return policy.query_embedding(as_tensor(state.query_entity, device), as_tensor(state.query_relation, device))


def query_context(policy: Policy, state: State, device) -> dict[str, torch.Tensor]:
    """What the heads need from the query, once per rollout (:meth:`Policy.precompute_query`)."""
    return policy.precompute_query(query_embedding(policy, state, device))


@dataclass
class CandidateTensors:
    entity: torch.Tensor  # int64 [B, A]
    relation: torch.Tensor  # int64 [B, A]
    dt: torch.Tensor  # int64 [B, A], t_q - t'
    mask: torch.Tensor  # bool [B, A]
    #: a bound on ``dt`` known without reading it (device candidates), else ``None``
    time_rows: Optional[int] = None


def candidate_tensors(state: State, cands: Candidates, device) -> CandidateTensors:
    # real actions have t' <= t_q and padding has time 0, so dt >= 0 always; the clip is a guard
    if isinstance(cands.entity, torch.Tensor):  # DeviceEnv: already there
        dt = (state.query_time[:, None] - cands.time).clamp(min=0)
        return CandidateTensors(entity=cands.entity, relation=cands.relation, dt=dt, mask=cands.mask,
                                time_rows=cands.time_rows)
    dt = state.query_time[:, None] - cands.time
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
    z = policy.candidate_logits(s, ct.entity, ct.relation, ct.dt, ct.mask, ct.time_rows)
    return z, (v.float() if v is not None else None)


def advance(policy: Policy, env: TemporalEnv, state: State, cands: Candidates, choice: torch.Tensor,
            hc, need_path: bool = True):
    """Take ``choice``; returns ``(next_state, next_hc)`` (``hc`` unchanged when ``need_path`` is false,
    e.g. after the last action, whose ``h_K`` nobody reads)."""
    on_host = isinstance(state.entity, np.ndarray)
    nxt = env.step(state, cands, choice.cpu().numpy() if on_host else choice)
    if need_path:
        dev = hc[0].device
        e = as_tensor(nxt.entity, dev)
        r = as_tensor(nxt.path_relation[:, -1], dev)
        dt = as_tensor(nxt.query_time - nxt.time, dev)
        hc = policy.advance_path(hc, e, r, dt)
    return nxt, hc


@dataclass
class Rollout:
    log_prob: torch.Tensor  # [B, K] log pi(a_k | s_k)
    entropy: torch.Tensor  # [B, K]
    value: torch.Tensor  # [B, K]
    final: State
    reward: torch.Tensor  # [B]
    #: bool 0-dim: a fixed-shape device environment flagged a row (its candidates were cut short)
    overflow: Optional[torch.Tensor] = None


def rollout(policy: Policy, env: TemporalEnv, queries: np.ndarray, generator: Optional[torch.Generator] = None,
            device="cpu", uniforms: Optional[torch.Tensor] = None) -> Rollout:
    """Run ``K`` sampled steps for a batch of ``[B, 4]`` training queries (one episode each).

    ``uniforms``: float64 ``[K, B]`` drawn beforehand (step ``k`` samples with row ``k``), for a step that
    must not draw (a CUDA graph); else each step draws from ``generator``. With a fixed-shape device
    environment (``DeviceEnv(scan_pad=...)``) :attr:`Rollout.overflow` says whether any row's candidates
    were incomplete (the batch must then be redone exactly)."""
    state = env.reset(queries)
    B = state.batch_size
    q = query_context(policy, state, device)
    hc = policy.initial_path_state(B)
    logps, ents, vals = [], [], []
    overflow = None
    for k in range(env.K):
        cands = env.candidates(state)
        flags = getattr(cands, "overflow", None)
        if flags is not None:
            overflow = flags.any() if overflow is None else overflow | flags.any()
        ct = candidate_tensors(state, cands, device)
        z, v = score_candidates(policy, state, ct, hc[0], q)
        choice, logp, ent = sample_step(z, ct.mask, generator, None if uniforms is None else uniforms[k])
        logps.append(logp)
        ents.append(ent)
        vals.append(v)
        state, hc = advance(policy, env, state, cands, choice, hc, need_path=k < env.K - 1)
    reward = as_tensor(env.reward(state), device)
    return Rollout(torch.stack(logps, 1), torch.stack(ents, 1), torch.stack(vals, 1), state, reward, overflow)
