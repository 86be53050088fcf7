"""The systems the pipeline trains and compares: one registry entry each.

A variant is an agent (:mod:`raptor.agents`) trained from some initialisation: plain data naming
its agent, whose behaviour the registry holds. Everything the stage graph, the flows, significance
and the report need to know about it is here; ``train.variants`` in params.yaml picks which of them
a pipeline runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from raptor.agents import AGENTS, agent_facts


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
    #: The agent and its training (a name of :data:`raptor.agents.AGENTS`): the paper's actor-critic
    #: policy or TITer's agent and REINFORCE.
    agent: str = "actor_critic"

    def __post_init__(self):
        if self.agent not in AGENTS:
            raise ValueError(f"variant {self.name!r}: unknown agent {self.agent!r} (known: {', '.join(AGENTS)})")

    @property
    def params(self) -> tuple[str, ...]:
        """The params sections its agent's training reads (besides env, eval, train and the epoch
        budget ``rl.epochs``): its finetune stage lists them, its runs' fingerprint holds them."""
        return agent_facts(self.agent).sections

    @property
    def unread_params(self) -> tuple[str, ...]:
        """The other agents' sections: a change there neither re-runs nor restarts its training."""
        return tuple(s for name in AGENTS if name != self.agent for s in agent_facts(name).sections
                     if s not in self.params)

    @property
    def trained(self) -> bool:
        """Trains for an epoch budget (false: a selection on the validation split, nothing to iterate)."""
        return agent_facts(self.agent).iterates

    @property
    def walks(self) -> bool:
        """Answers by walking paths (what ``raptor explain`` shows)."""
        return agent_facts(self.agent).walks

    @property
    def training(self) -> str:
        """What its finetune stage does, in words."""
        return agent_facts(self.agent).training


VARIANTS: dict[str, Variant] = {
    v.name: v for v in (
        Variant("pure_rl", "Pure-RL", pretrained=False, baseline=True),
        Variant("raptor", "RL-RAPTOR", pretrained=True),
        Variant("titer", "TITer-150", pretrained=False, agent="titer"),
        Variant("recurrency", "Recurrency", pretrained=False, agent="recurrency"),
    )
}


#: The variant whose RL starts from reachability pretraining (RL-RAPTOR): the pretraining stage's
#: models name it, the pretraining-epochs ablation trains it and ``raptor explain`` explains it.
PRETRAINED_VARIANT: str = next(v.name for v in VARIANTS.values() if v.pretrained)


def get(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r} (known: {', '.join(VARIANTS)})") from None
