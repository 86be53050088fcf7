"""The orchestration layer's own logic (the tasks themselves are exercised end to end in test_pipeline)."""

from dataclasses import replace
from pathlib import Path

import pytest

from prefect.states import Failed

from raptor.data.ingest import IngestError
from tasks.data import retry_on_io_errors
from tasks.tracking import metric_name
from tasks.train import threads_per_run


def _state(exc):
    return Failed(data=exc, message=f"Task run encountered unexpected exception: {exc!r}")


def test_only_io_errors_are_retried():
    assert retry_on_io_errors(None, None, _state(ConnectionResetError("reset by peer")))
    assert not retry_on_io_errors(None, None, _state(IngestError("SHA-256 mismatch")))
    assert not retry_on_io_errors(None, None, _state(IngestError("train.txt, line 3: bad")))


def test_metric_names_are_valid_for_mlflow():
    assert metric_name("rl/val_hits@10") == "rl/val_hits_at_10"
    assert metric_name("rl/reward") == "rl/reward"


def test_threads_are_shared_among_parallel_runs():
    assert threads_per_run(4, 2) == 2
    assert threads_per_run(2, 3) == 1
    assert threads_per_run(8, 1) == 8


def test_experiments_are_created_as_model_development(tmp_path, mlflow_db, monkeypatch):
    """MLflow's UI opens such an experiment on its runs table, not on the GenAI overview."""
    import mlflow

    from tasks import tracking

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp_id = tracking.experiment_id("raptor/T", artifact_root=(tmp_path / "mlruns").as_uri())
    exp = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").get_experiment(exp_id)
    assert exp.tags.get("mlflow.experimentKind") == "custom_model_development"
    assert tracking.experiment_id("raptor/T") == exp_id  # found again, not created twice


