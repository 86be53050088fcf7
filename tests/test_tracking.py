"""tasks.tracking's run life (:func:`tasks.tracking.tracked_run`, :func:`tasks.tracking.pipeline_parent`)
on a real MLflow SQLite store in the test's folder."""

from __future__ import annotations

import mlflow
import pytest

from tasks import tracking


@pytest.fixture
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return mlflow.MlflowClient(tracking_uri=uri)


class Diverged(RuntimeError):
    pass


def test_a_run_that_succeeds_ends_finished_with_its_params_metrics_and_tags(store, tmp_path):
    (tmp_path / "history.json").write_text("[]")
    with tracking.tracked_run("raptor/T", "T-pure_rl-seed0", params={"rl.gamma": 0.95, "seed": 0},
                              tags={"dataset": "T", "seed": 0}) as run:
        assert store.get_run(run.run_id).info.status == "RUNNING"
        run.log_metrics({"rl/reward": 0.1}, step=1)
        run.log_metrics({"rl/reward": 0.2, "rl/val_hits@10": 0.5}, step=2)
        run.log_artifact(tmp_path / "history.json", "history")
    got = store.get_run(run.run_id)
    assert got.info.status == "FINISHED" and got.info.run_name == "T-pure_rl-seed0" and run.ended
    assert got.data.params == {"rl.gamma": "0.95", "seed": "0"}
    assert got.data.tags["dataset"] == "T" and got.data.tags["seed"] == "0" and "git_commit" in got.data.tags
    assert [(m.step, m.value) for m in store.get_metric_history(run.run_id, "rl/reward")] == [(1, 0.1), (2, 0.2)]
    assert got.data.metrics["rl/val_hits_at_10"] == 0.5
    assert [a.path for a in store.list_artifacts(run.run_id, "history")] == ["history/history.json"]


def test_a_run_that_raises_ends_failed_and_the_exception_goes_on(store):
    with pytest.raises(Diverged, match="seed 0 diverged"):
        with tracking.tracked_run("raptor/T", "T-raptor-seed0", params={"seed": 0}) as run:
            run.log_metrics({"rl/reward": 0.3}, step=1)
            raise Diverged("seed 0 diverged")
    got = store.get_run(run.run_id)
    assert got.info.status == "FAILED" and got.data.params == {"seed": "0"}
    assert got.data.metrics["rl/reward"] == 0.3
    # an interrupt too (BaseException): the run does not stay RUNNING
    with pytest.raises(KeyboardInterrupt):
        with tracking.tracked_run("raptor/T", "T-raptor-seed1") as run:
            raise KeyboardInterrupt
    assert store.get_run(run.run_id).info.status == "FAILED"


def test_nesting_and_a_run_the_block_ends_itself(store):
    """Children name their parent; a lazy run that logged nothing and was discarded is never created;
    a run deleted in the block is not finished again."""
    with tracking.tracked_run("raptor/T", "finetune-T-pure_rl", tags={"aggregate": "seeds"}) as parent:
        with tracking.tracked_run("raptor/T", "T-pure_rl-seed0", parent=parent, lazy=True) as child:
            child.log_metrics({"rl/reward": 0.5}, step=1)
        with tracking.tracked_run("raptor/T", "T-pure_rl-seed1", parent=parent, lazy=True) as kept:
            assert kept.discard()
        with tracking.tracked_run("raptor/T", "T-pure_rl-seed2", parent=parent) as gone:
            gone.delete()
    exp = store.get_experiment_by_name("raptor/T")
    runs = {r.info.run_name: r for r in store.search_runs([exp.experiment_id])}
    assert set(runs) == {"finetune-T-pure_rl", "T-pure_rl-seed0"}  # seed1 never created, seed2 deleted
    assert runs["T-pure_rl-seed0"].data.tags["mlflow.parentRunId"] == parent.run_id
    assert kept.run_id is None and all(r.info.status == "FINISHED" for r in runs.values())
    assert store.get_run(gone.run_id).info.lifecycle_stage == "deleted"


def test_the_pipeline_parent_outside_an_invocation_is_none(store):
    with tracking.pipeline_parent("raptor/T", "T") as pipe:
        assert pipe is None
    assert store.get_experiment_by_name("raptor/T") is None  # nothing created


def test_the_pipeline_parent_of_an_invocation_is_closed_however_the_block_ends(store, monkeypatch):
    """Under a pipeline invocation: found or created by its id, FINISHED when the stage ends, also when
    the stage raises (its end time is the last stage's); deleted again when this stage created it and
    nothing was logged under it."""
    monkeypatch.setattr(tracking, "invocation_id", lambda: "inv-1")
    with pytest.raises(Diverged):
        with tracking.pipeline_parent("raptor/T", "T") as pipe:
            with tracking.tracked_run("raptor/T", "T-pretrain-seed0", parent=pipe) as run:
                raise Diverged
    got = store.get_run(pipe.run_id)
    assert got.info.run_name == "pipeline-T" and got.data.tags["pipeline_run_id"] == "inv-1"
    assert got.info.status == "FINISHED" and store.get_run(run.run_id).info.status == "FAILED"
    with tracking.pipeline_parent("raptor/T", "T") as again:
        assert again.run_id == pipe.run_id  # the same invocation: the same run
    monkeypatch.setattr(tracking, "invocation_id", lambda: "inv-2")
    with tracking.pipeline_parent("raptor/T", "T") as empty:
        assert empty.run_id != pipe.run_id
    assert store.get_run(empty.run_id).info.lifecycle_stage == "deleted"  # nothing under it


def test_mlflow_keeps_its_info_lines_and_download_bars_out_of_a_stage_output(tmp_path):
    """A stage that logged a model printed MLflow's INFO lines ("Creating initial MLflow database
    tables...") and "Downloading artifacts" bars among its own: a fresh process that imports the tracking
    module (as a stage does) logs MLflow at WARNING and without the bars."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import logging, os, tasks.tracking\n"
            "print(logging.getLogger('mlflow').getEffectiveLevel(), os.environ['MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR'])\n"
            "logging.getLogger('mlflow.store.db.utils').info('Creating initial MLflow database tables...')\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MLFLOW_")}
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**env, "PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["30", "false"]  # logging.WARNING
    assert "Creating initial MLflow database tables" not in proc.stderr
