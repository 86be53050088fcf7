"""``python -m flows.server [--port N] -- COMMAND ...``: run COMMAND against one local Prefect server.

Without ``PREFECT_API_URL`` every ``python -m flows`` process starts Prefect's temporary server and
stops it again (tens of seconds per stage, and nothing to open in a browser between stages). This
wrapper starts one server on 127.0.0.1 for the whole command, points every process it starts at it
(``PREFECT_API_URL``), tells the UI the same address (``PREFECT_UI_API_URL``, so any port works),
prints the UI's address, and stops the server when the command ends, fails or is interrupted. The
server keeps its database under ``PREFECT_HOME`` (``.prefect/`` by default: the runs stay visible to
a later ``prefect server start``). When ``PREFECT_API_URL`` is already set (a server of your own),
the command simply runs against it.

The exit status is the command's.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

DEFAULT_PORT = 4200
HOST = "127.0.0.1"


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a server could listen on ``port`` (connections in TIME_WAIT do not count, as for uvicorn)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(wanted: Optional[int]) -> int:
    """``wanted`` when given (an error when taken); else 4200, or any free port when 4200 is taken."""
    if wanted is not None:
        if not port_is_free(wanted):
            raise SystemExit(f"flows.server: port {wanted} on {HOST} is in use; choose another with --port")
        return wanted
    if port_is_free(DEFAULT_PORT):
        return DEFAULT_PORT
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_healthy(api_url: str, proc: subprocess.Popen, timeout: float, log: Path) -> float:
    """Seconds until ``{api_url}/health`` answers; an error (with the log's tail) if the server dies
    or does not answer within ``timeout`` seconds."""
    start = time.perf_counter()
    while True:
        try:
            urllib.request.urlopen(f"{api_url}/health", timeout=2).read()
            return time.perf_counter() - start
        except OSError:
            pass
        if proc.poll() is not None or time.perf_counter() - start > timeout:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            why = f"exited with {proc.returncode}" if proc.poll() is not None else f"did not answer in {timeout:.0f} s"
            raise RuntimeError(f"the Prefect server {why} (log: {log}):\n{tail}")
        time.sleep(0.25)


def _stop(proc: subprocess.Popen, grace: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def local_server(port: Optional[int] = None, timeout: float = 90.0, quiet: bool = False) -> Iterator[dict]:
    """Start a Prefect server on 127.0.0.1 and yield the environment variables that point at it
    (``PREFECT_API_URL``, ``PREFECT_UI_API_URL``); stopped on exit, whatever happened."""
    port = choose_port(port)
    api = f"http://{HOST}:{port}/api"
    urls = {"PREFECT_API_URL": api, "PREFECT_UI_API_URL": api}
    home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect"))
    home.mkdir(parents=True, exist_ok=True)
    log = home / "server.log"
    env = {**os.environ, **urls}
    env.pop("PREFECT_API_URL")  # the server itself is not a client of another server
    prefect = Path(sys.executable).with_name("prefect")
    cmd = [str(prefect) if prefect.exists() else "prefect", "server", "start", "--host", HOST, "--port", str(port)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        seconds = wait_healthy(api, proc, timeout, log)
        if not quiet:
            print(f"flows.server: Prefect UI at http://{HOST}:{port} (up in {seconds:.1f} s; log {log})",
                  file=sys.stderr, flush=True)
        yield urls
    finally:
        _stop(proc)


def run(command: list[str], port: Optional[int] = None) -> int:
    """Run ``command`` against a server: the user's (``PREFECT_API_URL`` set) or one started for it.
    SIGTERM or SIGINT to this process is passed on to the command; the server stops after it."""
    if os.environ.get("PREFECT_API_URL"):
        return subprocess.call(command)

    child: Optional[subprocess.Popen] = None

    def _forward(signum, frame):
        if child is None:  # still starting the server: give up (local_server stops it)
            raise SystemExit(128 + signum)
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, _forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with local_server(port) as urls:
            child = subprocess.Popen(command, env={**os.environ, **urls})
            rc = child.wait()
            return rc if rc >= 0 else 128 - rc  # killed by a signal: the shell's convention
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flows.server",
        description="Run a command against one local Prefect server (started and stopped around it), so "
                    "that its flows share one server and the UI can be opened while it runs.",
        epilog="example: python -m flows.server -- dvc repro")
    parser.add_argument("--port", type=int, default=None,
                        help=f"server port (default: {DEFAULT_PORT}, or a free one when {DEFAULT_PORT} is taken)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command (after --)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    return run(command, args.port)


if __name__ == "__main__":
    sys.exit(main())
