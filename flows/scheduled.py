"""The flow that ``python -m flows.deploy`` serves: the whole pipeline of one project, fixed by the
deployment process, with no run parameters at all.

:func:`flows.pipeline.pipeline_flow` takes ``root`` and ``dvcfile``; served as such, anyone who can
reach the Prefect API could start a run on another directory (``POST
/api/deployments/<id>/create_flow_run`` with ``{"parameters": {"root": "/elsewhere"}}``) and the
worker would run that project's stages. This flow has no parameters: the project comes from the
environment of the serving process (:data:`ROOT_ENV`, set by :mod:`flows.deploy` and inherited by the
runner's flow-run subprocesses), and the deployment's parameter schema admits none, so the server
refuses such a POST (HTTP 409). A run forced through anyway (``"enforce_parameter_schema": false``)
fails when Prefect binds its parameters, before anything is written.
"""

from __future__ import annotations

import os
from pathlib import Path

from prefect import flow

from .pipeline import pipeline_flow

ROOT_ENV = "RAPTOR_DEPLOY_ROOT"
DVCFILE = "dvc.yaml"


def deployment_root() -> Path:
    """The project this deployment was made for (set by flows.deploy); refuses to guess."""
    root = os.environ.get(ROOT_ENV)
    if not root:
        raise RuntimeError(f"{ROOT_ENV} is not set: serve this flow with `python -m flows.deploy`")
    return Path(root)


@flow(name="raptor-pipeline", flow_run_name="pipeline")
def scheduled_pipeline() -> dict:
    """Every changed stage of the deployment's own project (its dvc.yaml), as flows.pipeline runs them."""
    # .fn: the stages stay subflows of this run (no nested pipeline run in between).
    return pipeline_flow.fn(root=str(deployment_root()), dvcfile=DVCFILE)
