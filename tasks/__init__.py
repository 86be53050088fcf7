"""Prefect tasks: thin wrappers, each calling one function of the ``raptor`` library.

A mapped task takes one frozen job (:mod:`tasks.jobs`); an MLflow run's life is one ``with`` block
(:func:`tasks.tracking.tracked_run`). The decorators are Prefect's, made lazy (:mod:`tasks.lazy`):
outside a Prefect run a task is its function, and Prefect is not imported.

Skipping is DVC's job: its lock file decides which stages run (the scheduled pipeline flow asks DVC
too, :mod:`flows.pipeline`), so tasks never use Prefect's cache (``NO_CACHE``) and Prefect and DVC
cannot disagree about what is up to date. Tasks never import ``flows``.
"""