class _FlakyClient:
    """A real MLflow client (SQLite store) that acts like an unreachable server while ``down``."""

    def __init__(self, uri):
        import mlflow

        self.real, self.down = mlflow.MlflowClient(tracking_uri=uri), False

    def __getattr__(self, name):
        import requests

        attr = getattr(self.real, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            if self.down:
                raise requests.exceptions.ConnectionError("Connection refused")
            return attr(*args, **kwargs)
        return call


def test_tracking_waits_while_mlflow_is_unreachable_and_sends_in_order(tmp_path, mlflow_db, monkeypatch, caplog):
    from tasks import tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    flaky = _FlakyClient(uri)
    monkeypatch.setattr(tracking, "client", lambda: flaky)
    monkeypatch.setattr(tracking, "RETRY_EVERY_S", 0.0)

    # Down when the run starts: nothing fails, the run is created when the server answers.
    flaky.down = True
    run = tracking.start_run("raptor/T", "seed0", params={"rl.gamma": 0.95}, tags={"seed": 0})
    assert run.run_id is None and "is unreachable" in caplog.text and "training goes on" in caplog.text
    run.log_metrics({"rl/reward": 0.1}, step=0)
    run.log_metrics({"rl/reward": 0.2}, step=1)
    assert len(run.pending) == 3  # params + two epochs
    flaky.down = False
    run.log_metrics({"rl/reward": 0.3}, step=2)
    assert run.run_id is not None and not run.pending and "answers again" in caplog.text
    history = flaky.real.get_metric_history(run.run_id, "rl/reward")
    assert [(m.step, m.value) for m in history] == [(0, 0.1), (1, 0.2), (2, 0.3)]
    assert flaky.real.get_run(run.run_id).data.params == {"rl.gamma": "0.95"}

    # Gone in the middle and still gone at the end: training is not held up, the end says what is missing.
    flaky.down = True
    run.log_metrics({"rl/reward": 0.4}, step=3)
    assert run.finish() is False and "still unreachable at the end of run seed0" in caplog.text
    assert [m.step for m in flaky.real.get_metric_history(run.run_id, "rl/reward")] == [0, 1, 2]
    assert flaky.real.get_run(run.run_id).info.status == "RUNNING"
    # Back before the end: everything arrives and the run is finished.
    flaky.down = False
    assert run.finish() is True
    assert [m.step for m in flaky.real.get_metric_history(run.run_id, "rl/reward")] == [0, 1, 2, 3]
    assert flaky.real.get_run(run.run_id).info.status == "FINISHED"


def test_tracking_against_a_server_that_is_not_there(tmp_path, monkeypatch, caplog):
    import socket

    from tasks import tracking

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    run = tracking.start_run("raptor/T", "seed1", params={"a": 1})
    run.log_metrics({"rl/reward": 0.5}, step=0)  # waits: the next try is a minute away
    assert run.run_id is None and len(run.pending) == 2
    assert run.finish() is False
    assert f"127.0.0.1:{port}" in caplog.text and "not sent" in caplog.text



def tiny_training(tmp_path: Path, monkeypatch) -> None:
    """An MLflow store in ``tmp_path`` and a tiny synthetic dataset ingested to ``tmp_path/data`` with
    its graph at ``tmp_path/graph.npz``: what a training task reads."""
    from raptor.data.graph import build_graph
    from raptor.data.ingest import ingest
    from raptor.data.synthetic import SyntheticSpec, write_raw

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    raw = write_raw(tmp_path / "raw", SyntheticSpec(num_entities=30, num_timestamps=20))
    ingest(raw, tmp_path / "data")
    build_graph(tmp_path / "data", tmp_path / "graph.npz")


def tiny_params(path: Path, epochs: int = 2, **train) -> str:
    """A resolved params file of a tiny model (``train``: keys of the train section besides one thread)."""
    import json

    from raptor.config import params_from_dict, params_to_dict

    p = params_from_dict({"model": {"entity_dim": 8, "relation_dim": 8, "time_dim": 2, "step_dim": 2,
                                    "mlp_hidden_dim": 16}, "env": {"max_actions": 10},
                          "rl": {"epochs": epochs, "batch_size": 256}, "eval": {"beam_size": 5, "valid_every": 1},
                          "train": {"num_threads": 1, **train}})
    path.write_text(json.dumps(params_to_dict(p)))
    return str(path)


def test_a_run_that_trains_nothing_is_not_logged_again(tmp_path, mlflow_db, monkeypatch):
    """A second invocation on a complete run folder (e.g. the stage re-ran for another seed) keeps
    the first MLflow run instead of logging a copy of it; a run that trains more logs a new run."""
    import mlflow

    from tasks.jobs import TrainJob
    from tasks.train import train_run_task

    tiny_training(tmp_path, monkeypatch)

    def resolved(epochs):
        return tiny_params(tmp_path / f"params-{epochs}.json", epochs)

    def train(params_file):
        return train_run_task.fn(TrainJob(params_file, "SYN", str(tmp_path / "data"), str(tmp_path / "graph.npz"),
                                          "pure_rl", 0, str(tmp_path / "run"), "raptor/SYN", "SYN-pure_rl-seed0"))

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")

    def runs():
        exp = client.get_experiment_by_name("raptor/SYN")
        return client.search_runs([exp.experiment_id]) if exp else []

    first = train(resolved(1))
    assert len(runs()) == 1 and first["mlflow_run_id"] == runs()[0].info.run_id
    again = train(resolved(1))  # complete: nothing to train
    assert len(runs()) == 1 and again["mlflow_run_id"] == first["mlflow_run_id"]
    more = train(resolved(2))  # one more epoch: trained, so logged, with the whole history of the run
    assert len(runs()) == 2 and more["mlflow_run_id"] != first["mlflow_run_id"]
    # a logged model per trained run, none for the one kept
    models = client.search_logged_models([client.get_experiment_by_name("raptor/SYN").experiment_id])
    assert sorted(m.source_run_id for m in models) == sorted([first["mlflow_run_id"], more["mlflow_run_id"]])
    assert [m.step for m in client.get_metric_history(more["mlflow_run_id"], "rl/reward")] == [1, 2]  # 1-based

    # Only the params that shape a Pure-RL run, with the precision and device it trained with.
    run = client.get_run(more["mlflow_run_id"])
    sections = {k.split(".")[0] for k in run.data.params}
    assert not sections & {"titer", "labeling", "pretrain.batch_size", "ablation", "datasets"}, sections
    assert {"model", "rl", "env", "eval", "train"} <= sections
    assert run.data.params["precision"] == "float32" and run.data.params["device"] == "cpu"
    assert "train.precision" not in run.data.params
    # MLflow's own source tags (its Source and Version columns)
    tags = run.data.tags
    assert tags["mlflow.source.type"] == "PROJECT" and tags["mlflow.source.name"]
    assert tags.get("mlflow.source.git.commit", "unknown") == tags["git_commit"]
    # the best checkpoint under checkpoint/, and the artifacts beside this test's store, not in the project
    assert {a.path for a in client.list_artifacts(run.info.run_id, "checkpoint")} == {"checkpoint/best.pt",
                                                                                     "checkpoint/summary.json"}
    assert run.info.artifact_uri.startswith((tmp_path / "mlruns").as_uri())
    assert run.data.metrics["best_epoch"] >= 1


def test_each_agent_logs_only_its_own_params():
    from raptor.config import Params
    from tasks.train import run_params, variant_sections

    p = Params()
    titer = run_params(p, variant_sections("titer"), "cpu", "float32")
    assert not [k for k in titer if k.startswith(("model.", "rl.", "pretrain.", "labeling."))], sorted(titer)
    assert any(k.startswith("titer.") for k in titer) and titer["precision"] == "float32"
    assert "titer.precision" not in titer and "train.precision" not in titer
    for v in ("pure_rl", "raptor"):
        ac = run_params(p, variant_sections(v))
        assert not [k for k in ac if k.startswith("titer.")] and any(k.startswith("rl.") for k in ac)
    assert any(k.startswith("pretrain.") for k in run_params(p, variant_sections("raptor")))
    assert not any(k.startswith("pretrain.") for k in run_params(p, variant_sections("pure_rl")))


def test_epoch_lines_are_one_based_and_readable():
    from tasks.train import epoch_line

    line = epoch_line("SYN-raptor-seed0", "rl", 2, {"reward": 0.41234, "val_mrr": 0.2, "seconds": 12.43}, 15)
    assert line == "SYN-raptor-seed0 rl epoch 3/15: reward 0.4123, val MRR 0.2000, 12.4 s"
    assert "val MRR" not in epoch_line("r", "rl", 0, {"reward": 1.0, "val_mrr": None, "seconds": 1.0})


def test_prefect_artifact_rows_link_the_mlflow_runs(monkeypatch):
    """On a tracking server a row links the run's page in the model-training view of the UI (MLflow
    3 opens on its GenAI views otherwise); on a file store it names the run id."""
    from types import SimpleNamespace

    from tasks import tracking

    rows = [{"seed": 0, "best_val_mrr": 0.41234, "mlflow_run_id": "abcdef0123456789"}, {"seed": 1}]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///x.db")
    md = tracking.runs_markdown("raptor/T", rows, ("seed", "best_val_mrr"))
    assert "| 0 | 0.4123 | `abcdef0123456789` |" in md and "| 1 |  | - |" in md
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000/")
    monkeypatch.setattr(tracking, "client", lambda: SimpleNamespace(
        get_experiment_by_name=lambda name: SimpleNamespace(experiment_id="7") if name == "raptor/T" else None))
    md = tracking.runs_markdown("raptor/T", rows, ("seed", "best_val_mrr"))
    assert ("[abcdef01](http://mlflow:5000/#/experiments/7/runs/abcdef0123456789?workflowType=machine_learning)"
            in md)


def test_a_stage_finds_the_dvc_process_it_runs_under(tmp_path):
    """The stages of one `dvc repro` share its parent run through the DVC process above them (their
    nearest ancestor named dvc, through the shell DVC runs a command in); two invocations are two
    processes; a stage run by hand has none."""
    import subprocess
    import sys

    from flows.invocation import dvc_process

    fake = tmp_path / "dvc"  # runs its argument through a shell, as DVC runs a stage's command
    fake.write_text(f"#!{sys.executable}\nimport subprocess, sys\n"
                    "sys.exit(subprocess.call(['/bin/sh', '-c', sys.argv[2]]))\n")
    fake.chmod(0o755)
    # The stage: a process under that shell that names its parent and waits. What dvc_process() finds in
    # it is dvc_process(its parent pid), asked here while it runs (a Python stage importing flows, i.e.
    # Prefect, would cost seconds of CPU per process).
    stage = "sh -c 'echo $PPID; read x'; :"

    def under_dvc():
        proc = subprocess.Popen([str(fake), "repro", stage], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            return dvc_process(int(proc.stdout.readline()))
        finally:
            proc.communicate("\n", timeout=60)
            assert proc.returncode == 0

    first, second = under_dvc(), under_dvc()
    assert first["command"] == f"dvc repro {stage}" and first["pid"] > 1
    assert (first["pid"], first["start"]) != (second["pid"], second["start"])
    assert dvc_process() is None  # this process: run by hand


def test_a_read_only_mlflow_store_is_reported_as_read_only_naming_its_file(tmp_path, mlflow_db, monkeypatch, caplog):
    """The reported defect: a read-only mlflow.db was reported as "unreachable"."""
    import os

    from tasks import tracking

    db = tmp_path / "mlflow.db"
    # MLflow makes the folder of a `sqlite:///file:...` URI's path as a relative `file:/...` folder of the
    # working directory: here, not in the checkout
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    tracking.start_run("raptor/T", "seed0").finish()  # the store exists, with the experiment
    os.chmod(db, 0o444)  # read-only for a user other than root; `mode=ro` makes it read-only for root too
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///file:{db}?mode=ro&uri=true")
    caplog.clear()
    run = tracking.start_run("raptor/T", "seed1", params={"a": 1})
    assert run.run_id is None and run.finish() is False
    warnings = [r.getMessage() for r in caplog.records if r.name == "raptor.tracking"]
    assert warnings and all(len(w.splitlines()) == 1 for w in warnings)
    assert f"is read-only: {db} cannot be written" in warnings[0] and "unreachable" not in warnings[0]
    assert "readonly database" in warnings[0] and "training goes on" in warnings[0]
    assert "still read-only" in warnings[-1]


def test_runs_left_running_by_a_killed_process_are_marked_killed_by_the_next_one(tmp_path, mlflow_db, monkeypatch):
    """The reported defect: MLflow runs left RUNNING by a kill stayed RUNNING for ever. The next run
    of the same name and tags marks them KILLED; a run whose process still runs is left as it is."""
    import signal
    import subprocess
    import sys
    import textwrap

    import mlflow

    from tasks import tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    tags = {"dataset": "T", "variant": "pure_rl", "seed": 0, "stage": "finetune"}
    child = textwrap.dedent(f"""
        import time
        from tasks import tracking
        run = tracking.start_run("raptor/T", "T-pure_rl-seed0", tags={tags!r})
        run.log_metrics({{"rl/reward": 0.1}}, step=0)
        print(run.run_id, flush=True)
        time.sleep(600)
    """)
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    tracking.experiment_id("raptor/T")  # the store and experiment exist before the processes log to them
    procs, ids = [], []
    try:
        for _ in range(2):  # started together: each spends seconds importing MLflow
            procs.append(subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, env=env))
        ids = [p.stdout.readline().strip() for p in procs]
        killed_id, alive_id = ids
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        c = mlflow.MlflowClient(tracking_uri=uri)
        other = tracking.start_run("raptor/T", "T-pure_rl-seed1", tags={**tags, "seed": 1})  # another seed's
        assert c.get_run(killed_id).info.status == "RUNNING"
        run = tracking.start_run("raptor/T", "T-pure_rl-seed0", tags=tags)
        assert run.run_id not in (killed_id, alive_id)
        assert c.get_run(killed_id).info.status == "KILLED"
        assert c.get_run(alive_id).info.status == "RUNNING"  # its process still runs
        assert c.get_run(run.run_id).info.status == "RUNNING" == c.get_run(other.run_id).info.status
    finally:
        for p in procs:
            p.kill()


@pytest.mark.slow
def test_a_training_task_run_logs_its_epochs_to_prefect(tmp_path, monkeypatch):
    """Prefect's own view of training: one line per epoch (1-based) in the task run's log."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    import time

    from prefect.testing.utilities import prefect_test_harness

    from tasks.jobs import TrainJob
    from tasks.train import train_run_task

    tiny_training(tmp_path, monkeypatch)
    tiny_params(tmp_path / "params.json")

    @flow(name="tiny-train")
    def tiny():
        from prefect.runtime import flow_run

        train_run_task(TrainJob(str(tmp_path / "params.json"), "SYN", str(tmp_path / "data"), str(tmp_path / "graph.npz"),
                                "pure_rl", 0, str(tmp_path / "run"), "raptor/SYN", "SYN-pure_rl-seed0"))
        return flow_run.id

    with prefect_test_harness(server_startup_timeout=120):
        run_id = tiny()
        deadline = time.monotonic() + 30  # the log handler ships its lines in the background
        while True:
            with get_client(sync_client=True) as client:
                lines = [log.message for log in client.read_logs(
                    LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))]
            if sum(" rl epoch " in m for m in lines) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(1)
    epochs = [m for m in lines if " rl epoch " in m]
    assert [m.split(":")[0] for m in epochs] == ["SYN-pure_rl-seed0 rl epoch 1/2", "SYN-pure_rl-seed0 rl epoch 2/2"]
    assert all("reward" in m and "val MRR" in m for m in epochs), epochs


_PREDICT = """
import json, sys
import mlflow.pyfunc
import pandas as pd
import torch
torch.set_num_threads(int(sys.argv[3]))  # as the ranking it is compared with: torch's GEMMs round by thread count
model = mlflow.pyfunc.load_model(sys.argv[1])
out = model.predict(pd.DataFrame(json.loads(sys.argv[2])).astype("int64"))
import raptor
print(json.dumps({"rows": out.to_dict("list"), "raptor": raptor.__file__}))
"""


@pytest.mark.slow  # end to end: a fresh process loads the logged model (about a minute)
def test_a_training_run_logs_its_best_model_for_mlflow_without_pickle(tmp_path, monkeypatch):
    """The best checkpoint as an MLflow logged model "from code": a signature naming the query columns,
    loaded in a fresh process (no project on its path: it carries ``raptor/``) it answers queries with
    exactly the candidates and scores of the agent's own ranking, and no file of it is a pickle."""
    import json
    import os
    import subprocess
    import sys
    import time

    import mlflow
    import numpy as np
    import torch

    from raptor.agents import agent_of, get_agent
    from raptor.agents.base import load_model
    from raptor.config import load_resolved, params_from_dict, params_to_dict
    from raptor.runs.context import load_context
    from raptor.data.graph import build_graph
    from raptor.data.ingest import ingest
    from raptor.data.synthetic import SyntheticSpec, write_raw
    from tasks.jobs import TrainJob
    from tasks.train import train_run_task

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    raw = write_raw(tmp_path / "raw", SyntheticSpec(num_entities=30, num_timestamps=20))
    ingest(raw, tmp_path / "data")
    build_graph(tmp_path / "data", tmp_path / "graph.npz")
    p = params_from_dict({"model": {"entity_dim": 8, "relation_dim": 8, "time_dim": 2, "step_dim": 2,
                                    "mlp_hidden_dim": 16}, "env": {"max_actions": 10},
                          "rl": {"epochs": 1, "batch_size": 256}, "eval": {"beam_size": 5, "valid_every": 1},
                          "train": {"num_threads": 1}})
    params = tmp_path / "params.json"
    params.write_text(json.dumps(params_to_dict(p)))
    from tasks import tracking
    logging_model = []
    log_model = tracking.Run._log_model

    def timed(self, kwargs):
        t0 = time.perf_counter()
        log_model(self, kwargs)
        logging_model.append(time.perf_counter() - t0)
    monkeypatch.setattr(tracking.Run, "_log_model", timed)
    started = time.perf_counter()
    summary = train_run_task.fn(TrainJob(str(params), "SYN", str(tmp_path / "data"), str(tmp_path / "graph.npz"),
                                         "pure_rl", 0, str(tmp_path / "run"), "raptor/SYN", "SYN-pure_rl-seed0"))
    print(f"train + log: {time.perf_counter() - started:.1f} s, the model: {logging_model} s")
    run_id = summary["mlflow_run_id"]
    client = mlflow.MlflowClient(tracking_uri=uri)

    # One logged model, linked to the run, with its signature.
    exp = client.get_experiment_by_name("raptor/SYN")
    models = client.search_logged_models([exp.experiment_id])
    assert [(m.name, m.source_run_id) for m in models] == [("model", run_id)]
    info = mlflow.models.get_model_info(f"runs:/{run_id}/model")
    assert info.model_id == models[0].model_id
    inputs = info.signature.inputs.to_dict()
    assert [(c["name"], c["type"]) for c in inputs] == [("subject", "long"), ("relation", "long"), ("time", "long")]
    assert [c["name"] for c in info.signature.outputs.to_dict()] == ["query", "rank", "entity", "score", "name"]
    assert info.signature.params.to_dict()[0]["name"] == "top_k"

    # Its files: the model's code, the project's checkpoint as it is, the dataset; no pickle.
    local = Path(mlflow.artifacts.download_artifacts(f"models:/{info.model_id}", dst_path=str(tmp_path / "model")))
    files = {f.relative_to(local).as_posix(): f for f in local.rglob("*") if f.is_file()}
    assert (local / "artifacts" / "best.pt").read_bytes() == (tmp_path / "run" / "best.pt").read_bytes()
    assert "artifacts/data/train.parquet" in files and "artifacts/graph.npz" in files
    assert "mlflow_model.py" in files and "code/raptor/agents/base.py" in files, sorted(files)
    for name, f in files.items():
        assert not name.endswith((".pkl", ".pickle")), name
        if name != "artifacts/best.pt":  # a zip of tensors, read with weights_only (raptor.runs.checkpoints)
            assert f.read_bytes()[:1] != b"\x80", f"{name} is a pickle"
    flavor = mlflow.models.Model.load(str(local)).flavors["python_function"]
    assert flavor["loader_module"] == "mlflow.pyfunc.loaders.code_model" and "python_model.pkl" not in files

    # A fresh process, outside the project, predicts what the agent's ranking gives for the same checkpoint.
    ctx = load_context(tmp_path / "data", tmp_path / "graph.npz", load_resolved(params))
    queries = ctx.queries("test")[[0, 1, 2, -1, -2]]  # -1, -2: inverse queries
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _PREDICT, f"runs:/{run_id}/model",
                          json.dumps({"subject": queries[:, 0].tolist(), "relation": queries[:, 1].tolist(),
                                      "time": queries[:, 3].tolist()}), str(torch.get_num_threads())],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    print(f"load + predict in a fresh process: {time.perf_counter() - started:.1f} s")
    assert out.returncode == 0, out.stderr[-3000:]
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["raptor"].startswith(str(tmp_path / "model")) or "/code/raptor/" in answer["raptor"]
    rows = answer["rows"]

    model, meta = load_model(tmp_path / "run" / "best.pt")
    model.eval()
    agent = get_agent(agent_of(meta))
    with agent.test_time(ctx, model, meta, "test"):
        res, _ = agent.rank(ctx, model, queries, agent.precision(ctx.params, "cpu"), "cpu")
    expected = []
    for i in range(len(queries)):
        cands = [(float(s), int(e)) for e, s in zip(res.cand_entity[i], res.cand_score[i]) if e >= 0 and np.isfinite(s)]
        order = sorted(range(len(cands)), key=lambda j: -cands[j][0])
        expected += [(i, k + 1, cands[j][1], cands[j][0]) for k, j in enumerate(order)]
    got = list(zip(rows["query"], rows["rank"], rows["entity"], rows["score"]))
    assert got == expected and len({q for q, *_ in got}) == len(queries)
    assert rows["name"] == [ctx.dataset.entity_names[e] for e in rows["entity"]]


