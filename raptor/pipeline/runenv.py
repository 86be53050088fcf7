"""The embedded defaults of the orchestration stack: one place for scripts, flows and tests.

Everything stays inside the project unless the user says otherwise: Prefect keeps its SQLite
database under ``.prefect/``, MLflow tracks to ``mlflow.db`` (SQLite, artifacts under ``mlruns/``),
no telemetry. A variable already set in the environment wins (``PREFECT_API_URL`` for a Prefect
server, ``MLFLOW_TRACKING_URI`` for an MLflow server). Only environment variables: importing this
imports no orchestration library.

``python -m raptor.pipeline.runenv [ROOT]`` prints ``export`` lines for a shell (``scripts/env.sh``).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path


def defaults(root: str | Path) -> dict[str, str]:
    """The default environment for a project rooted at ``root``."""
    root = Path(root).resolve()
    return {
        "PREFECT_HOME": str(root / ".prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        "DO_NOT_TRACK": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DVC_NO_ANALYTICS": "1",
        "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
    }


def apply_defaults(root: str | Path = ".") -> None:
    """Set every default that the environment does not already set."""
    for key, value in defaults(root).items():
        os.environ.setdefault(key, value)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = argv[0] if argv else "."
    for key, value in defaults(root).items():
        print(f'export {key}="${{{key}:-{shlex.quote(value)[1:-1] if value.startswith(chr(39)) else value}}}"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
