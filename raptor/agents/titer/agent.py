"""TITer-150's agent: TITer's policy, trained by its REINFORCE with reward shaping (:mod:`raptor.agents.titer.training`,
params section ``titer``); on the test split, its inductive mean for entities unseen in training."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

from raptor.common.runtime import seeded_init
from raptor.agents.titer.training import TITER_CHECKPOINT_FORMAT, TITerPolicy, inductive_mean, titer_from_weights, train_titer
from raptor.agents.base import AGENT_KEY, Agent, RunOptions


#: ``titer.environment`` -> the walk of :class:`raptor.mdp.env.TemporalEnv`: the MDP shared with the paper's
#: systems, or TITer's own.
WALK_OF_ENVIRONMENT = {"raptor": "forward", "titer": "backward"}


class TITer(Agent):
    name = "titer"
    checkpoint_format = TITER_CHECKPOINT_FORMAT

    def build(self, ctx, seed: int) -> TITerPolicy:
        p = ctx.params
        with seeded_init(seed):
            return TITerPolicy(ctx.dataset.num_entities, ctx.dataset.num_relations, p.titer, p.env.max_path_length)

    def train(self, ctx, policy: TITerPolicy, run: RunOptions):
        p = ctx.params
        return train_titer(policy, self.env(ctx), ctx.train_queries, p.titer, p.eval,
                           replace(run, meta={**(run.meta or {}), AGENT_KEY: self.name}))

    def env(self, ctx):
        """The shared MDP, or TITer's own walk (``titer.environment: titer``, :mod:`raptor.mdp.env`)."""
        cfg = ctx.params.titer
        return ctx.env.with_walk(WALK_OF_ENVIRONMENT[cfg.environment], cfg.environment_same_time)

    def rebuild(self, weights: dict[str, Any], meta: dict[str, Any], device) -> TITerPolicy:
        return titer_from_weights(weights, meta, device)

    def test_time(self, ctx, model: TITerPolicy, meta: dict[str, Any], split: str):
        """TITer's inductive mean for query entities unseen in training (``titer.inductive_mean``) on the
        test split, as TITer's tester; validation runs without it."""
        if split != "test":
            return contextlib.nullcontext()
        return inductive_mean(model, ctx.dataset.splits["train"], enabled=ctx.params.titer.inductive_mean)


AGENT = TITer()
