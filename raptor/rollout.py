"""One episode batch of the agent in the environment: the building blocks of a rollout and the
sampled rollout that actor-critic training (:mod:`raptor.rl`) learns from.

Per step ``k`` of ``K``: the environment lists the candidate actions of every row
(:meth:`TemporalEnv.candidates`), the policy scores them (:func:`score_candidates`), one is sampled
(:func:`raptor.sampling.sample_step`) and taken (:func:`advance`, which also moves the LSTM path
state). Pretraining (:mod:`raptor.pretrain`), beam search (:mod:`raptor.beam`) and TITer's agent
(:mod:`raptor.titer`) reuse the building blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from .env import Candidates, State, TemporalEnv
from .policy import Policy
from .sampling import sample_step


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
