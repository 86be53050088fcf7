"""`raptor ui`: reopen the job's Prefect and MLflow UIs on its own stores, on loopback."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional

NAME = "ui"
SHORT = "open the Prefect and MLflow UIs on this project's own stores (prints both addresses)"
HELP = (
    "Start the Prefect UI (`prefect server start`, PREFECT_HOME=<root>/.prefect) and the MLflow UI "
    "(`mlflow server`, the job's sqlite:///<root>/mlflow.db and mlruns/) on 127.0.0.1, print both "
    "addresses and wait; Ctrl-C stops both. These are the stores a pipeline run logs to (raptor/pipeline/runenv.py); "
    "a plain `prefect server start` would open ~/.prefect instead, with none of the job's runs."
)

#: MLflow 3 opens on its GenAI views unless the link selects the model-training one (tasks/tracking.py).
MODEL_TRAINING_VIEW = "workflowType=machine_learning"


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=".", help="the project whose stores to open (default: %(default)s)")
    p.add_argument("--prefect-port", type=int, default=4200, help="Prefect UI port (default %(default)s; a free "
                   "one when taken)")
    p.add_argument("--mlflow-port", type=int, default=5000, help="MLflow UI port (default %(default)s; a free one "
                   "when taken)")
    p.add_argument("--only", choices=("prefect", "mlflow"), help="start only one of them")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each to answer (default: %(default)s)")


def _port(wanted: int) -> int:
    """``wanted`` when free on loopback, else any free port."""
    for port in (wanted, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free port on 127.0.0.1")


def _tool(name: str) -> str:
    """The executable of this Python's environment (the .venv), else the one on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


def commands(root: Path, prefect_port: int, mlflow_port: int) -> dict[str, tuple[list[str], dict, str, str]]:
    """``{name: (argv, env, health URL, UI address)}`` of the two servers on ``root``'s stores."""
    from raptor.pipeline.runenv import defaults

    env = {**os.environ, **defaults(root)}  # the job's stores, whatever this shell has set
    env.pop("PREFECT_API_URL", None)  # the server serves its own database, not another server's
    db = defaults(root)["MLFLOW_TRACKING_URI"]
    prefect = ([_tool("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)],
               {**env, "PREFECT_UI_API_URL": f"http://127.0.0.1:{prefect_port}/api"},
               f"http://127.0.0.1:{prefect_port}/api/health", f"http://127.0.0.1:{prefect_port}")
    mlflow = ([_tool("mlflow"), "server", "--host", "127.0.0.1", "--port", str(mlflow_port), "--workers", "1",
               "--backend-store-uri", db, "--default-artifact-root", (root / "mlruns").as_uri()],
              {**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
              f"http://127.0.0.1:{mlflow_port}/health",
              f"http://127.0.0.1:{mlflow_port}/#/experiments?{MODEL_TRAINING_VIEW}")
    return {"prefect": prefect, "mlflow": mlflow}


def _wait(url: str, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return True
        except OSError:
            time.sleep(0.5)
    return False


def _stop(procs: dict[str, subprocess.Popen]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for proc in procs.values():
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run(args: argparse.Namespace, ready: Optional[callable] = None) -> int:
    root = Path(args.root).resolve()
    if not (root / ".prefect").is_dir() and not (root / "mlflow.db").is_file():
        print(f"raptor ui: note: {root} has no .prefect/ nor mlflow.db yet (run the pipeline first); "
              "starting on empty stores", file=sys.stderr)
    every = commands(root, _port(args.prefect_port), _port(args.mlflow_port))
    wanted = [args.only] if args.only else ["prefect", "mlflow"]
    procs: dict[str, subprocess.Popen] = {}
    try:
        for name in wanted:
            argv, env, _, _ = every[name]
            procs[name] = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, start_new_session=True)
        for name in wanted:
            _, _, health, address = every[name]
            if not _wait(health, procs[name], args.timeout):
                print(f"raptor ui: error: {name} did not answer at {health} within {args.timeout:.0f} s "
                      f"(run `{' '.join(every[name][0])}` by hand to see why)", file=sys.stderr)
                return 1
            label = "Prefect" if name == "prefect" else "MLflow"
            print(f"{label:<8} {address}   (store: {root / '.prefect' if name == 'prefect' else root / 'mlflow.db'})",
                  flush=True)
        print("Ctrl-C stops both.", flush=True)
        if ready is not None:
            ready({n: every[n][3] for n in wanted})
            return 0
        while all(p.poll() is None for p in procs.values()):
            time.sleep(1)
        gone = [n for n, p in procs.items() if p.poll() is not None]
        print(f"raptor ui: {', '.join(gone)} stopped", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        _stop(procs)