def test_stacked_seeds_train_in_one_task_each_with_its_own_mlflow_run(tmp_path, mlflow_db, monkeypatch):
    """train.stacked_seeds: 2 groups a stage's three seeds into tasks of two and one; every seed still
    has its run folder, its MLflow run with its own epochs, and its row in the results, in seed order."""
    import json

    import mlflow

    from flows.stages import train_seeds
    from tasks.jobs import TrainGroup, TrainJob

    tiny_training(tmp_path, monkeypatch)
    params_file = tiny_params(tmp_path / "params.json", stacked_seeds=2)
    jobs = [TrainJob(str(params_file), "SYN", str(tmp_path / "data"), str(tmp_path / "graph.npz"), "pure_rl", s,
                     str(tmp_path / f"run{s}"), "raptor/SYN", f"SYN-pure_rl-seed{s}") for s in (0, 1, 2)]
    results = train_seeds(jobs, 2, 1)
    assert [r["seed"] for r in results] == [0, 1, 2]
    assert [r["stacked_seeds"] for r in results] == [2, 2, 1]
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    for r in results:
        run = client.get_run(r["mlflow_run_id"])
        assert run.info.status == "FINISHED" and run.data.params["seed"] == str(r["seed"])
        assert [m.step for m in client.get_metric_history(run.info.run_id, "rl/reward")] == [1, 2]
        assert json.loads((tmp_path / f"run{r['seed']}" / "mlflow_run.json").read_text())["run_id"] == run.info.run_id
    with pytest.raises(ValueError, match="share params, data, graph, variant"):
        TrainGroup((jobs[0], replace(jobs[1], variant="raptor")))


