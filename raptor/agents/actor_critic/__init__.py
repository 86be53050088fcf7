"""The paper's agent: actor-critic RL (`rl`), reachability pretraining (`pretrain`) and its adapter to the agent interface (`agent`)."""
