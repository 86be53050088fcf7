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
