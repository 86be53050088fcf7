"""A whole run of each variant and its evaluation, on a tiny synthetic dataset."""

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from raptor.runs.rundir import RunOptions

from raptor.config import params_from_dict
from raptor.pipeline import experiment
from raptor.pipeline.experiment import evaluate_model, load_context, run_variant
from raptor.common.io import OutputError
from raptor.agents.actor_critic.pretrain import pretrain_run
from raptor.labeling.stage import label_dataset
from raptor.evaluation.ranking import read_predictions
from raptor.data.synthetic import SyntheticSpec, write_raw

from helpers import synthetic_dataset

#: Wall-clock fields, the only ones two identical runs may differ in.
TIMING_KEYS = {"seconds", "ms_per_query"}


def without_timings(obj):
    if isinstance(obj, dict):
        return {k: without_timings(v) for k, v in obj.items() if k not in TIMING_KEYS and not k.endswith("seconds")}
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj

PARAMS = {
    "model": {"entity_dim": 16, "relation_dim": 16, "time_dim": 4, "step_dim": 4, "mlp_hidden_dim": 32},
    "env": {"max_actions": 20},
    "pretrain": {"epochs": 2, "batch_size": 256},
    "rl": {"epochs": 3, "batch_size": 256},
    "eval": {"beam_size": 10, "valid_every": 2},
    "train": {"seeds": [0], "num_threads": 1},
}


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    root = synthetic_dataset(tmp_path_factory.mktemp("exp"), seed=2)
    params = params_from_dict(PARAMS)
    label_dataset(root / "data", root / "labels", max_path_length=3, config=params.labeling,
                  graph_path=root / "graph.npz", show_progress=False)
    return load_context(root / "data", root / "graph.npz", params), root


def test_raptor_variant_pretrains_then_finetunes(ctx):
    c, root = ctx
    seen = []
    hook = lambda phase, e, m: seen.append((phase, e))  # noqa: E731
    snaps = pretrain_run(c, root / "labels", [1, 2], RunOptions(seed=0, out_dir=root / "runs/pretrain/0", progress=False), on_epoch_end=hook)
    assert sorted(snaps) == [1, 2] and all(Path(p).is_file() for p in snaps.values())
    summary = run_variant(c, "raptor", RunOptions(seed=0, out_dir=root / "runs/raptor/0", progress=False), init_model=snaps[2], pretrain_epochs=2, on_epoch_end=hook)
    assert seen == [("pretrain", 0), ("pretrain", 1), ("rl", 0), ("rl", 1), ("rl", 2)]
    assert summary["pretrain_epochs"] == 2 and summary["rl_epochs"] == 3 and summary["restarted"] is None
    assert (root / "runs/raptor/0/best.pt").exists()
    assert 0.0 <= summary["best_val_mrr"] <= 1.0
    assert json.loads((root / "runs/raptor/0/summary.json").read_text())["variant"] == "raptor"


def test_equal_runs_in_other_folders_make_equal_models_and_a_summary_counts_every_epochs_time(ctx, tmp_path):
    """A pretrained variant's models name their initial weights by content, not by path, so the same run
    in two folders gives the same model_sha256; ``train_seconds`` sums every epoch's training and
    validation, those of an earlier process included (``seconds``: this process's)."""
    c, root = ctx
    snap = pretrain_run(c, root / "labels", [1], RunOptions(seed=0, out_dir=tmp_path / "pre", progress=False))[1]
    shutil.copy(snap, tmp_path / "elsewhere.pt")
    a = run_variant(c, "raptor", RunOptions(seed=0, out_dir=tmp_path / "a", epochs=1, progress=False),
                    init_model=snap, pretrain_epochs=1)
    b = run_variant(c, "raptor", RunOptions(seed=0, out_dir=tmp_path / "b", epochs=1, progress=False),
                    init_model=tmp_path / "elsewhere.pt", pretrain_epochs=1)
    assert a["model_sha256"] == b["model_sha256"] is not None
    s = run_variant(c, "raptor", RunOptions(seed=0, out_dir=tmp_path / "a", epochs=2, progress=False),
                    init_model=snap, pretrain_epochs=1)
    history = json.loads((tmp_path / "a/history.json").read_text())
    assert len(history) == 2 and s["train_seconds"] == round(
        sum(r["seconds"] for r in history) + sum(r.get("val_seconds") or 0 for r in history), 2)
    assert s["train_seconds"] >= round(history[0]["seconds"] + history[1]["seconds"], 2)  # the first process's too


def test_pretrain_runs_stacks_the_seeds_and_a_seed_continues_alone(ctx, tmp_path):
    """``pretrain_runs`` (``train.stacked_seeds`` of the pretrain stage): each seed's folder has its
    snapshots and a stacked history; the folder's fingerprint is the one alone, so ``pretrain_run``
    of that seed continues it (one more epoch) instead of starting afresh."""
    from raptor.agents.actor_critic.pretrain_seeds import pretrain_runs

    c, root = ctx
    seen = []
    runs = [RunOptions(seed=s, out_dir=tmp_path / f"seed{s}", progress=False) for s in (0, 1)]
    snaps = pretrain_runs(c, root / "labels", [1], runs,
                          on_epoch_end=[lambda phase, e, m, s=s: seen.append((s, phase, e)) for s in (0, 1)])
    assert [sorted(x) for x in snaps] == [[1], [1]] and all(Path(x[1]).is_file() for x in snaps)
    assert sorted(seen) == [(0, "pretrain", 0), (1, "pretrain", 0)]
    history = json.loads((tmp_path / "seed1" / "history.json").read_text())
    assert [row["stacked_seeds"] for row in history] == [2]
    trained = []
    more = pretrain_run(c, root / "labels", [1, 2], runs[1],
                        on_epoch_end=lambda _, e, m: None if m.get("replayed") else trained.append(e))
    assert sorted(more) == [1, 2] and trained == [1]
    with pytest.raises(ValueError, match="repeated seeds"):
        pretrain_runs(c, root / "labels", [1], [runs[0], runs[0]])


def test_pretraining_walks_where_train_env_backend_says(ctx, tmp_path):
    """``train.env_backend`` reaches pretraining as it reaches RL: ``torch`` walks the device environment
    (kept on the context's environment once built) with device labels, and pretrains as the host does."""
    from raptor.agents.base import load_model

    _, root = ctx
    weights = {}
    for backend in ("numpy", "torch"):
        params = params_from_dict({**PARAMS, "train": {**PARAMS["train"], "env_backend": backend}})
        c = load_context(root / "data", root / "graph.npz", params)
        snap = pretrain_run(c, root / "labels", [1], RunOptions(seed=0, out_dir=tmp_path / backend, progress=False))[1]
        assert bool(c.env._device_envs) == (backend == "torch")
        weights[backend] = load_model(snap)[0].state_dict()
    for name, value in weights["numpy"].items():
        assert torch.equal(value, weights["torch"][name]), name


