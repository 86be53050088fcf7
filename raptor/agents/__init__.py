"""The agents: a registry of names, each agent loaded from its module only when asked for.

``AGENTS`` maps an agent's name to the module defining it (:class:`raptor.agents.base.Agent`);
importing this package imports none of them, nor any other ``raptor`` module: the variants (and
through them the config, which every stage reads) name agents without depending on their code.
The interface, the run options and :func:`raptor.agents.base.load_model` (any saved model, rebuilt
by the agent its file names) are in :mod:`raptor.agents.base`.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Agent name -> the module whose ``AGENT`` it is.
AGENTS: dict[str, str] = {
    "actor_critic": "raptor.agents.actor_critic.agent",
    "titer": "raptor.agents.titer.agent",
    "recurrency": "raptor.agents.recurrency.agent",
}

#: ``meta`` key of a saved model or checkpoint naming the agent that rebuilds it (:func:`agent_of`).
AGENT_KEY = "agent"
#: ``meta["architecture"]`` of TITer models written before models recorded their agent.
_LEGACY_ARCHITECTURES = {"titer": "titer"}
#: The paper's agent (the actor-critic policy): what a model file that records no agent holds (written
#: before agents had names), and whose search ranks when no agent is named.
PAPER_AGENT = "actor_critic"


def get_agent(name: str) -> Any:
    """The agent registered as ``name``, a :class:`raptor.agents.base.Agent` (its module is imported on
    first use; not typed here: the interface module's imports are not the registry's)."""
    try:
        module = AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown agent {name!r} (known: {', '.join(AGENTS)})") from None
    return importlib.import_module(module).AGENT


def agent_of(meta: dict[str, Any]) -> str:
    """The name of the agent that rebuilds a model from its ``meta``. Files written before models
    recorded their agent: ``architecture`` "titer" is TITer's, none the actor-critic policy."""
    if AGENT_KEY in meta:
        return meta[AGENT_KEY]
    return _LEGACY_ARCHITECTURES.get(meta.get("architecture"), PAPER_AGENT)
