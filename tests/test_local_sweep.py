"""`raptor sweep`: a sweep's plan run here in worker processes, without Prefect or MLflow."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from raptor import cli
from raptor.pipeline import local_sweep

from helpers import synthetic_dataset

SMALL = {
    "model.entity_dim": 8, "model.relation_dim": 8, "model.time_dim": 2, "model.step_dim": 2,
    "model.mlp_hidden_dim": 8, "env.max_actions": 10, "pretrain.epochs": 1, "pretrain.batch_size": 512,
    "rl.epochs": 2, "rl.batch_size": 512, "eval.beam_size": 4, "eval.valid_every": 1, "train.seeds": [0],
}
PARAMS = {
    "datasets": {"T": {"raw_dir": "raw"}},
    "sweeps": {"t": {"base": SMALL, "variants": ["pure_rl", "raptor"],
                     "arms": {"wide": {"model.mlp_hidden_dim": 16}},  # its own pretraining
                     "grid": {"rl.gamma": [0.9]}}},                   # shares the default's pretraining
}
PARAMS["sweeps"]["e"] = {"base": SMALL, "variants": ["pure_rl"],  # an evaluation-only arm beside the default
                         "arms": {"default": {}, "last": {"eval.rank_last_expansions": True}}}
RUNS = {f"{arm}-{v}-seed0" for arm in ("default", "wide", "rl.gamma=0.9") for v in ("pure_rl", "raptor")}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = synthetic_dataset(tmp_path_factory.mktemp("local-sweep"), seed=3)
    (root / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    return root


def _sweep(data: Path, tmp: Path, *extra: str) -> int:
    return cli.main(["sweep", "t", "--dataset", "T", "--data", str(data / "data"), "--graph", str(data / "graph.npz"),
                     "--params", str(data / "params.yaml"), "--local", str(tmp / "none.yaml"),
                     "--out", str(tmp / "work"), "--results", str(tmp / "results"), "--no-progress", *extra])


def _recorded(results: Path) -> set[str]:
    return {f"{p.parts[-4]}-{p.parts[-3]}-{p.parts[-2]}" for p in results.glob("train/*/*/seed*/run_config.json")}


@pytest.mark.slow  # end to end: a whole sweep in worker processes
def test_every_run_trained_tested_and_recorded_in_worker_processes(data, tmp_path, capsys, monkeypatch):
    assert _sweep(data, tmp_path, "--jobs", "2") == 0
    results = tmp_path / "results"
    table = json.loads((results / "results.json").read_text())
    assert table["missing"] == [] and {f"{r['arm']}-{r['variant']}-seed{r['seed']}" for r in table["runs"]} == RUNS
    assert all(0 < r["test_mrr"] <= 1 for r in table["runs"])
    assert _recorded(results) == RUNS
    summary = json.loads((results / "train/default/raptor/seed0/summary.json").read_text())
    assert summary["device"] == "cpu" and summary["rl_epochs"] == 2
    # default and rl.gamma=0.9 share one pretraining run per seed; wide has its own
    assert len(list((tmp_path / "work/pretrain").iterdir())) == 2
    assert "| wide |" in capsys.readouterr().out

    # run again: every run is recorded, so nothing trains (a training job would fail here)
    def no_training(*args, **kwargs):
        raise AssertionError("trained a recorded run")

    monkeypatch.setattr(local_sweep, "train_job", no_training)
    before = (results / "results.json").read_text()
    assert _sweep(data, tmp_path, "--jobs", "1") == 0
    assert "6 run(s) already recorded" in capsys.readouterr().out
    assert (results / "results.json").read_text() == before


def test_arms_runs_those_only_and_the_table_names_the_rest_missing(data, tmp_path, capsys, monkeypatch):
    assert _sweep(data, tmp_path, "--arms", "wide") == 0
    assert _recorded(tmp_path / "results") == {"wide-pure_rl-seed0", "wide-raptor-seed0"}
    assert len(list((tmp_path / "work/pretrain").iterdir())) == 1  # wide's pretraining alone
    table = json.loads((tmp_path / "results/results.json").read_text())
    assert set(table["missing"]) == RUNS - _recorded(tmp_path / "results")
    assert "Missing (not yet trained or evaluated): default-pure_rl-seed0" in capsys.readouterr().out
    # the table alone, from the records, as of a sweep still running elsewhere: nothing trains
    before = (tmp_path / "results/results.json").read_text()
    (tmp_path / "results/results.json").unlink()
    monkeypatch.setattr(local_sweep, "run_plan", lambda *a, **k: pytest.fail("--table-only trained"))
    assert _sweep(data, tmp_path, "--table-only", "--data", str(tmp_path / "nowhere")) == 0
    assert (tmp_path / "results/results.json").read_text() == before
    # the table from a checkout whose declaration differs (here rl.gamma in the base): the results folder
    # keeps the params its runs were trained with, and the command says which files it kept
    recorded = {f.name: f.read_bytes() for f in (tmp_path / "results/params").glob("*.json")}
    other = json.loads(json.dumps(PARAMS))
    other["sweeps"]["t"]["base"]["rl.gamma"] = 0.8
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    capsys.readouterr()
    assert cli.main(["sweep", "t", "--dataset", "T", "--params", str(tmp_path / "other.yaml"),
                     "--local", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "work2"),
                     "--results", str(tmp_path / "results"), "--table-only"]) == 0
    assert {f.name: f.read_bytes() for f in (tmp_path / "results/params").glob("*.json")} == recorded
    err = capsys.readouterr().err
    # sweep.json and the two arms the base change reaches; the arm rl.gamma=0.9 sets gamma itself
    assert "kept 3 declaration file(s)" in err and "sweep.json, params/default.json, params/wide.json" in err


def test_unknown_arm_and_bad_jobs_are_one_clear_line(data, tmp_path, capsys):
    assert _sweep(data, tmp_path, "--arms", "default,nope") == 1
    err = capsys.readouterr().err
    assert "unknown arm(s) nope" in err and "wide" in err
    assert _sweep(data, tmp_path, "--jobs", "0") == 1
    assert "--jobs and --threads must be at least 1" in capsys.readouterr().err
    rc = cli.main(["sweep", "t", "--dataset", "NODS", "--data", str(data / "data"), "--graph", str(data / "graph.npz"),
                   "--params", str(data / "params.yaml"), "--local", str(tmp_path / "none.yaml"),
                   "--out", str(tmp_path / "work-nods"), "--results", str(tmp_path / "results"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "--dataset NODS: no such dataset in" in err and "lists T" in err
    assert f"{data / 'data'} holds dataset 'raw'" in err  # ingested from a folder named raw
    assert not (tmp_path / "results").exists() and not (tmp_path / "work-nods").exists()  # nothing planned
    rc = cli.main(["sweep", "t", "--dataset", "NODS", "--data", str(tmp_path / "nowhere"), "--graph",
                   str(data / "graph.npz"), "--params", str(data / "params.yaml"), "--local", str(tmp_path / "none.yaml"),
                   "--out", str(tmp_path / "work-nods"), "--results", str(tmp_path / "results"), "--no-progress"])
    assert rc == 1 and f"{tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err


def test_a_failing_run_is_named_and_the_others_still_run(data, tmp_path, monkeypatch, capsys):
    real = local_sweep.train_job

    def flaky(plan, job, *args):
        if job.run_name == "default-pure_rl-seed0":
            raise RuntimeError("disk full")
        return real(plan, job, *args)

    monkeypatch.setattr(local_sweep, "train_job", flaky)
    assert _sweep(data, tmp_path, "--arms", "default", "--jobs", "1") == 1
    assert "1 of 2 run jobs failed:\n  default-pure_rl-seed0: RuntimeError: disk full" in capsys.readouterr().err
    assert _recorded(tmp_path / "results") == {"default-raptor-seed0"}
    assert not (tmp_path / "results/results.json").exists()  # no table from a failed sweep


def test_an_evaluation_only_arm_is_the_default_runs_model_re_scored_not_trained(data, tmp_path, monkeypatch, capsys):
    from raptor.config import load_resolved
    from raptor.pipeline.experiment import evaluate_model
    from raptor.runs.context import load_context

    trained, real = [], local_sweep.train_job

    def counted(plan, job, *args):
        trained.append(job.run_name)
        return real(plan, job, *args)

    monkeypatch.setattr(local_sweep, "train_job", counted)

    def sweep(*extra: str) -> int:
        return cli.main(["sweep", "e", "--dataset", "T", "--data", str(data / "data"), "--graph",
                         str(data / "graph.npz"), "--params", str(data / "params.yaml"), "--local",
                         str(tmp_path / "none.yaml"), "--out", str(tmp_path / "work"), "--results",
                         str(tmp_path / "results"), "--no-progress", *extra])

    # the arm alone: the default run it re-scores trains first, once
    assert sweep("--arms", "last") == 0
    assert trained == ["default-pure_rl-seed0"]
    work, results = tmp_path / "work", tmp_path / "results"
    assert not (work / "train/last").exists()  # nothing trained for the arm
    rec, default = results / "train/last/pure_rl/seed0", results / "train/default/pure_rl/seed0"
    assert (rec / "run_config.json").read_bytes() == (default / "run_config.json").read_bytes()
    assert (rec / "history.json").read_bytes() == (default / "history.json").read_bytes()
    summary, default_summary = (json.loads((d / "summary.json").read_text()) for d in (rec, default))
    assert summary["rescored"]["overrides"] == {"eval.rank_last_expansions": True}
    assert summary["rescored"]["default_best_val_mrr"] == default_summary["best_val_mrr"]
    # its test and validation: the default run's model evaluated with the arm's params
    ctx = load_context(data / "data", data / "graph.npz", load_resolved(work / "params/last.json"))
    model = work / "train/default/pure_rl/seed0/best.pt"
    test = evaluate_model(ctx, model, tmp_path / "check-test", split="test")
    valid = evaluate_model(ctx, model, tmp_path / "check-valid", split="valid")
    assert json.loads((results / "eval/last/pure_rl/seed0/metrics.json").read_text())["mrr"] == test["mrr"]
    assert summary["best_val_mrr"] == valid["mrr"]
    table = json.loads((results / "results.json").read_text())
    assert table["missing"] == [] and {r["arm"] for r in table["runs"]} == {"default", "last"}
    from raptor.pipeline.rescore import rescore_job
    from raptor.pipeline.sweep import load_sweep, plan_sweep

    sweep_, params_ = load_sweep(data / "params.yaml", "e")
    plan = plan_sweep(sweep_, params_, "T", work, write=False)
    with pytest.raises(ValueError, match="default-pure_rl-seed0: not a run of an evaluation-only arm of sweep e"):
        rescore_job(plan, plan.train[0], data / "data", data / "graph.npz", results)

    # again: both runs are recorded, so nothing trains or re-scores
    monkeypatch.setattr(local_sweep, "train_job", lambda *a: pytest.fail("trained a recorded run"))
    monkeypatch.setattr(local_sweep, "rescore_job", lambda *a: pytest.fail("re-scored a recorded run"))
    capsys.readouterr()
    assert sweep() == 0
    assert "2 run(s) already recorded" in capsys.readouterr().out
    monkeypatch.undo()

    # the arm's record gone, and the default run's folder (its record stays, but keeps no model): one clear error
    for d in (results / "train/last", results / "eval/last"):
        shutil.rmtree(d)
    shutil.rmtree(work / "train/default")
    capsys.readouterr()
    assert sweep() == 1
    err = capsys.readouterr().err
    assert "1 of 1 re-score jobs failed:\n  last-pure_rl-seed0: FileNotFoundError" in err
    assert "move default-pure_rl-seed0's record out of it to train the run here again" in err
    assert not rec.exists()
