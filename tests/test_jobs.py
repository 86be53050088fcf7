"""The jobs mapped tasks take (tasks/jobs.py) and how flows map a task over them (flows.runners.map_jobs):
as Prefect task runs inside a flow run, on plain threads outside Prefect (a stage of a plain `dvc repro`)."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flows.runners import map_jobs
from tasks.jobs import EvaluateJob, LabelJob, PretrainJob, TrainJob

ROOT = Path(__file__).resolve().parents[1]


def _job(seed: int, **kw) -> TrainJob:
    return TrainJob("build/params.json", "SYN", "data/SYN/ingested", "data/SYN/graph.npz", "raptor", seed,
                    f"runs/SYN/raptor/train/seed{seed}", "raptor/SYN", f"SYN-raptor-seed{seed}", **kw)


def test_jobs_are_frozen_values_that_pickle():
    job = _job(0, extra_tags={"stage": "ablation"}, pretrain_epochs=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.seed = 1  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(job)) == job  # to a Dask worker
    assert dataclasses.replace(job, seed=1).seed == 1 and job.seed == 0
    assert PretrainJob("p", "SYN", "d", "g", "l", 3, "o", (1, 2), "raptor/SYN").run_name == "SYN-pretrain-seed3"
    assert LabelJob("p", "d", "g", "o").part is None


class _Task:
    """What map_jobs needs of a Prefect task outside Prefect: its function (``fn``)."""

    def __init__(self, fn):
        self.fn = fn

    def map(self, jobs):  # never used outside a flow run
        raise AssertionError("Task.map called outside a Prefect flow run")


def test_outside_prefect_a_task_is_mapped_on_threads_in_order():
    threads, started = set(), []

    def train(job: TrainJob) -> dict:
        started.append(job.seed)
        threads.add(threading.get_ident())
        time.sleep(0.05 * (3 - job.seed))  # the first job ends last: results still in job order
        return {"seed": job.seed, "run_name": job.run_name}

    jobs = [_job(s) for s in range(3)]
    assert map_jobs(_Task(train), jobs, max_workers=2) == [{"seed": s, "run_name": f"SYN-raptor-seed{s}"}
                                                         for s in range(3)]
    assert len(threads) == 2 and sorted(started) == [0, 1, 2]
    assert map_jobs(_Task(train), [], max_workers=2) == []


def test_outside_prefect_the_first_failure_is_raised_once_every_job_has_ended():
    ended = []

    def evaluate(job: EvaluateJob) -> int:
        if job.seed in (1, 2):
            raise RuntimeError(f"seed {job.seed} diverged")
        time.sleep(0.2)
        ended.append(job.seed)
        return job.seed

    jobs = [EvaluateJob("p", "d", "g", "raptor", s, f"t{s}", f"e{s}") for s in range(4)]
    with pytest.raises(RuntimeError, match="seed 1 diverged"):
        map_jobs(_Task(evaluate), jobs, max_workers=2)
    assert sorted(ended) == [0, 3]


_FLOW = """
import json, sys, threading
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import task_run
from flows.runners import map_jobs
from tasks.jobs import TrainJob

@task(name="train-run", cache_policy=NO_CACHE, task_run_name="{job.run_name}")
def train(job: TrainJob) -> dict:
    return {"seed": job.seed, "task_run": task_run.name, "tags": dict(job.extra_tags)}

@flow(name="maps-jobs")
def maps(n: int) -> list:
    jobs = [TrainJob("p", "SYN", "d", "g", "raptor", s, f"o{s}", "raptor/SYN", f"SYN-raptor-seed{s}",
                     extra_tags={"arm": s}) for s in range(n)]
    return map_jobs(train, jobs)

print(json.dumps(maps(3)))
"""


@pytest.mark.slow
def test_a_flow_maps_a_task_over_its_jobs_as_named_task_runs(tmp_path):
    """Inside a Prefect flow run (Prefect's temporary local API): one task run per job, named from it."""
    from helpers import stack_env

    env = stack_env(tmp_path / ".prefect", "", tmp_path / "mlflow.db", PYTHONPATH=str(ROOT))
    env.pop("PREFECT_API_URL")
    proc = subprocess.run([sys.executable, "-c", _FLOW], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == [{"seed": s, "task_run": f"SYN-raptor-seed{s}", "tags": {"arm": s}} for s in range(3)]


_PLAIN = """
import pickle, sys
from pathlib import Path
import flows.stages
from raptor.data.ingest import ingest
from raptor.data.synthetic import SyntheticSpec, write_raw
from tasks.data import graph_task
from tasks.train import train_run_task

tmp = Path(sys.argv[1])
ingest(write_raw(tmp / "raw", SyntheticSpec(num_entities=20, num_timestamps=12)), tmp / "data")
summary = graph_task(str(tmp / "data"), str(tmp / "graph.npz"))  # outside Prefect: the function itself
assert summary["num_edges"] > 0 and (tmp / "graph.npz").is_file()
assert pickle.loads(pickle.dumps(train_run_task)) is train_run_task  # by name, as to a Dask worker
print(sorted(m for m in ("prefect", "mlflow") if m in sys.modules))
"""


def test_outside_prefect_a_task_is_its_function_and_prefect_is_never_imported(tmp_path):
    """What a stage of a plain `dvc repro` relies on (tasks.lazy): importing the flows and calling a task
    outside a Prefect run imports no Prefect (nor MLflow, for a stage that tracks nothing)."""
    proc = subprocess.run([sys.executable, "-c", _PLAIN, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "['mlflow']"  # tasks.train tracks: MLflow, never Prefect
