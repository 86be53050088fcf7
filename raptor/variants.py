"""The systems the pipeline trains and compares: one registry entry each.

A variant is an RL agent trained from some initialisation. Everything the stage graph, the flows,
significance and the report need to know about it is here; ``train.variants`` in params.yaml picks
which of them a pipeline runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Variant:
    """One trained system."""

    #: Registry key, folder and stage name (``finetune-<name>``).
    name: str
    #: Row label in reports and figures (the paper's name for it).
    label: str
    #: Starts its RL phase from the reachability pretraining checkpoint (the ``pretrain`` stage).
    pretrained: bool
    #: The reference of significance tests: others are compared against it.
    baseline: bool = False
    #: The agent and its training: the paper's actor-critic policy (``raptor.policy``, ``raptor.rl``)
    #: or TITer's agent and REINFORCE (``raptor.titer``, params section ``titer``).
    agent: Literal["actor_critic", "titer"] = "actor_critic"

    @property
    def params(self) -> tuple[str, ...]:
        """The params sections its agent's training reads (besides env, eval, train and the epoch
        budget ``rl.epochs``): its finetune stage lists them, its runs' fingerprint holds them."""
        return AGENT_PARAMS[self.agent]

    @property
    def unread_params(self) -> tuple[str, ...]:
        """The other agents' sections: a change there neither re-runs nor restarts its training."""
        return tuple(s for agent, secs in AGENT_PARAMS.items() if agent != self.agent for s in secs
                     if s not in self.params)

    @property
    def training(self) -> str:
        """What its finetune stage does, in words."""
        return AGENT_TRAINING[self.agent]


#: Per agent: the params sections its training reads (see :attr:`Variant.params`).
AGENT_PARAMS: dict[str, tuple[str, ...]] = {"actor_critic": ("model", "rl"), "titer": ("titer",)}
AGENT_TRAINING = {"actor_critic": "actor-critic RL", "titer": "TITer's REINFORCE"}


VARIANTS: dict[str, Variant] = {
    v.name: v for v in (
        Variant("pure_rl", "Pure-RL", pretrained=False, baseline=True),
        Variant("raptor", "RL-RAPTOR", pretrained=True),
        Variant("titer", "TITer-150", pretrained=False, agent="titer"),
    )
}


def get(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r} (known: {', '.join(VARIANTS)})") from None
