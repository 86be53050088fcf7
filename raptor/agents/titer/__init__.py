"""TITer-150: TITer's policy and REINFORCE training with its reward shaping (`training`) and its adapter (`agent`)."""
