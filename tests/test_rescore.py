"""Re-scoring finished runs under an evaluation-only reading: what it writes, keeps, refuses, and how the
results page sets it beside the default evaluation."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from raptor.cli import main as cli
from raptor.config import ConfigError, EvalConfig, TEST_TIME_EVAL_KEYS, params_from_dict
from raptor.evaluation.ranking import read_predictions
from raptor.pipeline.experiment import evaluate_model, load_context, run_variant
from raptor.pipeline.rescore import parse_overrides, reading_name, rescore_runs
from raptor.reporting.results import (READING_COLUMNS, collect, discover, pool, reading_rows,
                                      reading_significance_rows, significance_rows, write_results_page)
from raptor.runs.rundir import RunOptions

from helpers import synthetic_dataset

PARAMS = {
    "model": {"entity_dim": 16, "relation_dim": 16, "time_dim": 4, "step_dim": 4, "mlp_hidden_dim": 32},
    "env": {"max_actions": 20},
    "rl": {"epochs": 2, "batch_size": 256},
    "eval": {"beam_size": 4, "valid_every": 1},
    "train": {"seeds": [0], "num_threads": 1},
}
READING = {"eval.rank_last_expansions": True}


def test_overrides_are_test_time_eval_params_only():
    assert parse_overrides(["eval.rank_last_expansions=true", "eval.beam_size=50"]) == {
        "eval.rank_last_expansions": True, "eval.beam_size": 50}
    assert parse_overrides(["eval.score_rule=logsumexp"]) == {"eval.score_rule": "logsumexp"}
    # validation's schedule picks the checkpoint: changing it needs the runs trained again
    with pytest.raises(ConfigError, match="eval.valid_every: not an evaluation param"):
        parse_overrides(["eval.valid_every=5"])
    with pytest.raises(ConfigError, match="rl.gamma: not an evaluation param"):
        parse_overrides(["rl.gamma=0.9"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_overrides(["eval.beam_size"])
    with pytest.raises(ConfigError, match="no override"):
        parse_overrides([])
    # every re-scorable key is a field of the evaluation's params, and none schedules validation
    fields = {f"eval.{f.name}" for f in dataclasses.fields(EvalConfig)}
    assert set(TEST_TIME_EVAL_KEYS) <= fields and not any("valid" in k or "patience" in k for k in TEST_TIME_EVAL_KEYS)


def test_reading_names_are_sorted_key_value_pairs():
    assert reading_name({"eval.rank_last_expansions": True}) == "eval.rank_last_expansions=true"
    assert reading_name({"eval.score_rule": "logsumexp", "eval.beam_size": 50}) == \
        "eval.beam_size=50,eval.score_rule=logsumexp"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, one_torch_thread):
    """A folder of long runs on a tiny synthetic dataset: Pure-RL seeds 0 and 1 trained and evaluated, seed 2
    trained and not evaluated; the params file they trained with."""
    root = synthetic_dataset(tmp_path_factory.mktemp("rescore"), seed=3)
    params_file = root / "params.yaml"
    params_file.write_text(yaml.safe_dump(PARAMS))
    ctx = load_context(root / "data", root / "graph.npz", params_from_dict(PARAMS))
    for seed in (0, 1, 2):
        seed_dir = root / f"runs/TINY/pure_rl/seed{seed}"
        summary = run_variant(ctx, "pure_rl", RunOptions(seed=seed, out_dir=seed_dir / "rl", progress=False))
        if seed < 2:
            evaluate_model(ctx, summary["model"], seed_dir / "eval")
    return root, params_file


def _rescore(root: Path, params_file: Path, overrides=READING, runs_dir=None):
    return rescore_runs(runs_dir or root / "runs/TINY", root / "data", root / "graph.npz", params_file, overrides)


def test_rescore_writes_the_readings_evaluation_of_each_evaluated_run_and_keeps_it(runs, tmp_path):
    root, params_file = runs
    work = tmp_path / "runs"
    shutil.copytree(root / "runs/TINY", work)
    done = _rescore(root, params_file, runs_dir=work)
    assert [(Path(r["run"]).name, r["status"]) for r in done] == [
        ("seed0", "scored"), ("seed1", "scored"), ("seed2", "skipped: not tested yet")]
    name = "eval.rank_last_expansions=true"
    assert not (work / "pure_rl/seed2/rescore").exists()  # not tested: its best model may still change
    # the same as evaluating the model by hand with the reading's params
    ctx = load_context(root / "data", root / "graph.npz", params_from_dict(PARAMS, READING))
    by_hand = evaluate_model(ctx, work / "pure_rl/seed0/rl/best.pt", tmp_path / "by-hand")
    reading_dir = work / "pure_rl/seed0/rescore" / name
    written = json.loads((reading_dir / "metrics.json").read_text())
    assert written["mrr"] == pytest.approx(by_hand["mrr"])
    np.testing.assert_array_equal(read_predictions(reading_dir / "predictions.parquet").rank,
                                  read_predictions(tmp_path / "by-hand/predictions.parquet").rank)
    reading = json.loads((reading_dir / "reading.json").read_text())
    assert reading["overrides"] == READING and reading["split"] == "test"
    assert reading["model_hash"] != json.loads((work / "pure_rl/seed1/rescore" / name / "reading.json").read_text())["model_hash"]
    assert reading["code"]
    # every expansion ranked: each query has at least the candidates of the surviving paths alone, and the
    # beam of 4 paths leaves out expansions somewhere
    n_default = np.diff(read_predictions(work / "pure_rl/seed0/eval/predictions.parquet").cand_offsets)
    n_reading = np.diff(read_predictions(reading_dir / "predictions.parquet").cand_offsets)
    assert (n_reading >= n_default).all() and n_reading.sum() > n_default.sum()

    # its ranks beside its predictions: what a park keeps of it (the predictions are hundreds of MB on ICEWS18)
    np.testing.assert_array_equal(pq.read_table(reading_dir / "ranks.parquet").column("rank").to_numpy(),
                                  read_predictions(reading_dir / "predictions.parquet").rank)

    # a second call keeps it; a reading of another model (another hash) is scored again
    assert [r["status"] for r in _rescore(root, params_file, runs_dir=work)][:2] == ["kept", "kept"]
    # kept with its ranks alone (parked without its predictions), and a reading from before the ranks were
    # written beside it gets them
    ranks = (reading_dir / "ranks.parquet").read_bytes()
    (reading_dir / "predictions.parquet").unlink()
    other = work / "pure_rl/seed1/rescore" / name
    (other / "ranks.parquet").unlink()
    assert [r["status"] for r in _rescore(root, params_file, runs_dir=work)][:2] == ["kept", "kept"]
    assert (reading_dir / "ranks.parquet").read_bytes() == ranks and not (reading_dir / "predictions.parquet").exists()
    np.testing.assert_array_equal(pq.read_table(other / "ranks.parquet").column("rank").to_numpy(),
                                  read_predictions(other / "predictions.parquet").rank)
    (work / "pure_rl/seed1/rescore" / name / "reading.json").write_text(
        json.dumps({**reading, "model_hash": "0" * 16}))
    assert [r["status"] for r in _rescore(root, params_file, runs_dir=work)][:2] == ["kept", "scored"]
    # file times say nothing (a park, a change of machine writes every file anew): a best model newer than
    # its test is still the model tested
    best = work / "pure_rl/seed0/rl/best.pt"
    os.utime(best, (best.stat().st_atime, (work / "pure_rl/seed0/eval/metrics.json").stat().st_mtime + 10))
    assert _rescore(root, params_file, runs_dir=work)[0]["status"] == "kept"
    # a run trained on after its test: the default evaluation is of another model, so no reading beside it
    original = best.read_bytes()
    shutil.copy(work / "pure_rl/seed1/rl/best.pt", best)
    assert _rescore(root, params_file, runs_dir=work)[0]["status"] == \
        "skipped: its test evaluation is not of rl/best.pt (it names another model_sha256)"
    # an evaluation from before metrics named the model: told by its ranks of the first test queries
    metrics_file = work / "pure_rl/seed0/eval/metrics.json"
    metrics_file.write_text(json.dumps({k: v for k, v in json.loads(metrics_file.read_text()).items()
                                        if k != "model_sha256"}))
    status = _rescore(root, params_file, runs_dir=work)[0]["status"]
    assert status.startswith("skipped: its test evaluation is not of rl/best.pt (it names no model hash, and the "
                             "model ranks ") and "under 95%" in status, status
    best.write_bytes(original)
    assert _rescore(root, params_file, runs_dir=work)[0]["status"] == "kept"
    (work / "pure_rl/seed0/eval/predictions.parquet").unlink()
    assert "has no per-query ranks to compare with" in _rescore(root, params_file, runs_dir=work)[0]["status"]


def test_an_interrupted_reading_is_neither_read_nor_kept(runs, tmp_path):
    root, params_file = runs
    work = tmp_path / "runs"
    shutil.copytree(root / "runs/TINY", work)
    half = work / "pure_rl/seed0/rescore/eval.rank_last_expansions=true"
    half.mkdir(parents=True)
    (half / "metrics.json").write_text('{"mrr": 0.99}')  # no reading.json: the write did not finish
    shutil.copytree(work, tmp_path / "results/TINY")
    assert all(not r.readings for seeds in discover(tmp_path / "results")[0].runs.values() for r in seeds.values())
    assert [r["status"] for r in _rescore(root, params_file, runs_dir=work)][:2] == ["scored", "scored"]
    assert json.loads((half / "metrics.json").read_text())["mrr"] != 0.99


def test_rescore_refuses_other_params_or_data(runs, tmp_path):
    root, params_file = runs
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**PARAMS, "rl": {**PARAMS["rl"], "gamma": 0.5}}))
    with pytest.raises(ConfigError, match=r"seed0: .*not the params this run trained with \(rl.gamma: run 0.95"):
        _rescore(root, other)
    other_data = synthetic_dataset(tmp_path / "other", seed=4)
    with pytest.raises(ValueError, match="seed0: trained on other data"):
        rescore_runs(root / "runs/TINY", other_data / "data", other_data / "graph.npz", params_file, READING)
    with pytest.raises(FileNotFoundError, match="runs folder not found"):
        _rescore(root, params_file, runs_dir=tmp_path / "missing")
    # the runs' own value is the default evaluation, not a reading
    with pytest.raises(ConfigError, match="eval.rank_last_expansions=False: the value .* already has"):
        _rescore(root, params_file, {"eval.rank_last_expansions": False})
    # checked before any run is scored: a run without a fingerprint after a good one leaves nothing behind
    work = tmp_path / "runs"
    shutil.copytree(root / "runs/TINY", work)
    (work / "pure_rl/seed1/rl/run_config.json").unlink()
    with pytest.raises(ValueError, match="seed1: no run_config.json"):
        _rescore(root, params_file, runs_dir=work)
    assert not list(work.glob("pure_rl/*/rescore"))


def test_rescore_cli_names_a_bad_key_in_one_line(runs, capsys):
    root, params_file = runs
    code = cli(["rescore", str(root / "runs/TINY"), "--data", str(root / "data"), "--graph", str(root / "graph.npz"),
                "--params", str(params_file), "--set", "eval.valid_every=5"])
    err = capsys.readouterr().err
    assert code != 0 and "eval.valid_every: not an evaluation param" in err


def _long_runs_folder(root: Path, params_file: Path, lr: Path):
    """``longrun(*args)``: scripts/longrun.sh on a long-runs folder ``lr`` made of the fixture's runs, data,
    graph and params file (the layout the script keeps)."""
    shutil.copytree(root / "runs", lr / "runs")
    shutil.copytree(root / "data", lr / "data/TINY/ingested")
    shutil.copy(root / "graph.npz", lr / "data/TINY/graph.npz")
    shutil.copy(params_file, lr / "params.yaml")
    repo = Path(__file__).resolve().parents[1]
    env = {**{k: v for k, v in os.environ.items() if k != "LONGRUN_PARK"}, "LONGRUN_DIR": str(lr)}

    def longrun(*args):
        return subprocess.run(["bash", str(repo / "scripts/longrun.sh"), *args], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=300)
    return longrun


def test_longrun_rescore_scores_every_tested_run_of_the_long_runs_folder(runs, tmp_path):
    root, params_file = runs
    lr = tmp_path / "lr"
    r = _long_runs_folder(root, params_file, lr)("rescore", "--set", "eval.rank_last_expansions=true")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("scored eval.rank_last_expansions=true") == 2
    assert sorted(p.parent.parent.parent.name for p in lr.glob("runs/TINY/pure_rl/seed*/rescore/*/reading.json")) == \
        ["seed0", "seed1"]


def _workspace(root: Path, params_file: Path, ws: Path) -> Path:
    """A pipeline workspace made of the fixture's runs: ``runs/TINY/pure_rl/train/seed<S>/`` (the finetune stage's
    output: the run's training folder as it is) and ``.../eval/seed<S>/`` (the evaluate stage's), and the resolved
    params file the stages read; returns its ``runs/TINY``."""
    from raptor.pipeline.stages import resolve_params

    for seed_dir in sorted((root / "runs/TINY/pure_rl").glob("seed*")):
        shutil.copytree(seed_dir / "rl", ws / "runs/TINY/pure_rl/train" / seed_dir.name)
        if (seed_dir / "eval").is_dir():
            shutil.copytree(seed_dir / "eval", ws / "runs/TINY/pure_rl/eval" / seed_dir.name)
    resolve_params(params_file, ws / "params.local.yaml", ws / "build/params.json")
    return ws / "runs/TINY"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


def test_rescore_reads_a_pipeline_workspace_and_writes_beside_its_stage_outputs(runs, tmp_path, capsys):
    root, params_file = runs
    ws = tmp_path / "ws"
    work = _workspace(root, params_file, ws)
    resolved = ws / "build/params.json"
    stage_outputs = {d: _files(work / "pure_rl" / d) for d in ("train", "eval")}
    done = rescore_runs(work, root / "data", root / "graph.npz", resolved, READING)
    assert [(Path(r["run"]).name, r["status"]) for r in done] == [
        ("seed0", "scored"), ("seed1", "scored"), ("seed2", "skipped: not tested yet")]
    # the stages' outputs (DVC's to replace and to check) are left as they were
    assert {d: _files(work / "pure_rl" / d) for d in ("train", "eval")} == stage_outputs
    name = "eval.rank_last_expansions=true"
    reading_dir = work / "pure_rl/rescore/seed0" / name
    ctx = load_context(root / "data", root / "graph.npz", params_from_dict(PARAMS, READING))
    by_hand = evaluate_model(ctx, work / "pure_rl/train/seed0/best.pt", tmp_path / "by-hand")
    assert json.loads((reading_dir / "metrics.json").read_text())["mrr"] == pytest.approx(by_hand["mrr"])
    np.testing.assert_array_equal(pq.read_table(reading_dir / "ranks.parquet").column("rank").to_numpy(),
                                  read_predictions(tmp_path / "by-hand/predictions.parquet").rank)
    about = json.loads((reading_dir / "reading.json").read_text())
    assert about["model"] == "train/seed0/best.pt" and about["overrides"] == READING
    assert not (work / "pure_rl/rescore/seed2").exists()

    # the params file the workspace's params stage resolved, not the one it resolved it from
    (ws / "params.yaml").write_text(yaml.safe_dump({**PARAMS, "rl": {**PARAMS["rl"], "gamma": 0.5}}))
    with pytest.raises(ConfigError, match=r"seed0: .*not the params this run trained with \(rl.gamma: run 0.95, "
                                          r"params file 0.5\); a workspace's runs trained with its resolved "
                                          r"build/params.json"):
        rescore_runs(work, root / "data", root / "graph.npz", ws / "params.yaml", READING)
    # the CLI with the workspace's resolved params keeps both
    assert cli(["rescore", str(work), "--data", str(root / "data"), "--graph", str(root / "graph.npz"),
                "--params", str(resolved), "--set", f"{name}"]) == 0
    assert capsys.readouterr().out.count(f"kept {name} (test)") == 2

    # the results page's reader finds the readings, collect keeps them, the page made from the copy is the same
    seeds = discover(ws)[0].runs["pure_rl"]
    assert {s: sorted(r.readings) for s, r in seeds.items()} == {0: [name], 1: [name], 2: []}
    collect(ws, tmp_path / "kept")
    kept = tmp_path / "kept/runs/TINY/pure_rl/rescore/seed0" / name
    assert (kept / "reading.json").is_file() and (kept / "ranks.parquet").is_file()
    assert reading_rows(discover(tmp_path / "kept", "ws")) == reading_rows(discover(ws, "ws")) != []
    # a dvc repro that trained and tested seed 0 again (another model): its old reading is not set beside it
    metrics = work / "pure_rl/eval/seed0/metrics.json"
    metrics.write_text(json.dumps({**json.loads(metrics.read_text()), "model_sha256": "0" * 64}))
    assert sorted(discover(ws)[0].runs["pure_rl"][0].readings) == []
    assert sorted(discover(ws)[0].runs["pure_rl"][1].readings) == [name]
    assert rescore_runs(work, root / "data", root / "graph.npz", resolved, READING)[0]["status"] == \
        "skipped: its test evaluation is not of train/seed0/best.pt (it names another model_sha256)"


# ------------------------------------------------------------------------------ collect and the page


def _ranks(path: Path, ranks) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(ranks)
    pq.write_table(pa.table({"subject": np.arange(n), "relation": np.zeros(n, int), "object": np.ones(n, int),
                             "time": np.zeros(n, int), "rank": np.asarray(ranks, float)}), path)


def _eval(folder: Path, ranks, reading=None) -> None:
    r = np.asarray(ranks, float)
    m = {"mrr": float(np.mean(1 / r)), "hits@1": float(np.mean(r <= 1)), "hits@3": float(np.mean(r <= 3)),
         "hits@10": float(np.mean(r <= 10))}
    _ranks(folder / "ranks.parquet", r)
    (folder / "metrics.json").write_text(json.dumps(m))
    if reading is not None:
        (folder / "reading.json").write_text(json.dumps({"overrides": reading, "split": "test", "model_hash": "x"}))


@pytest.fixture
def records(tmp_path):
    """Hand-made records: Pure-RL and RL-RAPTOR seeds 0 and 1, each re-scored with one reading that turns
    its last query's rank 4 (default) into 1, except Pure-RL seed 0's: into 2."""
    root = tmp_path / "rec"
    for v, base in (("pure_rl", [1, 2, 4]), ("raptor", [1, 1, 4])):
        for seed in (0, 1):
            d = root / f"ICEWS14/{v}/seed{seed}"
            (d / "rl").mkdir(parents=True)
            (d / "rl/history.json").write_text(json.dumps([{"epoch": 0, "reward": 0.3, "val_mrr": 0.4}]))
            (d / "rl/summary.json").write_text(json.dumps({"rl_epochs": 1, "precision": "float32"}))
            (d / "rl/run_config.json").write_text(json.dumps({"params": {"eval.beam_size": 100}}))
            ranks = [r + seed for r in base[:2]] + [base[2]]
            _eval(d / "eval", ranks)
            last = 1 if v == "raptor" or seed == 1 else 2
            _eval(d / "rescore/eval.rank_last_expansions=true", ranks[:2] + [last], READING)
    (root / "COMMIT").write_text("0123456789abcdef\n")
    return root


def test_reading_rows_are_hand_computed_and_pair_seeds_and_queries(records):
    rows = reading_rows(discover(records, "long"))
    pure = next(r for r in rows if r["system"] == "Pure-RL")
    assert pure["reading"] == "`eval.rank_last_expansions=true`" and pure["seeds"] == "0,1"
    # seed 0: ranks 1, 2, 4 -> 1, 2, 2; seed 1: 2, 3, 4 -> 2, 3, 1: MRR gains (1/2 - 1/4) / 3 and (1 - 1/4) / 3
    d0, d1 = (0.5 - 0.25) / 3, (1 - 0.25) / 3
    assert pure["MRR diff"] == f"{100 * (d0 + d1) / 2:+.2f}"
    default0, default1 = (1 + 1 / 2 + 1 / 4) / 3, (1 / 2 + 1 / 3 + 1 / 4) / 3
    assert pure["MRR default"] == f"{100 * (default0 + default1) / 2:.2f} ± {100 * abs(default0 - default1) / 2 ** 0.5:.2f}"
    assert pure["H@1 diff"] == f"{100 / 6:+.2f}" and pure["H@3 diff"] == f"{100 / 3:+.2f}"
    # paired t over two seeds: t = mean / (sd / sqrt 2) = (d0 + d1) / |d1 - d0| = 2, one degree of freedom
    # (Cauchy): p two-sided = 1 - 2 atan(t) / pi
    assert pure["MRR diff t-test p (two-sided)"] == f"{1 - 2 * math.atan(2) / math.pi:.3g} (n = 2)"
    assert pure["MRR diff per-query bootstrap 95% CI"].startswith("[+0.00, ")
    assert set(pure) <= set(READING_COLUMNS)
    sig = reading_significance_rows(discover(records, "long"))
    assert [(r["reading"], r["comparison"]) for r in sig] == [("`eval.rank_last_expansions=true`", "RL-RAPTOR vs Pure-RL")]
    # under the reading: RL-RAPTOR [1,1,1] / [2,2,1] against Pure-RL [1,2,2] / [2,3,1]: (1/2 + 1/2) / 3 and
    # (1/2 - 1/3) / 3 (under the default: (1/2) / 3 and (1/2 - 1/3) / 3)
    assert sig[0]["MRR diff (points)"] == f"{100 * ((1 / 3) + (1 / 6 / 3)) / 2:+.2f}"
    assert significance_rows(discover(records, "long"))[0]["MRR diff (points)"] == f"{100 * ((0.5 / 3) + (1 / 6 / 3)) / 2:+.2f}"


def test_readings_of_some_seeds_pair_those_seeds_and_pool_across_folders(records, tmp_path):
    shutil.rmtree(records / "ICEWS14/pure_rl/seed1/rescore")
    pure = next(r for r in reading_rows(discover(records, "long")) if r["system"] == "Pure-RL")
    # seed 0 alone: its default MRR beside its reading's, no t-test over one seed
    assert pure["seeds"] == "0" and pure["MRR default"] == f"{100 * (1 + 1 / 2 + 1 / 4) / 3:.2f}"
    assert pure["MRR diff t-test p (two-sided)"] == "n/a (1 seed)"
    # seeds 0 and 1 in two folders, pooled: the same rows as one folder
    shutil.copytree(records, tmp_path / "a")
    shutil.copytree(records, tmp_path / "b")
    for v in ("pure_rl", "raptor"):
        shutil.rmtree(tmp_path / f"a/ICEWS14/{v}/seed1")
        shutil.rmtree(tmp_path / f"b/ICEWS14/{v}/seed0")
    pooled = pool("long", discover(tmp_path / "a") + discover(tmp_path / "b"))
    assert reading_rows([pooled]) == reading_rows(discover(records, "long"))


def test_collect_keeps_readings_and_the_page_shows_them(records, tmp_path):
    # a run folder's reading holds predictions (the ranks' columns and more): collect keeps the ranks
    live = records / "ICEWS14/raptor/seed1/rescore/eval.rank_last_expansions=true"
    table = pq.read_table(live / "ranks.parquet")
    pq.write_table(table.append_column("candidates", pa.array([[1, 2]] * len(table))), live / "predictions.parquet")
    (live / "ranks.parquet").unlink()
    out = collect(records, tmp_path / "kept")
    kept = tmp_path / "kept/ICEWS14/raptor/seed1/rescore/eval.rank_last_expansions=true"
    assert (kept / "reading.json").is_file() and (kept / "metrics.json").is_file() and (kept / "ranks.parquet").is_file()
    assert any("rescore" in f for f in out["files"])
    assert reading_rows(discover(tmp_path / "kept", "long")) == reading_rows(discover(records, "long"))
    page = write_results_page(discover(tmp_path / "kept", "long"), tmp_path / "page/results.md")
    text = page.read_text()
    assert "## Evaluation-only readings: the same checkpoints re-scored" in text
    assert "`eval.rank_last_expansions=true`" in text
    # the paper's layout has the re-scored rows beside the default ones: RL-RAPTOR's reading, ranks [1,1,1]
    # and [2,2,1]: MRR 100 and 66.67, mean 83.33 ± 23.57
    row = next(line for line in text.splitlines()
               if line.startswith("| **RL-RAPTOR (ours, long, `eval.rank_last_expansions=true`)**"))
    assert f"| {100 * (1 + 2 / 3) / 2:.2f} ± {100 * (1 / 3) / 2 ** 0.5:.2f}" in row
    assert any(line.startswith("| **RL-RAPTOR (ours, long)**") for line in text.splitlines())


def test_a_page_without_readings_has_no_readings_section(records, tmp_path):
    for d in records.glob("ICEWS14/*/seed*/rescore"):
        shutil.rmtree(d)
    text = write_results_page(discover(records, "long"), tmp_path / "results.md").read_text()
    assert "Evaluation-only readings" not in text


# ------------------------------------------------------------------------------ a sweep's evaluation-only arms


def test_an_arm_is_evaluation_only_when_test_time_eval_params_alone_differ_from_the_default():
    from raptor.pipeline.sweep import evaluation_only

    default = {"eval.beam_size": 100, "eval.rank_last_expansions": False, "eval.valid_every": 20, "rl.gamma": 0.95}
    assert evaluation_only({**default, "eval.rank_last_expansions": True}, default) == {"eval.rank_last_expansions": True}
    assert evaluation_only({**default, "eval.beam_size": 50, "eval.rank_last_expansions": True}, default) == {
        "eval.beam_size": 50, "eval.rank_last_expansions": True}
    # a param of training, or of validation's schedule (it picks the checkpoint): trained, not re-scored
    assert evaluation_only({**default, "eval.rank_last_expansions": True, "rl.gamma": 0.9}, default) is None
    assert evaluation_only({**default, "eval.valid_every": 5}, default) is None
    assert evaluation_only(dict(default), default) is None  # the default itself
    assert evaluation_only({**default, "extra.key": 1}, default) is None  # a key only one side has differs


SWEEP = {"variants": ["pure_rl"], "grid": {"eval.rank_last_expansions": [True], "rl.gamma": [0.9]}}
EV_ARM = "eval.rank_last_expansions=true"


@pytest.fixture(scope="module")
def sweep_runs(tmp_path_factory, one_torch_thread):
    """A folder of long runs holding sweep `ev`'s default arm (Pure-RL seeds 0 and 1 trained and tested, as
    scripts/longrun.sh lays them out and with the arm's params file it writes), the folder's params file
    declaring the sweep: an evaluation-only arm and a trained one (rl.gamma, not run)."""
    from raptor.config import load_params
    from raptor.pipeline.sweep import write_arm_params

    root = synthetic_dataset(tmp_path_factory.mktemp("rescore-sweep"), seed=3)
    params_file = root / "params.yaml"
    params_file.write_text(yaml.safe_dump({**PARAMS, "train": {**PARAMS["train"], "seeds": [0, 1]},
                                           "sweeps": {"ev": SWEEP}}))
    p = write_arm_params(params_file, "ev", "default", root / "sweeps/TINY/ev/default.yaml")
    ctx = load_context(root / "data", root / "graph.npz", p)
    for seed in (0, 1):
        seed_dir = root / f"runs/TINY/sweeps/ev/default/pure_rl/seed{seed}"
        summary = run_variant(ctx, "pure_rl", RunOptions(seed=seed, out_dir=seed_dir / "rl", progress=False))
        evaluate_model(ctx, summary["model"], seed_dir / "eval")
    assert load_params(root / "sweeps/TINY/ev/default.yaml") == p
    return root, params_file


def _copy(root: Path, tmp_path: Path) -> Path:
    shutil.copytree(root / "runs", tmp_path / "runs")
    return tmp_path / "runs"


def test_a_sweeps_evaluation_only_arm_is_the_default_arms_runs_rescored_on_both_splits(sweep_runs, tmp_path):
    from raptor.pipeline.local_sweep import collect_arm_runs
    from raptor.pipeline.rescore import rescore_sweep
    from raptor.pipeline.sweep import declared_records, load_sweep, plan_sweep
    from raptor.reporting.sweep_page import verdict

    root, params_file = sweep_runs
    runs = _copy(root, tmp_path)
    results = tmp_path / "results"
    # before the re-score: the default arm's runs are recorded, the evaluation-only arm's wait for it
    out = collect_arm_runs(runs, params_file, "ev", "TINY", results)
    assert sorted(out["saved"]) == ["default-pure_rl-seed0", "default-pure_rl-seed1"]
    assert sorted(out["unfinished"]) == [f"{EV_ARM}-pure_rl-seed0", f"{EV_ARM}-pure_rl-seed1"]

    done = rescore_sweep(runs / "TINY", root / "data", root / "graph.npz", params_file, "ev")
    assert [(r["arm"], Path(r["run"]).name, r["split"], r["status"]) for r in done] == [
        (EV_ARM, "seed0", "test", "scored"), (EV_ARM, "seed0", "valid", "scored"),
        (EV_ARM, "seed1", "test", "scored"), (EV_ARM, "seed1", "valid", "scored")]
    seed0 = runs / "TINY/sweeps/ev/default/pure_rl/seed0"
    # each split as `raptor evaluate` scores the best model with the arm's params; and under the default's own
    # params the validation split gives back the run's best validation MRR: the two validation MRRs the verdict
    # compares are of the same checkpoint, on the same queries
    from raptor.config import load_params
    default_ctx = load_context(root / "data", root / "graph.npz", load_params(root / "sweeps/TINY/ev/default.yaml"))
    for split, folder in (("test", seed0 / "rescore" / EV_ARM), ("valid", seed0 / "rescore" / EV_ARM / "valid")):
        by_hand = evaluate_model(load_context(root / "data", root / "graph.npz",
                                              load_params(root / "sweeps/TINY/ev/default.yaml", READING)),
                                 seed0 / "rl/best.pt", tmp_path / f"by-hand-{split}", split=split)
        assert json.loads((folder / "metrics.json").read_text())["mrr"] == pytest.approx(by_hand["mrr"])
        assert json.loads((folder / "reading.json").read_text())["split"] == split
    own = evaluate_model(default_ctx, seed0 / "rl/best.pt", tmp_path / "own-valid", split="valid")
    best_val = json.loads((seed0 / "rl/summary.json").read_text())["best_val_mrr"]
    assert own["mrr"] == pytest.approx(best_val)

    # a second call keeps both splits; the records: the default arm's run with the reading's evaluation
    assert {r["status"] for r in rescore_sweep(runs / "TINY", root / "data", root / "graph.npz", params_file, "ev")} == {"kept"}
    out = collect_arm_runs(runs, params_file, "ev", "TINY", results)
    assert sorted(out["saved"]) == sorted(f"{a}-pure_rl-seed{s}" for a in ("default", EV_ARM) for s in (0, 1))
    assert not out["unfinished"] and not out["undeclared"]
    rec = results / "train" / EV_ARM / "pure_rl/seed0"
    summary = json.loads((rec / "summary.json").read_text())
    valid_mrr = json.loads((seed0 / "rescore" / EV_ARM / "valid/metrics.json").read_text())["mrr"]
    assert summary["best_val_mrr"] == valid_mrr and summary["rescored"]["default_best_val_mrr"] == best_val
    assert summary["rescored"]["arm"] == "default" and summary["rescored"]["overrides"] == READING
    assert (rec / "run_config.json").read_bytes() == (seed0 / "rl/run_config.json").read_bytes()
    ranks = pq.read_table(results / "eval" / EV_ARM / "pure_rl/seed0/ranks.parquet").column("rank").to_numpy()
    np.testing.assert_array_equal(ranks, read_predictions(seed0 / "rescore" / EV_ARM / "predictions.parquet").rank)

    # the sweep's own reading of the folder accepts them, and its table compares the arm with the default
    sweep, params = load_sweep(params_file, "ev")
    used, refused = declared_records(plan_sweep(sweep, params, "TINY", results, write=False), results)
    assert sorted(used) == sorted(f"{a}-pure_rl-seed{s}" for a in ("default", EV_ARM) for s in (0, 1)) and not refused
    table = json.loads((results / "results.json").read_text())
    arm = next(a for a in table["arms"] if a["arm"] == EV_ARM)
    default = next(a for a in table["arms"] if a["arm"] == "default")
    valid_mrrs = [json.loads((runs / f"TINY/sweeps/ev/default/pure_rl/seed{s}/rescore" / EV_ARM / "valid/metrics.json")
                             .read_text())["mrr"] for s in (0, 1)]
    assert arm["best_val_mrr_mean"] == pytest.approx(np.mean(valid_mrrs)) and arm["vs_default"]["seeds"] == [0, 1]
    # the test against the default pairs each query's reading rank with its default rank, both of the same model
    diffs = []
    for s in (0, 1):
        run = runs / f"TINY/sweeps/ev/default/pure_rl/seed{s}"
        r_arm = read_predictions(run / "rescore" / EV_ARM / "predictions.parquet").rank
        r_def = read_predictions(run / "eval/predictions.parquet").rank
        diffs.append(np.mean(1 / r_arm) - np.mean(1 / r_def))
    assert arm["vs_default"]["mrr_diff"] == pytest.approx(np.mean(diffs)) and np.mean(diffs) >= 0
    assert verdict(arm, default) in ("better", "worse", "no clear difference")  # judged, not left out
    assert f"{EV_ARM}-pure_rl-seed0" not in table["missing"] and "rl.gamma=0.9-pure_rl-seed0" in table["missing"]

    # a re-scored record in a trained arm's folder is not that arm's run
    shutil.copytree(results / "train" / EV_ARM / "pure_rl/seed0", results / "train/rl.gamma=0.9/pure_rl/seed0")
    shutil.copytree(results / "eval" / EV_ARM / "pure_rl/seed0", results / "eval/rl.gamma=0.9/pure_rl/seed0")
    used, refused = declared_records(plan_sweep(sweep, params, "TINY", results, write=False), results)
    assert "not evaluation-only" in refused["rl.gamma=0.9-pure_rl-seed0"]


def test_an_evaluation_only_arms_reading_of_another_model_is_not_recorded(sweep_runs, tmp_path):
    from raptor.pipeline.local_sweep import collect_arm_runs
    from raptor.pipeline.rescore import rescore_sweep

    root, params_file = sweep_runs
    runs = _copy(root, tmp_path)
    rescore_sweep(runs / "TINY", root / "data", root / "graph.npz", params_file, "ev")
    valid = runs / "TINY/sweeps/ev/default/pure_rl/seed1/rescore" / EV_ARM / "valid/reading.json"
    valid.write_text(json.dumps({**json.loads(valid.read_text()), "model_hash": "0" * 16}))  # the run trained on
    shutil.rmtree(runs / "TINY/sweeps/ev/default/pure_rl/seed0/rescore" / EV_ARM / "valid")  # an interrupted score
    out = collect_arm_runs(runs, params_file, "ev", "TINY", tmp_path / "results")
    assert sorted(out["unfinished"]) == [f"{EV_ARM}-pure_rl-seed0", f"{EV_ARM}-pure_rl-seed1"]
    assert not (tmp_path / "results/train" / EV_ARM).exists()
    # scored again: the test split kept (same model), each validation split scored anew
    again = rescore_sweep(runs / "TINY", root / "data", root / "graph.npz", params_file, "ev")
    assert [(Path(r["run"]).name, r["split"], r["status"]) for r in again] == [
        ("seed0", "test", "kept"), ("seed0", "valid", "scored"), ("seed1", "test", "kept"), ("seed1", "valid", "scored")]
    assert len(collect_arm_runs(runs, params_file, "ev", "TINY", tmp_path / "results")["saved"]) == 4


def test_rescore_sweep_refuses_a_sweep_without_evaluation_only_arms_or_runs(sweep_runs, tmp_path, capsys):
    from raptor.pipeline.rescore import rescore_sweep

    root, params_file = sweep_runs
    other = tmp_path / "params.yaml"
    other.write_text(yaml.safe_dump({**yaml.safe_load(params_file.read_text()),
                                     "sweeps": {"ev": {**SWEEP, "grid": {"rl.gamma": [0.9]}}}}))
    with pytest.raises(ConfigError, match="sweep ev has no evaluation-only arm"):
        rescore_sweep(root / "runs/TINY", root / "data", root / "graph.npz", other, "ev")
    with pytest.raises(FileNotFoundError, match="no long runs of sweep ev's arm default here"):
        rescore_sweep(tmp_path, root / "data", root / "graph.npz", params_file, "ev")
    args = ["rescore", str(root / "runs/TINY"), "--data", str(root / "data"), "--graph", str(root / "graph.npz"),
            "--params", str(params_file)]
    assert cli([*args, "--sweep", "ev", "--set", "eval.beam_size=2"]) != 0
    assert "--sweep takes no --set" in capsys.readouterr().err
    assert cli(args) != 0 and "no override given" in capsys.readouterr().err


def test_longrun_rescore_sweep_scores_the_default_arms_runs_under_the_evaluation_only_arms(sweep_runs, tmp_path):
    root, params_file = sweep_runs
    lr = tmp_path / "lr"
    longrun = _long_runs_folder(root, params_file, lr)
    r = longrun("rescore", "--sweep", "ev")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(f"scored {EV_ARM} (test)") == 2 and r.stdout.count(f"scored {EV_ARM} (valid)") == 2, r.stdout
    assert len(list(lr.glob(f"runs/TINY/sweeps/ev/default/pure_rl/seed*/rescore/{EV_ARM}/valid/reading.json"))) == 2
    r = longrun("rescore", "--sweep", "ev", "--set", "eval.beam_size=2")
    assert r.returncode == 2 and "takes no --set" in r.stderr
    r = longrun("status", "--sweep", "ev")
    assert r.returncode == 2 and "--sweep is rescore's option" in r.stderr
    r = longrun("rescore", "--sweep", "nope")  # no such sweep's runs here: nothing to do, said
    assert r.returncode == 0 and "no long runs under" in r.stdout and "sweep nope" in r.stdout, r.stdout + r.stderr
