"""benchmarks/gpu_paper_seeds.py (a lent GPU's paper-budget seeds in one command): its records join a CPU
sitting's. A GPU run's seeds must pool on the results page with the seeds `scripts/longrun.sh` trains on a
CPU (`raptor ingest --dataset`, `raptor train`, `raptor evaluate`): the same params (`train.device` left
at `auto`), the same data and graph fingerprints (the same ingest of the same raw folder), the same layout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from raptor.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_paper_seeds.py"

pytestmark = pytest.mark.slow  # trains in subprocesses


def test_its_records_pool_with_a_cpu_runs_records(tmp_path):
    from raptor.data.synthetic import SyntheticSpec, write_raw
    from raptor.reporting.results import parse_sources

    raw = write_raw(tmp_path / "raw", SyntheticSpec(seed=3))
    params = tmp_path / "params-fixture.yaml"
    params.write_text(f"datasets:\n  SYN: {{raw_dir: {raw}}}\n"
                      "model: {entity_dim: 16, relation_dim: 16, time_dim: 4, step_dim: 4, mlp_hidden_dim: 32}\n"
                      "env: {max_actions: 20}\nrl: {epochs: 1, batch_size: 256}\n"
                      "eval: {beam_size: 10, valid_every: 1}\ntrain: {precision: float32, num_threads: 1}\n")
    out, commit = tmp_path / "gpu-out", "0123456789abcdef0123456789abcdef01234567"
    r = subprocess.run([sys.executable, str(SCRIPT), "--params", str(params), "--dataset", "SYN", "--device", "cpu",
                        "--seeds", "0", "1", "--out", str(out), "--work", str(tmp_path / "gpu-work"), "--commit", commit],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    records = out / "records"
    assert (records / "COMMIT").read_text().strip() == commit
    for seed in (0, 1):
        run = records / "SYN" / "pure_rl" / f"seed{seed}"
        assert {p.name for p in (run / "rl").iterdir()} == {"history.json", "run_config.json", "summary.json"}
        assert {p.name for p in (run / "eval").iterdir()} == {"metrics.json", "ranks.parquet"}
        assert json.loads((run / "rl" / "run_config.json").read_text())["params"]["train.device"] == "auto"

    # seed 2 as scripts/longrun.sh trains it on a CPU, into its own sitting's folder
    cpu = tmp_path / "cpu"
    run = cpu / "runs" / "SYN" / "pure_rl" / "seed2"
    for argv in (["ingest", "--dataset", "SYN", "--params", str(params), "--out", str(cpu / "data")],
                 ["graph", "--data", str(cpu / "data"), "--out", str(cpu / "graph.npz")],
                 ["train", "--data", str(cpu / "data"), "--graph", str(cpu / "graph.npz"), "--out", str(run),
                  "--seed", "2", "--params", str(params), "--no-progress"],
                 ["evaluate", "--model", str(run / "rl" / "best.pt"), "--data", str(cpu / "data"), "--graph",
                  str(cpu / "graph.npz"), "--params", str(params), "--split", "test", "--out", str(run / "eval")]):
        assert cli(argv) == 0, argv
    assert cli(["collect", str(cpu / "runs"), str(tmp_path / "sittings" / "cpu")]) == 0
    gpu_config = json.loads((records / "SYN/pure_rl/seed0/rl/run_config.json").read_text())
    cpu_config = json.loads((run / "rl" / "run_config.json").read_text())
    assert gpu_config["inputs"] == cpu_config["inputs"] and gpu_config["params"] == cpu_config["params"]
    (pooled,) = parse_sources([f"x={records}+{tmp_path / 'sittings' / 'cpu'}"])
    assert list(pooled.runs["pure_rl"]) == [0, 1, 2]
    assert all(r.metrics is not None for r in pooled.runs["pure_rl"].values())
    # a run whose params differ (another learning rate) is refused, naming the param; this one comes back
    # packed (--pack: one file, as a lent machine returns at most 8), and --table reads the unpacked folder
    r = subprocess.run([sys.executable, str(SCRIPT), "--params", str(params), "--dataset", "SYN", "--device", "cpu",
                        "--seeds", "3", "--out", str(tmp_path / "other"), "--work", str(tmp_path / "other-work"),
                        "--set", "rl.learning_rate=0.01", "--pack"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [p.name for p in (tmp_path / "other").iterdir()] == ["paper_seeds.tgz"]
    import tarfile

    with tarfile.open(tmp_path / "other" / "paper_seeds.tgz") as tar:
        # the "data" filter where this Python has it (3.11.4+), a plain extract of our own file otherwise
        tar.extractall(tmp_path / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    with pytest.raises(ValueError, match=r"rl.learning_rate: 0.001 vs 0.01"):
        parse_sources([f"x={records}+{tmp_path / 'unpacked' / 'records'}"])
    r = subprocess.run([sys.executable, str(SCRIPT), "--table", str(tmp_path / "unpacked")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    test_mrr = json.loads((tmp_path / "unpacked" / "seed3" / "metrics.json").read_text())["mrr"]
    assert "| 3 | 1 |" in r.stdout and f"{100 * test_mrr:.2f} |" in r.stdout
