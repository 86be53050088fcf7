"""scripts/longrun.sh: its refusals, which must leave nothing behind (the long runs themselves are
exercised by hand: a tiny budget trained, resumed and tested, docs/deployment.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import session_with_child, wait_gone

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "longrun.sh"


#: How long a test waits for tiny long runs to train and be tested: a guard against a hang, not a speed check
#: (300 s ran out on 2 cores shared with the README's main job, the runs working: 2026-11-29).
RUN_DEADLINE_S = 1200


def _cores() -> int:
    """The cores the script sees (`nproc`: this process's affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    # (never a LONGRUN_PARK of the caller's: the folder parks beside itself, lr-parked)
    env = {**{k: v for k, v in os.environ.items() if k != "LONGRUN_PARK"}, "LONGRUN_DIR": str(tmp_path / "lr")}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def _plan(folder: Path, on=None, **env: str) -> str:
    """`rebalance --plan` of long-runs folder ``folder`` (stdout and stderr), on the CPUs ``on`` (default: this
    process's), with ``env`` added (say LONGRUN_ENDING)."""
    e = {**{k: v for k, v in os.environ.items() if k != "LONGRUN_PARK"}, "LONGRUN_DIR": str(folder), **env}
    r = subprocess.run(["bash", str(SCRIPT), "rebalance", "--plan"], cwd=ROOT, env=e, capture_output=True, text=True,
                       timeout=60, preexec_fn=(lambda: os.sched_setaffinity(0, set(on))) if on else None)
    return r.stdout + r.stderr


def _kill_jobs(jobs) -> None:
    """SIGKILL the process groups of ``jobs`` (Popen leaders; None and those gone already are passed by)."""
    import signal

    for job in jobs:
        if job is None:
            continue
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("args, code, message", [
    (("bogus",), 2, "unknown command 'bogus'"),
    (("start",), 2, "name at least one VARIANT:SEED"),
    (("start", "--frobnicate", "raptor:0"), 2, "unknown option --frobnicate"),
    (("start", "pure_rl:0:p10"), 2, "raptor:SEED:pN for the ablation's arm"),  # only RL-RAPTOR pretrains
    (("start", "raptor:0:10"), 2, "expected VARIANT:SEED"),
    (("start", "raptor:x"), 2, "expected VARIANT:SEED"),
    (("rescore",), 2, "give the reading with --set KEY=VALUE"),
    (("rescore", "--set", "eval.beam_size=5", "raptor:0"), 2, "rescore: takes no runs"),
    (("rescore", "--commit", "a4a248d", "--set", "eval.beam_size=5"), 2, "rescore: takes no --commit"),
    (("queue", "pure_rl:x"), 2, "expected VARIANT:SEED"),
    (("queue", "--threads", "two", "pure_rl:1"), 2, "--threads 'two': expected a number"),
    (("queue", "--clear", "pure_rl:1"), 2, "queue --clear: takes no runs"),
    (("queue", "--threads", "08", "raptor:0:x"), 2, "expected VARIANT:SEED"),  # 08: a number, not octal
    *((("park", "--at", t), 2, f"park --at '{t}': expected HH:MM") for t in ("24:00", "7", "07:60", "7:5", "ab:cd", "")),
    (("park", "--at"), 2, "park --at '': expected HH:MM"),
    (("start", "--at", "07:00", "raptor:0"), 2, "start: --at and --cancel are park's options"),
    (("park", "--plan"), 2, "--plan only with --at"),
    (("start", "--plan", "raptor:0"), 2, "start: --plan is rebalance's and park --at's option"),
    (("resume", "--plan"), 2, "resume: --plan is rebalance's"),
    (("stop", "--clear"), 2, "stop: --clear is queue's option"),
    *(((c, o), 2, f"{o} needs a value") for c, o in (("start", "--commit"), ("queue", "--dataset"), ("start", "--set"),
                                                      ("queue", "--threads"))),
])
def test_bad_commands_are_refused_and_create_nothing(tmp_path, args, code, message):
    r = _run(*args, tmp_path=tmp_path)
    assert r.returncode == code, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "lr").exists()


def test_help_and_status_of_an_empty_folder(tmp_path):
    r = _run("--help", tmp_path=tmp_path)
    assert r.returncode == 0 and "scripts/longrun.sh start" in r.stdout and "set -euo" not in r.stdout
    # every folder the script writes is named, and `forget` is not offered for tested runs (the park would
    # not remember them: a folder of one left on another machine would train again)
    assert all(f in r.stdout for f in ("venv.txt", "queue.failed", "superseded/", "params-DS.yaml", "data/DS/"))
    assert "does not remember what it forgot" in r.stdout and "once collected and" not in r.stdout
    r = _run("status", tmp_path=tmp_path)
    assert r.returncode == 0 and "no long runs under" in r.stdout
    r = _run("resume", tmp_path=tmp_path)
    assert r.returncode == 0 and "no long runs under" in r.stdout and "to resume" in r.stdout
    assert not (tmp_path / "lr").exists()
    r = _run("resume", "raptor:0", tmp_path=tmp_path)
    assert r.returncode == 2 and "takes no runs and no --set" in r.stderr


def test_stop_ends_the_whole_process_group(tmp_path):
    """A run is a shell (the recorded pid, leader of its own session) and its python child: `stop`
    must end both. Killing the shell alone once left the trainer running, reported as stopped, where
    a second `start` would have trained the same folder twice. And `stop` returns only once they have
    ended (here the shell takes 1 s after SIGTERM), so a `start` right after it resumes the run (it once
    found it still alive and did nothing)."""
    import signal
    import threading
    import time

    run = tmp_path / "lr" / "runs" / "ICEWS14" / "pure_rl" / "seed0"
    run.mkdir(parents=True)
    job = subprocess.Popen(["sh", "-c", 'trap "sleep 1; exit 0" TERM; sleep 300 & echo $! > child; wait'], cwd=run,
                           start_new_session=True)
    threading.Thread(target=job.wait, daemon=True).start()  # (reaped as init reaps a real run's job)
    try:
        for _ in range(100):
            if (run / "child").is_file() and (run / "child").read_text().strip():
                break
            time.sleep(0.05)
        child = int((run / "child").read_text())
        (run / "pid").write_text(f"{job.pid}\n")
        assert "running" in _run("status", tmp_path=tmp_path).stdout
        r = _run("stop", tmp_path=tmp_path)
        assert r.returncode == 0 and f"stopped pid {job.pid}" in r.stdout, r.stdout + r.stderr
        for pid in (job.pid, child):  # gone already, not merely signalled
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        assert "stopped" in _run("status", tmp_path=tmp_path).stdout
    finally:
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("cmd", ["stop", "park"])
def test_a_run_that_ignores_sigterm_makes_stop_fail_naming_it_and_park_kill_it(tmp_path, monkeypatch, cmd):
    """A group still alive after LONGRUN_STOP_WAIT seconds: `stop` exits 1 naming its pid and how to end it,
    leaving it alive; `park` (a park that does not happen loses the session's runs) SIGKILLs it, says so, and
    parks (a checkpoint is written to a temporary name and renamed: a kill leaves the last whole one)."""
    import signal
    import threading

    run = tmp_path / "lr" / "runs" / "ICEWS14" / "pure_rl" / "seed0"
    (run / "rl").mkdir(parents=True)
    (run / "rl" / "checkpoint.pt").write_bytes(b"ck")
    (tmp_path / "lr" / "runs" / "COMMIT").write_text("0" * 40 + "\n")
    # (an ignored signal stays ignored in the child: the whole group outlives SIGTERM)
    job = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300 & wait"], cwd=run, start_new_session=True)
    threading.Thread(target=job.wait, daemon=True).start()
    try:
        (run / "pid").write_text(f"{job.pid}\n")
        monkeypatch.setenv("LONGRUN_STOP_WAIT", "x")
        r = _run(cmd, tmp_path=tmp_path)
        assert r.returncode == 2 and "LONGRUN_STOP_WAIT='x' is not a whole number" in r.stderr, r.stdout + r.stderr
        monkeypatch.setenv("LONGRUN_STOP_WAIT", "1")
        r = _run(cmd, tmp_path=tmp_path)
        if cmd == "stop":
            assert r.returncode == 1, r.stdout + r.stderr
            assert f"pid {job.pid} ({run}) did not stop in 1 s" in r.stderr and f"kill -KILL -- -{job.pid}" in r.stderr
            os.kill(job.pid, 0)  # still alive: nothing was killed harder than asked
            assert not (tmp_path / "lr-parked").exists()
        else:
            assert r.returncode == 0, r.stdout + r.stderr
            assert f"pid {job.pid} ({run}) did not stop in 1 s (LONGRUN_STOP_WAIT): SIGKILL" in r.stderr
            with pytest.raises(ProcessLookupError):
                os.killpg(job.pid, 0)
            assert (tmp_path / "lr-parked" / "runs/ICEWS14/pure_rl/seed0/rl/checkpoint.pt").read_bytes() == b"ck"
            assert "park: 1 runs in" in r.stdout, r.stdout
        assert not list(tmp_path.glob("lr-parked.tmp-*"))
    finally:
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_moved_long_runs_folder_that_git_still_registers_gets_a_hint(tmp_path):
    """`mv .longruns X` without `git worktree repair` leaves git registering .longruns/src: the next pin is
    refused with what to run, not git's message alone."""
    lr = tmp_path / "lr"
    lr.mkdir()
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(lr / "src"), "HEAD"],
                   capture_output=True, check=True)
    moved = tmp_path / "lr-moved"
    try:
        lr.rename(moved)
        r = _run("start", "--dataset", "ICEWS14", "pure_rl:0", tmp_path=tmp_path)
        assert r.returncode == 1 and "git worktree repair NEW_FOLDER/src" in r.stderr, r.stdout + r.stderr
        assert not (lr / "runs").exists()
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "repair", str(moved / "src")], capture_output=True)
        _drop_worktree(moved / "src")


def test_bad_thread_count_is_refused_and_creates_nothing(tmp_path):
    r = _run("start", "--threads", "two", "pure_rl:0", tmp_path=tmp_path)
    assert r.returncode == 2 and "--threads 'two'" in r.stderr
    assert not (tmp_path / "lr").exists()


def _src_stand_in(lr: Path, params: str = "") -> None:
    """A pinned source stand-in in ``lr/src``: a git work tree with one commit (and this params.yaml, not the
    repository's, where given)."""
    src = lr / "src"
    src.mkdir(parents=True)
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    if params:
        (src / "params.yaml").write_text(params)
        subprocess.run([*git, "add", "params.yaml"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "pin"], check=True)


def _done_run(lr: Path, dataset: str, run: str) -> Path:
    """A run of ``dataset`` (``VARIANT/seedS``) finished and tested, with its dataset's data made."""
    data = lr / "data" / dataset
    (data / "ingested").mkdir(parents=True, exist_ok=True)
    (data / "ingested" / "meta.json").write_text("{}")
    (data / "graph.npz").write_text("")
    done = lr / "runs" / dataset / run
    (done / "eval").mkdir(parents=True)
    (done / "eval" / "metrics.json").write_text('{"mrr": 0.4}')
    return done


