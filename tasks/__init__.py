"""Prefect tasks: thin wrappers, each calling one function of the ``raptor`` library.

Skipping is DVC's job: its lock file decides which stages run (the scheduled pipeline flow asks DVC
too, :mod:`flows.pipeline`), so tasks never use Prefect's cache (``NO_CACHE``) and Prefect and DVC
cannot disagree about what is up to date. Tasks never import ``flows``.
"""
