"""``python -m flows results``: the runs of result sets (``raptor results``' records) as MLflow comparisons."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flows.results import results_records_flow


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _ranks(folder: Path, seed: int, variant: str) -> None:
    """Per-query ranks of 8 test queries (the significance tests of a pooled set pair them)."""
    folder.mkdir(parents=True, exist_ok=True)
    n = 8
    pq.write_table(pa.table({"subject": np.arange(n), "relation": np.zeros(n, int), "object": np.ones(n, int),
                             "time": np.zeros(n, int), "rank": np.random.default_rng([seed, len(variant)]).integers(1, 20, n).astype(float)}),
                   folder / "ranks.parquet")


def _run(root: Path, variant: str, seed: int, mrr: float, reading_mrr: float | None = None, arm: int | None = None):
    """One collected long run (``raptor collect``'s layout): 4 RL epochs, validation at epochs 2 and 4."""
    d = root / "ICEWS14" / (f"ablation/p{arm}" if arm is not None else variant) / f"seed{seed}"
    pre = 0 if variant == "pure_rl" else (arm if arm is not None else 3)
    _write(d / "rl/history.json", [{"epoch": e, "reward": 0.1 * e, "seconds": 2.0,
                                    "val_mrr": 0.3 + 0.01 * e if e % 2 else None} for e in range(4)])
    _write(d / "rl/summary.json", {"rl_epochs": 4, "pretrain_epochs": pre, "precision": "float32"})
    _write(d / "rl/run_config.json", {"params": {"rl.gamma": 0.95, "eval.beam_size": 100}, "inputs": {"data": "d0"}})
    _write(d / "eval/metrics.json", {"mrr": mrr, "hits@1": mrr - 0.1, "hits@3": mrr, "hits@10": mrr + 0.1})
    _ranks(d / "eval", seed, variant)
    if reading_mrr is not None:
        r = d / "rescore/eval.rank_last_expansions=true"
        _write(r / "metrics.json", {"mrr": reading_mrr, "hits@1": 0.2})
        _ranks(r, seed + 1, variant)
        _write(r / "reading.json", {"overrides": {"eval.rank_last_expansions": True}, "split": "test",
                                    "model_hash": "x"})


@pytest.fixture
def records(tmp_path, monkeypatch):
    """Two sittings of a campaign (Pure-RL seeds 0-1 and RL-RAPTOR seed 0 in the first, RL-RAPTOR seed 1 and
    an ablation arm of 1 pretraining epoch in the second), run from ``tmp_path`` so paths are relative."""
    monkeypatch.chdir(tmp_path)
    a, b = Path("camp/s1"), Path("camp/s2")
    _run(a, "pure_rl", 0, 0.40, reading_mrr=0.41)
    _run(a, "pure_rl", 1, 0.42)
    _run(a, "raptor", 0, 0.44)
    _run(b, "raptor", 1, 0.47)
    _run(b, "raptor", 0, 0.43, arm=1)
    return tmp_path


def test_each_run_is_logged_once_with_its_curves_test_metrics_and_readings(records, mlflow_db, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    out = results_records_flow.fn(sources=["paper budget=camp/*"])
    exp = "raptor/ICEWS14/results-paper-budget"
    assert sorted(out[exp]["logged"]) == ["ICEWS14-ablation-p1-seed0", "ICEWS14-pure_rl-seed0", "ICEWS14-pure_rl-seed1",
                                          "ICEWS14-raptor-seed0", "ICEWS14-raptor-seed1"]
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{mlflow_db}")
    runs = {r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name(exp).experiment_id])}
    assert len(runs) == 6 and all(r.info.status == "FINISHED" for r in runs.values())
    parent = runs.pop("results-paper-budget-ICEWS14")
    assert parent.data.metrics["pure_rl/test_mrr_mean"] == pytest.approx(0.41)
    assert parent.data.metrics["pure_rl/test_mrr_std"] == pytest.approx(0.0141421, rel=1e-4)  # ddof 1
    assert parent.data.metrics["raptor/test_mrr_mean"] == pytest.approx(0.455)  # the arm is not a seed of RL-RAPTOR
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in runs.values())

    run = runs["ICEWS14-pure_rl-seed0"]
    assert run.data.metrics["test/mrr"] == pytest.approx(0.40) and run.data.metrics["test/hits_at_10"] == pytest.approx(0.5)
    assert run.data.metrics["rescored/eval.rank_last_expansions_true/mrr"] == pytest.approx(0.41)
    assert run.data.metrics["best_val_mrr"] == pytest.approx(0.33)
    assert run.data.params["rl.gamma"] == "0.95" and run.data.params["precision"] == "float32"
    assert run.data.tags["record"] == str(Path("camp/s1/ICEWS14/pure_rl/seed0/eval"))
    rewards = client.get_metric_history(run.info.run_id, "rl/reward")
    assert [(m.step, round(m.value, 6)) for m in sorted(rewards, key=lambda m: m.step)] == [(1, 0), (2, 0.1), (3, 0.2),
                                                                                           (4, 0.3)]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "rl/val_mrr")] == [2, 4]
    # RL epochs on the whole budget's axis: after the run's 3 pretraining epochs
    steps = sorted(m.step for m in client.get_metric_history(runs["ICEWS14-raptor-seed1"].info.run_id, "total/reward"))
    assert steps == [4, 5, 6, 7]
    arm = runs["ICEWS14-ablation-p1-seed0"]
    assert arm.data.tags["arm"] == "p1" and arm.data.params["pretrain.epochs"] == "1"
    assert "rescored/eval.rank_last_expansions_true/mrr" not in runs["ICEWS14-pure_rl-seed1"].data.metrics

    assert run.data.metrics["best_epoch"] == 4 and run.data.metrics["final_reward"] == pytest.approx(0.3)

    # run again as the campaign grows: the new tested seed is logged under the same parent, a reading re-scored
    # since is added to its run, a seed still training waits
    _run(Path("camp/s2"), "pure_rl", 2, 0.44)
    _run(Path("camp/s2"), "titer", 0, 0.0)
    Path("camp/s2/ICEWS14/titer/seed0/eval/metrics.json").unlink()
    reading = Path("camp/s1/ICEWS14/raptor/seed0/rescore/eval.rank_last_expansions=true")
    _write(reading / "metrics.json", {"mrr": 0.45})
    _write(reading / "reading.json", {"overrides": {"eval.rank_last_expansions": True}, "split": "test", "model_hash": "x"})
    _ranks(reading, 9, "raptor")
    again = results_records_flow.fn(sources=["paper budget=camp/*"])
    assert again[exp]["logged"] == ["ICEWS14-pure_rl-seed2"] and again[exp]["readings"] == ["ICEWS14-raptor-seed0"]
    assert len(again[exp]["before"]) == 4 and again[exp]["untested"] == ["ICEWS14-titer-seed0"]
    runs = {r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name(exp).experiment_id])}
    assert len(runs) == 7
    assert runs["results-paper-budget-ICEWS14"].data.metrics["pure_rl/test_mrr_mean"] == pytest.approx(0.42)
    assert runs["results-paper-budget-ICEWS14"].info.status == "FINISHED"
    assert runs["ICEWS14-raptor-seed0"].data.metrics["rescored/eval.rank_last_expansions_true/mrr"] == pytest.approx(0.45)


