"""The scheduled deployment and its servers behind credentials, tested against real servers:

* a Prefect server started with ``PREFECT_SERVER_API_AUTH_STRING`` refuses requests without the
  credentials (HTTP 401) and serves ``python -m flows.deploy``, which authenticates with
  ``PREFECT_API_AUTH_STRING``;
* the deployment runs only the project it was made for: a run requested with another ``root`` or
  ``dvcfile`` is refused (HTTP 409) and writes nothing there; one forced past the schema check fails
  before it writes anything; a run without parameters runs the deployment's own project;
* an MLflow server started by scripts/mlflow-server.sh with credentials refuses a bare POST that
  creates an experiment (401) and accepts the authenticated client.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port, stack_env

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NAME = "raptor-test-secured"
AUTH = "raptor:test-only-S3cret"  # user:password, as PREFECT_SERVER_API_AUTH_STRING takes it

pytestmark = [pytest.mark.xdist_group("deploy-security")]


def request(url: str, body: dict | None = None, auth: str | None = None, timeout: float = 10):
    """(HTTP status, decoded JSON or text); 4xx/5xx are returned, not raised. A 503 (Prefect's answer
    when its SQLite database is busy, as on loaded CI cores) is retried, as Prefect's client does."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    for attempt in range(10):
        req = urllib.request.Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        if status != 503:
            break
        time.sleep(1 + attempt)
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw.decode(errors="replace")


