"""Prefect flows: the pipeline diagram, one flow per stage, built from the tasks in ``tasks/``."""

from ._env import apply_defaults

apply_defaults()
