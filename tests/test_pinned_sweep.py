"""scripts/pinned-sweep.sh: its refusals, which must leave nothing behind, `stop`, which must end the
whole sweep, and `start` up to the sweep (with one that fails at once; the sweeps themselves are
exercised by hand: docs/sweeps.md, "From a pinned commit")."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import session_with_child, wait_gone

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "pinned-sweep.sh"


def _run(*args: str, tmp_path: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PIPELINES_DIR": str(tmp_path / "pipes"), "RESULTS_DIR": str(tmp_path / "results")}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("args, code, message", [
    (("bogus",), 2, "unknown command 'bogus'"),
    (("start",), 2, "give COMMIT NAME DATASET"),
    (("start", "HEAD", "choices"), 2, "give COMMIT NAME DATASET"),
    (("start", "no-such-commit-x", "choices", "ICEWS14"), 2, "unknown commit no-such-commit-x"),
    (("status",), 2, "give the sweep's NAME"),
    (("status", "nosuch"), 1, "no sweep nosuch here"),
    (("stop", "nosuch"), 1, "no sweep nosuch here"),
])
def test_bad_commands_are_refused_and_create_nothing(tmp_path, args, code, message):
    r = _run(*args, tmp_path=tmp_path)
    assert r.returncode == code, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "pipes").exists()


def test_help():
    r = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "pinned-sweep.sh start COMMIT NAME DATASET" in r.stdout and "set -euo" not in r.stdout


def test_a_running_sweep_is_not_started_twice_and_stop_ends_its_process_group(tmp_path):
    """The recorded pid leads its own session (a shell running one `raptor sweep` after another, whose
    worker processes are its grandchildren): `stop` must end them all, and `start` must refuse while
    it lives, before touching anything (a second sweep would train the same run folders twice)."""
    sweep = tmp_path / "pipes" / "sweep-s"
    sweep.mkdir(parents=True)
    job, child = session_with_child(sweep)
    try:
        (sweep / "sweep.pid").write_text(f"{job.pid}\n")
        assert "sweep s: running" in _run("status", "s", tmp_path=tmp_path).stdout
        r = _run("start", "HEAD", "s", "ICEWS14", tmp_path=tmp_path)
        assert r.returncode == 1 and "is running" in r.stderr and sorted(p.name for p in sweep.iterdir()) == [
            "child", "sweep.pid"]
        r = _run("stop", "s", tmp_path=tmp_path)
        assert r.returncode == 0 and "stopped sweep s" in r.stdout
        job.wait(timeout=10)
        wait_gone(child, "the sweep's child process")
        assert "sweep s: not running" in _run("status", "s", tmp_path=tmp_path).stdout
    finally:
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_start_refuses_records_of_another_commit_and_leaves_nothing(tmp_path):
    """A results folder whose COMMIT names another commit holds runs the pinned code may not train:
    the sweeps page would name the wrong code for them, so start stops before cloning anything."""
    records = tmp_path / "results" / "sweeps" / "s" / "ICEWS14"
    records.mkdir(parents=True)
    (records / "COMMIT").write_text("0" * 40 + "\n")
    r = _run("start", "HEAD", "s", "ICEWS14", tmp_path=tmp_path)
    assert r.returncode == 1 and "trained at 000000000000" in r.stderr and "move that folder aside" in r.stderr
    assert not (tmp_path / "pipes").exists() and (records / "COMMIT").read_text() == "0" * 40 + "\n"


@pytest.mark.slow  # end to end: clones the repo, ingests ICEWS14 there and runs a sweep in the background
@pytest.mark.shared_data
def test_start_pins_a_clone_and_names_its_commit_beside_the_records(tmp_path):
    """The whole start path with a sweep that does not exist: the clone is at the asked commit, the
    dataset is ingested there, the records' folder gets COMMIT (the full hash), and the sweep's
    own error reaches the log (the background run ends by itself)."""
    shared = ROOT.parent / "shared"
    assert (shared / "data" / "ICEWS14" / "train.txt").is_file(), f"the raw data must be at {shared}/data"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    r = _run("start", "HEAD", "nosuchsweep", "ICEWS14", tmp_path=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    sweep = tmp_path / "pipes" / "sweep-nosuchsweep"
    wait_gone(int((sweep / "sweep.pid").read_text()), "the background sweep of an unknown sweep", timeout=120)
    clone = sweep / "raptor-tkg"
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip() == head
    assert (clone / "data" / "ICEWS14" / "graph.npz").is_file()
    assert (tmp_path / "results" / "sweeps" / "nosuchsweep" / "ICEWS14" / "COMMIT").read_text() == head + "\n"
    log = (sweep / "sweep.log").read_text()
    assert "no sweep 'nosuchsweep'" in log and log.rstrip().endswith("exit 1")