def test_pure_rl_and_evaluation_outputs(ctx):
    c, root = ctx
    summary = run_variant(c, "pure_rl", RunOptions(seed=1, out_dir=root / "runs/pure_rl/1", progress=False))
    assert summary["pretrain_epochs"] == 0
    assert not (root / "runs/pure_rl/1/pretrain").exists()
    metrics = evaluate_model(c, summary["model"], root / "eval/pure_rl/1", split="test")
    written = json.loads((root / "eval/pure_rl/1/metrics.json").read_text())
    assert set(["mrr", "hits@1", "hits@3", "hits@10"]) <= set(written)
    # what the metrics depend on besides the data: the model and the evaluation params
    assert written["model_sha256"] == summary["model_sha256"] and "model" not in written  # no machine's path
    assert written["eval_params"] == {"beam_size": c.params.eval.beam_size, "score_rule": c.params.eval.score_rule,
                                      "rank_last_expansions": c.params.eval.rank_last_expansions}
    assert written["env_params"] == dataclasses.asdict(c.params.env) and written["inputs"] == c.input_hashes()
    assert len(written["code"]) == 64 and written["runtime"]["torch"] == torch.__version__
    assert summary["runtime"]["threads"] == written["runtime"]["threads"] >= 1
    n_test = len(c.dataset.splits["test"])
    assert written["queries"] == {"total": 2 * n_test, "forward": n_test, "inverse": n_test}
    pred = read_predictions(root / "eval/pure_rl/1/predictions.parquet")
    assert len(pred.rank) == 2 * n_test
    # metrics.json agrees with the ranks in predictions.parquet.
    assert metrics["mrr"] == pytest.approx(float(np.mean(1.0 / pred.rank)))
    assert written["hits@10"] == pytest.approx(float(np.mean(pred.rank <= 10)))


def test_an_evaluation_records_and_warns_of_mdp_params_other_than_the_models(ctx, tmp_path, caplog):
    """The same model ranks otherwise under another action cap: metrics.json says which it ran with, and a
    warning says it differs from the model's training params."""
    import logging

    c, _ = ctx
    summary = run_variant(c, "pure_rl", RunOptions(seed=0, out_dir=tmp_path / "run", epochs=1, progress=False))
    capped = dataclasses.replace(c, params=dataclasses.replace(c.params, env=dataclasses.replace(c.params.env, max_actions=3)))
    caplog.set_level(logging.WARNING, logger="raptor")
    evaluate_model(c, summary["model"], tmp_path / "same")
    assert "other MDP params" not in caplog.text
    evaluate_model(capped, summary["model"], tmp_path / "capped")
    trained = c.params.env.max_actions
    assert f"env.max_actions=3 (trained with {trained})" in caplog.text
    assert json.loads((tmp_path / "capped/metrics.json").read_text())["env_params"]["max_actions"] == 3


def test_an_evaluation_killed_between_its_files_leaves_no_metrics_of_another_model(ctx, tmp_path, monkeypatch):
    """metrics.json says an evaluation is whole: evaluating another model into the same folder removes the
    previous metrics once its predictions are complete and before they land, so a kill between the two
    files leaves predictions without metrics, never beside another model's."""
    import raptor.pipeline.experiment as experiment

    c, _ = ctx
    models = [run_variant(c, "pure_rl", RunOptions(seed=s, out_dir=tmp_path / f"run{s}", epochs=1, progress=False))
              ["model"] for s in (0, 1)]
    out = tmp_path / "eval"
    evaluate_model(c, models[0], out)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the process ends here: predictions written, metrics not

    monkeypatch.setattr(experiment, "write_metrics", killed)
    with pytest.raises(KeyboardInterrupt):
        evaluate_model(c, models[1], out)
    assert (out / "predictions.parquet").is_file() and not (out / "metrics.json").exists()


def test_errors_are_clear(ctx, tmp_path, monkeypatch):
    c, root = ctx
    with pytest.raises(ValueError, match="unknown variant 'rl_only'"):
        run_variant(c, "rl_only", RunOptions(seed=0, out_dir=tmp_path / "x"))
    with pytest.raises(ValueError, match="starts from a pretrained checkpoint"):
        run_variant(c, "raptor", RunOptions(seed=0, out_dir=tmp_path / "y", progress=False), pretrain_epochs=2)
    with pytest.raises(FileNotFoundError, match="initial weights not found"):
        run_variant(c, "raptor", RunOptions(seed=0, out_dir=tmp_path / "y"), init_model=tmp_path / "nope.pt", pretrain_epochs=2)
    with pytest.raises(FileNotFoundError, match="model not found"):
        evaluate_model(c, tmp_path / "missing.pt", tmp_path / "z")
    # An output that cannot be written is refused before the model is even read (a beam search of
    # many minutes used to end in the error).
    model = run_variant(c, "pure_rl", RunOptions(seed=0, out_dir=tmp_path / "run", progress=False))["model"]
    (tmp_path / "a-file").write_text("x")
    with monkeypatch.context() as m:
        m.setattr(experiment, "load_model", lambda *a, **k: pytest.fail("the model was read first"))
        with pytest.raises(OutputError, match=r"cannot write .*a-file/eval: .*a-file is a file"):
            evaluate_model(c, model, tmp_path / "a-file" / "eval")
    assert (tmp_path / "a-file").read_text() == "x"


