"""The generated results page: rows, budgets, significance and curves read from hand-made artifacts."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from raptor.cli import main as cli
from raptor.reporting.paper import MAIN_TABLE
from raptor.reporting.results import discover, paper_layout_rows, result_rows, significance_rows, source_folders


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _history(n: int, val_every: int, mrr0: float) -> list[dict]:
    return [{"epoch": e, "reward": 0.2 + 0.01 * e, "seconds": 36.0,
             "val_mrr": mrr0 + 0.001 * e if (e + 1) % val_every == 0 else None,
             "val_seconds": 72.0 if (e + 1) % val_every == 0 else None} for e in range(n)]


def _params(precision: str = "float32") -> dict:
    return {"params": {"eval.beam_size": 100, "train.precision": precision}}


@pytest.fixture
def workspace(tmp_path):
    """A pipeline workspace with two variants x two seeds on ICEWS14, one Pure-RL seed early-stopped."""
    ws = tmp_path / "ws"
    mrr = {("pure_rl", 0): 0.40, ("pure_rl", 1): 0.42, ("raptor", 0): 0.41, ("raptor", 1): 0.45}
    for (v, s), m in mrr.items():
        d = ws / f"runs/ICEWS14/{v}/train/seed{s}"
        n = 6 if (v, s) == ("pure_rl", 1) else 10
        _write(d / "history.json", _history(n, 2, 0.3))
        _write(d / "run_config.json", _params("auto"))
        _write(d / "summary.json", {"rl_epochs": 10, "pretrain_epochs": 5 if v == "raptor" else 0,
                                    "precision": "float32", "stopped_early": n < 10})
        _write(ws / f"runs/ICEWS14/{v}/eval/seed{s}/metrics.json",
               {"mrr": m, "hits@1": m - 0.1, "hits@3": m + 0.05, "hits@10": m + 0.15})
    _write(ws / "reports/ICEWS14/significance.json", {"baseline": "pure_rl", "comparisons": {"raptor": {
        "seed_level": {"mrr": {"mean_diff": 0.02, "p_one_sided": 0.0123, "n": 2}},
        "per_query": {"bootstrap": {"ci_low": 0.01, "ci_high": 0.03}, "wilcoxon": {"p_two_sided": 1e-5}}}}})
    return ws


@pytest.fixture
def long_runs(tmp_path):
    """A folder of `raptor train --out` runs, one finished and evaluated, one still training."""
    root = tmp_path / "long"
    d = root / "ICEWS18/raptor/seed0"
    _write(d / "rl/history.json", _history(40, 20, 0.25))
    _write(d / "rl/summary.json", {"rl_epochs": 40, "pretrain_epochs": 4, "precision": "bfloat16"})
    _write(d / "run_config.json", _params("bfloat16"))
    _write(d / "eval/metrics.json", {"mrr": 0.3, "hits@1": 0.2, "hits@3": 0.35, "hits@10": 0.5})
    _write(d / "pretrain/history.json", [{"epoch": e, "loss": 1.0 / (e + 1), "seconds": 24.0} for e in range(4)])
    _write(d / "pretrain/run_config.json", _params("bfloat16"))
    (d / "pretrain/checkpoint.pt").write_bytes(b"\0" * 10_000)
    d = root / "ICEWS18/pure_rl/seed0"
    _write(d / "rl/history.json", _history(7, 20, 0.25))
    _write(d / "run_config.json", _params())
    (root / "COMMIT").write_text("0123456789abcdef\n")
    return root


def test_rows_state_budget_precision_ties_and_hand_computed_means(workspace, long_runs):
    sets = discover(workspace, "quick") + discover(long_runs, "long")
    rows = {(r["set"], r["system"]): r for r in result_rows(sets)}
    pure, rap = rows[("quick", "Pure-RL")], rows[("quick", "RL-RAPTOR")]
    # mean and sample std over the seeds, in percent: (40 + 42) / 2 = 41, std = sqrt(2) = 1.41
    assert pure["MRR"] == "41.00 ± 1.41" and rap["MRR"] == "43.00 ± 2.83"
    assert pure["H@10"] == "56.00 ± 1.41"
    assert pure["RL epochs"] == "10/6 of 10 (early stop)" and rap["RL epochs"] == "10 of 10"
    assert rap["pretrain epochs"] == "5" and pure["precision"] == "float32" and rap["ties"] == "realistic"
    assert rap["vs paper"] == f"{43.0 - MAIN_TABLE['RL-RAPTOR']['ICEWS14'][0]:+.2f}"
    # best validation MRR: 0.3 + 0.001 * 9 (10 epochs) and 0.3 + 0.001 * 5 (6 epochs)
    assert pure["best val MRR"] == f"{(30.9 + 30.5) / 2:.2f} ± {abs(30.9 - 30.5) / 2 ** 0.5:.2f}"
    # validation peaks at the last round (MRR rises every epoch): epochs 10 and 6 (1-based), one per seed
    assert pure["val MRR peak at RL epoch"] == "10/6" and rap["val MRR peak at RL epoch"] == "10"
    # 36 s per epoch plus 72 s per validation round: 10 epochs (5 rounds) and 6 epochs (3 rounds)
    assert pure["train h/seed"] == f"{((10 * 36 + 5 * 72) + (6 * 36 + 3 * 72)) / 2 / 3600:.2f}"
    long_rap, long_pure = rows[("long", "RL-RAPTOR")], rows[("long", "Pure-RL")]
    assert long_rap["MRR"] == "30.00" and long_rap["precision"] == "bfloat16" and long_rap["RL epochs"] == "40 of 40"
    assert long_pure["MRR"] == "not evaluated" and long_pure["RL epochs"] == "7 (training)"
    assert "vs paper" not in long_pure and long_pure["best val MRR"] == ""  # no validation round yet
    assert long_pure["val MRR peak at RL epoch"] == "" and long_rap["val MRR peak at RL epoch"] == "40"


def test_a_training_free_system_has_no_peak_epoch(workspace):
    """Recurrency validates once (its history's epoch 0) and trains no RL epoch: no peak to name."""
    d = workspace / "runs/ICEWS14/recurrency/train/seed0"
    _write(d / "history.json", [{"epoch": 0, "seconds": 40.0, "val_mrr": 0.39}])
    _write(d / "run_config.json", _params("float64"))
    _write(d / "summary.json", {"rl_epochs": 0, "pretrain_epochs": 0, "precision": "float64"})
    _write(workspace / "runs/ICEWS14/recurrency/eval/seed0/metrics.json",
           {"mrr": 0.37, "hits@1": 0.3, "hits@3": 0.41, "hits@10": 0.51})
    rows = {r["system"]: r for r in result_rows(discover(workspace, "quick"))}
    assert rows["Recurrency"]["RL epochs"] == "none" and rows["Recurrency"]["best val MRR"] == "39.00"
    assert rows["Recurrency"]["val MRR peak at RL epoch"] == "" and rows["RL-RAPTOR"]["val MRR peak at RL epoch"] == "10"


def test_significance_and_paper_layout(workspace, long_runs):
    sets = discover(workspace, "quick") + discover(long_runs, "long")
    sig = significance_rows(sets)
    assert sig == [{"set": "quick", "dataset": "ICEWS14", "comparison": "RL-RAPTOR vs Pure-RL",
                    "MRR diff (points)": "+2.00", "t-test over seeds, p (one-sided)": "0.0123 (n = 2)",
                    "per-query bootstrap 95% CI": "[+1.00, +3.00]", "Wilcoxon p (two-sided)": "1e-05"}]
    rows, cols = paper_layout_rows(sets)
    ours = {r["model"].split("**")[1]: r for r in rows if "(ours" in r["model"]}
    # one row per (set, system): the two sets' rows stay apart, each stating seeds, epochs and precision
    assert set(ours) == {"Pure-RL (ours, quick)", "RL-RAPTOR (ours, quick)", "RL-RAPTOR (ours, long)"}
    assert ours["RL-RAPTOR (ours, quick)"]["ICEWS14 MRR"] == "43.00 ± 2.83 *"  # p = 0.0123 < 0.05
    assert "ICEWS18 MRR" not in ours["RL-RAPTOR (ours, quick)"]
    long = ours["RL-RAPTOR (ours, long)"]
    assert long["ICEWS18 MRR"] == "30.00" and "ICEWS14 MRR" not in long
    assert long["model"].endswith("ICEWS18: 1 seed, 40 of 40 RL epochs, bfloat16")
    # Pure-RL on ICEWS18 is not evaluated: no row rather than a partial result
    assert "ICEWS05-15 MRR" in cols
    assert sum("(paper)" in r["model"] for r in rows) == len(MAIN_TABLE)


def test_one_seed_has_its_mrr_difference_but_no_t_test():
    """One seed per system: no t-test over seeds, but the MRR difference is still the per-query mean
    difference (hand-made significance, as `raptor results` writes it)."""
    from types import SimpleNamespace

    sig = {"baseline": "pure_rl", "comparisons": {"raptor": {"seed_level": {}, "per_query": {
        "bootstrap": {"mean_diff": -0.0024, "ci_low": -0.0039, "ci_high": -0.0009}, "wilcoxon": {"p_two_sided": 3e-9}}}}}
    rows = significance_rows([SimpleNamespace(name="long", dataset="ICEWS18", significance=sig)])
    assert rows == [{"set": "long", "dataset": "ICEWS18", "comparison": "RL-RAPTOR vs Pure-RL", "MRR diff (points)": "-0.24",
                     "per-query bootstrap 95% CI": "[-0.39, -0.09]", "Wilcoxon p (two-sided)": "3e-09"}]


def test_one_row_per_set_lines_datasets_up(workspace, tmp_path):
    """Two datasets of one set (the quick pipeline on ICEWS14 and ICEWS18) share a row."""
    import shutil

    shutil.copytree(workspace / "runs/ICEWS14", workspace / "runs/ICEWS18")
    rows, _ = paper_layout_rows(discover(workspace, "quick"))
    ours = [r for r in rows if "(ours" in r["model"]]
    assert len(ours) == 2
    rap = next(r for r in ours if "RL-RAPTOR" in r["model"])
    # ICEWS14's t-test is significant (marked); ICEWS18 has no significance tests (not marked)
    assert rap["ICEWS14 MRR"] == "43.00 ± 2.83 *" and rap["ICEWS18 MRR"] == "43.00 ± 2.83"
    assert "ICEWS14: 2 seeds, 10 of 10 RL epochs, float32; ICEWS18: 2 seeds" in rap["model"]


def test_stage_usage_log_becomes_a_table(workspace):
    from raptor.common.resources import append_usage
    from raptor.reporting.results import usage_rows

    log = workspace / "runs/stage-usage.jsonl"
    append_usage(log, {"stage": "label@ICEWS14", "ok": True, "seconds": 15.24, "peak_rss_gb": 1.19,
                       "peak_is_per_stage": True, "released_before": True, "finished": "2026-11-24T10:00:00+00:00"})
    append_usage(log, {"stage": "finetune-raptor@ICEWS14", "ok": False, "seconds": 300.0, "peak_rss_gb": 3.0,
                       "peak_is_per_stage": False, "finished": "2026-11-24T10:05:00+00:00"})
    append_usage(log, {"stage": "label@OTHER", "ok": True, "seconds": 1.0, "peak_rss_gb": 0.1,
                       "peak_is_per_stage": True, "finished": "2026-11-24T10:06:00+00:00"})
    # the resumed stage's later record replaces the interrupted one; a record
    # without `released_before` (written before the pipeline released freed heap between stages) is marked
    append_usage(log, {"stage": "finetune-raptor@ICEWS14", "ok": True, "seconds": 750.0, "peak_rss_gb": 3.5,
                       "peak_is_per_stage": True, "finished": "2026-11-24T11:00:00+00:00"})
    # a record appended after later stages' (rebuilt from an older log) still sits in the pipeline's order
    append_usage(log, {"stage": "ingest@ICEWS14", "ok": True, "seconds": 4.0, "peak_rss_gb": 0.7,
                       "peak_is_per_stage": True, "released_before": True, "finished": "2026-11-24T09:00:00+00:00"})
    with log.open("a") as f:
        f.write('{"stage": "evaluate-rap')  # a write torn by a kill: skipped
    rows = usage_rows(discover(workspace, "quick"))
    assert rows == [
        {"set": "quick", "dataset": "ICEWS14", "stage": "ingest", "wall time": "4.0 s", "peak RSS (GB)": "0.70",
         "finished (UTC)": "2026-11-24 09:00:00", "status": "ok"},
        {"set": "quick", "dataset": "ICEWS14", "stage": "label", "wall time": "15.2 s", "peak RSS (GB)": "1.19",
         "finished (UTC)": "2026-11-24 10:00:00", "status": "ok"},
        {"set": "quick", "dataset": "ICEWS14", "stage": "finetune-raptor", "wall time": "12.5 min",
         "peak RSS (GB)": "3.50 †", "finished (UTC)": "2026-11-24 11:00:00", "status": "ok"}]


def test_a_malformed_usage_line_is_an_error_naming_the_file_and_line(workspace):
    log = workspace / "runs/stage-usage.jsonl"
    log.write_text('not json\n{"stage": "label@ICEWS14", "ok": true, "seconds": 1, "peak_rss_gb": 1}\n')
    with pytest.raises(ValueError, match=r"stage-usage.jsonl, line 1"):
        discover(workspace, "quick")


def test_cli_writes_the_page_and_curves(workspace, long_runs, tmp_path, capsys):
    out = tmp_path / "docs/results.md"
    assert cli(["results", f"quick={workspace}", f"long={long_runs}", "--out", str(out), "--untracked"]) == 0
    page = out.read_text()
    assert "do not edit by hand" in page and "commit 0123456789ab" in page
    assert "**Draft**" in page  # --untracked: the page says it cannot be made again
    assert f"--out {out} --untracked`" in page  # the command it names makes the same page
    for name in ("quick-icews14-val-mrr.png", "quick-icews14-reward.png", "long-icews18-val-mrr.png"):
        assert (out.parent / "figures/results" / name).stat().st_size > 1000
        assert f"figures/results/{name}" in page
    assert "nan" not in page.lower()
    assert "## Stage wall time" not in page  # no usage log in these folders: no empty table


def test_a_folder_without_runs_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli(["results", str(tmp_path / "empty"), "--out", str(tmp_path / "r.md"), "--untracked"]) == 1
    assert "no runs found" in capsys.readouterr().err
    assert not (tmp_path / "r.md").exists()


def test_p_values_that_underflowed_are_not_printed_as_zero():
    from raptor.reporting.results import format_p

    assert format_p(0.0) == "< 1e-300"  # ICEWS18's Wilcoxon test: z = -41, a tail below the smallest double
    assert format_p(4.3e-32) == "4.3e-32"
    assert format_p(0.19) == "0.19"
    assert format_p(None) == "n/a"


def test_collect_keeps_what_the_page_reads_and_nothing_heavy(workspace, long_runs, tmp_path, capsys):
    """A collected folder is a result folder of its own: the same rows, from a few small files."""
    from raptor.common.resources import append_usage

    append_usage(workspace / "runs/stage-usage.jsonl", {"stage": "label@ICEWS14", "ok": True, "seconds": 15.0,
                                                        "peak_rss_gb": 1.0, "peak_is_per_stage": True,
                                                        "finished": "2026-11-24T10:00:00+00:00"})
    (workspace / "runs/ICEWS14/raptor/train/seed0/best.pt").write_bytes(b"\0" * 10_000)
    (workspace / "COMMIT").write_text("fedcba9876543210fedcba9876543210fedcba98\n")
    for src, name in ((workspace, "quick"), (long_runs, "long")):
        dest = tmp_path / "collected" / name
        assert cli(["collect", str(src), str(dest), "--unfinished"]) == 0  # long_runs has a run in training
        assert not list(dest.rglob("*.pt"))
        assert result_rows(discover(dest, name)) == result_rows(discover(src, name))
        pretrained = list(src.rglob("pretrain/history.json"))  # a long run's pretraining history, byte for byte
        assert len(pretrained) == (name == "long")
        for pre in pretrained:
            assert (dest / pre.relative_to(src)).read_bytes() == pre.read_bytes()
        assert (dest / "COMMIT").read_text().strip() == (src / "COMMIT").read_text().strip()
    quick = discover(tmp_path / "collected/quick", "quick")
    assert significance_rows(quick) == significance_rows(discover(workspace, "quick"))
    assert quick[0].usage and "label@ICEWS14" in quick[0].usage
    assert "files ->" in capsys.readouterr().out
    # run again: unchanged files are left alone
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "collected").rglob("*") if p.is_file()}
    cli(["collect", str(workspace), str(tmp_path / "collected/quick")])
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "collected").rglob("*") if p.is_file()} == mtimes


