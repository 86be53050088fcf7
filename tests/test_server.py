"""flows.server: one local Prefect server around a command (what the README main job runs under)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows import server
from helpers import free_port, stack_env

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("prefect-server")]

PROBE = """
import json, os, urllib.request
api = os.environ["PREFECT_API_URL"]
health = urllib.request.urlopen(api + "/health", timeout=5).read().decode()
print(json.dumps({"api": api, "ui": os.environ.get("PREFECT_UI_API_URL"), "health": health}))
raise SystemExit(7)
"""


def _env(tmp_path: Path) -> dict:
    env = stack_env(tmp_path / ".prefect", "", tmp_path / "mlflow.db")
    env.pop("PREFECT_API_URL", None)
    return env


def test_command_runs_against_one_server_that_is_stopped_afterwards(tmp_path):
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "flows.server", "--port", str(port), "--", sys.executable, "-c",
                           PROBE], env=_env(tmp_path), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 7, proc.stderr[-3000:]  # the command's exit status
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["api"] == seen["ui"] == f"http://127.0.0.1:{port}/api"  # the UI calls the chosen port
    assert seen["health"] == "true"
    assert f"Prefect UI at http://127.0.0.1:{port}" in proc.stderr
    assert server.port_is_free(port)  # stopped
    assert (tmp_path / ".prefect" / "server.log").is_file()


def test_a_flow_run_lands_on_the_shared_server(tmp_path):
    """Two flow processes under one wrapper: both runs are in the server's database, named."""
    port = free_port()
    script = ("from prefect import flow\n"
              "@flow(name='probe', flow_run_name='probe-{n}')\n"
              "def probe(n: int): return n\n"
              "import sys; probe(int(sys.argv[1]))\n")
    (tmp_path / "probe.py").write_text(script)
    probe = tmp_path / "probe.py"
    two = f"{sys.executable} {probe} 1 && {sys.executable} {probe} 2"
    code = ("import json, os, urllib.request, subprocess, sys\n"
            f"subprocess.run({two!r}, shell=True, check=True)\n"
            "req = urllib.request.Request(os.environ['PREFECT_API_URL'] + '/flow_runs/filter', data=b'{}',\n"
            "                             headers={'Content-Type': 'application/json'})\n"
            "print(json.dumps(sorted(r['name'] for r in json.load(urllib.request.urlopen(req)))))\n")
    proc = subprocess.run([sys.executable, "-m", "flows.server", "--port", str(port), "--", sys.executable, "-c",
                           code], env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["probe-1", "probe-2"]
    # No temporary server was started by the flow processes (they found PREFECT_API_URL).
    assert "Starting temporary server" not in proc.stdout + proc.stderr


def test_sigterm_stops_the_command_and_the_server(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "flows.server", "--port", str(port), "--", sys.executable, "-c",
                             "import time; time.sleep(300)"], env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while server.port_is_free(port):
        assert time.time() < deadline and proc.poll() is None, "the server did not come up"
        time.sleep(0.5)
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in err, err[-2000:]
    assert server.port_is_free(port)


def test_a_server_of_ones_own_is_used_as_is(tmp_path, monkeypatch):
    """PREFECT_API_URL set: no server is started, the command sees the user's URL."""
    env = _env(tmp_path)
    env["PREFECT_API_URL"] = "http://127.0.0.1:9/api"
    code = "import os; print(os.environ['PREFECT_API_URL'])"
    proc = subprocess.run([sys.executable, "-m", "flows.server", "--", sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "http://127.0.0.1:9/api"
    assert "Prefect UI at" not in proc.stderr and not (tmp_path / ".prefect" / "server.log").exists()


def test_taken_port_and_missing_command_are_clear_errors(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "flows.server", "--port", str(taken), "--", "true"],
                              env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and f"port {taken}" in proc.stderr and "--port" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "flows.server"], env=_env(tmp_path), capture_output=True, text=True)
    assert proc.returncode == 2 and "no command given" in proc.stderr
