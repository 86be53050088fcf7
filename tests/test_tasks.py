"""The orchestration layer's own logic (the tasks themselves are exercised end to end in test_pipeline)."""

from prefect.states import Failed

from raptor.ingest import IngestError
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


def test_experiments_are_created_as_model_development(tmp_path, monkeypatch):
    """MLflow's UI opens such an experiment on its runs table, not on the GenAI overview."""
    import mlflow

    from tasks import tracking

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp_id = tracking.experiment_id("raptor/T", artifact_root=(tmp_path / "mlruns").as_uri())
    exp = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").get_experiment(exp_id)
    assert exp.tags.get("mlflow.experimentKind") == "custom_model_development"
    assert tracking.experiment_id("raptor/T") == exp_id  # found again, not created twice