def test_collect_takes_one_datasets_runs_of_a_folder_holding_several(long_runs, tmp_path, capsys):
    """A folder of long runs holds every dataset's runs; each campaign collects its own into its own
    records folder. A dataset with no runs there is an error naming the ones it has, and writes nothing."""
    import shutil

    shutil.copytree(long_runs / "ICEWS18", long_runs / "ICEWS14")
    dest = tmp_path / "kept"
    assert cli(["collect", str(long_runs), str(dest / "18"), "--dataset", "ICEWS18"]) == 0
    assert [rs.dataset for rs in discover(dest / "18", "long")] == ["ICEWS18"]
    assert not (dest / "18" / "ICEWS14").exists()
    out = capsys.readouterr().out
    assert out.startswith("ICEWS18: ") and "ICEWS14" not in out, out
    assert cli(["collect", str(long_runs), str(dest / "both"), "--dataset", "ICEWS18", "--dataset", "ICEWS14"]) == 0
    assert sorted(rs.dataset for rs in discover(dest / "both", "long")) == ["ICEWS14", "ICEWS18"]
    assert cli(["collect", str(long_runs), str(dest / "none"), "--dataset", "ICEWS05-15"]) == 1
    err = capsys.readouterr().err
    assert "no runs of dataset ICEWS05-15 with a training history yet (it has ICEWS14, ICEWS18)" in err, err
    assert not (dest / "none").exists()