def test_explain_cli_prints_named_answers_and_paths(ctx, tmp_path, capsys):
    import yaml

    from raptor.cli import main

    c, root = ctx
    summary = run_variant(c, "pure_rl", RunOptions(seed=2, out_dir=root / "runs/explain", progress=False, epochs=1))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**PARAMS, "datasets": {"SYNTH": {"raw_dir": "x", "start_date": "2018-01-01"}}}))
    args = ["explain", "Entity 3 (Synthetic)", "Make statement", "2018-02-05", "--model", summary["model"],
            "--data", str(root / "data"), "--graph", str(root / "graph.npz"), "--params", str(params), "--top", "3",
            "--dataset", "SYNTH"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("query: (Entity 3 (Synthetic), Make statement, ?, 2018-02-05)")
    assert " 1. Entity" in out and "@ 2018-" in out
    args[1] = "Entty 3 (Synthetc)"
    assert main(args) == 1
    assert "did you mean: 'Entity 3 (Synthetic)'" in capsys.readouterr().err
    # Hourly steps: the same step 35, labelled in hours.
    params.write_text(yaml.safe_dump({**PARAMS, "datasets": {"SYNTH": {
        "raw_dir": "x", "start_date": "2018-01-01T00:00", "granularity": "hour"}}}))
    args[1:4] = ["Entity 3 (Synthetic)", "Make statement", "2018-01-02 11:00"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("query: (Entity 3 (Synthetic), Make statement, ?, 2018-01-02 11:00)")
    assert "@ 2018-01-0" in out


def test_explain_defaults_to_the_pipelines_outputs(ctx, tmp_path, capsys, monkeypatch):
    import yaml

    from raptor.cli import main
    from raptor.constants import seed_dir
    from raptor.pipeline.stages import stage_output

    c, root = ctx
    summary = run_variant(c, "pure_rl", RunOptions(seed=2, out_dir=root / "runs/explain-defaults", progress=False, epochs=1))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**PARAMS, "datasets": {"SYNTH": {
        "raw_dir": "x", "start_date": "2018-01-01"}}}))
    args = ["explain", "Entity 3", "Make statement", "2018-02-05", "--variant", "pure_rl", "--seed", "2"]
    assert main(args) == 1  # nothing at the pipeline's paths yet: says where it looked
    err = capsys.readouterr().err
    assert "the ingested data not found at data/SYNTH/ingested" in err and "run the pipeline first" in err
    # Lay the outputs out where the pipeline writes them.
    for stage, target in (("ingest", root / "data"), ("graph", root / "graph.npz")):
        link = tmp_path / stage_output(stage, "SYNTH")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    model = tmp_path / seed_dir(stage_output("finetune-pure_rl", "SYNTH"), 2) / "best.pt"
    model.parent.mkdir(parents=True)
    model.symlink_to(summary["model"])
    assert main(args) == 0
    out = capsys.readouterr().out
    # "Entity 3" is a part of one name only; the beam and the meaning of the score are printed.
    assert out.startswith("query: (Entity 3 (Synthetic), Make statement, ?, 2018-02-05)")
    assert f"model {model.relative_to(tmp_path)}; beam {PARAMS['eval']['beam_size']}" in out
    assert "score: the probability of the most probable path" in out
    # No history before the first day; after the last one, all of it is used.
    assert main(args[:3] + ["2018-01-01"] + args[4:]) == 1
    assert "no history before it" in capsys.readouterr().err
    assert main(args[:3] + ["2030-01-01"] + args[4:]) == 0
    assert "note: after the data's last day" in capsys.readouterr().out


def test_resume_only_continues_the_same_configuration(ctx, tmp_path):
    c, root = ctx
    out = tmp_path / "run"
    run_variant(c, "pure_rl", RunOptions(seed=4, out_dir=out, epochs=1, progress=False))
    first = json.loads((out / "history.json").read_text())
    # More RL epochs with the same configuration extend the run: epoch 0 is not trained again.
    s = run_variant(c, "pure_rl", RunOptions(seed=4, out_dir=out, epochs=2, progress=False))
    extended = json.loads((out / "history.json").read_text())
    assert [h["epoch"] for h in extended] == [0, 1] and extended[0] == first[0] and s["restarted"] is None
    # A changed hyperparameter makes the checkpoints stale: the run starts afresh and says why.
    other = dataclasses.replace(c, params=dataclasses.replace(
        c.params, rl=dataclasses.replace(c.params.rl, gamma=0.5)))
    s = run_variant(other, "pure_rl", RunOptions(seed=4, out_dir=out, epochs=1, progress=False))
    fresh = json.loads((out / "history.json").read_text())
    assert [h["epoch"] for h in fresh] == [0] and "rl.gamma: 0.95 -> 0.5" in s["restarted"]
    assert json.loads((out / "run_config.json").read_text())["params"]["rl.gamma"] == 0.5
    # Settings the schema marks as not changing results (threads, seeds list) do not restart it.
    faster = dataclasses.replace(other, params=dataclasses.replace(
        other.params, train=dataclasses.replace(other.params.train, num_threads=2, seeds=[4, 9])))
    assert run_variant(faster, "pure_rl", RunOptions(seed=4, out_dir=out, epochs=1, progress=False))["restarted"] is None


def _copy_project(root: Path, dst: Path) -> Path:
    dst.mkdir()
    for name in ("data", "graph.npz", "labels"):
        (shutil.copytree if (root / name).is_dir() else shutil.copy)(root / name, dst / name)
    return dst


def test_a_model_never_outlives_its_data(ctx, tmp_path):
    """The reproduction of the stale-model defect: train, regenerate the raw data with another
    seed, ingest and graph again, train into the same folder: it must train afresh."""
    from raptor.data.graph import build_graph
    from raptor.data.ingest import ingest

    c, _ = ctx
    proj = tmp_path / "p"
    for seed, expect_restart in ((1, False), (2, True)):
        raw = write_raw(tmp_path / f"raw{seed}", SyntheticSpec(seed=seed))
        ingest(raw, proj / "data")
        build_graph(proj / "data", proj / "graph.npz")
        ctx2 = load_context(proj / "data", proj / "graph.npz", c.params)
        s = run_variant(ctx2, "pure_rl", RunOptions(seed=0, out_dir=proj / "run", epochs=1, progress=False))
        assert (s["restarted"] is not None) == expect_restart, s["restarted"]
    assert "inputs.data" in s["restarted"] and "inputs.graph" in s["restarted"]
    assert json.loads((proj / "run/history.json").read_text())[0]["epoch"] == 0


