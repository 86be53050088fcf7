"""scripts/longrun.sh: its refusals, which must leave nothing behind (the long runs themselves are
exercised by hand: a tiny budget trained, resumed and tested, docs/deployment.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import session_with_child, wait_gone

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "longrun.sh"


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LONGRUN_DIR": str(tmp_path / "lr")}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, code, message", [
    (("bogus",), 2, "unknown command 'bogus'"),
    (("start",), 2, "name at least one VARIANT:SEED"),
    (("start", "--frobnicate", "raptor:0"), 2, "unknown option --frobnicate"),
    (("start", "pure_rl:0:p10"), 2, "raptor:SEED:pN for the ablation's arm"),  # only RL-RAPTOR pretrains
    (("start", "raptor:0:10"), 2, "expected VARIANT:SEED"),
    (("start", "raptor:x"), 2, "expected VARIANT:SEED"),
])
def test_bad_commands_are_refused_and_create_nothing(tmp_path, args, code, message):
    r = _run(*args, tmp_path=tmp_path)
    assert r.returncode == code, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "lr").exists()


def test_help_and_status_of_an_empty_folder(tmp_path):
    r = _run("--help", tmp_path=tmp_path)
    assert r.returncode == 0 and "scripts/longrun.sh start" in r.stdout and "set -euo" not in r.stdout
    r = _run("status", tmp_path=tmp_path)
    assert r.returncode == 0 and "no long runs under" in r.stdout
    r = _run("resume", tmp_path=tmp_path)
    assert r.returncode == 0 and "no long runs under" in r.stdout and "to resume" in r.stdout
    assert not (tmp_path / "lr").exists()
    r = _run("resume", "raptor:0", tmp_path=tmp_path)
    assert r.returncode == 2 and "takes no arguments" in r.stderr


def test_stop_ends_the_whole_process_group(tmp_path):
    """A run is a shell (the recorded pid, leader of its own session) and its python child: `stop`
    must end both. Killing the shell alone once left the trainer running, reported as stopped, where
    a second `start` would have trained the same folder twice."""
    import signal

    run = tmp_path / "lr" / "runs" / "ICEWS14" / "pure_rl" / "seed0"
    run.mkdir(parents=True)
    job, child = session_with_child(run)
    try:
        (run / "pid").write_text(f"{job.pid}\n")
        assert "running" in _run("status", tmp_path=tmp_path).stdout
        r = _run("stop", tmp_path=tmp_path)
        assert r.returncode == 0 and f"stopped pid {job.pid}" in r.stdout
        job.wait(timeout=10)
        wait_gone(child, "the run's child process")
        assert "stopped" in _run("status", tmp_path=tmp_path).stdout
    finally:
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