def test_collect_of_one_dataset_keeps_only_its_stage_usage(workspace, tmp_path):
    """A pipeline workspace's stage-usage log holds every dataset's stages: a collection of one dataset keeps
    that dataset's records only (and drops a torn line)."""
    from raptor.common.resources import append_usage

    log = workspace / "runs/stage-usage.jsonl"
    for stage in ("label@ICEWS14", "label@ICEWS18", "pretrain@ICEWS14"):
        append_usage(log, {"stage": stage, "ok": True, "seconds": 1.0, "peak_rss_gb": 0.1,
                           "peak_is_per_stage": True, "finished": "2026-11-24T10:00:00+00:00"})
    with log.open("a") as f:
        f.write('{"stage": "evaluate-rap')
    assert cli(["collect", str(workspace), str(tmp_path / "kept"), "--dataset", "ICEWS14"]) == 0
    kept = [json.loads(x)["stage"] for x in (tmp_path / "kept/runs/stage-usage.jsonl").read_text().splitlines()]
    assert kept == ["label@ICEWS14", "pretrain@ICEWS14"]
    assert cli(["collect", str(workspace), str(tmp_path / "all")]) == 0  # no --dataset: the log as it is
    assert (tmp_path / "all/runs/stage-usage.jsonl").read_bytes() == log.read_bytes()