def test_threads_rewrite_the_no_effect_key_only(tmp_path):
    """`--threads N` sets `train.num_threads` in the long runs' params file, in place and once, whether or
    not the file has an overrides block; the other overrides stay, and the file still loads."""
    from raptor.config import load_params

    lr = tmp_path / "lr"
    _src_stand_in(lr)
    done = _done_run(lr, "ICEWS14", "pure_rl/seed0")
    params = lr / "params.yaml"
    params.write_text("rl:\n  epochs: 7\n")
    r = _run("start", "--threads", "1", "pure_rl:0", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "finished and evaluated" in r.stdout and "train.num_threads: 1" in r.stdout
    assert params.read_text().endswith("overrides:\n  train.num_threads: 1\n")
    assert load_params(params).train.num_threads == 1 and load_params(params).rl.epochs == 7
    params.write_text("rl:\n  epochs: 7\n\n# longrun.sh --set\noverrides:\n  train.precision: float32\n")
    r = _run("start", "--threads", "2", "pure_rl:0", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    r = _run("start", "--threads", "0", "pure_rl:0", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    text = params.read_text()
    assert text.count("num_threads") == 1 and "  train.precision: float32\n" in text
    p = load_params(params)
    assert p.train.num_threads == 0 and p.train.precision == "float32"
    assert (done / "eval" / "metrics.json").read_text() == '{"mrr": 0.4}'


def test_rebalance_plans_to_give_all_cores_to_the_one_run_left(tmp_path):
    """`rebalance` restarts a run with all cores only when it is the one run alive and has fewer threads
    than the machine has cores; a tested run whose job is still ending does not count as alive."""
    import signal

    runs = tmp_path / "lr" / "runs" / "ICEWS14"
    a, b, arm = runs / "raptor" / "seed0", runs / "titer" / "seed1", runs / "ablation" / "p10" / "seed2"
    jobs, children = [], []
    try:
        for run, threads in ((a, "1"), (b, "1")):
            run.mkdir(parents=True)
            job, child = session_with_child(run)
            jobs.append(job)
            children.append(child)
            (run / "pid").write_text(f"{job.pid}\n")
            (run / "threads").write_text(threads + "\n")
        r = _run("rebalance", "--plan", tmp_path=tmp_path)
        assert r.returncode == 0 and "2 runs alive, nothing to do" in r.stdout, r.stderr
        (b / "eval").mkdir()
        (b / "eval" / "metrics.json").write_text('{"mrr": 0.4}')  # b tested, its job still ending
        r = _run("rebalance", "--plan", tmp_path=tmp_path)
        cores = _cores()
        if cores > 1:
            assert f"restart ICEWS14 raptor:0 with {cores} threads (it has 1)" in r.stdout, r.stdout
        (a / "threads").write_text("0\n")  # 0 = all cores
        assert "raptor:0 has all" in _run("rebalance", "--plan", tmp_path=tmp_path).stdout
        os.killpg(jobs[0].pid, signal.SIGKILL)
        jobs[0].wait(timeout=10)
        wait_gone(children[0], "the stopped run's child process")
        arm.mkdir(parents=True)
        job, _ = session_with_child(arm)
        jobs.append(job)
        (arm / "pid").write_text(f"{job.pid}\n")
        (arm / "threads").write_text("1\n")
        r = _run("rebalance", "--plan", tmp_path=tmp_path)
        if cores > 1:
            assert "restart ICEWS14 raptor:2:p10 with" in r.stdout, r.stdout  # an ablation arm's spec
        assert not (tmp_path / "lr" / "params.yaml").exists()  # a plan starts nothing
    finally:
        for job in jobs:
            try:
                os.killpg(job.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_status_estimates_the_training_left_at_the_recent_pace(tmp_path):
    """A stopped run 10 of 40 RL epochs in (20 s each, one 30 s validation round, every 10th epoch):
    30 x 20 s + 3 rounds x 30 s = 11.5 min left (no end time: it is not running). A run still in
    pretraining has no RL pace yet: only its pretraining's time left is said."""
    import json

    lr = tmp_path / "lr"
    lr.mkdir()
    (lr / "params.yaml").write_text("rl: {epochs: 40}\neval: {valid_every: 10}\npretrain: {epochs: 5}\n")
    run = lr / "runs" / "ICEWS14" / "pure_rl" / "seed0" / "rl"
    run.mkdir(parents=True)
    history = [{"epoch": e, "seconds": 20.0, "val_mrr": None} for e in range(10)]
    history[9].update(val_mrr=0.3, val_seconds=30.0)
    (run / "history.json").write_text(json.dumps(history))
    pre = lr / "runs" / "ICEWS14" / "raptor" / "seed0" / "pretrain"
    pre.mkdir(parents=True)
    (pre / "history.json").write_text(json.dumps([{"epoch": e, "seconds": 60.0} for e in range(2)]))
    out = _run("status", tmp_path=tmp_path).stdout
    line = next(x for x in out.splitlines() if "pure_rl/seed0" in x)
    assert "RL 10 epochs, best val MRR 0.3000, stopped | about 0 h 11 min of training left" in line, out
    assert "ends about" not in line
    line = next(x for x in out.splitlines() if "raptor/seed0" in x)
    assert "pretraining 2 epochs" in line and "pretraining about 3 min left, RL not yet timed" in line, out


def _tested_and_stopped(tmp_path: Path) -> Path:
    """A folder ``lr`` of two Pure-RL runs (10 epochs of 20 s, validation rounds of 30 s at epochs 4 and 9):
    seed 0 tested (260 s), seed 1 stopped after 6 epochs (110 s left) on every core (threads 0)."""
    import json

    lr = tmp_path / "lr"
    lr.mkdir()
    (lr / "params.yaml").write_text("rl: {epochs: 10}\neval: {valid_every: 5}\n")
    history = [{"epoch": e, "seconds": 20.0} for e in range(10)]
    for e in (4, 9):
        history[e].update(val_mrr=0.3, val_seconds=30.0)
    done = lr / "runs" / "ICEWS14" / "pure_rl" / "seed0"
    (done / "rl").mkdir(parents=True)
    (done / "rl" / "history.json").write_text(json.dumps(history))
    (done / "rl" / "summary.json").write_text("{}")
    (done / "eval").mkdir()
    (done / "eval" / "metrics.json").write_text('{"mrr": 0.4}')
    stopped = lr / "runs" / "ICEWS14" / "pure_rl" / "seed1"
    (stopped / "rl").mkdir(parents=True)
    (stopped / "rl" / "history.json").write_text(json.dumps(history[:6]))
    (stopped / "threads").write_text("0\n")
    return lr


def test_status_forecasts_the_queue_after_the_runs_resume_would_restart(tmp_path):
    """A finished Pure-RL run (10 epochs of 20 s + two 30 s rounds = 260 s) times the queued one; the stopped,
    untested run (6 of 10 epochs: 4 x 20 s + a 30 s round = 110 s left) holds every core (threads 0) until
    `resume` would have trained it, so the queued run starts in 1 min 50 s and ends in 6 min 10 s."""
    lr = _tested_and_stopped(tmp_path)
    (lr / "queue").write_text("ICEWS14 pure_rl:2 1\n")
    r = _run("status", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "queued, in order: ICEWS14 pure_rl:2 (threads: 1)" in lines, r.stdout
    assert any("the 1 stopped runs counted as running" in x for x in lines), r.stdout
    # the tested run says so, with its test MRR; the other is stopped (resume restarts it)
    assert "ICEWS14/pure_rl/seed0: RL 10 epochs (finished), best val MRR 0.3000, tested (test MRR 0.4000)" in lines, r.stdout
    assert any(x.startswith("ICEWS14/pure_rl/seed1: RL 6 epochs, best val MRR 0.3000, stopped") for x in lines), r.stdout
    line = next(x for x in lines if x.startswith("  ICEWS14 pure_rl:2: "))
    assert "starts in 0 h 01 min" in line and "ends in 0 h 06 min" in line, line
    assert lines[-1].startswith("  the queue ends in 0 h 06 min of running"), r.stdout


@pytest.mark.parametrize("started", ["1", "2"])
def test_a_stopped_folders_forecast_counts_the_cores_its_last_start_saw(tmp_path, started):
    """A stopped folder (no job to read an affinity from) is timed on the cores its last start saw (``cores``,
    written by the start: one under ``taskset -c 1``), not the asker's: two queued one-thread runs of 260 s
    after the stopped one's 110 s run one after the other on one core, side by side on two."""
    lr = _tested_and_stopped(tmp_path)
    (lr / "queue").write_text("ICEWS14 pure_rl:2 1\nICEWS14 pure_rl:3 1\n")
    (lr / "cores").write_text(started + "\n")
    r = _run("status", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("  ICEWS14 pure_rl:3: "))
    if started == "1":
        assert "starts in 0 h 06 min" in line and "ends in 0 h 10 min" in line, r.stdout
    else:
        assert "starts in 0 h 01 min" in line and "ends in 0 h 06 min" in line, r.stdout


def _kill_runs(*runs: Path) -> None:
    """End the background jobs of these run folders, if any is still going (a test's cleanup)."""
    import signal

    for run in runs:
        if (run / "pid").exists():
            try:
                os.killpg(int((run / "pid").read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _pinned(tmp_path: Path) -> Path:
    """A long-runs folder whose source is this checkout (a link: no worktree is added to the repository)
    and whose params exist, as after a first start."""
    lr = tmp_path / "lr"
    lr.mkdir()
    (lr / "src").symlink_to(ROOT)
    (lr / "params.yaml").write_text("rl: {epochs: 1}\n")
    return lr


def test_queue_waits_for_free_cores_and_skips_what_is_done(tmp_path):
    """Queued runs wait while the alive runs hold every core; a run queued twice, tested or running is not
    queued; `rebalance --plan` names the run that a finished one would start, and starts nothing."""
    import signal

    lr = _pinned(tmp_path)
    runs = lr / "runs" / "ICEWS14"
    busy, tested = runs / "titer" / "seed0", runs / "titer" / "seed5"
    busy.mkdir(parents=True)
    (tested / "eval").mkdir(parents=True)
    (tested / "eval" / "metrics.json").write_text('{"mrr": 0.4}')
    job, _ = session_with_child(busy)
    try:
        (busy / "pid").write_text(f"{job.pid}\n")
        (busy / "threads").write_text("0\n")  # all cores
        r = _run("queue", "--threads", "1", "pure_rl:1", "raptor:2:p10", tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        cores = _cores()
        assert f"queue: ICEWS14 pure_rl:1 waits ({cores} of {cores} cores held, it takes 1)" in r.stdout, r.stdout
        assert (lr / "queue").read_text() == "ICEWS14 pure_rl:1 1\nICEWS14 raptor:2:p10 1\n"
        out = _run("queue", "pure_rl:1", "titer:5", "titer:0", tmp_path=tmp_path).stdout
        assert "pure_rl:1 is queued already" in out and "titer:5 is finished and tested; not queued" in out
        assert "titer:0 is running; not queued" in out
        assert (lr / "queue").read_text().count("\n") == 2
        assert "  ICEWS14 raptor:2:p10, threads: 1" in _run("queue", tmp_path=tmp_path).stdout
        assert "queued, in order: ICEWS14 pure_rl:1 (threads: 1), ICEWS14 raptor:2:p10 (threads: 1)" in \
            _run("status", tmp_path=tmp_path).stdout
        assert "pure_rl:1 waits" in _run("rebalance", "--plan", tmp_path=tmp_path).stdout
        (busy / "eval").mkdir()
        (busy / "eval" / "metrics.json").write_text('{"mrr": 0.4}')  # tested: its job is ending, its cores free
        r = _run("rebalance", "--plan", tmp_path=tmp_path)
        assert "queue: would start ICEWS14 pure_rl:1, threads: 1" in r.stdout, r.stdout
        assert (lr / "queue").read_text().count("\n") == 2 and not (runs / "pure_rl").exists()
        r = _run("queue", "--threads", "2", "titer:7", tmp_path=tmp_path)  # one params file: one thread count
        assert r.returncode == 2 and "the queue's runs have threads 1, not 2" in r.stderr
        r = _run("queue", "--clear", tmp_path=tmp_path)
        assert r.returncode == 0 and "queue: 2 runs removed" in r.stdout and not (lr / "queue").exists()
        assert _run("queue", tmp_path=tmp_path).stdout.strip() == "queue: empty"
        # the job of a run that ends, tested or failed, calls rebalance naming itself: its cores count as free
        (busy / "eval" / "metrics.json").unlink()
        (lr / "queue").write_text("ICEWS14 pure_rl:1 1\n")
        assert "pure_rl:1 waits" in _run("rebalance", "--plan", tmp_path=tmp_path).stdout
        env = {**os.environ, "LONGRUN_DIR": str(lr), "LONGRUN_ENDING": str(busy)}
        r = subprocess.run(["bash", str(SCRIPT), "rebalance", "--plan"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=60)
        assert "would start ICEWS14 pure_rl:1" in r.stdout, r.stdout + r.stderr
    finally:
        os.killpg(job.pid, signal.SIGKILL)


def test_the_runs_of_another_long_runs_folder_hold_the_cores_they_are_on(tmp_path):
    """Two pins at once (a campaign's folder and a sweep's, side by side): a folder's `queue` and `rebalance` count
    the other folder's alive runs on the CPUs this process may use (their threads, at most the CPUs their job
    shares with it), so a queue filled from a shell that sees every core waits rather than take the core the other
    folder's run is on, a one-run folder is not given that core by rebalance, and a folder kept to other CPUs
    (`taskset`) is not held back by it."""
    import signal

    cpus = sorted(os.sched_getaffinity(0))
    lr = _pinned(tmp_path)
    other = tmp_path / ".longruns-other" / "runs" / "ICEWS14" / "titer" / "seed0"
    other.mkdir(parents=True)
    job, child = session_with_child(other)
    own_job = None
    try:
        (other / "pid").write_text(f"{job.pid}\n")
        (other / "threads").write_text("0\n")  # all the cores it may use
        (lr / "queue").write_text("ICEWS14 pure_rl:1 1\n")
        n = len(cpus)
        r = _run("rebalance", "--plan", tmp_path=tmp_path)
        assert f"queue: ICEWS14 pure_rl:1 waits ({n} of {n} cores held, {n} by another long-runs folder's runs, " \
               "it takes 1)" in r.stdout, r.stdout + r.stderr
        (lr / "runs").mkdir()  # (a folder with runs/, as after a start or an unpark: status forecasts its queue)
        out = _run("status", tmp_path=tmp_path).stdout  # no start time while the other folder holds every core
        assert f"queue forecast: none while the other long-runs folders' runs hold all {n} cores" in out, out
        assert "starts in" not in out, out
        # a tested run of the other folder holds nothing (its job is ending)
        (other / "eval").mkdir()
        (other / "eval" / "metrics.json").write_text('{"mrr": 0.4}')
        assert "queue: would start ICEWS14 pure_rl:1" in _run("rebalance", "--plan", tmp_path=tmp_path).stdout
        (other / "eval" / "metrics.json").unlink()
        if n < 2:
            return  # the rest keeps the two folders on different CPUs
        for pid in (job.pid, child):  # the other folder's run kept to the first CPU, as `taskset -c 0` does
            os.sched_setaffinity(pid, {cpus[0]})

        def plan(*on: int) -> str:
            return _plan(lr, on)
        assert "queue: would start ICEWS14 pure_rl:1" in plan(*cpus[1:])  # a folder kept to the other CPUs
        assert "would start ICEWS14 pure_rl:1" in plan(*cpus)  # every CPU: the other folder's run holds one
        if n == 2:
            # a run of this folder alive on one thread holds the other core: the queue waits
            own = lr / "runs" / "ICEWS14" / "pure_rl" / "seed0"
            own.mkdir(parents=True)
            own_job, _ = session_with_child(own)
            (own / "pid").write_text(f"{own_job.pid}\n")
            (own / "threads").write_text("1\n")
            out = plan(*cpus)
            assert "waits (2 of 2 cores held, 1 by another long-runs folder's runs, it takes 1)" in out, out
            out = _run("status", tmp_path=tmp_path).stdout  # the forecast, on the cores its running job has left
            assert "runs hold 1 of the 2 cores this folder's runs may use: the forecast counts 1)" in out, out
            # no queue: rebalance leaves the run the one core the other folder's run leaves free
            (lr / "queue").unlink()
            out = plan(*cpus)
            assert "rebalance: ICEWS14 pure_rl:0 has the 1 of 2 cores that another long-runs folder's runs leave " \
                   "free" in out, out
            os.killpg(job.pid, signal.SIGKILL)  # the other folder's run ends: its core is free again
            job.wait(timeout=10)
            wait_gone(child, "the other folder's job")
            assert "rebalance: restart ICEWS14 pure_rl:0 with 2 threads (it has 1)" in plan(*cpus)
    finally:
        _kill_jobs([job, own_job])


def test_an_ending_run_offers_its_cores_to_the_other_folders_queues(tmp_path):
    """The job of a run that ends calls `rebalance` in its own folder; once that folder's queue has taken what it
    can, the queues of the other long-runs folders beside it are offered the freed cores (each under its own lock,
    never restarting their runs), and the ending run holds no core there. A plain `rebalance` leaves them alone;
    a run kept to other CPUs than the asker's leaves the asker's to the queue."""

    cpus = sorted(os.sched_getaffinity(0))
    lr = _pinned(tmp_path)
    ending = lr / "runs" / "ICEWS14" / "titer" / "seed0"
    ending.mkdir(parents=True)
    other = tmp_path / ".longruns-b"
    (other / "runs").mkdir(parents=True)
    (other / "src").symlink_to(ROOT)
    (other / "params.yaml").write_text("rl: {epochs: 1}\n")
    (other / "queue").write_text("ICEWS14 pure_rl:1 1\n")
    lone = other / "runs" / "ICEWS14" / "raptor" / "seed0"
    lone.mkdir(parents=True)
    jobs = []
    try:
        for out, threads in ((ending, 0), (lone, 1)):
            job, _ = session_with_child(out)
            jobs.append(job)
            (out / "pid").write_text(f"{job.pid}\n")
            (out / "threads").write_text(f"{threads}\n")
        n = len(cpus)

        def rebalance(ending_run=None) -> str:
            return _plan(lr, **({"LONGRUN_ENDING": str(ending_run)} if ending_run else {}))
        out = rebalance()  # not an ending run's: the other folder is left alone
        assert f"rebalance: ICEWS14 titer:0 has all {n} cores" in out and ".longruns-b" not in out, out
        queued_only = tmp_path / ".longruns-c"  # a folder whose runs are all queued (its runs/ made by the first start)
        queued_only.mkdir()
        (queued_only / "src").symlink_to(ROOT)
        (queued_only / "params.yaml").write_text("rl: {epochs: 1}\n")
        (queued_only / "queue").write_text("ICEWS05-15 pure_rl:0 1\n")
        out = rebalance(ending)
        assert f"rebalance: the queue of {other} (another long-runs folder here):" in out, out
        assert f"rebalance: the queue of {queued_only} (another long-runs folder here):" in out, out
        assert "ICEWS05-15 pure_rl:0" in out, out
        shutil.rmtree(queued_only)
        if n == 1:  # the other folder's own run holds the one core
            assert "queue: ICEWS14 pure_rl:1 waits (1 of 1 cores held, it takes 1)" in out, out
        else:  # the ending run's cores are free: the other folder's queue would take one
            assert "queue: would start ICEWS14 pure_rl:1, threads: 1" in out, out
        (other / "queue").unlink()  # no queue there: its lone run is not restarted on the freed cores
        out = rebalance(ending)
        assert "restart" not in out and ".longruns-b" not in out, out
        if n >= 2:  # the other folder's run kept to the first CPU leaves the others to a queue asked from there
            (other / "queue").write_text("ICEWS14 pure_rl:1 1\n")
            for pid in [jobs[1].pid, *map(int, subprocess.run(["pgrep", "-g", str(jobs[1].pid)], capture_output=True,
                                                              text=True).stdout.split())]:
                os.sched_setaffinity(pid, {cpus[0]})
            out = _plan(other, cpus[1:])
            assert "queue: would start ICEWS14 pure_rl:1, threads: 1" in out, out
    finally:
        _kill_jobs(jobs)


def test_a_queued_run_that_cannot_start_does_not_block_the_queue(tmp_path):
    """Runs whose start fails (an unknown dataset) and a line `queue` did not write are moved to
    queue.failed, each named, and the queue goes on; `status` names them, even with no runs folder."""
    lr = _pinned(tmp_path)
    (lr / "queue").write_text("NOPE pure_rl:1 1\ngarbage\nNOPE2 titer:0 1\n")
    r = _run("rebalance", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "queue: NOPE pure_rl:1 did not start (above); moved to" in r.stderr and "no dataset 'NOPE'" in r.stderr
    assert "first line 'garbage' is not 'DATASET SPEC THREADS'" in r.stderr
    assert (lr / "queue").read_text() == ""
    assert (lr / "queue.failed").read_text() == "NOPE pure_rl:1 1\ngarbage\nNOPE2 titer:0 1\n"
    out = _run("status", tmp_path=tmp_path).stdout
    assert "failed to start (not retried): NOPE pure_rl:1 1;garbage;NOPE2 titer:0 1;" in out, out


@pytest.mark.slow
def test_a_run_that_finishes_starts_the_next_queued_run(tmp_path):
    """Three tiny Pure-RL runs queued with all cores each: the first starts at once and fails (its folder holds
    files of an unknown run), the second starts when it fails, the third when the second is tested (each
    job calls rebalance, which takes the queue's next run), and the queue ends empty."""
    import json
    import shutil
    import time

    import yaml
    from helpers import synthetic_dataset

    lr = _pinned(tmp_path)
    ds = synthetic_dataset(tmp_path / "ds", seed=3)
    shutil.copytree(ds / "data", lr / "data" / "TINY" / "ingested")
    shutil.copy(ds / "graph.npz", lr / "data" / "TINY" / "graph.npz")
    (lr / "params.yaml").write_text(yaml.safe_dump({
        "model": {"entity_dim": 8, "relation_dim": 8, "time_dim": 4, "step_dim": 4, "mlp_hidden_dim": 16},
        "env": {"max_actions": 10}, "rl": {"epochs": 1, "batch_size": 256},
        "eval": {"beam_size": 4, "valid_every": 1}, "train": {"seeds": [0]}}))
    failing, first, second = (lr / "runs" / "TINY" / "pure_rl" / f"seed{s}" for s in (0, 1, 2))
    (failing / "rl").mkdir(parents=True)
    (failing / "rl" / "stray.txt").write_text("not a run's")
    try:
        r = _run("queue", "--dataset", "TINY", "--threads", "0", "pure_rl:0", "pure_rl:1", "pure_rl:2",
                 tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "pure_rl seed 0: started" in r.stdout and "queue: TINY pure_rl:1 waits" in r.stdout, r.stdout
        assert (lr / "queue").read_text() == "TINY pure_rl:1 0\nTINY pure_rl:2 0\n"
        deadline = time.monotonic() + RUN_DEADLINE_S
        while not (second / "eval" / "metrics.json").exists():
            assert time.monotonic() < deadline, (failing / "train.log").read_text()[-2000:]
            time.sleep(1)
        assert (lr / "queue").read_text() == ""
        log = (failing / "train.log").read_text()
        assert "refusing to start afresh" in log and "pure_rl seed 1: started" in log, log
        assert not (failing / "eval").exists()
        assert "pure_rl seed 2: started" in (first / "train.log").read_text()
        assert (second / "eval" / "metrics.json").stat().st_mtime > (first / "eval" / "metrics.json").stat().st_mtime
        assert 0 < json.loads((second / "eval" / "metrics.json").read_text())["mrr"] <= 1
    finally:
        _kill_runs(failing, first, second)


def test_a_dataset_without_runs_takes_its_own_overrides(tmp_path):
    """After the first start, `--set` with `--dataset DS` gives DS's runs their own params file (the
    folder's overrides plus these): refused for a dataset that has runs or without --dataset, a no-op when
    repeated, refused when it differs; `--threads` then rewrites the dataset's file, not the folder's."""
    import signal

    from raptor.config import load_params

    lr = tmp_path / "lr"
    _src_stand_in(lr, "rl:\n  epochs: 7\n")
    folder_params = "rl:\n  epochs: 7\n\n# longrun.sh --set\noverrides:\n  train.precision: float32\n  train.num_threads: 1\n"
    (lr / "params.yaml").write_text(folder_params)
    busy = lr / "runs" / "ICEWS14" / "pure_rl" / "seed0"  # ICEWS14 has a run, holding every core
    busy.mkdir(parents=True)
    job, _ = session_with_child(busy)
    try:
        (busy / "pid").write_text(f"{job.pid}\n")
        (busy / "threads").write_text("0\n")
        for args in (("--dataset", "ICEWS14"), ()):
            r = _run("queue", *args, "--set", "train.precision=bfloat16", "pure_rl:1", tmp_path=tmp_path)
            assert r.returncode == 1 and "--set is only read by the first start, or with --dataset DS" in r.stderr
        assert not (lr / "params-ICEWS14.yaml").exists() and not (lr / "queue").exists()
        own = lr / "params-ICEWS18.yaml"
        r = _run("queue", "--dataset", "ICEWS18", "--set", "train.precision=bfloat16", "--set", "rl.epochs=3",
                 "raptor:0", tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        assert f"wrote {own}" in r.stdout and "queue: ICEWS18 raptor:0 waits" in r.stdout, r.stdout
        p = load_params(own)
        assert (p.train.precision, p.rl.epochs, p.train.num_threads) == ("bfloat16", 3, 1)
        assert (lr / "params.yaml").read_text() == folder_params
        text = own.read_text()
        r = _run("queue", "--dataset", "ICEWS18", "--set", "train.precision=bfloat16", "pure_rl:0", tmp_path=tmp_path)
        assert r.returncode == 0 and "wrote" not in r.stdout and own.read_text() == text, r.stderr
        assert (lr / "queue").read_text() == "ICEWS18 raptor:0 1\nICEWS18 pure_rl:0 1\n"
        # a run of ICEWS18 that is done: `start --threads` rewrites the thread count in ICEWS18's file only
        _done_run(lr, "ICEWS18", "titer/seed0")
        r = _run("start", "--dataset", "ICEWS18", "--threads", "2", "titer:0", tmp_path=tmp_path)
        assert r.returncode == 0 and f"train.num_threads: 2 in {own}" in r.stdout, r.stdout + r.stderr
        assert load_params(own).train.num_threads == 2 and load_params(own).train.precision == "bfloat16"
        assert (lr / "params.yaml").read_text() == folder_params
        r = _run("queue", "--dataset", "ICEWS18", "--set", "train.precision=bfloat16", "titer:1", tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr  # the file exists: the same value again, though ICEWS18 has runs now
        r = _run("queue", "--dataset", "ICEWS18", "--set", "train.precision=float32", "pure_rl:1", tmp_path=tmp_path)
        assert r.returncode == 1 and "exists with other overrides (train.precision: 'bfloat16' there, 'float32' here)" \
            in r.stderr, r.stderr  # its runs were made with it
        r = _run("queue", "--dataset", "ICEWS18", "--set", "rl.epochs=3.0", "titer:1", tmp_path=tmp_path)
        assert r.returncode == 1 and "rl.epochs: 3 there, 3.0 here" in r.stderr  # equal in Python, not the same value
        # a dataset without runs: a misspelt key is refused by loading the file (none written), another value
        # rewrites its file while no run has read it
        r = _run("queue", "--dataset", "GDELT", "--set", "train.precison=bfloat16", "pure_rl:0", tmp_path=tmp_path)
        assert r.returncode == 1 and "train.precison: unknown key" in r.stderr, r.stderr
        assert not list(lr.glob("params-GDELT.yaml*")) and "GDELT" not in (lr / "queue").read_text()
        gdelt = lr / "params-GDELT.yaml"
        for value in ("bfloat16", "float32"):
            r = _run("queue", "--dataset", "GDELT", "--set", f"train.precision={value}", "pure_rl:0", tmp_path=tmp_path)
            assert r.returncode == 0 and load_params(gdelt).train.precision == value, r.stderr
        assert gdelt.read_text().count("overrides:") == 1 and load_params(gdelt).rl.epochs == 7
    finally:
        os.killpg(job.pid, signal.SIGKILL)


def test_a_start_that_writes_a_datasets_params_starts_its_run_with_them(tmp_path):
    """`start --dataset DS --set ... --threads N` for a dataset without runs: the run it starts reads the
    file that same call wrote (its thread count is the file's), not the folder's."""
    import signal
    import time

    from raptor.config import load_params

    lr = tmp_path / "lr"
    _src_stand_in(lr, "rl:\n  epochs: 7\n")
    (lr / "params.yaml").write_text("rl:\n  epochs: 7\n\n# longrun.sh --set\noverrides:\n  train.num_threads: 1\n")
    data = lr / "data" / "YAGO"
    (data / "ingested").mkdir(parents=True)
    (data / "ingested" / "meta.json").write_text("{}")
    (data / "graph.npz").write_text("")
    r = _run("start", "--dataset", "YAGO", "--set", "train.precision=bfloat16", "--threads", "2", "pure_rl:0",
             tmp_path=tmp_path)
    out = lr / "runs" / "YAGO" / "pure_rl" / "seed0"
    try:
        assert r.returncode == 0, r.stderr
        own = lr / "params-YAGO.yaml"
        assert f"train.num_threads: 2 in {own}" in r.stdout and "pure_rl seed 0: started" in r.stdout, r.stdout
        assert (out / "threads").read_text().strip() == "2"  # read from the dataset's file
        p = load_params(own)
        assert (p.train.num_threads, p.train.precision) == (2, "bfloat16")
        assert load_params(lr / "params.yaml").train.num_threads == 1
    finally:
        pid = int((out / "pid").read_text()) if (out / "pid").is_file() else None
        for _ in range(100):  # the job (its own session once setsid ran): ended before it trains
            if pid is None:
                break
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    break
            time.sleep(0.05)


def _park_env(tmp_path: Path) -> dict:
    return {**os.environ, "LONGRUN_DIR": str(tmp_path / "lr"), "LONGRUN_PARK": str(tmp_path / "parked")}


def _run_parked(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=_park_env(tmp_path), capture_output=True,
                          text=True, timeout=120)


def _head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _parkable(tmp_path: Path) -> Path:
    """A long-runs folder as on the first machine: two stopped runs (an ablation arm in pretraining, an
    ICEWS18 run in RL) with checkpoints and their .prev, a tested run (its checkpoints still there), two params
    files and a queue."""
    lr = tmp_path / "lr"
    (lr / "runs").mkdir(parents=True)
    (lr / "src").symlink_to(ROOT)
    (lr / "runs" / "COMMIT").write_text(_head() + "\n")
    (lr / "params.yaml").write_text("rl: {epochs: 1}\n\n# longrun.sh --set\noverrides:\n  train.num_threads: 2\n")
    (lr / "params-ICEWS18.yaml").write_text("rl: {epochs: 2}\n")
    (lr / "queue").write_text("ICEWS18 pure_rl:0 1\n")
    for out, name in ((lr / "runs/ICEWS14/ablation/p50/seed0", "pretrain"), (lr / "runs/ICEWS18/raptor/seed0", "rl")):
        (out / name).mkdir(parents=True)
        (out / name / "checkpoint.pt").write_bytes(os.urandom(4096))
        (out / name / "checkpoint.pt.prev").write_bytes(b"older")
        (out / name / "history.json").write_text("[]")
        (out / "pid").write_text("999999999\n")  # no such process: the run is stopped
        (out / "train.log").write_text("log\n")
    tested = _done_run(lr, "ICEWS14", "titer/seed0")
    (tested / "rl").mkdir()
    for name in ("best.pt", "checkpoint.pt", "checkpoint.pt.prev"):  # the test read best.pt; the others resume
        (tested / "rl" / name).write_bytes(os.urandom(64))
    (tested / "eval" / "predictions.parquet").write_bytes(b"whence raptor collect makes the ranks")
    (tested / "rl" / "history.json").write_text('[{"epoch": 0}]')
    # two re-scores of it: one with its ranks beside its predictions (on both splits), one from before ranks were
    for reading, files in (("eval.beam_size=8", ("ranks.parquet", "valid/ranks.parquet")), ("eval.beam_size=4", ())):
        for split in ("", "valid/"):
            if split and not files:
                continue
            d = tested / "rescore" / reading / split
            d.mkdir(parents=True, exist_ok=True)
            for name in ("metrics.json", "reading.json", "predictions.parquet"):
                (d / name).write_bytes(os.urandom(32))
        for name in files:
            (tested / "rescore" / reading / name).write_bytes(os.urandom(16))
    return lr


def test_runs_are_told_by_their_place_under_runs_not_by_the_names_around_them(tmp_path):
    """A folder of long runs named `sweeps`, a sweep named `seed-x` and its arm `ablation`: `park` takes exactly
    the two runs, each named by its spec (a sweep folder named seed* once passed for a run)."""
    lr = tmp_path / "sweeps"
    for rel in ("runs/ICEWS14/pure_rl/seed0", "runs/ICEWS14/sweeps/seed-x/ablation/raptor/seed3"):
        (lr / rel / "rl").mkdir(parents=True)
        (lr / rel / "rl" / "checkpoint.pt").write_bytes(b"x")
        (lr / rel / "pid").write_text("999999999\n")
    (lr / "src").symlink_to(ROOT)
    (lr / "runs" / "COMMIT").write_text(_head() + "\n")
    (lr / "params.yaml").write_text("rl: {epochs: 1}\n")
    env = {**os.environ, "LONGRUN_DIR": str(lr), "LONGRUN_PARK": str(tmp_path / "parked")}
    r = subprocess.run(["bash", str(SCRIPT), "park"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "park: ICEWS14 pure_rl:0 (" in r.stdout and "park: ICEWS14 raptor:3:seed-x/ablation (" in r.stdout, r.stdout
    assert "park: 2 runs in" in r.stdout, r.stdout
    assert (tmp_path / "parked" / "RUNS").read_text() == \
        "runs/ICEWS14/pure_rl/seed0\nruns/ICEWS14/sweeps/seed-x/ablation/raptor/seed3\n"
    out = subprocess.run(["bash", str(SCRIPT), "status"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60).stdout
    assert "ICEWS14/pure_rl/seed0: RL 0 epochs" in out and "ICEWS14/sweeps/seed-x/ablation/raptor/seed3: RL 0 epochs" in out, out
    assert sum(": RL " in line for line in out.splitlines()) == 2, out  # no third "run" (the sweep folder)


def test_a_sweep_arms_run_parks_and_unparks_like_the_others(tmp_path):
    """A stopped run of a sweep's arm is parked with the others (its folder under runs/DS/sweeps/NAME/ARM/),
    named by its spec, and restored from the park; a tested one is parked without checkpoints."""
    import shutil

    lr, parked = _parkable(tmp_path), tmp_path / "parked"
    arm = lr / "runs/ICEWS18/sweeps/wd/rl.weight_decay=0.001/pure_rl/seed1"
    (arm / "rl").mkdir(parents=True)
    (arm / "rl" / "checkpoint.pt").write_bytes(os.urandom(4096))
    (arm / "pid").write_text("999999999\n")
    _done_run(lr, "ICEWS18", "sweeps/wd/default/pure_rl/seed1")
    r = _run_parked("park", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "park: ICEWS18 pure_rl:1:wd/rl.weight_decay=0.001 (" in r.stdout and "park: 5 runs in" in r.stdout, r.stdout
    assert "park: ICEWS18 pure_rl:1:wd/default (tested, " in r.stdout, r.stdout
    assert (parked / "RUNS").read_text().splitlines()[-1] == "runs/ICEWS18/sweeps/wd/rl.weight_decay=0.001/pure_rl/seed1"
    shutil.rmtree(lr)
    out = _run_parked("status", tmp_path=tmp_path).stdout
    assert "ICEWS14 raptor:0:p50, ICEWS18 pure_rl:1:wd/default, ICEWS18 pure_rl:1:wd/rl.weight_decay=0.001" in out, out
    r = _run_parked("unpark", tmp_path=tmp_path)
    try:
        assert r.returncode == 0 and "unpark: ICEWS18 pure_rl:1:wd/rl.weight_decay=0.001 restored" in r.stdout, r.stdout + r.stderr
        assert (arm / "rl" / "checkpoint.pt").read_bytes() == (parked / arm.relative_to(lr) / "rl" / "checkpoint.pt").read_bytes()
    finally:
        _drop_worktree(lr / "src")


def _drop_worktree(src: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(src)], capture_output=True)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], capture_output=True)


def test_park_keeps_what_resumes_and_unpark_puts_it_back(tmp_path):
    """`park` copies every untested run with its last checkpoints (not the .prev ones, not the pid), every tested
    run without its checkpoints (its records exist nowhere else until collected), the commit, params and queue,
    each file under a sha256; with .longruns/ gone (another machine), `unpark` pins the source at that commit and
    restores them byte for byte; a folder here as far along wins; a params file that differs only in its thread
    count is the same params; `park` refuses to drop runs it has not restored."""
    import shutil

    lr, parked = _parkable(tmp_path), tmp_path / "parked"
    head = _head()
    r = _run_parked("park", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "park: ICEWS14 titer:0 (tested, " in r.stdout and "park: 3 runs in" in r.stdout, r.stdout
    kept = sorted(str(p.relative_to(parked)) for p in parked.rglob("*") if p.is_file())
    assert kept == sorted([
        "RUNS", "SHA256SUMS", "params.yaml", "params-ICEWS18.yaml", "queue", "runs/COMMIT",
        "runs/ICEWS14/titer/seed0/SHA256SUMS", "runs/ICEWS14/titer/seed0/eval/metrics.json",
        "runs/ICEWS14/titer/seed0/eval/predictions.parquet",
        "runs/ICEWS14/titer/seed0/rl/best.pt", "runs/ICEWS14/titer/seed0/rl/history.json",
        # a re-score's predictions stay behind where its ranks lie beside them (raptor collect reads either)
        *(f"runs/ICEWS14/titer/seed0/rescore/eval.beam_size=8/{split}{f}" for split in ("", "valid/")
          for f in ("metrics.json", "reading.json", "ranks.parquet")),
        *(f"runs/ICEWS14/titer/seed0/rescore/eval.beam_size=4/{f}" for f in
          ("metrics.json", "reading.json", "predictions.parquet")),
        *(f"runs/ICEWS14/ablation/p50/seed0/{f}" for f in
          ("SHA256SUMS", "pretrain/checkpoint.pt", "pretrain/history.json", "train.log")),
        *(f"runs/ICEWS18/raptor/seed0/{f}" for f in ("SHA256SUMS", "rl/checkpoint.pt", "rl/history.json", "train.log"))])
    assert (parked / "RUNS").read_text() == \
        "runs/ICEWS14/titer/seed0\nruns/ICEWS18/raptor/seed0\nruns/ICEWS14/ablation/p50/seed0\n"
    assert not list(tmp_path.glob("parked.*"))  # the temporary folders went
    assert (lr / "runs/ICEWS14/titer/seed0/eval/metrics.json").exists()  # park copies; it deletes nothing

    shutil.rmtree(lr)  # another machine: the ignored folder is gone, the parked one came along
    out = _run_parked("status", tmp_path=tmp_path).stdout
    assert "not here yet (`resume` restores them): ICEWS14 titer:0, ICEWS18 raptor:0, ICEWS14 raptor:0:p50" in out, out
    assert "the queue of a folder none of whose runs had started" not in out  # (it comes back with the runs)
    (tmp_path / "lr" / "runs").mkdir(parents=True)
    (tmp_path / "lr" / "runs" / "COMMIT").write_text(head + "\n")
    r = _run_parked("park", tmp_path=tmp_path)  # parking here now would drop the runs not yet restored
    assert r.returncode == 1 and "holds runs not restored here" in r.stderr, r.stderr
    assert (parked / "runs/ICEWS18/raptor/seed0/rl/checkpoint.pt").exists()
    shutil.rmtree(lr)
    r = _run_parked("unpark", tmp_path=tmp_path)
    try:
        assert r.returncode == 0, r.stderr
        assert f"unpark: pinned {head[:7]} in {lr}/src" in r.stdout and "unpark: 3 runs restored" in r.stdout, r.stdout
        assert subprocess.run(["git", "-C", str(lr / "src"), "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip() == head
        for rel in ("runs/ICEWS14/ablation/p50/seed0/pretrain/checkpoint.pt", "runs/ICEWS18/raptor/seed0/rl/checkpoint.pt",
                    "runs/ICEWS18/raptor/seed0/train.log", "params.yaml", "params-ICEWS18.yaml", "queue", "runs/COMMIT",
                    "runs/ICEWS14/titer/seed0/eval/metrics.json", "runs/ICEWS14/titer/seed0/rl/best.pt"):
            assert (lr / rel).read_bytes() == (parked / rel).read_bytes(), rel
        assert not (lr / "runs/ICEWS18/raptor/seed0/SHA256SUMS").exists()
        assert not (lr / "runs/ICEWS14/titer/seed0/rl/checkpoint.pt").exists()  # a tested run resumes from nothing
        assert not list(lr.rglob(".unpark-*"))
        assert "not here yet" not in _run_parked("status", tmp_path=tmp_path).stdout
        # restored: another unpark has nothing to do, whatever `start --threads` or `queue --clear` did since
        (lr / "params.yaml").write_text((lr / "params.yaml").read_text().replace("num_threads: 2", "num_threads: 1"))
        (lr / "queue").unlink()
        r = _run_parked("unpark", tmp_path=tmp_path)
        assert r.returncode == 0 and "nothing to restore" in r.stdout and not (lr / "queue").exists(), r.stdout + r.stderr
        # a run folder here as far along as its parked copy wins; a moved-away one comes back, with a thread count
        # rewritten (in an overrides block `start --threads` added)
        (lr / "runs/ICEWS18/raptor/seed0/rl/checkpoint.pt").write_bytes(b"newer, here")
        shutil.rmtree(lr / "runs/ICEWS14/ablation/p50/seed0")
        r = _run_parked("unpark", tmp_path=tmp_path)
        assert r.returncode == 0 and "ICEWS14 raptor:0:p50 restored" in r.stdout and "1 runs restored" in r.stdout, r.stdout + r.stderr
        assert (lr / "runs/ICEWS18/raptor/seed0/rl/checkpoint.pt").read_bytes() == b"newer, here"
        # a parked params file that differs from the one here in a param is refused, naming it
        shutil.rmtree(lr / "runs/ICEWS14/ablation/p50/seed0")
        (lr / "params.yaml").write_text("rl: {epochs: 3}\n")
        r = _run_parked("unpark", tmp_path=tmp_path)
        assert r.returncode == 1 and "params.yaml differs from the parked one" in r.stderr, r.stderr
        assert not (lr / "runs/ICEWS14/ablation/p50/seed0").exists()
    finally:
        _drop_worktree(lr / "src")


def test_a_folder_of_queued_runs_none_started_parks_and_resumes_its_queue(tmp_path):
    """A folder whose runs are all queued, none started (no runs/ yet: waiting for a core), parks its pin, params
    and queue; on a new machine `status` names the queue, `start` and `queue` refuse (they would pin the work tree
    anew), and `unpark` pins the parked commit and restores params and queue byte for byte; back here, the queue
    cleared by hand stays cleared (it is not the park's to restore while the folder is pinned)."""
    import shutil

    lr, parked = tmp_path / "lr", tmp_path / "parked"
    lr.mkdir()
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(lr / "src"), "HEAD~1"],
                   check=True, capture_output=True)
    pinned = subprocess.run(["git", "-C", str(lr / "src"), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    try:
        (lr / "params.yaml").write_text("rl: {epochs: 1}\n")
        (lr / "queue").write_text("ICEWS05-15 pure_rl:0 1\nICEWS05-15 titer:0 1\n")
        r = _run_parked("park", tmp_path=tmp_path)
        assert r.returncode == 0 and "park: no run started yet; the queue (2 runs)" in r.stdout, r.stdout + r.stderr
        assert (parked / "runs" / "COMMIT").read_text() == pinned + "\n" and (parked / "RUNS").read_text() == ""
        assert not (lr / "runs").exists()  # park wrote nothing here
        _drop_worktree(lr / "src")
        shutil.rmtree(lr)  # a new machine
        out = _run_parked("status", tmp_path=tmp_path).stdout
        assert "not here yet (`resume` restores and starts it): the queue of a folder none of whose runs had " \
               "started, 2 runs (ICEWS05-15 pure_rl:0, ICEWS05-15 titer:0)" in out, out
        for cmd in (("start", "pure_rl:3"), ("queue", "pure_rl:3")):
            r = _run_parked(*cmd, tmp_path=tmp_path)
            assert r.returncode == 3 and "holds a queue not restored here, 2 runs (ICEWS05-15 pure_rl:0, " \
                "ICEWS05-15 titer:0), pinned at" in r.stderr, r.stdout + r.stderr
            assert f"pinned at {pinned[:7]}" in r.stderr and not (lr / "src").exists() and not (lr / "queue").exists()
        r = _run_parked("unpark", tmp_path=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"unpark: pinned {pinned[:7]}" in r.stdout and "2 runs (ICEWS05-15 pure_rl:0, ICEWS05-15 titer:0), " \
               "restored from" in r.stdout and "runs restored" not in r.stdout, r.stdout
        assert subprocess.run(["git", "-C", str(lr / "src"), "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip() == pinned
        for f in ("params.yaml", "queue"):
            assert (lr / f).read_bytes() == (parked / f).read_bytes(), f
        (lr / "queue").unlink()
        r = _run_parked("unpark", tmp_path=tmp_path)
        assert r.returncode == 0 and "nothing to restore" in r.stdout and not (lr / "queue").exists(), r.stdout
        assert "holds a queue" not in _run_parked("status", tmp_path=tmp_path).stdout
    finally:
        _drop_worktree(lr / "src")


@pytest.mark.parametrize("damage, message", [
    ("checkpoint", "files differ from their SHA256SUMS"),
    ("run sums", "has no SHA256SUMS"),
    ("extra file", "holds other files than its SHA256SUMS lists"),
    ("cut sums", "files differ from their SHA256SUMS"),
    ("commit", "files differ from their SHA256SUMS"),
    ("pinned elsewhere", "the parked runs (runs/ICEWS14/titer/seed0,runs/ICEWS18/raptor/seed0,runs/ICEWS14/ablation/p50/seed0) at"),
])
def test_unpark_refuses_a_damaged_park_and_restores_nothing(tmp_path, damage, message):
    """A parked folder changed or cut short in transit, or a source here pinned at another commit: `resume`
    refuses, names what, and restores nothing."""
    import shutil

    lr, parked = _parkable(tmp_path), tmp_path / "parked"
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    shutil.rmtree(lr)
    run = parked / "runs/ICEWS18/raptor/seed0"
    if damage == "checkpoint":
        (run / "rl/checkpoint.pt").write_bytes(b"truncated")
    elif damage == "run sums":
        (run / "SHA256SUMS").unlink()
    elif damage == "extra file":
        (run / "rl/best.pt").write_bytes(b"from elsewhere")
    elif damage == "cut sums":  # the last line cut mid-way: --strict refuses what a plain check would skip
        text = (run / "SHA256SUMS").read_text()
        (run / "SHA256SUMS").write_text(text[:-30])
    elif damage == "commit":
        (parked / "runs/COMMIT").write_text("0" * 40 + "\n")
    elif damage == "pinned elsewhere":
        lr.mkdir()
        (lr / "src").mkdir()
        subprocess.run(["git", "init", "-q", str(lr / "src")], check=True)
        subprocess.run(["git", "-C", str(lr / "src"), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                        "--allow-empty", "-m", "another pin"], check=True)
    r = _run_parked("resume", tmp_path=tmp_path)
    assert r.returncode == 1 and message in r.stderr, r.stderr
    assert "nothing was restored" in r.stderr or "nothing was done" in r.stderr or damage == "pinned elsewhere"
    assert not (lr / "runs").exists()
    if damage == "checkpoint":
        assert "rl/checkpoint.pt" in r.stderr


def test_a_commit_the_repository_lacks_is_refused(tmp_path):
    lr, parked = _parkable(tmp_path), tmp_path / "parked"
    (lr / "runs" / "COMMIT").write_text("0" * 40 + "\n")
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    import shutil
    shutil.rmtree(lr)
    r = _run_parked("unpark", tmp_path=tmp_path)
    assert r.returncode == 1 and "which this repository does not have" in r.stderr, r.stderr
    assert not (lr / "runs").exists()


def test_park_keeps_a_previous_checkpoint_whose_latest_is_missing(tmp_path):
    """A run stopped while older code wrote its next checkpoint has only `checkpoint.pt.prev`: park keeps it
    (under the sums), and a .prev beside its latest stays behind as before."""
    lr, parked = _parkable(tmp_path), tmp_path / "parked"
    (lr / "runs/ICEWS18/raptor/seed0/rl/checkpoint.pt").unlink()
    r = _run_parked("park", tmp_path=tmp_path)
    assert r.returncode == 0 and "park: 3 runs in" in r.stdout, r.stdout + r.stderr
    run = parked / "runs/ICEWS18/raptor/seed0"
    assert (run / "rl/checkpoint.pt.prev").read_bytes() == b"older" and not (run / "rl/checkpoint.pt").exists()
    assert "rl/checkpoint.pt.prev" in (run / "SHA256SUMS").read_text()
    assert not (parked / "runs/ICEWS14/ablation/p50/seed0/pretrain/checkpoint.pt.prev").exists()


def test_park_and_unpark_refuse_arguments_and_say_when_empty(tmp_path):
    assert "no long runs under" in _run_parked("park", tmp_path=tmp_path).stdout
    assert "nothing parked in" in _run_parked("unpark", tmp_path=tmp_path).stdout
    r = _run_parked("park", "raptor:0", tmp_path=tmp_path)
    assert r.returncode == 2 and "park: takes no runs" in r.stderr
    r = _run_parked("unpark", "--set", "rl.epochs=2", tmp_path=tmp_path)
    assert r.returncode == 2 and "unpark: takes no runs and no --set" in r.stderr
    assert not (tmp_path / "lr").exists() and not (tmp_path / "parked").exists()


@pytest.mark.slow
def test_a_parked_run_continues_on_another_machine(tmp_path):
    """A tiny Pure-RL run stopped midway by `park`; its long-runs folder deleted (a new machine); `resume`
    restores it from the parked copy and it trains on from its checkpoint to the end and is tested, its
    history one epoch after another; its parked copy stays until a park replaces it with the tested run (records,
    predictions and best model, no checkpoint), which a later resume leaves as it is."""
    import json
    import shutil
    import time

    import yaml
    from helpers import synthetic_dataset

    lr = _pinned(tmp_path)
    parked = tmp_path / "parked"
    ds = synthetic_dataset(tmp_path / "ds", seed=3)

    def data():
        shutil.copytree(ds / "data", lr / "data" / "TINY" / "ingested")
        shutil.copy(ds / "graph.npz", lr / "data" / "TINY" / "graph.npz")
    data()
    epochs = 30
    (lr / "params.yaml").write_text(yaml.safe_dump({
        "model": {"entity_dim": 8, "relation_dim": 8, "time_dim": 4, "step_dim": 4, "mlp_hidden_dim": 16},
        "env": {"max_actions": 10}, "rl": {"epochs": epochs, "batch_size": 256},
        "eval": {"beam_size": 4, "valid_every": 5}, "train": {"seeds": [0]}}))
    out = lr / "runs" / "TINY" / "pure_rl" / "seed0"
    try:
        r = _run_parked("start", "--dataset", "TINY", "--threads", "1", "pure_rl:0", tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (lr / "cores").read_text() == f"{_cores()}\n"  # what the start saw: a stopped folder's status counts it
        deadline = time.monotonic() + RUN_DEADLINE_S
        while not (out / "rl" / "history.json").exists():  # (written after the epoch's checkpoint)
            assert time.monotonic() < deadline, (out / "train.log").read_text()[-2000:]
            time.sleep(0.2)
        r = _run_parked("park", tmp_path=tmp_path)
        assert r.returncode == 0 and "park: 1 runs in" in r.stdout, r.stdout + r.stderr
        before = json.loads((parked / "runs/TINY/pure_rl/seed0/rl/history.json").read_text())
        done_before = len(before)
        assert 0 < done_before < epochs and not (out / "eval").exists()
        shutil.rmtree(lr)
        lr.mkdir()
        (lr / "src").symlink_to(ROOT)  # (this checkout's code, as the pin: the run's fingerprint includes it)
        data()
        r = _run_parked("resume", tmp_path=tmp_path)
        assert r.returncode == 0 and "unpark: TINY pure_rl:0 restored" in r.stdout, r.stdout + r.stderr
        assert "pure_rl seed 0: started" in r.stdout
        while not (out / "eval" / "metrics.json").exists():
            assert time.monotonic() < deadline, (out / "train.log").read_text()[-2000:]
            time.sleep(0.5)
        history = json.loads((out / "rl" / "history.json").read_text())
        assert [h["epoch"] for h in history] == list(range(epochs))
        assert history[:done_before] == before  # kept from before the move (their timings too), not trained again
        assert "afresh" not in (out / "train.log").read_text()  # "starting afresh", "refusing to start afresh"
        for _ in range(200):  # the job writes its exit status after the test
            if (out / "exit").exists() and (out / "exit").read_text().strip():
                break
            time.sleep(0.1)
        assert (out / "exit").read_text().strip() == "0"
        # the parked copy stays until a park replaces it with the tested run (records and best model, no checkpoint):
        # until `raptor collect` and a commit, the park is the only copy that travels
        assert (parked / "RUNS").read_text() == "runs/TINY/pure_rl/seed0\n"
        r = _run_parked("park", tmp_path=tmp_path)
        assert r.returncode == 0 and "park: TINY pure_rl:0 (tested, " in r.stdout, r.stdout + r.stderr
        copy = parked / "runs" / "TINY" / "pure_rl" / "seed0"
        assert (copy / "eval" / "metrics.json").read_bytes() == (out / "eval" / "metrics.json").read_bytes()
        assert (copy / "rl" / "best.pt").exists() and not list(copy.rglob("checkpoint.pt*"))
        assert "TINY: every run is tested (1); nothing to start" in _run_parked("resume", tmp_path=tmp_path).stdout
    finally:
        _kill_runs(out)


def test_a_moved_folder_of_long_runs_parks_beside_itself(tmp_path):
    """With LONGRUN_DIR=X and no LONGRUN_PARK, park and resume use X-parked, never the work tree's
    longruns-parked/ of the default folder (a test's folder once restored and started the real parked run)."""
    _parkable(tmp_path)
    r = _run("park", tmp_path=tmp_path)
    assert r.returncode == 0 and f"in {tmp_path}/lr-parked" in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "lr-parked" / "RUNS").read_text().count("\n") == 3


def test_forget_drops_one_parked_run_and_the_rest_still_unparks(tmp_path):
    """A run dropped from the park (to start anew) leaves the park whole:
    its copy and its line in RUNS go, the sums still hold, and on another machine the other run is restored
    and the forgotten one is not."""
    import shutil

    lr, parked = _parkable(tmp_path), tmp_path / "parked"
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    r = _run_parked("forget", "--dataset", "ICEWS18", "raptor:0", tmp_path=tmp_path)
    assert r.returncode == 0 and "forget: ICEWS18 raptor:0 removed" in r.stdout, r.stdout + r.stderr
    assert (parked / "RUNS").read_text() == "runs/ICEWS14/titer/seed0\nruns/ICEWS14/ablation/p50/seed0\n"
    assert not (parked / "runs/ICEWS18/raptor/seed0").exists()
    assert "is not parked" in _run_parked("forget", "--dataset", "ICEWS18", "raptor:0", tmp_path=tmp_path).stdout
    r = _run_parked("forget", "raptor:0", "pure_rl:0", tmp_path=tmp_path)
    assert r.returncode == 2 and "name one run" in r.stderr
    shutil.rmtree(lr)
    r = _run_parked("unpark", tmp_path=tmp_path)
    try:
        assert r.returncode == 0 and "ICEWS14 raptor:0:p50 restored" in r.stdout and "2 runs restored" in r.stdout, \
            r.stdout + r.stderr
        assert not (lr / "runs/ICEWS18").exists()
    finally:
        _drop_worktree(lr / "src")


@pytest.mark.parametrize("damage", ["RUNS gone", "RUNS cut"])
def test_a_park_without_its_run_list_is_refused_by_park_and_unpark(tmp_path, damage):
    """Without its RUNS (or with it cut to runs that are here) a park would look empty, and the next park
    would replace it, losing its runs: both commands refuse it and leave it as it is."""
    _parkable(tmp_path)
    parked = tmp_path / "parked"
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    if damage == "RUNS gone":
        (parked / "RUNS").unlink()
    else:
        (parked / "RUNS").write_text("runs/ICEWS18/raptor/seed0\n")
    before = sorted(p.relative_to(parked) for p in parked.rglob("*"))
    for cmd in ("unpark", "park", "resume"):
        r = _run_parked(cmd, tmp_path=tmp_path)
        assert r.returncode == 1 and ("lacks SHA256SUMS, RUNS" in r.stderr or "differ from their SHA256SUMS" in r.stderr), \
            (cmd, r.stderr)
    assert sorted(p.relative_to(parked) for p in parked.rglob("*")) == before


_TINY = {"model": {"entity_dim": 8, "relation_dim": 8, "time_dim": 4, "step_dim": 4, "mlp_hidden_dim": 16},
         "env": {"max_actions": 10}, "rl": {"epochs": 1, "batch_size": 256},
         "eval": {"beam_size": 4, "valid_every": 1}, "train": {"seeds": [0]}}


def _tiny_folder(tmp_path: Path, sweeps: dict) -> Path:
    """A pinned long-runs folder (this checkout) with a tiny dataset TINY made and these sweeps declared in its
    params.yaml (the runs' params, the folder's overrides block included)."""
    import shutil

    import yaml
    from helpers import synthetic_dataset

    lr = _pinned(tmp_path)
    ds = synthetic_dataset(tmp_path / "ds", seed=3)
    shutil.copytree(ds / "data", lr / "data" / "TINY" / "ingested")
    shutil.copy(ds / "graph.npz", lr / "data" / "TINY" / "graph.npz")
    (lr / "params.yaml").write_text(yaml.safe_dump({**_TINY, "sweeps": sweeps})
                                    + "\n# longrun.sh --set\noverrides:\n  train.precision: float32\n")
    return lr


@pytest.mark.parametrize("spec, message", [
    ("pure_rl:0:nope/default", "no sweep 'nope'"),
    ("pure_rl:0:wd/nope", "sweeps.wd: no arm 'nope' (arms: default, labels, rl.weight_decay=0.001)"),
    ("raptor:0:wd/labels", "arm labels of sweep wd changes the label tables' settings"),
    ("titer:0:wd/default", "sweep wd trains variants pure_rl, raptor with seeds 0: not titer seed 0"),
    ("pure_rl:1:wd/default", "not pure_rl seed 1"),
])
def test_a_sweep_arm_that_cannot_run_is_refused_when_queued(tmp_path, spec, message):
    lr = _tiny_folder(tmp_path, {"wd": {"grid": {"rl.weight_decay": [1.0e-3]}, "variants": ["pure_rl", "raptor"],
                                        "arms": {"labels": {"labeling.visited": "target_and_subject"}}}})
    r = _run("queue", "--dataset", "TINY", spec, tmp_path=tmp_path)
    assert r.returncode == 1 and message in r.stderr, r.stdout + r.stderr
    assert not (lr / "queue").exists() and not (lr / "runs").exists() and not (lr / "sweeps").exists()
    for bad in ("pure_rl:0:wd/", "pure_rl:0:/default", "pure_rl:0:a/b/c", "pure_rl:0:wd/x y"):
        r = _run("queue", "--dataset", "TINY", bad, tmp_path=tmp_path)
        assert r.returncode == 2 and "VARIANT:SEED:NAME/ARM for arm ARM of sweep NAME" in r.stderr, bad


def test_status_names_the_other_folders_of_long_runs_beside_its_own(tmp_path):
    """Two pins at once (a campaign's and a sweep's) live in two folders, each with its own status: each names
    the other (not a park, not a folder without runs)."""
    env = {**{k: v for k, v in os.environ.items() if k != "LONGRUN_PARK"}}
    for name in (".longruns", ".longruns-sweep", ".longruns-sweep-parked"):
        (tmp_path / name / "runs").mkdir(parents=True)
    (tmp_path / ".longruns-empty").mkdir()

    def status(name):
        return subprocess.run(["bash", str(SCRIPT), "status"], cwd=ROOT, env={**env, "LONGRUN_DIR": str(tmp_path / name)},
                              capture_output=True, text=True, timeout=60)
    r = status(".longruns")
    assert r.returncode == 0 and f"other long-runs folders here: .longruns-sweep (LONGRUN_DIR={tmp_path}/NAME" in r.stdout, r.stdout + r.stderr
    assert "other long-runs folders here: .longruns (" in status(".longruns-sweep").stdout
    shutil.rmtree(tmp_path / ".longruns-sweep")
    assert "other long-runs folders" not in status(".longruns").stdout


def test_an_evaluation_only_arm_is_refused_when_queued_and_pointed_at_rescore(tmp_path):
    """An arm whose params differ from the default's in test-time evaluation params alone trains what the
    default arm trains: its runs are the default arm's re-scored (`rescore --sweep`), not trained again."""
    lr = _tiny_folder(tmp_path, {"ev": {"variants": ["pure_rl"], "grid": {"eval.rank_last_expansions": [True],
                                                                          "rl.weight_decay": [1.0e-3]}}})
    r = _run("queue", "--dataset", "TINY", "pure_rl:0:ev/eval.rank_last_expansions=true", tmp_path=tmp_path)
    assert r.returncode == 1 and "arm eval.rank_last_expansions=true of sweep ev is evaluation-only" in r.stderr, r.stderr
    assert "`scripts/longrun.sh rescore --sweep ev`" in r.stderr
    assert not (lr / "queue").exists() and not (lr / "runs").exists() and not (lr / "sweeps").exists()


@pytest.mark.slow
def test_a_sweeps_arms_train_as_long_runs_and_are_recorded_as_the_sweep_records_them(tmp_path):
    """Two arms of a sweep (its default and a weight-decay arm) as long runs: each trains with the arm's params
    (the folder's overrides, the sweep's base, the arm's: in its fingerprint), `status` and `park` see them,
    and `raptor collect --sweep` writes the sweep's results folder from the tested runs, which the sweep's
    own reading (declared_records) accepts; a run trained with other params than its arm's is refused."""
    import json
    import time

    from raptor.config import load_params
    from raptor.pipeline.sweep import declared_records, load_sweep, plan_sweep

    sweep = {"base": {"rl.learning_rate": 0.002}, "variants": ["pure_rl"], "grid": {"rl.weight_decay": [1.0e-3]}}
    lr = _tiny_folder(tmp_path, {"wd": sweep})
    runs = [lr / "runs" / "TINY" / "sweeps" / "wd" / arm / "pure_rl" / "seed0" for arm in ("default", "rl.weight_decay=0.001")]
    try:
        r = _run("start", "--dataset", "TINY", "--threads", "1", "pure_rl:0:wd/default",
                 "pure_rl:0:wd/rl.weight_decay=0.001", tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "sweep wd arm rl.weight_decay=0.001 pure_rl seed 0: started" in r.stdout, r.stdout
        p = load_params(lr / "sweeps" / "TINY" / "wd" / "rl.weight_decay=0.001.yaml")
        assert (p.rl.weight_decay, p.rl.learning_rate, p.train.precision, p.train.num_threads) == (1e-3, 0.002, "float32", 1)
        status = _run("status", tmp_path=tmp_path).stdout
        assert "TINY/sweeps/wd/rl.weight_decay=0.001/pure_rl/seed0:" in status, status
        deadline = time.monotonic() + RUN_DEADLINE_S
        while not all((run / "eval" / "metrics.json").exists() for run in runs):
            assert time.monotonic() < deadline, (runs[1] / "train.log").read_text()[-2000:]
            time.sleep(1)
        config = json.loads((runs[1] / "rl" / "run_config.json").read_text())
        assert config["params"]["rl.weight_decay"] == 1e-3 and config["params"]["rl.learning_rate"] == 0.002
        assert json.loads((runs[0] / "rl" / "run_config.json").read_text())["params"]["rl.weight_decay"] == 0.0
        assert "rl.weight_decay=0.001/pure_rl/seed0: RL 1 epochs (finished)" in _run("status", tmp_path=tmp_path).stdout

        results = tmp_path / "results" / "wd" / "TINY"
        cli = [str(ROOT / ".venv" / "bin" / "python"), "-m", "raptor.cli", "collect", str(lr / "runs"), str(results),
               "--sweep", "wd", "--params", str(lr / "params.yaml"), "--dataset", "TINY"]
        r = subprocess.run(cli, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "2 run(s) recorded" in r.stdout, r.stdout + r.stderr
        table = json.loads((results / "results.json").read_text())
        assert sorted(a["arm"] for a in table["arms"]) == ["default", "rl.weight_decay=0.001"] and not table["missing"]
        assert (results / "COMMIT").read_text() == (lr / "runs" / "COMMIT").read_text()
        sw, params = load_sweep(lr / "params.yaml", "wd")
        used, refused = declared_records(plan_sweep(sw, params, "TINY", results, write=False), results)
        assert sorted(used) == ["default-pure_rl-seed0", "rl.weight_decay=0.001-pure_rl-seed0"] and not refused
        page = tmp_path / "docs" / "sweeps.md"  # the docs' sweeps page reads the folder as any sweep's
        r = subprocess.run([*cli[:3], "sweeps", str(results), "--out", str(page)], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "| rl.weight_decay=0.001 | `rl.weight_decay: 0.001` |" in page.read_text(), page.read_text()[:3000]

        # records of another commit in the results folder, or another declaration: refused, nothing changed
        before = {f: f.read_bytes() for f in results.rglob("*") if f.is_file()}
        (results / "COMMIT").write_text("0" * 40 + "\n")
        r = subprocess.run(cli, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "trained at 000000000000" in r.stderr, r.stdout + r.stderr
        (results / "COMMIT").write_bytes(before[results / "COMMIT"])
        declared = results / "params" / "default.json"
        data = json.loads(declared.read_text())
        data["rl"]["learning_rate"] = 0.003
        declared.write_text(json.dumps(data))
        r = subprocess.run(cli, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "default.json: declares other params" in r.stderr, r.stdout + r.stderr
        declared.write_bytes(before[declared])
        assert {f: f.read_bytes() for f in results.rglob("*") if f.is_file()} == before

        # the default arm's run passed off as the other arm's: refused, named, nothing recorded
        import shutil
        shutil.rmtree(results)
        shutil.rmtree(runs[1] / "rl")
        shutil.copytree(runs[0] / "rl", runs[1] / "rl")
        r = subprocess.run(cli, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "rl.weight_decay: 0.0, declared 0.001" in r.stderr, r.stdout + r.stderr
        assert not results.exists()
    finally:
        _kill_runs(*runs)


# --- moving between machines: what a park must never lose (the 2026-11-29 review of longrun.sh) ---

def _history(run: Path, phase: str, epochs: int) -> None:
    (run / phase).mkdir(parents=True, exist_ok=True)
    (run / phase / "history.json").write_text(str([{"epoch": e} for e in range(epochs)]).replace("'", '"'))


@pytest.mark.parametrize("cmd", [("start", "pure_rl:3"), ("queue", "pure_rl:3")])
def test_start_and_queue_refuse_while_parked_runs_are_not_restored(tmp_path, cmd):
    """On a machine the park has come to and nothing is restored yet, `start` or `queue` would pin the
    work tree's commit and train runs from epoch 0, and the next park would replace the parked ones: refused,
    pointing at `resume`, before anything is pinned or written."""
    import shutil

    lr = _parkable(tmp_path)
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    shutil.rmtree(lr)
    r = _run_parked(*cmd, tmp_path=tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr  # (3: the park's refusal, which a queue waits out whole)
    assert "holds runs not restored here" in r.stderr and "runs/ICEWS18/raptor/seed0: no folder here" in r.stderr, r.stderr
    assert "`scripts/longrun.sh resume` restores and continues them" in r.stderr and "Nothing was started" in r.stderr
    assert not (lr / "src").exists() and not (lr / "params.yaml").exists() and not (lr / "queue").exists()
    assert not (lr / "runs").exists()


def test_a_folder_left_behind_gives_way_to_the_parks_further_runs(tmp_path):
    """A machine left behind keeps an older .longruns/: its runs, less far along than the park (another machine
    trained on and parked), are not the ones to continue. `status` says so, `park` and `start` refuse (parking
    would replace the park with the older runs), and `unpark` restores the parked runs, setting the folders here
    (and the queue here, as old) aside under superseded/, never deleting them; a run here as far along or further
    stays. A run training here behind its parked copy is refused until stopped."""
    import shutil

    from helpers import session_with_child

    lr, parked = _parkable(tmp_path), tmp_path / "parked"
    run, arm = lr / "runs/ICEWS18/raptor/seed0", lr / "runs/ICEWS14/ablation/p50/seed0"
    _history(run, "pretrain", 2)
    _history(run, "rl", 5)
    _history(arm, "pretrain", 3)
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    parked_ck = (parked / "runs/ICEWS18/raptor/seed0/rl/checkpoint.pt").read_bytes()
    # this machine as it was before the others went on: the RL run 3 epochs back, the arm 1 epoch ahead
    _history(run, "rl", 2)
    (run / "rl" / "checkpoint.pt").write_bytes(b"older, here")
    _history(arm, "pretrain", 4)
    (lr / "queue").write_text("ICEWS14 titer:9 1\n")
    (lr / "params.yaml").write_text("rl: {epochs: 1}\n")  # no overrides block: the thread count alone differs
    before = sorted(str(p.relative_to(parked)) for p in parked.rglob("*"))

    out = _run_parked("status", tmp_path=tmp_path).stdout
    assert "further along than here" in out and \
        "ICEWS18 raptor:0 (here at pretraining epoch 2, RL epoch 2, parked at pretraining epoch 2, RL epoch 5)" in out, out
    for cmd, code in ((("park",), 1), (("start", "--dataset", "ICEWS18", "pure_rl:4"), 3)):
        r = _run_parked(*cmd, tmp_path=tmp_path)
        assert r.returncode == code and "holds runs not restored here" in r.stderr, (cmd, r.stderr)
        assert "runs/ICEWS18/raptor/seed0: here at pretraining epoch 2, RL epoch 2, parked at" in r.stderr, r.stderr
        assert "ablation" not in r.stderr  # the arm here is further along: nothing to restore
    assert sorted(str(p.relative_to(parked)) for p in parked.rglob("*")) == before

    job, _ = session_with_child(tmp_path)  # the run behind, training here: refused, nothing moved
    try:
        (run / "pid").write_text(f"{job.pid}\n")
        r = _run_parked("unpark", tmp_path=tmp_path)
        assert r.returncode == 1 and "ICEWS18 raptor:0 is training here, behind its parked copy" in r.stderr, r.stderr
        assert (run / "rl" / "checkpoint.pt").read_bytes() == b"older, here"
    finally:
        import signal
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    (run / "pid").unlink()  # (stopped; its sleep may linger as a zombie in the group where nothing reaps it)

    r = _run_parked("unpark", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "unpark: ICEWS18 raptor:0 restored" in r.stdout and "unpark: 1 runs restored" in r.stdout, r.stdout
    assert (run / "rl" / "checkpoint.pt").read_bytes() == parked_ck
    aside = list((lr / "superseded").iterdir())
    assert len(aside) == 1, aside
    assert (aside[0] / "runs/ICEWS18/raptor/seed0/rl/checkpoint.pt").read_bytes() == b"older, here"
    assert (aside[0] / "queue").read_text() == "ICEWS14 titer:9 1\n"
    assert (lr / "queue").read_bytes() == (parked / "queue").read_bytes()
    assert (arm / "pretrain" / "history.json").read_text().count("epoch") == 4  # the arm further along here stayed
    assert "nothing to restore" in _run_parked("unpark", tmp_path=tmp_path).stdout
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0  # now it may replace the park


def test_a_park_cut_between_its_two_renames_is_put_back(tmp_path):
    """A park killed after it moved the previous park aside and before the new one took its place: the next
    command that reads the park puts the previous one back (the next park used to delete it, its name being
    a temporary one); one left beside a park that was swapped in is removed."""
    lr, parked = _parkable(tmp_path), tmp_path / "parked"
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    runs = (parked / "RUNS").read_text()
    parked.rename(tmp_path / "parked.tmp-old-4242")
    r = _run_parked("unpark", tmp_path=tmp_path)
    assert r.returncode == 0 and "parked.tmp-old-4242, left by a park cut short) is back" in r.stderr, r.stdout + r.stderr
    assert (parked / "RUNS").read_text() == runs and not (tmp_path / "parked.tmp-old-4242").exists()
    (tmp_path / "parked.tmp-old-99").mkdir()
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    assert not list(tmp_path.glob("parked.tmp-*")) and (parked / "RUNS").read_text() == runs


def test_a_pid_that_is_no_longer_the_runs_job_is_not_the_run(tmp_path):
    """pids wrap within hours and a pid file outlives its job: a live process whose start time is not the one
    `start` recorded (pid.id) is another process. `status` says stopped and `stop` leaves it alone; with the
    job's own start time it is the run."""
    import signal

    from helpers import session_with_child

    lr = _pinned(tmp_path)
    run = lr / "runs/ICEWS14/pure_rl/seed0"
    run.mkdir(parents=True)
    job, _ = session_with_child(tmp_path)
    try:
        (run / "pid").write_text(f"{job.pid}\n")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        start = Path(f"/proc/{job.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        (run / "pid.id").write_text(f"{boot} {int(start) + 1}\n")
        assert "stopped" in _run("status", tmp_path=tmp_path).stdout
        r = _run("stop", tmp_path=tmp_path)
        assert r.returncode == 0 and "stopped pid" not in r.stdout, r.stdout
        os.killpg(job.pid, 0)  # alive: not ours to stop
        (run / "pid.id").write_text(f"{boot} {start}\n")
        assert f"running (pid {job.pid})" in _run("status", tmp_path=tmp_path).stdout
        (run / "pid.id").write_text(f"another-boot {start}\n")
        assert "stopped" in _run("status", tmp_path=tmp_path).stdout
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def test_status_tells_a_failed_run_from_a_stopped_one(tmp_path):
    """A job that ended with a non-zero status (its train or test failed) wrote it to `exit`; a stopped job
    never gets there."""
    lr = _pinned(tmp_path)
    failed, stopped = lr / "runs/ICEWS14/pure_rl/seed0", lr / "runs/ICEWS14/pure_rl/seed1"
    for run in (failed, stopped):
        run.mkdir(parents=True)
    (failed / "exit").write_text("1\n")
    out = _run("status", tmp_path=tmp_path).stdout
    line = {x.split(":")[0]: x for x in out.splitlines()}
    assert "failed (exit status 1; see its train.log)" in line["ICEWS14/pure_rl/seed0"], out
    assert "stopped" in line["ICEWS14/pure_rl/seed1"], out


def test_precision_auto_is_refused_for_long_runs(tmp_path, monkeypatch):
    """`auto` resolves by the CPU, and long runs move between CPUs with and without native bfloat16: a first
    start whose params would say auto writes no params file; a run whose params say auto does not start."""
    lr = tmp_path / "lr"
    _src_stand_in(lr, params="train:\n  precision: auto\n")
    r = _run("start", "--set", "rl.epochs=1", "pure_rl:0", tmp_path=tmp_path)
    assert r.returncode == 1 and "train.precision would be auto" in r.stderr, r.stderr
    assert "--set train.precision=float32" in r.stderr and not list(lr.glob("params.yaml*"))
    assert f"{lr / 'params.yaml'}: train.precision would be auto" in r.stderr  # the file named, not its temporary copy
    # LONGRUN_ALLOW_AUTO=1 lets runs started with auto before the refusal resume; it writes no new auto params
    monkeypatch.setenv("LONGRUN_ALLOW_AUTO", "1")
    r = _run("start", "--set", "rl.epochs=1", "pure_rl:0", tmp_path=tmp_path)
    assert r.returncode == 1 and "train.precision would be auto" in r.stderr, r.stderr
    assert "LONGRUN_ALLOW_AUTO" not in r.stderr and not list(lr.glob("params.yaml*"))
    monkeypatch.delenv("LONGRUN_ALLOW_AUTO")
    (lr / "params.yaml").write_text("titer: {precision: auto}\n")
    r = _run("start", "titer:0", tmp_path=tmp_path)
    assert r.returncode == 1 and "titer.precision is auto" in r.stderr, r.stderr
    assert not (lr / "runs").exists()


def test_resume_goes_on_past_a_dataset_that_cannot_start(tmp_path):
    """One dataset's runs failing to start (its data missing here) does not keep the others from resuming:
    their untested runs reach `start` (here one alive already), their tested ones are not named to it, and
    resume exits 1 naming the dataset that failed."""
    import signal

    lr = tmp_path / "lr"
    _src_stand_in(lr)
    (lr / "params.yaml").write_text("rl: {epochs: 1}\n")
    (lr / "runs/ABC/pure_rl/seed0").mkdir(parents=True)
    _done_run(lr, "ICEWS14", "pure_rl/seed0")
    alive = lr / "runs/ICEWS14/titer/seed1"
    alive.mkdir(parents=True)
    job, _ = session_with_child(tmp_path)
    try:
        (alive / "pid").write_text(f"{job.pid}\n")
        r = _run("resume", tmp_path=tmp_path)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "resume: the runs of ABC did not start" in r.stderr and "titer seed 1: already running" in r.stdout
        assert "finished and evaluated" not in r.stdout and "every run is tested" not in r.stdout
    finally:
        os.killpg(job.pid, signal.SIGKILL)


def test_resume_leaves_a_dataset_whose_runs_are_all_tested_alone(tmp_path):
    """A dataset whose runs are all tested is done: `resume` neither makes its data again nor fails where its
    raw data is missing (a park's tested runs restored on a new machine)."""
    lr = tmp_path / "lr"
    _src_stand_in(lr)
    (lr / "params.yaml").write_text("rl: {epochs: 1}\n")
    for run in ("pure_rl/seed0", "raptor/seed0", "ablation/p10/seed1"):
        (lr / "runs/ABC" / run / "eval").mkdir(parents=True)
        (lr / "runs/ABC" / run / "eval/metrics.json").write_text('{"mrr": 0.4}')
    r = _run("resume", tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resume: ABC: every run is tested (3); nothing to start" in r.stdout
    assert not (lr / "data").exists() and not (lr / "runs/COMMIT").exists() and not (lr / "venv.txt").exists()


def test_a_park_that_blocks_starts_never_stops_a_run_nor_drains_the_queue(tmp_path):
    """Runs parked and not restored here keep `start` from starting anything (exit 3); an ending job's
    `rebalance` must then neither stop the lone run to restart it on all cores (it would stay stopped) nor move
    the queue to queue.failed (never retried): both wait, whole, for `resume`."""
    import shutil
    import signal

    from helpers import session_with_child

    lr = _parkable(tmp_path)
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    shutil.rmtree(lr / "runs/ICEWS14/titer/seed0")  # (collected, say, and removed without `forget`)
    shutil.rmtree(lr / "runs/ICEWS14/ablation")
    run = lr / "runs/ICEWS18/raptor/seed0"
    job, _ = session_with_child(tmp_path)
    try:
        (run / "pid").write_text(f"{job.pid}\n")
        (run / "threads").write_text("1\n")
        (lr / "queue").write_text("ICEWS18 pure_rl:0 1\nICEWS18 pure_rl:1 1\n")
        r = _run_parked("rebalance", tmp_path=tmp_path)
        assert r.returncode == 0 and "queue: nothing started" in r.stderr and "holds runs not restored here" in r.stderr, \
            r.stdout + r.stderr
        assert (lr / "queue").read_text() == "ICEWS18 pure_rl:0 1\nICEWS18 pure_rl:1 1\n"
        assert not (lr / "queue.failed").exists()
        (lr / "queue").unlink()
        if _cores() > 1:  # the lone run has fewer threads than the machine has cores
            r = _run_parked("rebalance", "--plan", tmp_path=tmp_path)  # the plan says what rebalance would do
            assert r.returncode == 1 and "ICEWS18 raptor:0 left as it is" in r.stderr, r.stdout + r.stderr
            assert "restart" not in r.stdout
            r = _run_parked("rebalance", tmp_path=tmp_path)
            assert r.returncode == 1 and "ICEWS18 raptor:0 left as it is" in r.stderr, r.stdout + r.stderr
        os.killpg(job.pid, 0)  # still running
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def test_park_works_with_relative_folders(tmp_path):
    """LONGRUN_DIR and LONGRUN_PARK relative (to the work tree): park checks each copy from inside the run's
    folder, which a relative park path would not reach."""
    _parkable(tmp_path)
    env = {**os.environ, "LONGRUN_DIR": os.path.relpath(tmp_path / "lr", ROOT),
           "LONGRUN_PARK": os.path.relpath(tmp_path / "parked", ROOT)}
    r = subprocess.run(["bash", str(SCRIPT), "park"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "park: 3 runs in" in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "parked" / "RUNS").read_text().count("\n") == 3


def test_forget_refuses_a_run_tested_here(tmp_path):
    """Jobs started by older versions of the script call `forget` once their run is tested: the park's copy
    would go while the tested records exist only in the ignored folder. And once parked tested, the park would not
    remember a forgotten run (a folder of it left on another machine would train again). Refused while the run is
    tested here, parked or not; a run whose folder was moved away (to start anew) is forgotten."""
    import shutil

    lr, parked = _parkable(tmp_path), tmp_path / "parked"
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    _done_run(lr, "ICEWS18", "raptor/seed0")
    for _ in range(2):  # before and after a park has taken the tested run
        r = _run_parked("forget", "--dataset", "ICEWS18", "raptor:0", tmp_path=tmp_path)
        assert r.returncode == 1 and "is tested here" in r.stderr and "nothing removed" in r.stderr, r.stdout + r.stderr
        assert "runs/ICEWS18/raptor/seed0" in (parked / "RUNS").read_text()
        assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    assert (parked / "runs/ICEWS18/raptor/seed0/eval/metrics.json").exists()
    shutil.move(lr / "runs/ICEWS18/raptor/seed0", tmp_path / "moved-away")
    r = _run_parked("forget", "--dataset", "ICEWS18", "raptor:0", tmp_path=tmp_path)
    assert r.returncode == 0 and "removed" in r.stdout, r.stdout + r.stderr
    assert "runs/ICEWS18/raptor/seed0" not in (parked / "RUNS").read_text()


def test_a_queue_cleared_where_the_runs_went_is_set_aside_on_the_machine_left_behind(tmp_path):
    """The park has no queue (cleared on the machine the runs moved to); the machine left behind still has
    one: with runs here behind the park, it goes to superseded/ too, and no queue is left to start runs."""
    lr, parked = _parkable(tmp_path), tmp_path / "parked"
    run = lr / "runs/ICEWS18/raptor/seed0"
    _history(run, "rl", 4)
    (lr / "queue").unlink()
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    _history(run, "rl", 1)
    (lr / "queue").write_text("ICEWS14 titer:9 1\n")
    r = _run_parked("unpark", tmp_path=tmp_path)
    assert r.returncode == 0 and "ICEWS18 raptor:0 restored" in r.stdout, r.stdout + r.stderr
    assert not (lr / "queue").exists()
    assert [q.read_text() for q in (lr / "superseded").glob("*/queue")] == ["ICEWS14 titer:9 1\n"]


def _standin_pin(tmp_path: Path, precision: str = "float32", no_progress: bool = False) -> Path:
    """A long-runs folder pinned at a stand-in source: a `raptor` package whose `load_params` gives these
    precisions and whose `raptor train` lacks `--no-progress` (unless asked for), its data made."""
    lr = tmp_path / "lr"
    _src_stand_in(lr)
    pkg = lr / "src" / "raptor"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text(
        "from types import SimpleNamespace as NS\n"
        f"def load_params(path):\n    return NS(train=NS(num_threads=1, precision={precision!r}), titer=NS(precision={precision!r}))\n")
    train_opts = ["--data", "--graph", "--out", "--variant", "--seed", "--params", "--labels", "--resume-only"]
    train_opts += ["--no-progress"] if no_progress else []
    (pkg / "cli.py").write_text(
        "import argparse\np = argparse.ArgumentParser(prog='raptor')\nsub = p.add_subparsers()\n"
        f"t = sub.add_parser('train')\nfor o in {train_opts!r}: t.add_argument(o)\n"
        "e = sub.add_parser('evaluate')\nfor o in ['--model', '--data', '--graph', '--params', '--split', '--out']: e.add_argument(o)\n"
        "p.parse_args()\n")
    (lr / "params.yaml").write_text("rl: {epochs: 1}\n")
    _done_run(lr, "ICEWS14", "titer/seed9")
    return lr


def test_start_checks_the_pins_options_and_keeps_the_packages_it_started_with(tmp_path):
    """A pinned commit without an option the jobs pass is refused at start, naming it, before any run folder
    (not by a background job that dies at once); a pin whose code cannot even import says so; the first start
    keeps the .venv's packages in venv.txt and a later start under other packages warns, naming them."""
    lr = _standin_pin(tmp_path)
    r = _run("start", "titer:0", tmp_path=tmp_path)
    assert r.returncode == 1 and "has no `raptor train --no-progress`" in r.stderr, r.stdout + r.stderr
    assert not (lr / "runs/ICEWS14/titer/seed0").exists()
    venv = (lr / "venv.txt").read_text()
    assert "torch==" in venv and "raptor" not in venv.lower()  # (this work tree itself is not a package version)
    (lr / "venv.txt").write_text(venv + "fakepkg==1.0\n")
    r = _run("start", "titer:0", tmp_path=tmp_path)
    assert "packages differ from those of the runs' first start" in r.stderr and "< fakepkg==1.0" in r.stderr, r.stderr
    (lr / "src" / "raptor" / "cli.py").write_text("raise ImportError('no such package on this machine')\n")
    r = _run("start", "titer:0", tmp_path=tmp_path)
    assert r.returncode == 1 and "could not run `raptor train --help`" in r.stderr, r.stderr
    assert "no such package on this machine" in r.stderr


@pytest.mark.parametrize("allow", [None, "1", "new"])
def test_runs_started_with_precision_auto_resume_only_when_allowed(tmp_path, monkeypatch, allow):
    """A folder whose params say auto (runs started before the refusal): refused, the message naming
    LONGRUN_ALLOW_AUTO=1, which lets them through with a warning. Another value is no value: refused as unset (the
    script once told a params file about to be written by LONGRUN_ALLOW_AUTO=new, which a caller could also set)."""
    _standin_pin(tmp_path, precision="auto")
    if allow:
        monkeypatch.setenv("LONGRUN_ALLOW_AUTO", allow)
    r = _run("start", "titer:0", tmp_path=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    if allow == "1":
        assert "warning" in r.stderr and "(LONGRUN_ALLOW_AUTO=1)" in r.stderr
        assert "has no `raptor train --no-progress`" in r.stderr  # past the precision check, to the next one
    else:
        assert "train.precision, titer.precision is auto" in r.stderr and "LONGRUN_ALLOW_AUTO=1" in r.stderr


@pytest.mark.parametrize("cmd", [("rebalance",), ("start", "pure_rl:0")])
def test_a_lock_named_in_the_environment_is_not_taken_for_held(tmp_path, cmd):
    """Only a `start` whose parent holds the lock (LONGRUN_LOCKED = its parent's pid) skips taking it: a job's
    environment may carry a value an older version of the script set, and its ending `rebalance` (or a hand
    `start`) must still wait for a park that holds the lock."""
    import fcntl

    lr = _pinned(tmp_path)
    with open(lr / "queue.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a park in progress, say
        env = {**os.environ, "LONGRUN_DIR": str(lr), "LONGRUN_PARK": str(tmp_path / "parked"), "LONGRUN_LOCKED": "1"}
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run(["bash", str(SCRIPT), *cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3)


# --- park --at: a safety-net park at a time of day ---

def test_park_at_parks_at_the_next_such_time_whether_today_or_tomorrow(tmp_path, monkeypatch):
    """The delay is that of the next HH:MM after now: today's while ahead, else tomorrow's, always positive and under
    a day (a hand-made `sleep $(( $(date -d 07:00 +%s) - $(date +%s) ))` went negative after midnight and parked at
    once), a clock change counted; `--plan` arms nothing."""
    import time

    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("LONGRUN_NOW", str(1714564800 + 30))  # 2024-05-01 12:00:30 UTC
    for at, day, delay in (("13:30", "2024-05-01", 5370), ("11:00", "2024-05-02", 82770), ("12:00", "2024-05-02", 86370),
                           ("0:05", "2024-05-02", 43470)):
        r = _run("park", "--at", at, "--plan", tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        assert f"would park at {day} {at.zfill(5)} UTC, in {delay} s" in r.stdout, r.stdout
        assert 0 < delay < 24 * 3600
    # Central European time, the night it moves to summer time (02:00 -> 03:00): 23:00 to 07:00 is 7 h, not 8
    monkeypatch.setenv("TZ", "CET-1CEST,M3.5.0,M10.5.0/3")
    monkeypatch.setenv("LONGRUN_NOW", str(1711836000))  # 2024-03-30 23:00 CET (22:00 UTC)
    r = _run("park", "--at", "07:00", "--plan", tmp_path=tmp_path)
    assert r.returncode == 0 and "would park at 2024-03-31 07:00 CEST, in 25200 s" in r.stdout, r.stdout + r.stderr
    monkeypatch.setenv("LONGRUN_NOW", "soon")
    r = _run("park", "--at", "07:00", "--plan", tmp_path=tmp_path)
    assert r.returncode == 2 and "LONGRUN_NOW='soon' is not epoch seconds" in r.stderr
    assert not (tmp_path / "lr").exists()  # a plan writes nothing
    assert time.time() > 1714564800  # (the real clock untouched: LONGRUN_NOW is read by this computation only)


def _gone(pid: int) -> bool:
    """No such process, or a zombie (reaped by whatever reaps orphans here, or not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_park_at_arms_a_detached_sleeper_that_a_new_time_replaces_and_cancel_ends(tmp_path):
    """`park --at` leaves a sleeper in its own session (it outlives the shell), its pid in park-at.pid, named by
    `status`; another `park --at` replaces it, saying so; `park --at cancel` (or `--cancel`) ends it."""
    import signal
    import time

    lr = tmp_path / "lr"
    soon = time.strftime("%H:%M", time.localtime(time.time() + 3 * 3600))  # hours away: never fires in the test
    pids = []
    try:
        r = _run("park", "--at", soon, tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        pid = int((lr / "park-at.pid").read_text())
        pids.append(pid)
        assert f"park --at {soon}: parks at " in r.stdout and f"(pid {pid};" in r.stdout, r.stdout
        assert 2 * 3600 < int(r.stdout.split(" s (pid")[0].rsplit(" ", 1)[1]) <= 3 * 3600
        assert os.getsid(pid) == pid and not _gone(pid)  # its own session, alive
        assert "park --at" in (lr / "park-at.log").read_text()
        assert f"a park is armed for " in _run("status", tmp_path=tmp_path).stdout
        r = _run("park", "--at", "03:00", tmp_path=tmp_path)
        assert r.returncode == 0 and f"replaced the park armed for " in r.stdout and f"(pid {pid})" in r.stdout, r.stdout
        new = int((lr / "park-at.pid").read_text())
        pids.append(new)
        deadline = time.monotonic() + 10
        while not _gone(pid):
            assert time.monotonic() < deadline, "the replaced sleeper lives on"
            time.sleep(0.1)
        assert not _gone(new)
        r = _run("park", "--cancel", tmp_path=tmp_path)
        assert r.returncode == 0 and f"cancelled the park armed for " in r.stdout and f"(pid {new})" in r.stdout, r.stdout
        assert not (lr / "park-at.pid").exists() and not (lr / "park-at.pid.id").exists()
        deadline = time.monotonic() + 10
        while not _gone(new):
            assert time.monotonic() < deadline, "the cancelled sleeper lives on"
            time.sleep(0.1)
        r = _run("park", "--at", "cancel", tmp_path=tmp_path)
        assert r.returncode == 0 and "no park armed" in r.stdout
        assert "armed" not in _run("status", tmp_path=tmp_path).stdout
    finally:
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_jobs_call_a_copy_of_the_script_in_the_long_runs_folder(tmp_path, monkeypatch):
    """`start` copies the script into the long-runs folder (atomically) and a run's job, when it ends, calls that copy
    for `rebalance`, telling it the work tree: another commit checked out in the work tree meanwhile does not change
    the script the jobs run. (The pinned code here is a stand-in whose train waits for a file.)"""
    import time

    lr = _standin_pin(tmp_path, no_progress=True)
    gate = tmp_path / "gate"
    (lr / "src" / "raptor" / "cli.py").write_text(  # (waits after parse_args: `--help` does not)
        "import argparse, os, time\np = argparse.ArgumentParser(prog='raptor')\nsub = p.add_subparsers()\n"
        "t = sub.add_parser('train')\nfor o in ['--data', '--graph', '--out', '--variant', '--seed', '--params']: t.add_argument(o)\n"
        "for o in ['--resume-only', '--no-progress']: t.add_argument(o, action='store_true')\n"
        "e = sub.add_parser('evaluate')\nfor o in ['--model', '--data', '--graph', '--params', '--split', '--out']: e.add_argument(o)\n"
        "a = p.parse_args()\nend = time.time() + 60\n"
        "while not os.path.exists(os.environ['STANDIN_GATE']) and time.time() < end:\n    time.sleep(0.1)\n"
        "if getattr(a, 'split', None):  # evaluate: the run is tested\n"
        "    os.makedirs(a.out, exist_ok=True)\n    open(os.path.join(a.out, 'metrics.json'), 'w').write('{}')\n")
    monkeypatch.setenv("STANDIN_GATE", str(gate))
    run, queued = lr / "runs" / "ICEWS14" / "titer" / "seed0", lr / "runs" / "ICEWS14" / "titer" / "seed1"
    try:
        r = _run("start", "titer:0", tmp_path=tmp_path)
        assert r.returncode == 0 and "titer seed 0: started" in r.stdout, r.stdout + r.stderr
        copy = lr / "longrun.sh"
        assert copy.read_bytes() == SCRIPT.read_bytes() and os.access(copy, os.X_OK)
        assert not list(lr.glob("longrun.sh.tmp*"))
        job = (run / "pid").read_text().strip()
        ident = (run / "run.id").read_text()  # the folder's identity, written as its first start made it
        assert len(ident) == 33 and int(ident, 16) and ident.endswith("\n"), ident
        args = Path(f"/proc/{job}/cmdline").read_bytes().split(b"\0")
        assert str(copy).encode() in args and str(ROOT).encode() in args, args
        assert str(SCRIPT).encode() not in args
        # a run queued with every core waits for this one; when its job ends, the copy's rebalance starts it (the copy
        # calling itself for the start, told the work tree), and that run's job calls the copy in turn
        r = _run("queue", "--threads", "0", "titer:1", tmp_path=tmp_path)
        assert r.returncode == 0 and "queue: ICEWS14 titer:1 waits" in r.stdout, r.stdout + r.stderr
        gate.write_text("")
        deadline = time.monotonic() + 60
        while "rebalance:" not in (queued / "train.log").read_text() if (queued / "train.log").exists() else True:
            assert time.monotonic() < deadline, (run / "train.log").read_text()
            time.sleep(0.2)
        log = (run / "train.log").read_text()
        # the copy, run from the long-runs folder, found the work tree (its .venv): it did the rebalance
        assert (run / "exit").read_text().strip() == "0" and "titer seed 1: started" in log, log
        assert "rebalance: 0 runs alive, nothing to do" in (queued / "train.log").read_text()
        assert (lr / "queue").read_text() == "" and (queued / "exit").read_text().strip() == "0"
        while "titer/seed0: " not in (out := _run("status", tmp_path=tmp_path).stdout) or "running (pid" in \
                next(x for x in out.splitlines() if "titer/seed0: " in x):  # (its job's shell ends after its rebalance)
            assert time.monotonic() < deadline, out
            time.sleep(0.2)
        (run / "eval" / "metrics.json").unlink()
        (run / "rl").mkdir()  # (trained, say): a start again keeps the folder's identity
        r = _run("start", "titer:0", tmp_path=tmp_path)
        assert r.returncode == 0 and "titer seed 0: started" in r.stdout, r.stdout + r.stderr
        assert (run / "run.id").read_text() == ident
    finally:
        gate.write_text("")
        _kill_runs(run, queued)


def test_a_run_started_anew_and_parked_replaces_an_older_start_left_behind(tmp_path):
    """A run forgotten to start anew, restarted from epoch 0 and parked at epoch 5: a machine left behind with a folder
    of the earlier start at epoch 100 must not keep it for being further along. Their run.id differ: the park's copy
    wins whatever its progress (`status` says so, `park` and `start` refuse, `unpark` sets the folder here aside,
    never deleting it). A folder without a run.id (made before it existed) is compared by progress as before."""
    import shutil

    lr, parked = _parkable(tmp_path), tmp_path / "parked"  # (lr/src: a link to this checkout, never a worktree to drop)
    run = lr / "runs/ICEWS18/raptor/seed0"
    _history(run, "rl", 5)
    (run / "run.id").write_text("b2" * 16 + "\n")  # the start anew
    assert _run_parked("park", tmp_path=tmp_path).returncode == 0
    assert (parked / "runs/ICEWS18/raptor/seed0/run.id").read_text() == "b2" * 16 + "\n"
    assert "  ./run.id\n" in (parked / "runs/ICEWS18/raptor/seed0/SHA256SUMS").read_text()  # checked as the run's files
    parked_ck = (parked / "runs/ICEWS18/raptor/seed0/rl/checkpoint.pt").read_bytes()
    # the machine left behind: the earlier start's folder, far further along
    _history(run, "rl", 100)
    (run / "rl" / "checkpoint.pt").write_bytes(b"the earlier start, here")
    (run / "run.id").write_text("a1" * 16 + "\n")
    out = _run_parked("status", tmp_path=tmp_path).stdout
    assert "further along than here, or started anew" in out and "here run.id a1a1a1a1 at RL epoch 100, parked run.id " \
        "b2b2b2b2 at RL epoch 5: another start of the run" in out, out
    for cmd, code in ((("park",), 1), (("start", "--dataset", "ICEWS18", "pure_rl:4"), 3)):
        r = _run_parked(*cmd, tmp_path=tmp_path)
        assert r.returncode == code and "runs/ICEWS18/raptor/seed0: here run.id a1a1a1a1" in r.stderr, (cmd, r.stderr)
    r = _run_parked("unpark", tmp_path=tmp_path)
    assert r.returncode == 0 and "unpark: ICEWS18 raptor:0 restored" in r.stdout, r.stdout + r.stderr
    assert (run / "rl" / "checkpoint.pt").read_bytes() == parked_ck and (run / "run.id").read_text() == "b2" * 16 + "\n"
    aside = list((lr / "superseded").iterdir())
    assert len(aside) == 1, aside
    kept = aside[0] / "runs/ICEWS18/raptor/seed0"
    assert (kept / "rl" / "checkpoint.pt").read_bytes() == b"the earlier start, here"
    assert (kept / "run.id").read_text() == "a1" * 16 + "\n" and (kept / "rl" / "history.json").read_text().count("epoch") == 100
    assert "nothing to restore" in _run_parked("unpark", tmp_path=tmp_path).stdout
    # a folder here without a run.id: progress decides, as before run.id (further along here: it stays)
    shutil.rmtree(lr / "superseded")
    _history(run, "rl", 100)
    (run / "run.id").unlink()
    r = _run_parked("unpark", tmp_path=tmp_path)
    assert r.returncode == 0 and "nothing to restore" in r.stdout, r.stdout + r.stderr
    _history(run, "rl", 3)  # behind, no run.id here: the park's, by its progress
    r = _run_parked("unpark", tmp_path=tmp_path)
    assert r.returncode == 0 and "here at RL epoch 3, parked at RL epoch 5" in r.stdout, r.stdout + r.stderr
    assert (run / "run.id").read_text() == "b2" * 16 + "\n"
