"""Prefect tasks: thin wrappers, each calling one function of the ``raptor`` library.

Skipping is DVC's job: its lock file decides which stages run, so tasks never use Prefect's cache
(``NO_CACHE``) and Prefect and DVC cannot disagree about what is up to date.
"""
