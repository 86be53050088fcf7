"""Embedded defaults for the orchestration stack, applied before Prefect or MLflow is imported.

Everything stays inside the project unless the user says otherwise: Prefect's temporary local API
keeps its SQLite database under ``.prefect/``, MLflow tracks to ``mlflow.db`` (SQLite) with
artifacts under ``mlruns/``. Any variable already set in the environment wins (for example
``PREFECT_API_URL`` for a Prefect server, ``MLFLOW_TRACKING_URI`` for an MLflow server).
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]

DEFAULTS = {
    "PREFECT_HOME": str(PROJECT_ROOT / ".prefect"),
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DVC_NO_ANALYTICS": "1",
    "MLFLOW_TRACKING_URI": f"sqlite:///{PROJECT_ROOT / 'mlflow.db'}",
}


def apply_defaults() -> None:
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
