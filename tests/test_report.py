import csv
import json

import numpy as np
import pytest

from raptor.common.io import atomic_write_json
from raptor.evaluation.ranking import evaluation_metrics, write_metrics, write_predictions
from raptor.reporting.report import compare_variants, epochs_to_reward, significance, write_report
from raptor.reporting.runs_reader import seed_metrics
from raptor.evaluation.summary import summarize
from raptor.constants import METRIC_KEYS

R = 3


def _fake_eval(folder, seed, ranks):
    q = len(ranks)
    d = folder / f"seed{seed}"
    d.mkdir(parents=True)
    rel = np.arange(q) % (2 * R)
    metrics = evaluation_metrics(np.asarray(ranks, float), rel, R)
    write_metrics(d / "metrics.json", metrics)
    ent = np.full((q, 2), -1)
    ent[:, 0] = 0
    sc = np.full((q, 2), -np.inf, dtype=np.float32)
    sc[:, 0] = 0.0
    write_predictions(d / "predictions.parquet", np.stack([np.arange(q) % 5, rel, np.zeros(q, int), np.arange(q)], 1),
                      ent, sc, ranks)
    return metrics


def _fake_train(folder, seed, rewards):
    d = folder / f"seed{seed}"
    d.mkdir(parents=True)
    hist = [{"epoch": i, "reward": r, "val_mrr": (0.1 * r if i % 2 else None)} for i, r in enumerate(rewards)]
    atomic_write_json(d / "history.json", hist)


