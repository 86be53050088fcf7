"""What every agent provides: the interface the runs, the stage graph and the model files go through,
and :func:`load_model`, which rebuilds any saved model with the agent its file names.

An agent is a policy network and its training (the paper's actor-critic policy, TITer's agent and
REINFORCE, ...). Each lives in its own module of :mod:`raptor.agents`, loaded on demand by the
registry (:func:`raptor.agents.get_agent`), so that code which only names agents never imports them.
"""

from __future__ import annotations

import contextlib
import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Optional

from raptor.runs import checkpoints
from raptor.runs.rundir import RunOptions  # noqa: F401 (the agents take it from here)
from raptor.common.runtime import resolve_precision
from raptor.agents import AGENT_KEY, AGENTS, agent_facts, agent_of, get_agent

if TYPE_CHECKING:  # (not imported at run time: the registry's imports stay below the config and the loop)
    from torch import nn

    from raptor.mdp.env import TemporalEnv

class Agent(ABC):
    """One kind of policy and its training; subclasses set :attr:`name` and :attr:`checkpoint_format`,
    and get the facts the registry holds of them (:class:`raptor.agents.AgentFacts`: ``sections``,
    ``precision_key``, ``fixed_precision``, ``code``, ``training``, ``iterates``, ``stacks_seeds``)
    as class attributes."""

    #: Registry key (:data:`raptor.agents.AGENTS`), recorded in its model files' ``meta["agent"]``.
    name: str
    #: ``format`` of its training checkpoints (``checkpoint.pt``); a model can be taken from one.
    checkpoint_format: str
    sections: tuple[str, ...]
    precision_key: Optional[str]
    fixed_precision: str
    code: tuple[str, ...]
    training: str
    iterates: bool
    stacks_seeds: bool

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        facts = agent_facts(cls.name)
        for key in ("sections", "precision_key", "fixed_precision", "code", "training", "iterates", "stacks_seeds"):
            setattr(cls, key, getattr(facts, key))

    @abstractmethod
    def build(self, ctx, seed: int) -> "nn.Module":
        """A freshly initialised policy for ``ctx`` (:class:`raptor.pipeline.experiment.Context`), seeded by ``seed``."""

    @abstractmethod
    def train(self, ctx, policy: "nn.Module", run: RunOptions):
        """Train ``policy`` on ``ctx.train_queries`` for ``run.epochs`` epochs, writing ``checkpoint.pt``,
        ``best.pt``, ``final.pt`` and the history to ``run.out_dir`` (resumed from there with
        ``run.resume``); returns its :class:`raptor.runs.loop.TrainResult`."""

    def train_many(self, ctx, policies: list["nn.Module"], runs: list[RunOptions]) -> list:
        """:meth:`train` of ``policies[i]`` with ``runs[i]`` for every seed ``i`` (the runs differ only in
        their seed, folder, hooks and ``meta``): one after the other here; an agent whose
        :attr:`stacks_seeds` trains them at once, each as it would train alone up to
        floating-point order."""
        return [self.train(ctx, policy, run) for policy, run in zip(policies, runs)]

    @abstractmethod
    def rebuild(self, weights: dict[str, Any], meta: dict[str, Any], device) -> "nn.Module":
        """The policy whose ``state_dict`` is ``weights``, from the ``meta`` its model file records."""

    def load(self, path: str | Path, device="cpu") -> tuple["nn.Module", dict[str, Any]]:
        """``(policy, meta)`` of a model file of this agent (or one of its training checkpoints).
        Only tensors and plain data are read (:func:`raptor.runs.checkpoints.load`)."""
        obj = checkpoints.load(path, (checkpoints.MODEL_FORMAT, self.checkpoint_format), f"{self.name} model",
                               map_location=device)
        if agent_of(obj["meta"]) != self.name:
            raise checkpoints.CheckpointError(f"{path}: not a {self.name} model (agent {agent_of(obj['meta'])!r})")
        return self.rebuild(obj["policy"], obj["meta"], device), obj["meta"]

    def test_time(self, ctx, model: "nn.Module", meta: dict[str, Any], split: str) -> ContextManager:
        """What the agent does differently while ``model`` is evaluated on ``split``: nothing by default."""
        return contextlib.nullcontext()

    def precision(self, params, device) -> str:
        """The resolved autocast precision of its runs: the value at :attr:`precision_key` of
        ``params`` (:class:`raptor.config.Params`)."""
        if self.precision_key is None:
            return self.fixed_precision
        value = functools.reduce(getattr, self.precision_key.split("."), params)
        return resolve_precision(value, device)

    def env(self, ctx) -> "TemporalEnv":
        """The MDP its paths walk: the context's (the paper's) by default."""
        return ctx.env

    def rank(self, ctx, model: "nn.Module", queries, precision: str = "float32", device="cpu"):
        """Candidates and time-aware filtered ranks of int64 ``[Q, 4]`` queries: ``(BeamResult, ranks
        float64 [Q])``; by default beam search (``eval``) in :meth:`env` and the time-aware filtered ranks
        (:func:`raptor.agents.beam.search_and_rank`: on the device where the search runs there)."""
        from raptor.agents.beam import SearchOptions, search_and_rank
        from raptor.evaluation.ranking import context_filter

        return search_and_rank(model, self.env(ctx), queries, context_filter(ctx), ctx.params.eval,
                               SearchOptions(precision=precision, device=device))


def load_model(path: str | Path, device="cpu", ctx=None) -> tuple["nn.Module", dict[str, Any]]:
    """``(policy, meta)`` of a saved model (``best.pt``, ``final.pt``, a pretraining snapshot) or of a
    training checkpoint, rebuilt by the agent its ``meta`` names (:func:`raptor.agents.agent_of`).
    Only tensors and plain data are read (:mod:`raptor.runs.checkpoints`): a file carrying code is refused.
    With ``ctx`` (:class:`raptor.runs.context.Context`) a model of other data is refused before it is
    rebuilt (:meth:`~raptor.runs.context.Context.check_model`)."""
    formats = (checkpoints.MODEL_FORMAT,) + tuple(get_agent(n).checkpoint_format for n in AGENTS)
    obj = checkpoints.load(path, formats, "RAPTOR model", map_location=device)
    meta = obj["meta"]
    agent = get_agent(agent_of(meta))
    if obj["format"] not in (checkpoints.MODEL_FORMAT, agent.checkpoint_format):
        raise checkpoints.CheckpointError(f"{path}: a {obj['format']!r} file that names agent {agent.name!r}")
    if ctx is not None:
        ctx.check_model(meta, path)
    return agent.rebuild(obj["policy"], meta, device), meta