def test_changed_labels_or_code_restart_pretraining(ctx, tmp_path, monkeypatch, caplog):
    import logging

    import raptor.common.provenance

    caplog.set_level(logging.WARNING, logger="raptor")
    c, root = ctx
    proj = _copy_project(root, tmp_path / "p")
    c2 = load_context(proj / "data", proj / "graph.npz", c.params)
    run = proj / "pre"
    pretrain_run(c2, proj / "labels", [1], RunOptions(seed=0, out_dir=run, progress=False))
    pretrain_run(c2, proj / "labels", [1, 2], RunOptions(seed=0, out_dir=run, progress=False))  # one more epoch continues
    assert [h["epoch"] for h in json.loads((run / "history.json").read_text())] == [0, 1]
    # The same labels computed again (another run: another wall time in the summary, other workers)
    # are the same input: the run continues, nothing is trained or rewritten.
    files = ("pretrained-e2.pt", "checkpoint.pt", "pretrained.pt", "history.json")
    stamps = {f: (run / f).stat().st_mtime_ns for f in files}
    label_dataset(proj / "data", proj / "labels", max_path_length=3,
                  config=params_from_dict({**PARAMS, "labeling": {"workers": 2}}).labeling,
                  graph_path=proj / "graph.npz", show_progress=False)
    seen = []
    pretrain_run(c2, proj / "labels", [1, 2], RunOptions(seed=0, out_dir=run, progress=False), on_epoch_end=lambda _, e, m: None if m.get("replayed") else seen.append(e))
    assert seen == [] and "starting afresh" not in caplog.text
    assert {f: (run / f).stat().st_mtime_ns for f in stamps} == stamps
    # Changed labels: another label table (exact instead of N = 200) restarts pretraining.
    params = params_from_dict({**PARAMS, "labeling": {"max_in_edges": 1}})
    label_dataset(proj / "data", proj / "labels", max_path_length=3, config=params.labeling,
                  graph_path=proj / "graph.npz", show_progress=False)
    seen.clear()
    pretrain_run(c2, proj / "labels", [1], RunOptions(seed=0, out_dir=run, progress=False), on_epoch_end=lambda *a: seen.append(a[1]))
    assert seen == [0]
    assert "starting afresh" in caplog.text and "inputs.labels" in caplog.text
    assert "inputs.data" not in caplog.text
    # Changed code (the hash of the modules the run imports): restart too.
    monkeypatch.setattr(raptor.common.provenance, "code_hash", lambda mods: "0" * 64)
    seen.clear()
    pretrain_run(c2, proj / "labels", [1], RunOptions(seed=0, out_dir=run, progress=False), on_epoch_end=lambda *a: seen.append(a[1]))
    assert seen == [0]
    assert json.loads((run / "run_config.json").read_text())["code"] == "0" * 64
    # A snapshot the run is already past cannot be written: start afresh rather than skip it.
    stamp = (run / "checkpoint.pt").stat().st_mtime_ns
    pretrain_run(c2, proj / "labels", [1], RunOptions(seed=0, out_dir=run, progress=False))
    assert (run / "checkpoint.pt").stat().st_mtime_ns == stamp  # same fingerprint, nothing to train
    seen.clear()
    (run / "pretrained-e1.pt").unlink()
    pretrain_run(c2, proj / "labels", [1], RunOptions(seed=0, out_dir=run, progress=False), on_epoch_end=lambda *a: seen.append(a[1]))
    assert seen == [0] and (run / "pretrained-e1.pt").exists()


def test_changed_code_restarts_rl(ctx, tmp_path, monkeypatch):
    import raptor.pipeline.experiment as experiment

    c, _ = ctx
    out = tmp_path / "run"
    run_variant(c, "pure_rl", RunOptions(seed=0, out_dir=out, epochs=1, progress=False))
    monkeypatch.setattr(experiment, "code_hash", lambda mods: "f" * 64)
    s = run_variant(c, "pure_rl", RunOptions(seed=0, out_dir=out, epochs=1, progress=False))
    assert s["restarted"] and "code" in s["restarted"]


def test_a_run_keeps_the_precision_it_started_in_when_auto_resolves_otherwise(ctx, tmp_path, monkeypatch):
    """``train.precision: auto`` is bfloat16 on a CPU with native bfloat16 and float32 elsewhere: a run
    moved between the two does not go on in the other precision under the same fingerprint (its record
    would name one precision for epochs trained in two); it starts afresh and says why (pretraining too)."""
    import raptor.common.runtime as runtime

    c, root = ctx
    auto = dataclasses.replace(c, params=dataclasses.replace(
        c.params, train=dataclasses.replace(c.params.train, precision="auto")))
    monkeypatch.setattr(runtime, "_cpu_flags", lambda: frozenset({"avx512_bf16"}))
    pre = tmp_path / "pre"
    pretrain_run(auto, root / "labels", [1], RunOptions(seed=0, out_dir=pre, progress=False))
    s = run_variant(auto, "pure_rl", RunOptions(seed=0, out_dir=tmp_path / "rl", epochs=1, progress=False))
    assert s["precision"] == "bfloat16" and json.loads((tmp_path / "rl/run_config.json").read_text())["precision"] == "bfloat16"
    assert run_variant(auto, "pure_rl", RunOptions(seed=0, out_dir=tmp_path / "rl", epochs=2, progress=False))["restarted"] is None
    monkeypatch.setattr(runtime, "_cpu_flags", lambda: frozenset())  # the same folders on a CPU without it
    s = run_variant(auto, "pure_rl", RunOptions(seed=0, out_dir=tmp_path / "rl", epochs=2, progress=False))
    assert s["precision"] == "float32" and s["restarted"].endswith("precision: 'bfloat16' -> 'float32'")
    assert [h["epoch"] for h in json.loads((tmp_path / "rl/history.json").read_text())] == [0, 1]
    seen = []
    pretrain_run(auto, root / "labels", [1], RunOptions(seed=0, out_dir=pre, progress=False),
                 on_epoch_end=lambda _, e, m: None if m.get("replayed") else seen.append(e))
    assert seen == [0] and json.loads((pre / "run_config.json").read_text())["precision"] == "float32"


def test_resume_only_refuses_to_delete_a_run_it_cannot_continue(ctx, tmp_path, monkeypatch):
    """Long runs pass ``resume_only``: a run whose code changed under it fails with a clear error and
    its checkpoints stay as they were (two paper-budget runs were once lost to a silent restart)."""
    import raptor.pipeline.experiment as experiment
    from raptor.common.io import RunMismatchError

    c, _ = ctx
    out = tmp_path / "run"
    run_variant(c, "pure_rl", RunOptions(seed=0, out_dir=out, epochs=1, progress=False))
    # The same configuration still continues under resume_only.
    assert run_variant(c, "pure_rl", RunOptions(seed=0, out_dir=out, epochs=2, progress=False, resume_only=True))["restarted"] is None
    before = {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()}
    monkeypatch.setattr(experiment, "code_hash", lambda mods: "f" * 64)
    with pytest.raises(RunMismatchError, match=r"refusing to start afresh.*code"):
        run_variant(c, "pure_rl", RunOptions(seed=0, out_dir=out, epochs=3, progress=False, resume_only=True))
    assert {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()} == before


