"""MLflow server mode for real: scripts/mlflow-server.sh on loopback, a run logged through
tasks/tracking.py over HTTP, read back through the server's REST API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port, http_json

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("mlflow-server")]



def rest(url: str, path: str, body: dict | None = None, timeout: float = 10):
    return http_json(f"{url}{path}", body, timeout)


@pytest.fixture
def mlflow_server(tmp_path: Path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.update(
        PATH=f"{BIN}:{env.get('PATH', '')}",
        MLFLOW_PORT=str(port),
        MLFLOW_BACKEND_STORE_URI=f"sqlite:///{tmp_path / 'server.db'}",
        MLFLOW_ARTIFACTS_DESTINATION=str(tmp_path / "artifacts"),
    )
    env.pop("MLFLOW_HOST", None)
    env.pop("MLFLOW_WORKERS", None)
    log = tmp_path / "server.log"
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(ROOT / "scripts/mlflow-server.sh")], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = t0 + 90
        while True:
            assert proc.poll() is None, f"mlflow server exited:\n{log.read_text()[-4000:]}"
            try:
                if rest(url, "/health", timeout=2) == "OK":
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"mlflow server not healthy in 90 s:\n{log.read_text()[-4000:]}"
            time.sleep(0.5)
        print(f"mlflow server healthy after {time.monotonic() - t0:.1f} s")
        yield url, tmp_path / "artifacts"
    finally:
        # SIGTERM to the server stops its workers; the group kill catches any straggler.
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
            if proc.poll() is not None:
                break
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass


def test_log_through_tracking_and_read_back(mlflow_server, monkeypatch, tmp_path):
    url, artifacts = mlflow_server
    assert "127.0.0.1" in url
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    from tasks import tracking

    parent = tracking.start_run("raptor/SERVER-TEST", "train", params={"rl.epochs": 2})
    child = tracking.start_run("raptor/SERVER-TEST", "raptor-seed0", params={"seed": 0, "variant": "raptor"},
                               tags={"dataset": "SYNTH"}, parent=parent)
    for epoch in range(3):
        child.log_metrics({"train/loss": 1.0 / (epoch + 1), "valid/mrr": None}, step=epoch)
    (tmp_path / "summary.json").write_text('{"mrr": 0.5}')
    child.log_artifact(tmp_path / "summary.json")
    child.finish()
    parent.finish()

    found = rest(url, "/api/2.0/mlflow/runs/search",
                 {"experiment_ids": [child.experiment_id], "order_by": ["attributes.start_time ASC"]})
    runs = {r["info"]["run_name"]: r for r in found["runs"]}
    assert set(runs) == {"train", "raptor-seed0"}
    run = runs["raptor-seed0"]
    assert run["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert params == {"seed": "0", "variant": "raptor"}
    assert tags["mlflow.parentRunId"] == parent.run_id and tags["dataset"] == "SYNTH" and "git_commit" in tags
    assert {m["key"]: m["value"] for m in run["data"]["metrics"]} == {"train/loss": pytest.approx(1 / 3)}

    history = rest(url, "/api/2.0/mlflow/metrics/get-history?"
                   + urllib.parse.urlencode({"run_id": child.run_id, "metric_key": "train/loss"}))
    assert sorted(m["step"] for m in history["metrics"]) == [0, 1, 2]

    # The artifact went through the server (--serve-artifacts) into its artifacts destination.
    listed = rest(url, "/api/2.0/mlflow/artifacts/list?" + urllib.parse.urlencode({"run_id": child.run_id}))
    assert [f["path"] for f in listed["files"]] == ["summary.json"]
    stored = list(artifacts.rglob("summary.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text()) == {"mrr": 0.5}
