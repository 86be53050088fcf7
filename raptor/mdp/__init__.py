"""The temporal-path MDP the agents walk: on the host as NumPy (`env`: both walks) and as torch tensors on the training device (`device_env`)."""