def test_truncated_checkpoint_resumes_from_the_previous_epoch(ctx, tmp_path, caplog):
    c, _ = ctx
    out = tmp_path / "run"
    run_variant(c, "pure_rl", RunOptions(seed=5, out_dir=out, epochs=2, progress=False))
    ck = out / "checkpoint.pt"
    ck.write_bytes(ck.read_bytes()[:1000])  # a crash or a full disk mid-write
    with caplog.at_level("WARNING", logger="raptor"):
        run_variant(c, "pure_rl", RunOptions(seed=5, out_dir=out, epochs=3, progress=False))
    assert "falling back to the previous checkpoint" in caplog.text
    assert [h["epoch"] for h in json.loads((out / "history.json").read_text())] == [0, 1, 2]


def test_truncated_checkpoint_without_a_previous_one_is_one_clear_cli_line(ctx, tmp_path, capsys):
    from raptor.cli import main

    c, root = ctx
    out = tmp_path / "run"
    args = ["train", "--data", str(root / "data"), "--graph", str(root / "graph.npz"), "--out", str(out),
            "--params", str(tmp_path / "p.yaml"), "--epochs", "1", "--no-progress"]
    import yaml

    (tmp_path / "p.yaml").write_text(yaml.safe_dump(PARAMS))
    assert main(args) == 0
    (out / "rl" / "checkpoint.pt").write_bytes(b"PK\x03\x04 truncated")
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("raptor train: error:") and "checkpoint.pt: not a readable" in err
    assert "--fresh" in err and "Traceback" not in err


def test_equal_total_epochs_gives_pure_rl_the_pretraining_budget(ctx, tmp_path):
    from raptor.pipeline.experiment import effective_epochs

    c, _ = ctx
    p = dataclasses.replace(c.params, train=dataclasses.replace(c.params.train, equal_total_epochs=True),
                            rl=dataclasses.replace(c.params.rl, epochs=1),
                            pretrain=dataclasses.replace(c.params.pretrain, epochs=1))
    assert effective_epochs(p, "pure_rl", 0) == 2 and effective_epochs(p, "raptor", 1) == 1
    s = run_variant(dataclasses.replace(c, params=p), "pure_rl", RunOptions(seed=6, out_dir=tmp_path / "r", progress=False))
    assert s["rl_epochs"] == 2 == len(json.loads((tmp_path / "r/history.json").read_text()))


def test_pretraining_refuses_labels_of_the_other_visited_mode(ctx, tmp_path):
    """labeling.visited is a label-stage param: pretraining on a table built the other way is an error
    naming both values, and a subject-mode table with matching params pretrains end to end."""
    c, root = ctx
    subject = params_from_dict({**PARAMS, "labeling": {"visited": "target_and_subject"}})
    c_subject = load_context(root / "data", root / "graph.npz", subject)
    with pytest.raises(ValueError, match=r"labeling.visited = 'target', but params say 'target_and_subject'"):
        pretrain_run(c_subject, root / "labels", [1], RunOptions(seed=0, out_dir=tmp_path / "a", progress=False))
    assert not (tmp_path / "a" / "pretrained-e1.pt").exists()
    label_dataset(root / "data", tmp_path / "labels", max_path_length=3, config=subject.labeling,
                  graph_path=root / "graph.npz", show_progress=False)
    snaps = pretrain_run(c_subject, tmp_path / "labels", [1], RunOptions(seed=0, out_dir=tmp_path / "b", progress=False))
    assert Path(snaps[1]).is_file()
    hist = json.loads((tmp_path / "b" / "history.json").read_text())
    assert len(hist) == 1 and 0.0 <= hist[0]["label_accuracy"] <= 1.0


def test_titer_variant_trains_and_evaluates_through_the_same_run_and_evaluation(ctx, tmp_path):
    """TITer-150 is a variant like the others: run_variant trains TITer's agent with its own section of
    params (not model/rl), best.pt loads back as a TITer policy, and the test evaluation (with the
    inductive mean) writes the same artifacts with ranks that agree with its metrics."""
    from raptor.agents.base import load_model
    from raptor.agents.titer.training import TITerPolicy

    c, root = ctx
    small = {"entity_dim": 16, "relation_dim": 12, "time_dim": 4, "state_dim": 12, "mlp_hidden_dim": 12}
    ct = load_context(root / "data", root / "graph.npz", params_from_dict({**PARAMS, "titer": small}))
    summary = run_variant(ct, "titer", RunOptions(seed=0, out_dir=tmp_path / "titer", progress=False))
    assert summary["variant"] == "titer" and summary["pretrain_epochs"] == 0 and summary["epochs_trained"] == 3
    hist = json.loads((tmp_path / "titer/history.json").read_text())
    assert [h["epoch"] for h in hist] == [0, 1, 2] and "shaped_reward" in hist[0] and "critic_loss" not in hist[0]
    assert (tmp_path / "titer/dirichlet.npz").is_file()
    policy, meta = load_model(summary["model"])
    assert isinstance(policy, TITerPolicy) and meta["architecture"] == "titer"
    assert policy.config.entity_dim == 16  # titer section, not model
    # the agent's params are in the fingerprint, the actor-critic's are not
    fp = json.loads((tmp_path / "titer/run_config.json").read_text())["params"]
    assert "titer.entity_dim" in fp and "model.entity_dim" not in fp and "rl.gamma" not in fp
    metrics = evaluate_model(ct, summary["model"], tmp_path / "eval", split="test")
    pred = read_predictions(tmp_path / "eval/predictions.parquet")
    assert len(pred.rank) == 2 * len(ct.dataset.splits["test"])
    assert metrics["mrr"] == pytest.approx(float(np.mean(1.0 / pred.rank)))
    # an actor-critic run's fingerprint ignores the titer section
    pure = run_variant(c, "pure_rl", RunOptions(seed=3, out_dir=tmp_path / "pure", progress=False, epochs=1))
    fp = json.loads((tmp_path / "pure/run_config.json").read_text())["params"]
    assert pure["variant"] == "pure_rl" and not any(k.startswith("titer.") for k in fp)