def stop(proc: subprocess.Popen, grace: float = 15) -> None:
    """SIGTERM the process group (children too), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass


def tail(path: Path, n: int = 4000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


def wait_healthy(proc: subprocess.Popen, url: str, ok, log: Path, limit: float) -> float:
    t0 = time.monotonic()
    while True:
        assert proc.poll() is None, f"server exited:\n{tail(log)}"
        try:
            if ok(request(url, timeout=2)):
                return time.monotonic() - t0
        except OSError:
            pass
        assert time.monotonic() - t0 < limit, f"server not healthy in {limit:.0f} s:\n{tail(log)}"
        time.sleep(0.5)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``folder`` with its size and mtime: what a run would change."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def dvc_project(path: Path, env: dict) -> Path:
    """A DVC project (no git) with a params file flows.deploy accepts and no stages."""
    path.mkdir(parents=True)
    (path / "params.yaml").write_text("rl:\n  gamma: 0.9\n")
    subprocess.run(["dvc", "init", "-q", "--no-scm"], cwd=path, env=env, check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A Prefect server that requires credentials, and flows.deploy serving a deployment of ``own``
    against it (authenticated by PREFECT_API_AUTH_STRING). Yields a dict of what the tests need."""
    tmp = tmp_path_factory.mktemp("secured")
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    base = stack_env(tmp / "prefect-home", url, tmp / "mlflow.db", PREFECT_UI_ENABLED="false",
                     # No scheduled runs: every run in these tests is one a test asked for.
                     PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false", PREFECT_RUNNER_POLL_FREQUENCY="1")
    for key in ("PREFECT_API_AUTH_STRING", "PREFECT_SERVER_API_AUTH_STRING", "PREFECT_API_KEY"):
        base.pop(key, None)
    own = dvc_project(tmp / "own", base)
    # Another project, with a stage that would write into it if a run were sent there.
    other = dvc_project(tmp / "other", base)
    (other / "dvc.yaml").write_text("stages:\n  params:\n    cmd: python -m raptor.pipeline.stages params\n"
                                    "    outs:\n      - build/params.json\n")
    server_log, serve_log = tmp / "server.log", tmp / "serve.log"
    procs: list[subprocess.Popen] = []
    try:
        with open(server_log, "wb") as log:
            procs.append(subprocess.Popen(
                [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                env={**base, "PREFECT_SERVER_API_AUTH_STRING": AUTH}, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True))
        # /api/health answers without credentials (the compose healthcheck relies on it).
        server_s = wait_healthy(procs[0], f"{url}/health", lambda r: r == (200, True), server_log, 90)
        with open(serve_log, "wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "flows.deploy", "--interval", "86400", "--name", NAME, "--root", str(own)],
                cwd=ROOT, env={**base, "PREFECT_API_AUTH_STRING": AUTH}, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True))
        deadline = time.monotonic() + 120
        while True:
            assert procs[1].poll() is None, f"flows.deploy exited:\n{tail(serve_log)}"
            status, found = request(f"{url}/deployments/filter", {"deployments": {"name": {"any_": [NAME]}}}, AUTH)
            assert status == 200, (status, found)
            if found and "serving raptor-pipeline" in tail(serve_log):
                break
            assert time.monotonic() < deadline, f"deployment not served in 120 s:\n{tail(serve_log)}"
            time.sleep(0.5)
        print(f"prefect server healthy after {server_s:.1f} s")
        yield {"url": url, "deployment": found[0], "own": own, "other": other, "serve_log": serve_log,
               "server_log": server_log, "env": base}
    finally:
        for proc in reversed(procs):
            stop(proc)


def wait_final(url: str, run_id: str, serve_log: Path, limit: float = 180) -> dict:
    deadline = time.monotonic() + limit
    while True:
        status, run = request(f"{url}/flow_runs/{run_id}", auth=AUTH)
        assert status == 200, (status, run)
        if run["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return run
        assert time.monotonic() < deadline, f"run {run['name']} still {run['state_type']}:\n{tail(serve_log)}"
        time.sleep(1)


@pytest.mark.slow
def test_prefect_api_refuses_requests_without_credentials(served):
    url, dep = served["url"], served["deployment"]
    create = f"{url}/deployments/{dep['id']}/create_flow_run"
    for auth in (None, "raptor:wrong", "nobody"):
        for path, body in ((create, {}), (f"{url}/flow_runs/filter", {}), (f"{url}/deployments/filter", {})):
            status, answer = request(path, body, auth)
            assert status == 401, (path, auth, status, answer)
    status, answer = request(f"{url}/flow_runs/filter", {}, AUTH)
    assert (status, answer) == (200, [])  # the refused POSTs created no run
    # The authenticated client (flows.deploy, PREFECT_API_AUTH_STRING) registered the deployment.
    assert dep["name"] == NAME and dep["paused"] is False


@pytest.mark.slow
def test_run_naming_another_project_is_refused(served):
    url, dep, other = served["url"], served["deployment"], served["other"]
    before = snapshot(other)
    create = f"{url}/deployments/{dep['id']}/create_flow_run"
    for params in ({"root": str(other)}, {"dvcfile": str(other / "dvc.yaml")}, {"dvcfile": "../other/dvc.yaml"},
                   {"root": str(other), "dvcfile": str(other / "dvc.yaml")}, {"targets": ["params"]}):
        status, answer = request(create, {"parameters": params}, AUTH)
        assert status == 409, (params, status, answer)
    status, runs = request(f"{url}/flow_runs/filter", {}, AUTH)
    assert status == 200 and runs == [], [r["parameters"] for r in runs]
    time.sleep(3)  # a few runner polls: had anything been accepted, it would have started
    assert snapshot(other) == before
    assert dep["parameters"] == {}
    assert dep["parameter_openapi_schema"].get("additionalProperties") is False


@pytest.mark.slow
def test_run_forced_past_the_schema_fails_before_writing(served):
    """The POST may switch the schema check off for its run; the flow has no parameters to bind, so
    the run fails before it writes anything, in either project."""
    url, dep, other, own = served["url"], served["deployment"], served["other"], served["own"]
    before_other, before_own = snapshot(other), snapshot(own)
    status, run = request(f"{url}/deployments/{dep['id']}/create_flow_run",
                          {"parameters": {"root": str(other)}, "enforce_parameter_schema": False}, AUTH)
    assert status == 201, (status, run)
    run = wait_final(url, run["id"], served["serve_log"])
    assert run["state_type"] in ("FAILED", "CRASHED"), run["state"]
    assert "expects parameters [] but was provided with parameters ['root']" in tail(served["serve_log"], 100_000)
    assert snapshot(other) == before_other
    assert snapshot(own) == before_own


@pytest.mark.slow
def test_run_without_parameters_runs_its_own_project(served):
    url, dep, other, own = served["url"], served["deployment"], served["other"], served["own"]
    before_other = snapshot(other)
    assert not (own / ".dvc/tmp/lock").exists()
    status, run = request(f"{url}/deployments/{dep['id']}/create_flow_run", {}, AUTH)
    assert status == 201, (status, run)
    run = wait_final(url, run["id"], served["serve_log"])
    assert run["state_type"] == "COMPLETED", f"{run['state']}\n{tail(served['serve_log'])}"
    assert run["parameters"] == {}
    assert (own / ".dvc/tmp/lock").exists()  # DVC's repository lock: the run opened its own project
    assert snapshot(other) == before_other


# --- MLflow -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_mlflow_server_refuses_requests_without_credentials(tmp_path, monkeypatch):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    for key in [k for k in env if k.startswith("MLFLOW_")]:
        env.pop(key)
    env.update(PATH=f"{BIN}:{env.get('PATH', '')}", MLFLOW_PORT=str(port),
               MLFLOW_BACKEND_STORE_URI=f"sqlite:///{tmp_path / 'server.db'}",
               MLFLOW_ARTIFACTS_DESTINATION=str(tmp_path / "artifacts"),
               MLFLOW_AUTH_DATABASE_URI=f"sqlite:///{tmp_path / 'auth.db'}",
               MLFLOW_AUTH_ADMIN_USERNAME="raptor", MLFLOW_AUTH_ADMIN_PASSWORD="test-only-S3cret-pw")
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(ROOT / "scripts/mlflow-server.sh")], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        up = wait_healthy(proc, f"{url}/health", lambda r: r == (200, "OK"), log, 120)
        print(f"mlflow server (basic auth) healthy after {up:.1f} s")
        create = f"{url}/api/2.0/mlflow/experiments/create"
        for auth in (None, "raptor:wrong", "admin:password1234"):
            status, answer = request(create, {"name": "bare"}, auth)
            assert status == 401, (auth, status, answer)
        status, answer = request(f"{url}/api/2.0/mlflow/experiments/search", {"max_results": 10})
        assert status == 401, (status, answer)
        # The authenticated client: the pipeline's tracking (MLflow's client), credentials from the environment.
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "raptor")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "test-only-S3cret-pw")
        from tasks import tracking

        run = tracking.start_run("raptor/WITH-CREDENTIALS", "train", params={"rl.epochs": 1})
        run.log_metrics({"train/loss": 0.5}, step=0)
        run.finish()
        status, found = request(f"{url}/api/2.0/mlflow/experiments/search", {"max_results": 10},
                                "raptor:test-only-S3cret-pw")
        assert status == 200, (status, found)
        names = {e["name"] for e in found["experiments"]}
        assert "bare" not in names and "raptor/WITH-CREDENTIALS" in names
        status, runs = request(f"{url}/api/2.0/mlflow/runs/search", {"experiment_ids": [run.experiment_id]},
                               "raptor:test-only-S3cret-pw")
        assert status == 200 and runs["runs"][0]["info"]["status"] == "FINISHED", (status, runs)
        assert "basic auth" in tail(log)  # the script said it started the basic-auth app
    finally:
        stop(proc, grace=20)


def test_mlflow_script_refuses_to_listen_beyond_loopback_without_credentials(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(PATH=f"{BIN}:{env.get('PATH', '')}", MLFLOW_HOST="0.0.0.0", MLFLOW_PORT=str(free_port()),
               MLFLOW_BACKEND_STORE_URI=f"sqlite:///{tmp_path / 'server.db'}",
               MLFLOW_ARTIFACTS_DESTINATION=str(tmp_path / "artifacts"))
    proc = subprocess.run([str(ROOT / "scripts/mlflow-server.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "without credentials: set MLFLOW_AUTH_ADMIN_PASSWORD" in proc.stderr, proc.stderr
    assert not (tmp_path / "server.db").exists()
