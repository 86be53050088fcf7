"""Prefect flows: the pipeline diagram, one flow per stage, built from the tasks in ``tasks/``.

Run from the project root (``python -m flows STAGE``, what dvc.yaml calls); not installed into
site-packages, so these names never collide with another package's.
"""

from raptor.pipeline.runenv import apply_defaults

apply_defaults()