def test_recurrency_variant_runs_and_evaluates_through_the_registry(ctx, tmp_path):
    """The fourth system (issue 40, item 8) goes through the same run and evaluation as the others: its
    "training" selects lambda/alpha on the valid split, best.pt loads back through the registry, and its
    test ranks are those of raptor.agents.recurrency.method computed independently from the same data."""
    from raptor.agents.base import load_model
    from raptor.agents.recurrency.agent import RecurrencyTables
    from raptor.evaluation.ranking import build_filter
    from raptor.agents.recurrency.method import fit, rank_queries

    c, root = ctx
    summary = run_variant(c, "recurrency", RunOptions(seed=1, out_dir=tmp_path / "rec", progress=False))
    assert summary["variant"] == "recurrency" and summary["epochs_trained"] == 1 and summary["precision"] == "float64"
    hist = json.loads((tmp_path / "rec/history.json").read_text())
    assert len(hist) == 1 and hist[0]["val_mrr"] == summary["best_val_mrr"] and 0 < hist[0]["val_mrr"] <= 1
    fp = json.loads((tmp_path / "rec/run_config.json").read_text())["params"]
    assert "recurrency.lambda_grid" in fp and not any(k.startswith(("model.", "rl.gamma", "titer.")) for k in fp)
    tables, meta = load_model(summary["model"])
    assert isinstance(tables, RecurrencyTables) and meta["agent"] == "recurrency"
    ds = c.dataset
    want = fit(ds.splits["train"], ds.splits["valid"], ds.num_entities, ds.num_relations, c.params.recurrency)
    assert np.array_equal(tables.lambdas.numpy(), want.lambdas) and np.array_equal(tables.alphas.numpy(), want.alphas)
    metrics = evaluate_model(c, summary["model"], tmp_path / "eval", split="test")
    pred = read_predictions(tmp_path / "eval/predictions.parquet")
    queries = c.queries("test")
    ranks = rank_queries(want, ds.all_quadruples(), queries, build_filter(ds.all_quadruples(), ds.num_relations))
    assert np.array_equal(pred.rank, ranks)
    assert metrics["mrr"] == pytest.approx(float(np.mean(1.0 / ranks))) and metrics["precision"] == "float64"
    assert np.diff(pred.cand_offsets).max() <= c.params.eval.beam_size  # the top candidates only
    # run again on the same folder: the finished selection is replayed, not fitted again
    seen = []
    again = run_variant(c, "recurrency", RunOptions(seed=1, out_dir=tmp_path / "rec", progress=False),
                        on_epoch_end=lambda phase, e, m: seen.append(m.get("replayed")))
    assert seen == [True] and again["best_val_mrr"] == summary["best_val_mrr"]


def test_titer_environment_param_picks_the_walk_of_training_and_evaluation(ctx, tmp_path):
    """`titer.environment: titer` puts TITer-150 in TITer's own walk for training, validation and test:
    its runs' fingerprint holds the choice, and its test ranks are beam search's in that walk."""
    from raptor.agents import get_agent
    from raptor.agents.base import load_model
    from raptor.agents.beam import beam_search
    from raptor.evaluation.ranking import context_filter, filtered_ranks

    c, root = ctx
    small = {"entity_dim": 16, "relation_dim": 12, "time_dim": 4, "state_dim": 12, "mlp_hidden_dim": 12}
    ct = load_context(root / "data", root / "graph.npz",
                      params_from_dict({**PARAMS, "rl": {"epochs": 1, "batch_size": 256},
                                        "titer": {**small, "environment": "titer"}}))
    agent = get_agent("titer")
    assert agent.env(ct).walk == "backward" and agent.env(c).walk == "forward" and c.env.walk == "forward"
    summary = run_variant(ct, "titer", RunOptions(seed=0, out_dir=tmp_path / "titer", progress=False))
    fp = json.loads((tmp_path / "titer/run_config.json").read_text())["params"]
    assert fp["titer.environment"] == "titer"
    metrics = evaluate_model(ct, summary["model"], tmp_path / "eval", split="valid")  # no inductive mean on valid
    policy, _ = load_model(summary["model"])
    q = ct.queries("valid")
    res = beam_search(policy, ct.env.with_walk("backward"), q, ct.params.eval)
    ranks = filtered_ranks(res.cand_entity, res.cand_score, q[:, 2], q[:, [0, 1, 3]], context_filter(ct), ct.dataset.num_entities)
    assert np.array_equal(read_predictions(tmp_path / "eval/predictions.parquet").rank, ranks)
    assert metrics["mrr"] == pytest.approx(float(np.mean(1.0 / ranks)))