def test_stacked_pretraining_seeds_run_in_one_task_each_with_its_own_mlflow_run(tmp_path, mlflow_db, monkeypatch):
    """train.stacked_seeds groups the pretrain stage's seeds too (pretrain_group_task): one task, every
    seed with its run folder, snapshots and MLflow run with its own epochs."""
    import json

    import mlflow

    from raptor.config import load_resolved
    from raptor.labeling.stage import label_dataset
    from tasks.jobs import PretrainGroup, PretrainJob
    from tasks.train import pretrain_group_task

    tiny_training(tmp_path, monkeypatch)
    params_file = tiny_params(tmp_path / "params.json", stacked_seeds=2)
    label_dataset(tmp_path / "data", tmp_path / "labels", max_path_length=3,
                  config=load_resolved(params_file).labeling, graph_path=tmp_path / "graph.npz", show_progress=False)
    jobs = [PretrainJob(params_file, "SYN", str(tmp_path / "data"), str(tmp_path / "graph.npz"), str(tmp_path / "labels"),
                        s, str(tmp_path / f"pre{s}"), (1, 2), "raptor/SYN") for s in (0, 1)]
    results = pretrain_group_task.fn(PretrainGroup(tuple(jobs)))
    assert [r["seed"] for r in results] == [0, 1]
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    for r in results:
        assert sorted(r["snapshots"]) == [1, 2] and all(Path(p).is_file() for p in r["snapshots"].values())
        run = client.get_run(r["mlflow_run_id"])
        assert run.info.status == "FINISHED" and run.data.params["seed"] == str(r["seed"])
        history = json.loads((tmp_path / f"pre{r['seed']}" / "history.json").read_text())
        assert [row["stacked_seeds"] for row in history] == [2, 2]
        assert json.loads((tmp_path / f"pre{r['seed']}" / "mlflow_run.json").read_text())["run_id"] == run.info.run_id
    with pytest.raises(ValueError, match="share params, data, graph, labels"):
        PretrainGroup((jobs[0], replace(jobs[1], epochs=(1,))))