def test_collect_from_a_folder_without_runs_writes_nothing(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli(["collect", str(tmp_path / "empty"), str(tmp_path / "dest")]) == 1
    assert "no runs found" in capsys.readouterr().err and not (tmp_path / "dest").exists()


@pytest.mark.parametrize("extra, message", [
    (["--sweep", "wd"], "--sweep NAME needs --params FILE and one --dataset DS"),
    (["--params", "p.yaml", "--dataset", "T"], "--sweep NAME needs --params FILE"),
    (["--sweep", "wd", "--params", "p.yaml", "--dataset", "A", "--dataset", "B"], "one --dataset DS"),
    (["--sweep", "wd", "--params", "p.yaml", "--dataset", "T", "--unfinished"], "takes no --unfinished"),
])
def test_collect_of_a_sweeps_long_runs_needs_its_params_and_one_dataset(tmp_path, capsys, extra, message):
    (tmp_path / "runs").mkdir()
    assert cli(["collect", str(tmp_path / "runs"), str(tmp_path / "dest"), *extra]) == 1
    assert message in capsys.readouterr().err and not (tmp_path / "dest").exists()


def test_collect_of_a_sweep_with_no_long_runs_names_the_folder_and_writes_nothing(tmp_path, capsys):
    import yaml

    (tmp_path / "runs").mkdir()
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"sweeps": {"wd": {"grid": {"rl.weight_decay": [0.001]}}}}))
    assert cli(["collect", str(tmp_path / "runs"), str(tmp_path / "dest"), "--sweep", "wd", "--params",
                str(tmp_path / "p.yaml"), "--dataset", "T"]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'runs' / 'T' / 'sweeps' / 'wd'}: no long runs of sweep wd on T here" in err, err
    assert not (tmp_path / "dest").exists()