def test_runs_trained_as_threads_equal_runs_trained_alone(ctx, tmp_path, monkeypatch):
    """A stage trains `train.parallel_runs` seeds as threads of one process. Their initial weights come
    from torch's process-wide generator: each run must seed it and draw its weights without another
    run drawing in between, or a run's weights depend on the other's timing. Policy construction is
    slowed down here so that, without that guarantee, the two runs would interleave for certain."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from raptor.agents.policy import Policy

    c, root = ctx

    def pretrain(seed, tag):
        pretrain_run(c, root / "labels", [1], RunOptions(seed=seed, out_dir=tmp_path / tag / f"pre{seed}", progress=False))
        return json.loads((tmp_path / tag / f"pre{seed}" / "history.json").read_text())

    def rl(seed, tag):
        s = run_variant(c, "pure_rl", RunOptions(seed=seed, out_dir=tmp_path / tag / f"rl{seed}", epochs=1, progress=False))
        return json.loads((tmp_path / tag / f"rl{seed}" / "history.json").read_text()), s["best_val_mrr"]

    alone = {s: (pretrain(s, "alone"), rl(s, "alone")) for s in (6, 7)}
    original = Policy.__init__

    def slow_init(self, *args, **kwargs):
        time.sleep(0.05)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Policy, "__init__", slow_init)
    with ThreadPoolExecutor(2) as pool:
        pre = dict(zip((6, 7), pool.map(lambda s: pretrain(s, "threads"), (6, 7))))
        rls = dict(zip((6, 7), pool.map(lambda s: rl(s, "threads"), (6, 7))))
    for s in (6, 7):
        assert [e["bce"] for e in pre[s]] == [e["bce"] for e in alone[s][0]], s
        assert [e["reward"] for e in rls[s][0]] == [e["reward"] for e in alone[s][1][0]], s
        assert rls[s][1] == alone[s][1][1]
    assert alone[6][0][0]["bce"] != alone[7][0][0]["bce"]  # the seeds differ: the comparison has teeth


def test_titer_runs_take_their_own_precision_and_the_actor_critic_runs_train_precision():
    """bfloat16 was measured for the actor-critic agent only: ``train.precision: auto`` must not move
    TITer-150 off float32 (``titer.precision``)."""
    from raptor.pipeline.experiment import variant_precision

    p = params_from_dict({"train": {"precision": "bfloat16"}, "titer": {"precision": "float32"}})
    assert [variant_precision(p, v, "cpu") for v in ("pure_rl", "raptor", "titer")] == ["bfloat16", "bfloat16", "float32"]
    p = params_from_dict({"train": {"precision": "float32"}, "titer": {"precision": "bfloat16"}})
    assert [variant_precision(p, v, "cpu") for v in ("pure_rl", "raptor", "titer")] == ["float32", "float32", "bfloat16"]
    assert params_from_dict({}).titer.precision == "float32"


def _weights(path: Path) -> dict:
    import torch

    return torch.load(path, weights_only=True)["policy"]


def _same_weights(a: Path, b: Path) -> bool:
    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all(np.array_equal(wa[k].numpy(), wb[k].numpy()) for k in wa)


def test_a_lower_epoch_budget_retrains_and_a_higher_one_resumes(ctx, tmp_path, caplog):
    """The reported defect: rl.epochs lowered (40 -> 3) gave back the 40-epoch model. A run trained
    past the budget now asked is trained again, to the model a run of that budget alone gives (the
    same history, metrics and weights), and records what it trained; a larger budget continues it."""
    import logging

    from raptor.common.io import RunMismatchError

    caplog.set_level(logging.WARNING, logger="raptor")
    c, _ = ctx
    ref, out = tmp_path / "ref", tmp_path / "run"
    alone = run_variant(c, "pure_rl", RunOptions(seed=7, out_dir=ref, epochs=2, progress=False))
    run_variant(c, "pure_rl", RunOptions(seed=7, out_dir=out, epochs=4, progress=False))
    with pytest.raises(RunMismatchError, match=r"trained 4 epochs.*2"):  # a long run is not thrown away
        run_variant(c, "pure_rl", RunOptions(seed=7, out_dir=out, epochs=2, progress=False, resume_only=True))
    assert len(json.loads((out / "history.json").read_text())) == 4
    seen = []
    s = run_variant(c, "pure_rl", RunOptions(seed=7, out_dir=out, epochs=2, progress=False), on_epoch_end=lambda _, e, m: None if m.get("replayed") else seen.append(e))
    assert seen == [0, 1] and "trained 4 epochs" in s["restarted"] and "starting afresh" in caplog.text
    assert s["rl_epochs"] == s["epochs_trained"] == 2
    assert without_timings(s) == without_timings({**alone, "restarted": s["restarted"], "model": s["model"]})
    assert without_timings(json.loads((out / "history.json").read_text())) == \
        without_timings(json.loads((ref / "history.json").read_text()))
    assert _same_weights(out / "best.pt", ref / "best.pt") and _same_weights(out / "final.pt", ref / "final.pt")
    assert json.loads((out / "summary.json").read_text())["epochs_trained"] == 2
    a = evaluate_model(c, out / "best.pt", tmp_path / "eval-run", split="test")
    b = evaluate_model(c, ref / "best.pt", tmp_path / "eval-ref", split="test")
    assert without_timings(a) == without_timings(b)  # the same model at another path
    # A larger budget continues the run from its checkpoint: epochs 0 and 1 are not trained again.
    seen.clear()
    s = run_variant(c, "pure_rl", RunOptions(seed=7, out_dir=out, epochs=3, progress=False), on_epoch_end=lambda _, e, m: None if m.get("replayed") else seen.append(e))
    assert seen == [2] and s["restarted"] is None and s["epochs_trained"] == 3
    # The same budget again: the finished run is the result, nothing is trained.
    seen.clear()
    s = run_variant(c, "pure_rl", RunOptions(seed=7, out_dir=out, epochs=3, progress=False), on_epoch_end=lambda _, e, m: None if m.get("replayed") else seen.append(e))
    assert seen == [] and s["restarted"] is None


def test_a_partial_run_of_a_larger_budget_is_not_taken_for_a_finished_smaller_one(ctx, tmp_path):
    """A 4-epoch run killed after its epoch 1 has not validated that epoch as a last one: asked for
    2 epochs, it trains again rather than skip the 2-epoch run's final validation."""
    from raptor.runs import checkpoints

    c, _ = ctx
    out = tmp_path / "run"
    run_variant(c, "pure_rl", RunOptions(seed=8, out_dir=out, epochs=4, progress=False))
    ck = checkpoints.load(out / "checkpoint.pt", checkpoints.RL_CHECKPOINT_FORMAT, "checkpoint")
    assert ck["n_epochs"] == 4
    for f in out.iterdir():  # what a kill after epoch 1 leaves: that epoch's checkpoint and history
        if f.name not in ("run_config.json", "history.json"):
            f.unlink()
    checkpoints.save(out / "checkpoint.pt", {**ck, "epoch": 1, "history": ck["history"][:2]})
    s = run_variant(c, "pure_rl", RunOptions(seed=8, out_dir=out, epochs=2, progress=False))
    assert s["restarted"] and "toward 4 epochs" in s["restarted"]
    assert [h["epoch"] for h in json.loads((out / "history.json").read_text())] == [0, 1]


def test_seeds_stacked_into_one_step_leave_the_run_folders_of_seeds_alone(ctx, tmp_path):
    """run_variants trains the seeds of a variant as one batched step (the actor-critic agent stacks
    them): each run folder and summary is the one its seed alone leaves, up to floating-point order."""
    from raptor.pipeline.experiment import run_variants

    c, root = ctx
    seen = []
    runs = [RunOptions(seed=s, out_dir=tmp_path / f"stacked/{s}", progress=False, epochs=2) for s in (0, 1)]
    stacked = run_variants(c, "pure_rl", runs, hooks=[lambda ph, e, m, s=s: seen.append((s, ph, e)) for s in (0, 1)])
    assert sorted(seen) == [(0, "rl", 0), (0, "rl", 1), (1, "rl", 0), (1, "rl", 1)]
    for s, summary in zip((0, 1), stacked):
        alone = run_variant(c, "pure_rl", RunOptions(seed=s, out_dir=tmp_path / f"alone/{s}", progress=False, epochs=2))
        assert summary["stacked_seeds"] == 2 and alone["stacked_seeds"] == 1
        assert summary["seed"] == s and summary["best_epoch"] == alone["best_epoch"]
        assert summary["final_reward"] == pytest.approx(alone["final_reward"], rel=1e-3)
        assert summary["best_val_mrr"] == pytest.approx(alone["best_val_mrr"], abs=0.02)
        assert json.loads((tmp_path / f"stacked/{s}/summary.json").read_text()) == summary
        assert (tmp_path / f"stacked/{s}/best.pt").is_file()
    # TITer's agent does not stack: its seeds train one after the other through the same call
    titer = run_variants(c, "titer", [RunOptions(seed=s, out_dir=tmp_path / f"titer/{s}", progress=False, epochs=1)
                                      for s in (0, 1)])
    assert [t["stacked_seeds"] for t in titer] == [1, 1] and [t["seed"] for t in titer] == [0, 1]


