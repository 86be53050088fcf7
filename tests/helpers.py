"""Helpers shared by the tests that start real servers on loopback."""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, body: dict | None = None, timeout: float = 10):
    """GET (or POST ``body`` as JSON) and decode the JSON answer (text if it is not JSON)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    try:
        return json.loads(raw or b"null")
    except ValueError:
        return raw.decode()


def stack_env(prefect_home: Path, api_url: str, mlflow_db: Path, **extra: str) -> dict:
    """Environment for a subprocess of the stack: this venv first on PATH, the project's defaults
    (raptor/runenv.py, the module the scripts and flows use too) with Prefect on ``api_url`` and
    MLflow on a SQLite file; ``extra`` adds or overrides variables."""
    from raptor.runenv import defaults

    env = dict(os.environ)
    env.update(defaults(Path(mlflow_db).parent))
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        PREFECT_HOME=str(prefect_home),
        PREFECT_API_URL=api_url,
        MLFLOW_TRACKING_URI=f"sqlite:///{mlflow_db}",
        **extra,
    )
    return env
