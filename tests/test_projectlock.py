"""The project lock (raptor/pipeline/projectlock.py): exclusive across processes, re-entrant within one, gone
with its process (kill -9 too), refused in one line naming the file and its holder; every
orchestration entry point takes it before writing anything; and the race of issue 41 end to end: a
`python -m flows pipeline` started while `dvc repro` is inside a stage is refused, and dvc.lock, the
resolved params and what the stage ran with agree afterwards."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from helpers import free_port, stack_env

from raptor.pipeline.projectlock import ProjectBusy, held, lock_path, project_lock

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

#: A process that takes the lock of the folder it is given, says so, and holds it until its stdin closes.
HOLD = """
import sys
from raptor.pipeline.projectlock import project_lock
with project_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""
#: A process that tries the lock once: exit 0 when it got it, 3 (and the message) when refused.
TRY = """
import sys
from raptor.pipeline.projectlock import ProjectBusy, project_lock
try:
    with project_lock(sys.argv[1]):
        pass
except ProjectBusy as exc:
    print(exc)
    sys.exit(3)
"""
#: Seconds a test waits for a child process to reach the point it waits for.
WAIT_S = 300


@contextmanager
def holder(root: Path):
    """Another process holding the project lock of ``root`` for the block."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "held\n"
        yield proc
    finally:
        if proc.poll() is None:
            proc.stdin.close()
            proc.wait(timeout=60)


def try_lock(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", TRY, str(root)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_lock_file_sits_beside_dvcs_lock_and_never_creates_dvc(tmp_path):
    assert lock_path(tmp_path) == tmp_path.resolve() / "build" / "raptor.lock"
    with project_lock(tmp_path) as path:
        assert path.is_file()
    assert not (tmp_path / ".dvc").exists()  # `dvc init` would refuse the folder
    (tmp_path / ".dvc").mkdir()
    assert lock_path(tmp_path) == tmp_path.resolve() / ".dvc" / "tmp" / "raptor.lock"
    assert lock_path(tmp_path / "." / ".dvc" / "..") == lock_path(tmp_path)


def test_exclusive_across_processes_with_a_one_line_message(tmp_path):
    with holder(tmp_path) as other:
        with pytest.raises(ProjectBusy) as refused:
            with project_lock(tmp_path):
                pytest.fail("the lock was taken while another process held it")
        msg = str(refused.value)
        assert "\n" not in msg
        assert str(lock_path(tmp_path)) in msg and f"pid {other.pid} since " in msg and "python -c" in msg
        assert "nothing was written" in msg and not held(tmp_path)
    with project_lock(tmp_path) as path:  # its holder ended: free again, and the file names this process
        assert path.read_text().startswith(f"pid {os.getpid()} since ")
    assert path.read_text() == ""  # released: the file names no one


def test_reentrant_within_a_process_and_released_by_the_outermost(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with project_lock(tmp_path):
        with project_lock("."):  # the same project by another path: nests, does not refuse itself
            assert held(tmp_path)
        assert held(tmp_path)
        refused = try_lock(tmp_path)
        assert refused.returncode == 3 and f"pid {os.getpid()} " in refused.stdout  # still held after the inner one
    assert not held(tmp_path)
    assert try_lock(tmp_path).returncode == 0


def test_released_when_its_holder_is_killed_9(tmp_path):
    with holder(tmp_path) as other:
        assert try_lock(tmp_path).returncode == 3
        os.kill(other.pid, signal.SIGKILL)
        other.wait(timeout=60)
        assert lock_path(tmp_path).read_text().startswith(f"pid {other.pid} ")  # its line stays ...
        with project_lock(tmp_path) as path:  # ... but the lock went with the process: nothing to remove
            assert path.read_text().startswith(f"pid {os.getpid()} ")


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_every_entry_point_is_refused_at_once_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """`python -m flows pipeline`, the pipeline flow itself (what a scheduled deployment runs), a stage
    command and the params stage, each while another process holds the lock: exit status 1, one
    line naming the lock file and the holder, and not one file of the project created or changed."""
    import flows.pipeline
    from flows.__main__ import main as flows_main
    from raptor.pipeline.stages import main as stages_main

    proj = tmp_path / "proj"
    (proj / ".dvc").mkdir(parents=True)
    (proj / "params.yaml").write_text("datasets:\n  D: {raw_dir: raw}\n")
    (proj / "params.local.yaml").write_text("rl.gamma: 0.5\n")
    (proj / "build").mkdir()
    (proj / "build" / "params.json").write_text("{}\n")
    monkeypatch.chdir(proj)
    monkeypatch.setattr(flows.pipeline, "get_run_logger", lambda: logging.getLogger("test"))
    with holder(proj) as other:
        before = _tree(proj)
        calls = {
            "python -m flows pipeline": lambda: flows_main(["pipeline"]),
            "python -m flows graph": lambda: flows_main(["graph", "--dataset", "D", "--in", "data=data/D/ingested",
                                                         "--out", "out=data/D/graph.npz"]),
            "raptor.pipeline.stages": lambda: stages_main(["resolve"]),
        }
        for prefix, call in calls.items():
            assert call() == 1, prefix
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith(f"{prefix}: error: this project is busy: "), err
            assert str(lock_path(proj)) in err and f"pid {other.pid} " in err
        with pytest.raises(ProjectBusy):  # a deployment's run calls the flow, not the command line
            flows.pipeline.pipeline_flow.fn(root=str(proj))
        assert _tree(proj) == before


# ---------------------------------------------------------------------------------------------
# the race of issue 41, end to end
# ---------------------------------------------------------------------------------------------

#: Appended to the project's copy of raptor/labeling/stage.py: with RAPTOR_TEST_GATE set, the label stage
#: stops after it read its params (the labeling config it was given), says so, and waits for ``go``.
GATE = '''

def _gated(fn):
    import functools, json, os, time

    @functools.wraps(fn)
    def gated(*args, **kwargs):
        gate = os.environ.get("RAPTOR_TEST_GATE")
        if gate:
            # written whole, then renamed: the test reads the file as soon as it exists
            Path(gate, "inside.tmp").write_text(json.dumps({"max_in_edges": kwargs["config"].max_in_edges}))
            os.replace(Path(gate, "inside.tmp"), Path(gate, "inside"))
            deadline = time.time() + 600
            while not Path(gate, "go").exists() and time.time() < deadline:
                time.sleep(0.05)
        return fn(*args, **kwargs)
    return gated


label_dataset = _gated(label_dataset)
'''
LABEL = "label@SYNTH"
#: The labeling key both runs set (a param of the label stage that labels/summary.json records).
KEY = "labeling.max_in_edges"


@contextmanager
def prefect_server(proj: Path):
    """A Prefect server on a free port for the block; yields the environment of the stack's processes."""
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = stack_env(proj / ".prefect", api, proj / "mlflow.db", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                    GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    env.pop("RAPTOR_TEST_GATE", None)
    server = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + WAIT_S
        while True:
            try:
                urllib.request.urlopen(f"{api}/health", timeout=2).read()
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("the Prefect server did not come up")
                time.sleep(0.5)
        yield env
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def _run(cmd: list[str], cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


def _records(proj: Path) -> dict[str, object]:
    """The labeling key as the three records hold it: the resolved params, dvc.lock and the labels."""
    lock = yaml.safe_load((proj / "dvc.lock").read_text())
    return {"build/params.json": json.loads((proj / "build/params.json").read_text())["labeling"]["max_in_edges"],
            "dvc.lock": lock["stages"][LABEL]["params"]["build/params.json"][KEY],
            "labels/summary.json": json.loads((proj / "data/SYNTH/labels/summary.json").read_text())["max_in_edges"]}


@pytest.mark.slow
def test_a_pipeline_started_while_dvc_repro_is_inside_a_stage_changes_nothing_dvc_records(tmp_path):
    """`dvc repro` releases DVC's lock while a stage runs. A `python -m flows pipeline` with another
    labeling value, started while the label stage of a `dvc repro` runs, is refused at once by the
    stage's project lock, writes nothing (build/params.json stays), and the repro then records what
    the stage really ran with. Before the lock, the pipeline got DVC's lock, rewrote build/params.json
    and relabeled, and the repro recorded the new value for labels made with the old one."""
    from raptor.pipeline import stages
    from raptor.config import params_from_dict
    from raptor.data.synthetic import SyntheticSpec, write_raw

    proj = tmp_path / "proj"
    proj.mkdir()
    raw = write_raw(tmp_path / "raw", SyntheticSpec(seed=5, num_entities=20, num_timestamps=12))
    shutil.copytree(ROOT / "raptor", proj / "raptor", ignore=shutil.ignore_patterns("__pycache__"))
    with open(proj / "raptor" / "labeling" / "stage.py", "a") as fh:
        fh.write(GATE)
    for name in ("flows", "tasks"):
        (proj / name).symlink_to(ROOT / name)
    params = {"datasets": {"SYNTH": {"raw_dir": str(raw)}}, "train": {"variants": ["pure_rl"]}}
    (proj / "params.yaml").write_text(yaml.safe_dump(params))
    (proj / "dvc.yaml").write_text(stages.dvc_yaml(params_from_dict(params)))
    (proj / ".gitignore").write_text("".join(f"/{n}\n" for n in ("data", "runs", "reports", "build", ".prefect",
                                                                 "mlflow.db", "mlruns", "params.local.yaml")))
    local = proj / "params.local.yaml"
    local.write_text(f"{KEY}: 50\n")
    gate = tmp_path / "gate"
    gate.mkdir()

    with prefect_server(proj) as env:
        for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "i"]):
            _run(cmd, proj, env)
        repro = subprocess.Popen(["dvc", "repro", LABEL], cwd=proj, env={**env, "RAPTOR_TEST_GATE": str(gate)},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.time() + WAIT_S
            while not (gate / "inside").exists():
                assert repro.poll() is None and time.time() < deadline, \
                    f"dvc repro never reached the label stage:\n{(repro.communicate()[0] or '')[-4000:]}"
                time.sleep(0.1)
            assert json.loads((gate / "inside").read_text()) == {"max_in_edges": 50}
            resolved = (proj / "build/params.json").read_bytes()
            local.write_text(f"{KEY}: 7\n")  # the second run's value
            started = time.perf_counter()
            second = subprocess.run([sys.executable, "-m", "flows", "pipeline", "--target", LABEL], cwd=proj, env=env,
                                    capture_output=True, text=True, timeout=WAIT_S)
            refused_in = time.perf_counter() - started
            assert repro.poll() is None, "the repro left its stage before the second run was tried: nothing was tested"
            assert (proj / "build/params.json").read_bytes() == resolved, "the refused run rewrote build/params.json"
            assert second.returncode == 1, second.stdout[-2000:] + second.stderr[-4000:]
            err = second.stderr.strip()
            assert "\n" not in err and err.startswith("python -m flows pipeline: error: this project is busy: ")
            assert str(proj.resolve() / ".dvc/tmp/raptor.lock") in err and "python -m flows label --dataset SYNTH" in err
            # A second `dvc repro` gets DVC's repository lock too (the first released it for its stage),
            # but DVC's read lock on the running stage's deps (build/params.json among them) refuses its
            # params stage before DVC removes that output: two `dvc repro` need DVC's locks alone.
            other = subprocess.run(["dvc", "repro", LABEL], cwd=proj, env=env, capture_output=True, text=True,
                                   timeout=WAIT_S)
            assert repro.poll() is None, "the repro left its stage before the second repro was tried"
            assert other.returncode != 0 and "failed to reproduce 'params'" in other.stderr, other.stderr[-2000:]
            assert (proj / "build/params.json").read_bytes() == resolved, "a refused `dvc repro` changed build/params.json"
        finally:
            (gate / "go").touch()
            out, _ = repro.communicate(timeout=WAIT_S)
        assert repro.returncode == 0, out[-4000:]
        assert _records(proj) == dict.fromkeys(("build/params.json", "dvc.lock", "labels/summary.json"), 50)
        status = json.loads(_run(["dvc", "status", "--json", LABEL], proj, env).strip().splitlines()[-1])
        assert set(status) <= {"params"}, status  # the label stage is up to date with what it recorded

        # The lock went with the repro's stage: the refused run, run again now, goes through and agrees.
        _run([sys.executable, "-m", "flows", "pipeline", "--target", LABEL], proj, env)
        assert _records(proj) == dict.fromkeys(("build/params.json", "dvc.lock", "labels/summary.json"), 7)
    print(f"refused in {refused_in:.1f} s")