def test_a_model_of_other_data_or_another_path_length_is_refused_before_it_is_used(ctx, tmp_path):
    """The audit's case: a 13-entity model evaluated on 12-entity data wrote wrong metrics and exit 0."""
    from dataclasses import replace

    from helpers import synthetic_dataset
    from raptor.runs.checkpoints import CheckpointError

    c, _ = ctx
    s = run_variant(c, "pure_rl", RunOptions(seed=0, out_dir=tmp_path / "run", epochs=1, progress=False))
    other = tmp_path / "other"
    raw = write_raw(other / "raw", SyntheticSpec(num_entities=50, seed=3))
    from raptor.data.graph import build_graph
    from raptor.data.ingest import ingest

    ingest(raw, other / "data")
    build_graph(other / "data", other / "graph.npz")
    ctx2 = load_context(other / "data", other / "graph.npz", c.params)
    n = c.dataset.num_entities
    with pytest.raises(CheckpointError, match=rf"run/best\.pt: a model of dataset .*\({n} entities, .* does not fit "
                                              r".*other/data \(50 entities"):
        evaluate_model(ctx2, s["model"], tmp_path / "eval")
    assert not (tmp_path / "eval").exists()
    k2 = params_from_dict({**PARAMS, "env": {**PARAMS["env"], "max_path_length": 2}})
    ctx3 = replace(c, params=k2)
    with pytest.raises(CheckpointError, match=r"trained with env\.max_path_length = 3, the params say 2"):
        evaluate_model(ctx3, s["model"], tmp_path / "eval")
    assert evaluate_model(c, s["model"], tmp_path / "eval")["mrr"] >= 0  # its own data: accepted


def test_a_bad_initial_model_is_refused_before_the_run_folder_is_touched(ctx, tmp_path):
    """The audit's case: a truncated (or foreign) pretrained model emptied a finished RL run's folder
    and only then was refused."""
    from raptor.runs.checkpoints import CheckpointError

    c, root = ctx
    snaps = pretrain_run(c, root / "labels", [1], RunOptions(seed=0, out_dir=tmp_path / "pre", progress=False))
    run = RunOptions(seed=0, out_dir=tmp_path / "rl", epochs=1, progress=False)
    run_variant(c, "raptor", run, init_model=snaps[1], pretrain_epochs=1)
    before = sorted(p.name for p in (tmp_path / "rl").iterdir())
    assert "summary.json" in before and "best.pt" in before
    bad = tmp_path / "bad.pt"
    bad.write_bytes(Path(snaps[1]).read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=r"bad\.pt: not a readable RAPTOR model"):
        run_variant(c, "raptor", run, init_model=bad, pretrain_epochs=1)
    wide = params_from_dict({**PARAMS, "model": {**PARAMS["model"], "mlp_hidden_dim": 48}})
    from dataclasses import replace
    with pytest.raises(CheckpointError, match=r"its weights do not fit the model these params build .*pretrain again"):
        run_variant(replace(c, params=wide), "raptor", run, init_model=snaps[1], pretrain_epochs=1)
    assert sorted(p.name for p in (tmp_path / "rl").iterdir()) == before


def test_the_evaluation_of_a_run_takes_only_a_finished_runs_model(ctx, tmp_path):
    """The audit's case: the evaluate stage tested the mid-training best.pt of a killed run."""
    from raptor.runs.rundir import RunDir

    c, _ = ctx
    out = tmp_path / "run"
    with pytest.raises(FileNotFoundError, match=r"run is not trained: train it to the end first"):
        RunDir(out).finished_best()
    (out / "best.pt").parent.mkdir(parents=True)
    (out / "best.pt").write_bytes(b"a snapshot of a killed run")
    with pytest.raises(FileNotFoundError, match=r"run did not finish training \(no summary\.json\)"):
        RunDir(out).finished_best()
    (out / "best.pt").unlink()
    run_variant(c, "pure_rl", RunOptions(seed=0, out_dir=out, epochs=1, progress=False))
    assert RunDir(out).finished_best() == out / "best.pt"
    # Training went on (a larger budget) and rewrote best.pt, then was killed: not the finished model.
    finished = (out / "best.pt").read_bytes()
    (out / "best.pt").write_bytes(finished[:-1] + bytes([finished[-1] ^ 1]))
    with pytest.raises(FileNotFoundError, match=r"best\.pt is not the model the run finished with"):
        RunDir(out).finished_best()
    (out / "best.pt").write_bytes(finished)
    assert RunDir(out).finished_best() == out / "best.pt"


def test_labels_of_other_data_are_refused_before_a_pretraining_folder_is_touched(ctx, tmp_path):
    """The audit's case: labels of another dataset failed late, with a message naming a pair, not why."""
    from raptor.data.graph import build_graph
    from raptor.data.ingest import ingest

    c, root = ctx
    pretrain_run(c, root / "labels", [1], RunOptions(seed=0, out_dir=tmp_path / "pre", progress=False))
    before = sorted(p.name for p in (tmp_path / "pre").iterdir())
    other = tmp_path / "other"
    ingest(write_raw(other / "raw", SyntheticSpec(num_entities=50, seed=3)), other / "data")
    build_graph(other / "data", other / "graph.npz")
    ctx2 = load_context(other / "data", other / "graph.npz", c.params)
    with pytest.raises(ValueError, match=rf"label table .*labels was built on a graph of {c.dataset.num_entities} "
                                         r"entities, the data .*other/data has 50"):
        pretrain_run(ctx2, root / "labels", [1], RunOptions(seed=0, out_dir=tmp_path / "pre", progress=False))
    assert sorted(p.name for p in (tmp_path / "pre").iterdir()) == before
    # Other data of the same size: told apart by the hash of the data the table was labeled from.
    same = tmp_path / "same"
    spec = SyntheticSpec(num_entities=c.dataset.num_entities, num_relations=c.dataset.num_relations, seed=9)
    ingest(write_raw(same / "raw", spec), same / "data")
    build_graph(same / "data", same / "graph.npz")
    ctx3 = load_context(same / "data", same / "graph.npz", c.params)
    assert ctx3.dataset.num_entities == c.dataset.num_entities
    with pytest.raises(ValueError, match=r"label table .*labels was labeled from .*/data \(dataset .*\), whose "
                                         r"content is not that of .*same/data: label this data"):
        pretrain_run(ctx3, root / "labels", [1], RunOptions(seed=0, out_dir=tmp_path / "pre", progress=False))
    assert sorted(p.name for p in (tmp_path / "pre").iterdir()) == before