def test_collect_of_a_sweep_names_runs_not_yet_tested_and_runs_it_does_not_declare(tmp_path, capsys):
    import yaml

    runs = tmp_path / "runs"
    for rel in ("default/pure_rl/seed0", "default/pure_rl/seed9", "default/titer/seed0"):
        (runs / "T" / "sweeps" / "wd" / rel).mkdir(parents=True)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(
        {"train": {"seeds": [0]}, "sweeps": {"wd": {"variants": ["pure_rl"], "grid": {"rl.weight_decay": [0.001]}}}}))
    dest = tmp_path / "dest"
    assert cli(["collect", str(runs), str(dest), "--sweep", "wd", "--params", str(tmp_path / "p.yaml"),
                "--dataset", "T"]) == 0
    out = capsys.readouterr().out
    assert "sweep wd on T: 0 run(s) recorded" in out and "left out: default-pure_rl-seed0" in out, out
    assert "left out: default/pure_rl/seed9, default/titer/seed0" in out, out
    assert json.loads((dest / "results.json").read_text())["missing"] == ["default-pure_rl-seed0",
                                                                          "rl.weight_decay=0.001-pure_rl-seed0"]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def test_a_source_git_does_not_hold_as_it_is_is_refused_and_nothing_is_written(workspace, tmp_path, capsys):
    """Untracked, ignored or changed-since-added files make the page one that a clone could not make."""
    out = tmp_path / "page/results.md"
    assert cli(["results", f"quick={workspace}", "--out", str(out)]) == 1
    assert "not inside a git work tree" in capsys.readouterr().err and not out.exists()

    _git(workspace, "init", "-q")
    (workspace / ".gitignore").write_text("reports/\n")
    _git(workspace, "add", "runs", ".gitignore")
    assert cli(["results", f"quick={workspace}", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reports/ICEWS14/significance.json" in err and "raptor collect" in err
    assert not out.exists()

    (workspace / ".gitignore").write_text("")
    _git(workspace, "add", "-A")  # added, not committed: tracked
    assert cli(["results", f"quick={workspace}", "--out", str(out)]) == 0
    page = out.read_text()
    assert "**Draft**" not in page and "| quick | ICEWS14 | RL-RAPTOR |" in page

    metrics = workspace / "runs/ICEWS14/raptor/eval/seed0/metrics.json"
    metrics.write_text(metrics.read_text().replace("0.41", "0.99"))  # edited after it was added
    out.unlink()
    assert cli(["results", f"quick={workspace}", "--out", str(out)]) == 1
    assert "runs/ICEWS14/raptor/eval/seed0/metrics.json" in capsys.readouterr().err and not out.exists()


def test_collect_keeps_the_per_query_ranks_of_each_evaluation(workspace, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from raptor.reporting.runs_reader import read_ranks

    eval_dir = workspace / "runs/ICEWS14/raptor/eval/seed1"
    preds = pa.table({"subject": [0, 1], "relation": [2, 3], "object": [4, 0], "time": [7, 8],
                      "rank": [1.0, 2.5], "candidates": [[1, 2, 3], [4, 5, 6]]})
    pq.write_table(preds, eval_dir / "predictions.parquet")
    dest = tmp_path / "collected"
    assert cli(["collect", str(workspace), str(dest)]) == 0
    queries, ranks = read_ranks(dest / "runs/ICEWS14/raptor/eval/seed1/ranks.parquet")
    assert queries.tolist() == [[0, 2, 4, 7], [1, 3, 0, 8]] and ranks.tolist() == [1.0, 2.5]
    assert "candidates" not in pq.read_schema(dest / "runs/ICEWS14/raptor/eval/seed1/ranks.parquet").names
    assert not (dest / "runs/ICEWS14/raptor/eval/seed0/ranks.parquet").exists()  # no predictions there


REPO = Path(__file__).resolve().parents[1]


def _sweep_folders(specs: list[str]) -> list[str]:
    """The folders of `raptor sweeps`' ``[TITLE=]FOLDER`` arguments."""
    return [spec.partition("=")[2] or spec for spec in specs]


@pytest.mark.parametrize("page_path, subcommand, folders_of", [
    ("docs/results.md", "results", source_folders),
    ("docs/sweeps-results.md", "sweeps", _sweep_folders),
])
def test_a_generated_page_is_made_again_from_tracked_records_alone(tmp_path, monkeypatch, capsys, page_path,
                                                                  subcommand, folders_of):
    """A generated page (the results page, the sweeps page), made again by `raptor pages` (the command its
    header names) from the files git tracks (nothing ignored, nothing untracked: a fresh clone's view), is the
    same page; a page edited by hand is put back, and `--check` says so."""
    from raptor.reporting.pages import out_of, page_command, sources_of

    monkeypatch.chdir(REPO)  # the command's wildcards are the repo's, wherever pytest runs from
    page = (REPO / page_path).read_text()
    argv = page_command(REPO / page_path)
    assert argv and argv[0] == subcommand, f"{page_path} does not name the command that generated it"
    assert out_of(argv) == page_path, argv
    sources = folders_of(sources_of(argv))
    assert sources, argv
    for folder in [*sources, page_path]:
        tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--", folder],
                                 capture_output=True, text=True, check=True).stdout.split("\0")
        tracked = [f for f in tracked if f]
        assert tracked, f"{page_path} names {folder}, which git does not track"
        for f in tracked:
            (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / f, tmp_path / f)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    monkeypatch.chdir(tmp_path)
    made = tmp_path / page_path
    assert cli(["pages", "--check", page_path]) == 0
    assert f"{page_path}: unchanged" in capsys.readouterr().out
    assert made.read_text() == page
    if subcommand == "sweeps":  # (the quicker of the two) a hand edit is undone, and --check fails on it
        made.write_text(page.replace("| default |", "| default (edited) |", 1))
        assert cli(["pages", "--check", page_path]) == 1
        assert f"{page_path}: changed" in capsys.readouterr().out
        assert made.read_text() == page


def test_a_pages_header_names_its_command_or_nothing(tmp_path):
    from raptor.reporting.pages import PageError, generated_pages, out_of, page_command, sources_of

    page = tmp_path / "r.md"
    page.write_text("# Results\n\n<!-- generated by `raptor results 'a b=results/x/*' --out docs/r.md`: do not "
                    "edit by hand; re-run it instead -->\n")
    argv = page_command(page)
    assert argv == ["results", "a b=results/x/*", "--out", "docs/r.md"]
    assert out_of(argv) == "docs/r.md" and sources_of(argv) == ["a b=results/x/*"]
    (tmp_path / "hand.md").write_text("# Notes\n\nwritten by hand\n")
    assert page_command(tmp_path / "hand.md") is None
    # an archived copy quotes its old header further down: not a page to make again
    (tmp_path / "old.md").write_text("# Archived\n\n\n\n\n" + page.read_text())
    assert page_command(tmp_path / "old.md") is None
    # only the generators: no other subcommand is run from a page
    (tmp_path / "train.md").write_text("<!-- generated by `raptor train --out x`: do not edit -->\n")
    assert page_command(tmp_path / "train.md") is None
    assert generated_pages(tmp_path) == [page]
    (tmp_path / "bad.md").write_text("<!-- generated by `raptor sweeps results/sweeps/x`: do not edit -->\n")
    with pytest.raises(PageError, match="bad.md: the command in its header, `raptor sweeps results/sweeps/x`, "
                                        "names no --out"):
        page_command(tmp_path / "bad.md")


def test_raptor_pages_refuses_what_is_not_a_generated_page_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    assert cli(["pages"]) == 1
    assert "no generated page under docs/" in capsys.readouterr().err
    (tmp_path / "docs/hand.md").write_text("# Notes\n")
    assert cli(["pages", "docs/hand.md"]) == 1
    assert "docs/hand.md: its header names no `raptor results` or `raptor sweeps` command" in capsys.readouterr().err
    assert cli(["pages", "docs/missing.md"]) == 1
    assert "docs/missing.md: no such page" in capsys.readouterr().err
    # a header whose command writes another page: refused before anything runs
    (tmp_path / "docs/r.md").write_text("<!-- generated by `raptor results results/x --out docs/other.md`: do not "
                                        "edit -->\n")
    assert cli(["pages", "docs/r.md"]) == 1
    assert "docs/r.md: the command in its header writes docs/other.md, not this page" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["hand.md", "r.md"]


def _ablation(ws: Path, rewards: dict[int, list[float]], mrr: dict[int, float]) -> None:
    """The ablation's arms in a pipeline workspace: per arm one seed-0 run with these per-epoch rewards,
    validation every second epoch, tested at ``mrr``."""
    for arm, rs in rewards.items():
        d = ws / f"runs/ICEWS14/ablation/arms/p{arm}/seed0"
        _write(d / "history.json", [{"epoch": e, "reward": r, "seconds": 10.0,
                                     "val_mrr": (0.30 + 0.01 * arm - 0.001 * (e - 3) ** 2) if e % 2 else None}
                                    for e, r in enumerate(rs)])
        _write(d / "run_config.json", _params())
        _write(d / "summary.json", {"rl_epochs": len(rs), "pretrain_epochs": arm, "precision": "float32"})
        _write(ws / f"runs/ICEWS14/ablation/eval/p{arm}/seed0/metrics.json",
               {"mrr": mrr[arm], "hits@1": mrr[arm] - 0.1, "hits@3": mrr[arm] + 0.05, "hits@10": mrr[arm] + 0.15})


def test_the_ablation_table_states_the_papers_efficiency_measure_beside_ours(workspace):
    from raptor.reporting.results import ablation_rows

    # arm 0 never reaches the paper's 0.325; arm 10 reaches it at its 4th epoch (index 3); arm 2 at its 1st
    _ablation(workspace, {0: [0.2, 0.3, 0.32, 0.324, 0.3249], 10: [0.3, 0.31, 0.32, 0.33, 0.34],
                          2: [0.33, 0.2, 0.2, 0.2, 0.2]}, {0: 0.38, 2: 0.39, 10: 0.41})
    (workspace / "runs/ICEWS14/ablation/arms/notes").mkdir()  # not an arm: ignored
    sets = discover(workspace, "quick")
    assert list(sets[0].ablation) == [0, 2, 10]  # in increasing pretraining epochs
    rows = {r["pretrain epochs"]: r for r in ablation_rows(sets)}
    assert rows["0"]["reward ≥ 0.325 at RL epoch"] == "not in 5"
    assert rows["10"]["reward ≥ 0.325 at RL epoch"] == "4" and rows["2"]["reward ≥ 0.325 at RL epoch"] == "1"
    # the paper: 10 pretraining epochs reach it by RL epoch 50, Pure-RL needs more than 100; nothing on arm 2
    assert rows["10"]["paper: reward ≥ 0.325 at RL epoch"] == "50"
    assert rows["0"]["paper: reward ≥ 0.325 at RL epoch"] == "more than 100"
    assert rows["2"]["paper: reward ≥ 0.325 at RL epoch"] == ""
    # validation at epochs 1 and 3 (0-based): 0.30 + 0.01 arm - 0.001 (e - 3)^2 peaks at index 3, RL epoch 4
    assert rows["10"]["best val MRR"] == "40.00" and rows["10"]["val MRR peak at RL epoch"] == "4"
    assert rows["10"]["final reward"] == "0.340" and rows["10"]["MRR"] == "41.00" and rows["0"]["H@10"] == "53.00"
    assert rows["0"]["RL epochs"] == "5 of 5" and rows["0"]["seeds"] == "0"


def test_the_page_shows_the_ablation_and_marks_significant_cells(workspace, tmp_path):
    from raptor.reporting.results import write_results_page

    _ablation(workspace, {0: [0.2, 0.3], 5: [0.3, 0.33]}, {0: 0.38, 5: 0.41})
    out = tmp_path / "docs/results.md"
    write_results_page(discover(workspace, "quick"), out)
    page = out.read_text()
    assert "## Pretraining-epochs ablation" in page and "| quick | ICEWS14 | 5 | 0 | 2 of 2 |" in page
    for name in ("reward", "best-val-mrr", "val-mrr"):
        png = out.parent / f"figures/results/quick-icews14-ablation-{name}.png"
        assert png.read_bytes()[:4] == b"\x89PNG" and f"(figures/results/{png.name})" in page
    # the paper's RL-RAPTOR row is marked where the paper marks it: not ICEWS14's Hits@10
    paper_row = next(line for line in page.splitlines() if line.startswith("| RL-RAPTOR (paper)"))
    assert "| 42.86 * |" in paper_row and "| 59.49 |" in paper_row and "| 66.79 * |" in paper_row
    # ours: the fixture's MRR t-test has p = 0.0123 < 0.05 (marked); it has no test of Hits@1 (not marked)
    ours = next(line for line in page.splitlines() if line.startswith("| **RL-RAPTOR (ours, quick)"))
    assert "| 43.00 ± 2.83 * | 33.00 ± 2.83 |" in ours


def test_a_significance_test_above_the_level_is_not_marked(workspace):
    sig = workspace / "reports/ICEWS14/significance.json"
    obj = json.loads(sig.read_text())
    obj["comparisons"]["raptor"]["seed_level"]["mrr"]["p_one_sided"] = 0.05  # not below the level
    sig.write_text(json.dumps(obj))
    rows, _ = paper_layout_rows(discover(workspace, "quick"))
    ours = next(r for r in rows if r["model"].startswith("**RL-RAPTOR"))
    assert ours["ICEWS14 MRR"] == "43.00 ± 2.83"


def test_an_ablation_alone_is_a_result_set_and_collect_keeps_it(tmp_path):
    from raptor.reporting.results import ablation_rows, collect

    ws = tmp_path / "ws"
    _ablation(ws, {0: [0.2, 0.3], 10: [0.3, 0.33]}, {0: 0.38, 10: 0.41})
    (ws / "runs/ICEWS14/ablation/arms/p10/seed0/checkpoint.pt").write_bytes(b"\0" * 1000)
    sets = discover(ws, "abl")
    assert [s.runs for s in sets] == [{}] and result_rows(sets) == []
    dest = tmp_path / "collected"
    assert collect(ws, dest)["sets"] == [("ICEWS14", ["ablation p0", "ablation p10"])]
    assert not list(dest.rglob("*.pt"))
    assert ablation_rows(discover(dest, "abl")) == ablation_rows(sets)


# ---------------------------------------------------------------------------------------- pooled sets


def _seed_records(ws: Path, variant: str, seed: int, shift: float, beam: int = 100, data: str = "d0") -> None:
    """One evaluated pipeline run of ``variant``: random per-query ranks of 60 fixed queries (better by
    ``shift``), the metrics computed from them, and a fingerprint with params and input hashes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(100 * seed + len(variant))
    ranks = np.maximum(1.0, np.floor(rng.exponential(6.0 - shift, 60)) + 1)
    d = ws / f"runs/ICEWS14/{variant}/train/seed{seed}"
    _write(d / "history.json", _history(4, 2, 0.3))
    _write(d / "run_config.json", {"params": {"eval.beam_size": beam, "train.precision": "float32"},
                                   "inputs": {"data": data, "graph": "g0", "init_model": f"m{seed}"}})
    _write(d / "summary.json", {"rl_epochs": 4, "pretrain_epochs": 0, "precision": "float32"})
    e = ws / f"runs/ICEWS14/{variant}/eval/seed{seed}"
    _write(e / "metrics.json", {"mrr": float(np.mean(1 / ranks)),
                                **{f"hits@{k}": float(np.mean(ranks <= k)) for k in (1, 3, 10)}})
    q = np.arange(60)
    pq.write_table(pa.table({"subject": q, "relation": q % 7, "object": (q * 3) % 11, "time": q // 5,
                             "rank": ranks}), e / "ranks.parquet")


def _pipeline_workspace(ws: Path, seeds, **kw) -> Path:
    from raptor.reporting.report import compare_variants

    for seed in seeds:
        _seed_records(ws, "pure_rl", seed, 0.0, **kw)
        _seed_records(ws, "raptor", seed, 2.0, **kw)
    sig = compare_variants({v: ws / f"runs/ICEWS14/{v}/eval" for v in ("pure_rl", "raptor")})
    from raptor.evaluation.stats import json_safe

    _write(ws / "reports/ICEWS14/significance.json", json_safe(sig))
    return ws


def test_folders_pooled_are_the_set_of_all_their_seeds(tmp_path):
    """Seeds 0-1 in one folder and 2-4 in another read as one folder holding all five: the same rows, and
    the significance tests the pipeline's significance stage computes over the five seeds."""
    from raptor.reporting.results import parse_sources

    whole = _pipeline_workspace(tmp_path / "whole", range(5))
    a, b = _pipeline_workspace(tmp_path / "a", [0, 1]), _pipeline_workspace(tmp_path / "b", [2, 3, 4])
    (ref,) = parse_sources([f"q={whole}"])
    (pooled,) = parse_sources([f"q={a}+{b}"])
    assert {v: list(seeds) for v, seeds in pooled.runs.items()} == {"pure_rl": [0, 1, 2, 3, 4],
                                                                      "raptor": [0, 1, 2, 3, 4]}
    assert result_rows([pooled]) == result_rows([ref])
    assert json.loads(json.dumps(pooled.significance)) == json.loads((whole / "reports/ICEWS14/significance.json").read_text())
    assert significance_rows([pooled]) == significance_rows([ref])
    assert "(n = 5)" in significance_rows([pooled])[0]["t-test over seeds, p (one-sided)"]
    assert paper_layout_rows([pooled]) == paper_layout_rows([ref])
    assert pooled.source == f"`{a}` + `{b}`" and [p.source for p in pooled.parts] == [f"`{a}`", f"`{b}`"]
    # each part's own significance (2 and 3 seeds) is not the pooled one
    assert discover(a)[0].significance != pooled.significance



def test_a_pooled_set_keeps_each_parts_stage_times(tmp_path):
    from raptor.common.resources import append_usage
    from raptor.reporting.results import parse_sources, usage_rows

    a, b = _pipeline_workspace(tmp_path / "a", [0, 1]), _pipeline_workspace(tmp_path / "b", [2])
    for ws, seconds in ((a, 600.0), (b, 300.0)):
        append_usage(ws / "runs/stage-usage.jsonl", {"stage": "finetune-raptor@ICEWS14", "ok": True, "seconds": seconds,
                                                      "peak_rss_gb": 2.0, "peak_is_per_stage": True,
                                                      "released_before": True, "finished": "2026-11-27T06:00:00+00:00"})
    rows = usage_rows(parse_sources([f"q={a}+{b}"]))
    assert [(r["set"], r["wall time"]) for r in rows] == [(f"q: `{a}`", "10.0 min"), (f"q: `{b}`", "5.0 min")]


def test_pooling_refuses_shared_seeds_other_params_and_other_data(tmp_path, capsys):
    from raptor.reporting.results import parse_sources

    a = _pipeline_workspace(tmp_path / "a", [0, 1])
    with pytest.raises(ValueError, match=rf"pure_rl seed 1 is in both `{a}` and `{tmp_path / 'c'}`"):
        parse_sources([f"q={a}+{_pipeline_workspace(tmp_path / 'c', [1, 2])}"])
    with pytest.raises(ValueError, match=r"differ in params eval.beam_size: 100 vs 50"):
        parse_sources([f"q={a}+{_pipeline_workspace(tmp_path / 'd', [2], beam=50)}"])
    with pytest.raises(ValueError, match=r"differ in inputs data: d0 vs d1"):
        parse_sources([f"q={a}+{_pipeline_workspace(tmp_path / 'e', [3], data='d1')}"])
    out = tmp_path / "results.md"
    assert cli(["results", f"q={a}+{tmp_path / 'c'}", "--out", str(out), "--untracked"]) == 1
    assert "seed 1 is in both" in capsys.readouterr().err and not out.exists()
    with pytest.raises(ValueError, match="an empty folder name"):
        parse_sources([f"q={a}+"])
    (unnamed,) = parse_sources([f"{a}+{_pipeline_workspace(tmp_path / 'f', [5])}"])
    assert unnamed.name == "a+f" and list(unnamed.runs["raptor"]) == [0, 1, 5]


def test_a_pooled_page_names_every_folder_and_checks_each_is_tracked(tmp_path, capsys):
    a, b = _pipeline_workspace(tmp_path / "a", [0, 1]), _pipeline_workspace(tmp_path / "b", [2])
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "a")
    out = tmp_path / "page/results.md"
    assert cli(["results", f"q={a}+{b}", "--out", str(out)]) == 1
    assert f"{b}:" in capsys.readouterr().err and not out.exists()  # b is not tracked
    _git(tmp_path, "add", "b")
    assert cli(["results", f"q={a}+{b}", "--out", str(out)]) == 0
    page = out.read_text()
    assert f"- **q** / ICEWS14: `{a}` + `{b}`" in page and "| q | ICEWS14 | RL-RAPTOR | 0,1,2 |" in page
    assert "(n = 3)" in page


def test_the_page_sets_what_titers_code_does_beside_what_each_set_used(tmp_path):
    """Every setting the paper leaves to TITer's code, with TITer's value and the values the set's runs used."""
    import dataclasses

    from raptor.config import INHERITED_FROM_TITER, Params, flatten
    from raptor.reporting.results import inherited_rows, parse_sources

    a = _pipeline_workspace(tmp_path / "a", [0, 1])
    for v, decay in (("pure_rl", 0.0), ("raptor", 1.0e-5)):
        cfg = a / f"runs/ICEWS14/{v}/train/seed0/run_config.json"
        obj = json.loads(cfg.read_text())
        obj["params"].update({"rl.weight_decay": decay, "eval.rank_last_expansions": False})
        cfg.write_text(json.dumps(obj))
    rows, cols = inherited_rows(parse_sources([f"q={a}"]))
    assert cols[-1] == "q" and [r["param"] for r in rows] == [f"`{k}`" for k in INHERITED_FROM_TITER]
    by = {r["param"]: r for r in rows}
    assert by["`rl.weight_decay`"]["TITer's code"] == "1e-05" and by["`rl.weight_decay`"]["q"] == "0.0/1e-05"
    assert by["`eval.rank_last_expansions`"]["TITer's code"] == "true" and by["`eval.rank_last_expansions`"]["q"] == "false"
    assert by["`rl.clip_gradient`"]["q"] == ""  # no run of the set has it
    # every key is a param, whose default keeps this project's behaviour (not TITer's value) until issue 39 decides
    defaults = flatten(dataclasses.asdict(Params()))
    for key, (titer, _) in INHERITED_FROM_TITER.items():
        assert key in defaults and defaults[key] != titer, key
    # docs/agent.md's table of them names each
    agent_doc = (REPO / "docs/agent.md").read_text()
    assert all(f"| `{key}` |" in agent_doc for key in INHERITED_FROM_TITER)


def test_long_runs_ablation_arms_borrow_the_sets_own_runs_for_the_arms_they_are(tmp_path):
    """`longrun.sh start raptor:S:pN` arms, read with the set's Pure-RL runs as arm 0 and its RL-RAPTOR runs
    as the arm of their pretraining epochs (same params; an arm's own folder wins), and collected as such."""
    from raptor.reporting.results import ablation_rows, collect

    root = tmp_path / "long"

    def run(where: str, pre: int, mrr: float, beam: int = 100) -> None:
        d = root / "ICEWS14" / where
        _write(d / "rl/history.json", _history(6, 2, mrr))
        _write(d / "rl/summary.json", {"rl_epochs": 6, "pretrain_epochs": pre, "precision": "float32"})
        _write(d / "run_config.json", {"params": {"eval.beam_size": beam, "train.precision": "float32"}})
        _write(d / "eval/metrics.json", {"mrr": mrr, "hits@1": mrr - 0.1, "hits@3": mrr, "hits@10": mrr + 0.1})

    run("pure_rl/seed0", 0, 0.30)
    run("pure_rl/seed2", 0, 0.31, beam=50)  # other params: not an arm
    run("raptor/seed0", 4, 0.34)
    run("raptor/seed1", 4, 0.35)
    run("titer/seed0", 0, 0.33)  # another agent: not an arm
    run("ablation/p2/seed0", 2, 0.32)
    run("ablation/p4/seed1", 4, 0.36)  # its own folder wins over raptor seed 1
    (s,) = discover(root, "long")
    mrr = {arm: {seed: r.metrics["mrr"] for seed, r in seeds.items()} for arm, seeds in s.ablation.items()}
    assert mrr == {0: {0: 0.30}, 2: {0: 0.32}, 4: {0: 0.34, 1: 0.36}}
    assert set(s.runs) == {"pure_rl", "raptor", "titer"}  # the main table is unchanged by the arms
    rows = ablation_rows([s])
    assert [(r["pretrain epochs"], r["seeds"]) for r in rows] == [("0", "0"), ("2", "0"), ("4", "0,1")]
    collect(root, tmp_path / "kept")
    assert ablation_rows(discover(tmp_path / "kept", "long")) == rows
    # no arm folder: no ablation, even with Pure-RL and RL-RAPTOR runs
    import shutil

    shutil.rmtree(root / "ICEWS14/ablation")
    assert discover(root, "long")[0].ablation == {}


def test_a_wildcard_pools_every_folder_it_matches_and_refuses_matching_none(tmp_path):
    """`NAME=CAMPAIGN/*` is the pool of the campaign's sittings (one records folder each), in sorted order:
    the same set as naming them with `+`; a pattern that matches no folder is an error, not an empty set."""
    from raptor.reporting.results import parse_sources

    camp = tmp_path / "campaign"
    _pipeline_workspace(camp / "2026-11-27", [0, 1])
    _pipeline_workspace(camp / "2026-11-28", [2])
    (camp / "NOTES.md").write_text("not a folder: not matched")
    assert source_folders([f"q={camp}/*"]) == [str(camp / "2026-11-27"), str(camp / "2026-11-28")]
    (globbed,) = parse_sources([f"q={camp}/*"])
    (named,) = parse_sources([f"q={camp}/2026-11-27+{camp}/2026-11-28"])
    assert list(globbed.runs["raptor"]) == [0, 1, 2]
    assert result_rows([globbed]) == result_rows([named]) and globbed.source == named.source
    assert significance_rows([globbed]) == significance_rows([named])
    with pytest.raises(ValueError, match=r"matches no folder"):
        parse_sources([f"q={camp}/2025-*"])
    with pytest.raises(ValueError, match=r"matches no folder"):
        source_folders([f"q={camp}/2026-11-27+{tmp_path}/nothing-*"])


def test_collect_leaves_out_runs_not_yet_tested_unless_asked(tmp_path):
    """A sitting's workspace holds finished runs beside runs still training: `raptor collect` copies the
    tested ones only and names the rest, so the seed finished in a later sitting's folder still pools; with
    ``unfinished`` the partial records come too (a pool of both folders then refuses the shared seed)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from raptor.reporting.results import collect, pool

    root = tmp_path / "long"

    def run(where: str, tested: bool, mrr: float = 0.3) -> None:
        d = root / "ICEWS14" / where
        _write(d / "rl/history.json", _history(6, 2, mrr))
        _write(d / "run_config.json", {"params": {"eval.beam_size": 100, "train.precision": "float32"}})
        if tested:
            _write(d / "rl/summary.json", {"rl_epochs": 6, "pretrain_epochs": 0, "precision": "float32"})
            _write(d / "eval/metrics.json", {"mrr": mrr, "hits@1": mrr - 0.1, "hits@3": mrr, "hits@10": mrr + 0.1})
            q = np.arange(20)  # the per-query ranks pooling recomputes significance from
            pq.write_table(pa.table({"subject": q, "relation": q % 3, "object": q % 5, "time": q // 4,
                                     "rank": 1.0 + q % 4}), d / "eval/ranks.parquet")

    run("pure_rl/seed0", True)
    run("pure_rl/seed1", False)  # still training
    run("raptor/seed1", False)  # a variant with no tested run at all
    run("ablation/p10/seed0", False)
    out = collect(root, tmp_path / "sitting1")
    assert out["sets"] == [("ICEWS14", ["pure_rl", "ablation p0"])]  # with an arm folder, Pure-RL is arm 0
    assert out["skipped"] == ["ICEWS14 pure_rl seed 1", "ICEWS14 raptor seed 1", "ICEWS14 ablation p10 seed 0"]
    assert not (tmp_path / "sitting1/ICEWS14/pure_rl/seed1").exists()
    assert not (tmp_path / "sitting1/ICEWS14/raptor").exists()
    # the later sitting finishes seed 1: the two folders pool
    later = tmp_path / "later"
    shutil.copytree(root / "ICEWS14/pure_rl/seed1", later / "ICEWS14/pure_rl/seed1")
    root = later
    run("pure_rl/seed1", True, 0.32)
    collect(later, tmp_path / "sitting2")
    pooled = pool("p", [discover(tmp_path / "sitting1", "p")[0], discover(tmp_path / "sitting2", "p")[0]])
    assert sorted(pooled.runs["pure_rl"]) == [0, 1]
    # asked for, the partial records come too, and that folder no longer pools with the later one
    root = tmp_path / "long"
    out = collect(root, tmp_path / "all", unfinished=True)
    assert out["skipped"] == [] and (tmp_path / "all/ICEWS14/pure_rl/seed1/rl/history.json").is_file()
    with pytest.raises(ValueError, match="seed 1 is in both"):
        pool("p", [discover(tmp_path / "all", "p")[0], discover(tmp_path / "sitting2", "p")[0]])