@pytest.fixture
def runs(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.integers(1, 30, size=200).astype(float)
    out = {}
    for variant, shift in (("pure_rl", 0.0), ("raptor", 1.0)):
        for seed in (0, 1, 2):
            better = np.maximum(1.0, base - shift * (1 + seed % 2) - rng.integers(0, 2, size=200))
            out[(variant, seed)] = _fake_eval(tmp_path / "eval" / variant, seed, better)
            _fake_train(tmp_path / "train" / variant, seed, [0.1 + 0.05 * i + 0.1 * shift for i in range(6)])
    return tmp_path, out


def test_summary_and_significance(runs):
    root, metrics = runs
    per_seed = seed_metrics(root / "eval/raptor")
    s = summarize(per_seed, METRIC_KEYS)
    vals = [metrics[("raptor", k)]["mrr"] for k in (0, 1, 2)]
    assert s["mrr"]["mean"] == pytest.approx(np.mean(vals))
    assert s["mrr"]["std"] == pytest.approx(np.std(vals, ddof=1))
    both = compare_variants({"raptor": root / "eval/raptor", "pure_rl": root / "eval/pure_rl"}, n_resamples=2000)
    assert both["baseline"] == "pure_rl" and list(both["comparisons"]) == ["raptor"]  # from raptor/agents/variants.py
    sig = both["comparisons"]["raptor"]
    assert sig["seeds"] == [0, 1, 2]
    assert sig["seed_level"]["mrr"]["mean_diff"] > 0  # raptor's ranks are better by construction
    assert sig["seed_level"]["mrr"]["significant_one_sided"]
    assert sig["per_query"]
    json.dumps(sig)  # serialisable


def test_significance_needs_both_variants(runs):
    root, _ = runs
    with pytest.raises(ValueError, match="no evaluation of variant 'pure_rl'"):
        significance({"raptor": root / "eval/raptor"}, "raptor", "pure_rl")
    with pytest.raises(ValueError, match="exactly one baseline"):
        compare_variants({"raptor": root / "eval/raptor"})


def test_significance_refuses_an_evaluation_of_other_seeds_than_the_params_ask(runs):
    """The audit's case: an evaluate stage that failed at seed 1 left seed 0, and significance reported
    n = 1 without a word."""
    import shutil

    root, _ = runs
    evals = {"raptor": root / "eval/raptor", "pure_rl": root / "eval/pure_rl"}
    assert compare_variants(evals, n_resamples=200, seeds=[0, 1, 2])["comparisons"]["raptor"]["seeds"] == [0, 1, 2]
    shutil.rmtree(root / "eval/raptor/seed2")
    with pytest.raises(ValueError, match=r"eval/raptor: seeds \[0, 1\] evaluated for raptor, the params ask for \[0, 1, 2\]"):
        compare_variants(evals, seeds=[0, 1, 2])
    with pytest.raises(ValueError, match=r"eval/pure_rl: seeds \[0, 1, 2\] evaluated for pure_rl, the params ask for \[0, 1\]"):
        compare_variants(evals, seeds=[0, 1])  # a seed left from other params is not pooled either


def test_epochs_to_reward():
    hist = [{"epoch": 0, "reward": 0.1}, {"epoch": 1, "reward": 0.33}, {"epoch": 2, "reward": 0.4}]
    assert epochs_to_reward(hist, 0.325) == 2
    assert epochs_to_reward(hist, 0.9) is None


def test_write_report(runs):
    root, metrics = runs
    evals = {"pure_rl": root / "eval/pure_rl", "raptor": root / "eval/raptor"}
    sig = compare_variants(evals, n_resamples=500)
    atomic_write_json(root / "sig.json", sig)
    for seed in (0, 1, 2):
        atomic_write_json(root / f"train/raptor/seed{seed}/summary.json", {"pretrain_epochs": 3, "rl_epochs": 6})
    write_report("ICEWS14", {"pure_rl": root / "train/pure_rl", "raptor": root / "train/raptor"}, evals,
                 root / "report", root / "sig.json")
    out = root / "report"
    for f in ("main_table.md", "main_table.csv", "training_efficiency.png", "validation_mrr.png", "efficiency.csv",
              "README.md", "report.json"):
        assert (out / f).exists(), f
    rows = list(csv.DictReader((out / "main_table.csv").open()))
    paper = {r["model"]: r for r in rows if r["source"] == "paper"}
    assert paper["RL-RAPTOR"]["mrr"] == "42.86" and paper["Pure-RL"]["hits@10"] == "59.46"
    ours = [r for r in rows if r["source"].startswith("this run")]
    assert len(ours) == 2
    # each row states the budget its seeds trained (histories of 6 epochs; RAPTOR's summaries: 3 pretraining)
    assert {r["model"].split(" (")[0]: r["source"] for r in ours} == {
        "Pure-RL": "this run, 6 RL epochs", "RL-RAPTOR": "this run, 3 pretraining + 6 RL epochs"}
    raptor_row = next(r for r in ours if r["model"].startswith("RL-RAPTOR"))
    mean = 100 * np.mean([metrics[("raptor", s)]["mrr"] for s in (0, 1, 2)])
    assert raptor_row["mrr"].startswith(f"{mean:.2f}") and raptor_row["mrr"].endswith("*")
    eff = list(csv.DictReader((out / "efficiency.csv").open()))
    # raptor's rewards are 0.2 + 0.05 i: reaches 0.325 at epoch index 3 -> 4 epochs.
    assert {r["epochs_to_reward_0.325"] for r in eff if r["variant"] == "raptor"} == {"4"}
    assert (out / "training_efficiency.png").read_bytes()[:4] == b"\x89PNG"


def test_ablation_report_has_each_arms_test_metrics(tmp_path):
    from raptor.reporting.report import write_ablation_report

    arms, evals, tested = {}, {}, {}
    for n, ranks in ((0, ([1, 2, 4], [2, 2, 4])), (2, ([1, 1, 2], [1, 1, 1]))):
        arms[n], evals[n] = tmp_path / f"arms/p{n}", tmp_path / f"eval/p{n}"
        for seed, r in enumerate(ranks):
            atomic_write_json(arms[n] / f"seed{seed}/history.json",
                              [{"epoch": 0, "reward": 0.1 * seed, "val_mrr": 0.2 + 0.1 * n + 0.01 * seed}])
            tested[(n, seed)] = _fake_eval(evals[n], seed, r)
    out = write_ablation_report("T", arms, tmp_path / "report", evals)
    rows = {a["pretrain_epochs"]: a for a in out["arms"]}
    # arm 0: reciprocal ranks (1 + 1/2 + 1/4) / 3 and (1/2 + 1/2 + 1/4) / 3
    assert rows[0]["test_mrr_mean"] == pytest.approx(np.mean([1.75 / 3, 1.25 / 3]))
    assert rows[0]["test_mrr_std"] == pytest.approx(np.std([1.75 / 3, 1.25 / 3], ddof=1))
    assert rows[2]["test_hits@1_mean"] == pytest.approx(np.mean([2 / 3, 1.0]))
    assert rows[2]["best_val_mrr_mean"] == pytest.approx(0.405)
    header = (tmp_path / "report/ablation.csv").read_text().splitlines()[0]
    assert "test_mrr_mean" in header
    # without evaluations the report is as before: no test columns
    assert "test_mrr_mean" not in write_ablation_report("T", arms, tmp_path / "report2")["arms"][0]


def test_a_damaged_metrics_or_history_file_is_named(runs, tmp_path):
    """The audit's cases: a truncated metrics.json was a JSON error naming no file, `"mrr": "high"` a
    float conversion error, and a history row without an integer epoch was accepted silently."""
    from raptor.reporting.runs_reader import read_history, read_metrics

    root, _ = runs
    m = root / "eval/raptor/seed0/metrics.json"
    good = m.read_text()
    m.write_text(good[: len(good) // 2])
    with pytest.raises(ValueError, match=r"seed0/metrics\.json: not valid JSON"):
        seed_metrics(root / "eval/raptor")
    assert read_metrics(m.parent, lenient=True) is None  # a record's half-copied file counts as missing
    m.write_text(json.dumps({**json.loads(good), "mrr": "high"}))
    with pytest.raises(ValueError, match=r"seed0/metrics\.json: not test metrics \('mrr' is 'high'"):
        seed_metrics(root / "eval/raptor")
    h = root / "train/raptor/seed0/history.json"
    h.write_text(json.dumps([{"epoch": 0, "reward": 0.1}, {"epoch": "x", "reward": 0.2}]))
    with pytest.raises(ValueError, match=r"seed0/history\.json: not a run history \(row 1: "):
        read_history(h.parent)
    assert read_history(h.parent, lenient=True) is None
    h.write_text(json.dumps([{"epoch": 0, "reward": 0.1}]))
    assert read_history(h.parent) == [{"epoch": 0, "reward": 0.1}]
