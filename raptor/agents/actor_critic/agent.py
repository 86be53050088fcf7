"""The paper's agent: the actor-critic policy (:mod:`raptor.agents.policy`) trained by actor-critic RL
(:mod:`raptor.agents.actor_critic.rl`); Pure-RL and RL-RAPTOR differ only in their initial weights."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from raptor.config import ModelConfig
from raptor.agents.policy import Policy
from raptor.agents.actor_critic.rl import CHECKPOINT_FORMAT, train
from raptor.agents.actor_critic.seeds import train_seeds
from raptor.common.runtime import seeded_init
from raptor.agents.base import AGENT_KEY, Agent, RunOptions


class ActorCritic(Agent):
    name = "actor_critic"
    checkpoint_format = CHECKPOINT_FORMAT

    def build(self, ctx, seed: int) -> Policy:
        p = ctx.params
        with seeded_init(seed):
            return Policy(ctx.dataset.num_entities, ctx.dataset.num_relations, p.model, p.env.max_path_length)

    def train(self, ctx, policy: Policy, run: RunOptions):
        p = ctx.params
        return train(policy, ctx.env, ctx.train_queries, p.rl, p.eval,
                     replace(run, meta={**(run.meta or {}), AGENT_KEY: self.name}))

    def train_many(self, ctx, policies: list[Policy], runs: list[RunOptions]):
        p = ctx.params
        return train_seeds(policies, ctx.env, ctx.train_queries, p.rl, p.eval,
                           [replace(run, meta={**(run.meta or {}), AGENT_KEY: self.name}) for run in runs])

    def rebuild(self, weights: dict[str, Any], meta: dict[str, Any], device) -> Policy:
        with seeded_init():  # its random init is overwritten, but must not draw from a run's seeded stream
            policy = Policy(meta["num_entities"], meta["num_relations"], ModelConfig(**meta["model"]),
                            meta["max_path_length"]).to(device)
        policy.load_state_dict(weights)
        return policy


AGENT = ActorCritic()
