"""The agents: a registry of names and facts, each agent's code loaded from its module only when asked for.

``AGENTS`` maps an agent's name to its :class:`AgentFacts`: the module defining it
(:class:`raptor.agents.base.Agent`) and what the stage graph, the variants and the run fingerprints
need to know of it (its params sections, code, precision key, whether it iterates). Importing this
package imports none of the agents, nor torch, nor any other ``raptor`` module: the variants (and
through them the config, which every stage reads) and the stage graph (and so ``raptor --help``)
name agents without loading their code. The interface, the run options and
:func:`raptor.agents.base.load_model` (any saved model, rebuilt by the agent its file names) are in
:mod:`raptor.agents.base`, whose agents read their facts from here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class AgentFacts:
    """What is known of an agent without importing it (:class:`raptor.agents.base.Agent` has each as a
    class attribute of the same name)."""

    #: The module whose ``AGENT`` it is.
    module: str
    #: The params sections its training reads (besides env, eval, train and the budget ``rl.epochs``).
    sections: tuple[str, ...]
    #: Dotted params key of the autocast precision its runs use (``train.precision``); ``None`` for an
    #: agent without a network (its ``fixed_precision`` is what its numbers are computed in).
    precision_key: Optional[str]
    #: Its training, in words (a finetune stage's description).
    training: str
    fixed_precision: str = "float32"
    #: Trains for an epoch budget (``rl.epochs``); false: one pass with nothing to iterate or resume
    #: (a selection), so its runs have no budget (``rl_epochs`` 0) and its stages do not read ``rl.epochs``.
    iterates: bool = True
    #: ``train_many`` trains several seeds at once, as one batched step (``train.stacked_seeds``
    #: groups a stage's seeds for it); false: one after the other.
    stacks_seeds: bool = False
    #: Answers by walking paths in the graph (beam search over the MDP): ``raptor explain`` shows them.
    walks: bool = True

    @property
    def code(self) -> tuple[str, ...]:
        """The modules that implement it: code hashes of its runs and DVC code dependencies of its stages."""
        return (self.module,)


#: Agent name -> its facts.
AGENTS: dict[str, AgentFacts] = {
    "actor_critic": AgentFacts("raptor.agents.actor_critic.agent", ("model", "rl"), "train.precision",
                               "actor-critic RL", stacks_seeds=True),
    "titer": AgentFacts("raptor.agents.titer.agent", ("titer",), "titer.precision", "TITer's REINFORCE"),
    "recurrency": AgentFacts("raptor.agents.recurrency.agent", ("recurrency",), None,  # no network: NumPy, float64
                             "no training: (lambda, alpha) per relation chosen on the valid split",
                             fixed_precision="float64", iterates=False, walks=False),
}

#: ``meta`` key of a saved model or checkpoint naming the agent that rebuilds it (:func:`agent_of`).
AGENT_KEY = "agent"
#: ``meta["architecture"]`` of TITer models written before models recorded their agent.
_LEGACY_ARCHITECTURES = {"titer": "titer"}
#: The paper's agent (the actor-critic policy): what a model file that records no agent holds (written
#: before agents had names), and whose search ranks when no agent is named.
PAPER_AGENT = "actor_critic"


def agent_facts(name: str) -> AgentFacts:
    """The facts of the agent registered as ``name`` (nothing is imported)."""
    try:
        return AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown agent {name!r} (known: {', '.join(AGENTS)})") from None


def get_agent(name: str) -> Any:
    """The agent registered as ``name``, a :class:`raptor.agents.base.Agent` (its module is imported on
    first use; not typed here: the interface module's imports are not the registry's)."""
    return importlib.import_module(agent_facts(name).module).AGENT


def agent_of(meta: dict[str, Any]) -> str:
    """The name of the agent that rebuilds a model from its ``meta``. Files written before models
    recorded their agent: ``architecture`` "titer" is TITer's, none the actor-critic policy."""
    if AGENT_KEY in meta:
        return meta[AGENT_KEY]
    return _LEGACY_ARCHITECTURES.get(meta.get("architecture"), PAPER_AGENT)
