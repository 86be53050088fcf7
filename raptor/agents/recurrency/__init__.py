"""The recurrency baseline (Gastinger et al., IJCAI 2024): the training-free method (`method`) and its adapter (`agent`)."""
