"""Helpers shared by the tests: the synthetic environment of the agent tests, and loopback servers."""

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
    (raptor/pipeline/runenv.py, the module the scripts and flows use too) with Prefect on ``api_url`` and
    MLflow on a SQLite file; ``extra`` adds or overrides variables."""
    from raptor.pipeline.runenv import defaults

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


def synthetic_env(max_actions: int, max_path_length: int = 3):
    """The default synthetic dataset (``raptor.data.synthetic.SyntheticSpec()``) as the agent tests use it:
    ``(env, queries, E, R, splits)``, with ``queries[split]`` int64 ``[n, 4]`` in both directions."""
    import numpy as np

    from raptor.config import EnvConfig
    from raptor.data.dataset import with_inverse_queries
    from raptor.mdp.env import TemporalEnv
    from raptor.data.graph import TemporalGraph
    from raptor.data.synthetic import SyntheticSpec, generate

    spec = SyntheticSpec()
    splits = generate(spec)
    E, R = spec.num_entities, spec.num_relations
    graph = TemporalGraph.from_quadruples(np.concatenate(list(splits.values())), E, R)
    env = TemporalEnv(graph, EnvConfig(max_path_length=max_path_length, max_actions=max_actions))
    q = {k: with_inverse_queries(v, R).astype(np.int64) for k, v in splits.items()}
    return env, q, E, R, splits


def synthetic_dataset(root: Path, seed: int) -> Path:
    """A synthetic raw dataset under ``root/raw``, ingested into ``root/data`` with its graph at
    ``root/graph.npz`` (the pipeline's first stages, as a run reads them); returns ``root``."""
    from raptor.data.graph import build_graph
    from raptor.data.ingest import ingest
    from raptor.data.synthetic import SyntheticSpec, write_raw

    raw = write_raw(root / "raw", SyntheticSpec(seed=seed))
    ingest(raw, root / "data")
    build_graph(root / "data", root / "graph.npz")
    return root


def session_with_child(cwd):
    """``(shell, child pid)``: a shell leading its own session, with a ``sleep`` child (a background run's
    shape: what a stop command must end as a whole)."""
    import subprocess
    import time
    from pathlib import Path

    job = subprocess.Popen(["sh", "-c", "sleep 300 & echo $! > child; wait"], cwd=cwd, start_new_session=True)
    for _ in range(100):
        if (Path(cwd) / "child").exists() and (Path(cwd) / "child").read_text().strip():
            break
        time.sleep(0.05)
    return job, int((Path(cwd) / "child").read_text())


def wait_gone(pid: int, what: str = "a child process", timeout: float = 5.0) -> None:
    """Wait up to ``timeout`` seconds for ``pid`` to exit; AssertionError naming ``what`` otherwise."""
    import os
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} still running after {timeout:g} s")