def test_a_run_whose_logging_was_cut_short_is_logged_again_once(records, mlflow_db, monkeypatch):
    import mlflow

    from tasks import tracking

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    exp = "raptor/ICEWS14/results-x"
    cut = tracking.start_run(exp, "ICEWS14-pure_rl-seed0",
                             tags={"record": str(Path("camp/s1/ICEWS14/pure_rl/seed0/eval"))})
    cut.log_metrics({"rl/reward": 0.1}, step=1)  # and then the process died: no test metrics
    results_records_flow.fn(sources=["x=camp/s1"])
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{mlflow_db}")
    named = [r for r in client.search_runs([client.get_experiment_by_name(exp).experiment_id])
             if r.info.run_name == "ICEWS14-pure_rl-seed0"]
    assert len(named) == 1 and named[0].info.run_id != cut.run_id and named[0].data.metrics["test/mrr"] == 0.40


def test_another_folder_under_a_logged_sets_name_is_refused_naming_both(records, mlflow_db, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    results_records_flow.fn(sources=["x=camp/s1"])
    _run(Path("other"), "pure_rl", 0, 0.30)
    with pytest.raises(ValueError, match=r"has a run ICEWS14-pure_rl-seed0 logged from camp.s1.*this one is from other"):
        results_records_flow.fn(sources=["x=other"])
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{mlflow_db}")
    parents = [r for r in client.search_runs([client.get_experiment_by_name("raptor/ICEWS14/results-x").experiment_id])
               if r.data.tags.get("stage") == "results" and r.info.run_name.startswith("results-")]
    assert [p.info.status for p in parents] == ["FINISHED"]  # the earlier invocation's parent keeps its state


def test_a_source_that_matches_nothing_is_an_error_of_the_command(records, capsys):
    from flows.__main__ import main

    assert main(["results", "x=nowhere/*"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("python -m flows results: error:") and "matches no folder" in err