def test_the_evaluate_stage_clears_its_output_first_so_no_seed_of_other_params_stays(tmp_path, monkeypatch):
    """The review's case: `python -m flows pipeline` (unlike `dvc repro`) kept eval/seed2..4 of an earlier
    five-seed run beside a two-seed profile's seeds; significance then refused them (or, before it checked
    seeds, pooled them)."""
    import json

    import tasks.train
    from flows.stages import evaluate_flow
    from raptor.common.io import OutputError

    def fake_evaluate(job):
        metrics = {"mrr": 0.5, "hits@1": 0.4, "hits@3": 0.5, "hits@10": 0.6}
        Path(job.out_dir).mkdir(parents=True)
        (Path(job.out_dir) / "metrics.json").write_text(json.dumps(metrics))
        return metrics

    monkeypatch.setattr(tasks.train, "evaluate_run_task", fake_evaluate)
    params = tiny_params(tmp_path / "params.json", seeds=[0, 1])
    out = tmp_path / "eval"
    for s in (0, 1, 2, 3, 4):  # a previous evaluation of five seeds
        (out / f"seed{s}").mkdir(parents=True)
        (out / f"seed{s}" / "metrics.json").write_text("{}")
    io = {"data": "d", "graph": "g", "train": str(tmp_path / "train")}
    flat = evaluate_flow.fn("T", params, io, {"out": str(out), "metrics": str(tmp_path / "m.json")}, "pure_rl")
    assert flat["seeds"] == [0, 1] and sorted(p.name for p in out.iterdir()) == ["seed0", "seed1"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match=r"mine holds files and is not an evaluation folder"):
        evaluate_flow.fn("T", params, io, {"out": str(mine), "metrics": str(tmp_path / "m.json")}, "pure_rl")
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
