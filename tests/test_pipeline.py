"""End to end: `dvc repro` of the whole pipeline on a tiny synthetic dataset (smoke profile), through
the Prefect flows on a real local Prefect API, with a real local MLflow store; then the ablation."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port, http_json, stack_env
import yaml

from raptor.data import load_dataset
from raptor.graph import TemporalGraph
from raptor.synthetic import SyntheticSpec, write_raw

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pipeline")]


def _env(project: Path, api_url: str) -> dict:
    return stack_env(project / ".prefect", api_url, project / "mlflow.db", GIT_AUTHOR_NAME="t",
                     GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")


def _run(cmd: list[str], cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A throwaway project (this repo's code, dvc.yaml, params with the smoke profile) and a Prefect server."""
    proj = tmp_path_factory.mktemp("project")
    raw = write_raw(proj.parent / "raw-synth", SyntheticSpec(seed=3))
    for name in ("raptor", "flows", "tasks"):
        (proj / name).symlink_to(ROOT / name)
    shutil.copy(ROOT / "dvc.yaml", proj / "dvc.yaml")
    (proj / "ablation").mkdir()
    shutil.copy(ROOT / "ablation" / "dvc.yaml", proj / "ablation" / "dvc.yaml")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"].update(dataset="SYNTH", raw_dir=str(raw))
    params["profile"] = "smoke"
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = _env(proj, api)
    server = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"{api}/health", timeout=2).read()
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("the Prefect server did not come up")
                time.sleep(0.5)
        _run(["git", "init", "-q"], proj, env)
        _run(["dvc", "init", "-q"], proj, env)
        yield proj, env, api
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def _flow_runs(api: str) -> list[dict]:
    return http_json(f"{api}/flow_runs/filter", {})


def test_dvc_repro_end_to_end(project):
    proj, env, api = project
    out = _run(["dvc", "repro"], proj, env)
    for stage in ("ingest", "graph", "label", "finetune_pure_rl", "finetune_raptor", "evaluate@pure_rl",
                  "evaluate@raptor", "significance", "report"):
        assert f"Running stage '{stage}'" in out, stage

    # Data stages.
    ds = load_dataset(proj / "data/SYNTH/ingested")
    graph = TemporalGraph.load(proj / "data/SYNTH/graph.npz")
    assert graph.num_edges == 2 * len(ds.all_quadruples())
    assert json.loads((proj / "data/SYNTH/labels/summary.json").read_text())["rows"] > 0

    # Evaluation outputs agree with the per-variant summaries and the report.
    n_test = 2 * len(ds.splits["test"])
    table = {r["model"]: r for r in csv.DictReader((proj / "reports/SYNTH/report/main_table.csv").open())}
    for variant, row_name in (("pure_rl", "Pure-RL"), ("raptor", "RL-RAPTOR")):
        summary = json.loads((proj / f"runs/SYNTH/{variant}/metrics.json").read_text())
        per_seed = [json.loads((proj / f"runs/SYNTH/{variant}/eval/seed{s}/metrics.json").read_text()) for s in (0, 1)]
        assert all(m["queries"]["total"] == n_test for m in per_seed)
        assert summary["mrr"] == pytest.approx(sum(m["mrr"] for m in per_seed) / 2)
        ours = next(r for k, r in table.items() if k.startswith(f"{row_name} (ours"))
        assert ours["mrr"].startswith(f"{100 * summary['mrr']:.2f}")
    sig = json.loads((proj / "reports/SYNTH/significance.json").read_text())
    assert sig["seeds"] == [0, 1] and "mrr" in sig["seed_level"]
    assert (proj / "reports/SYNTH/report/training_efficiency.png").stat().st_size > 1000

    # MLflow: one child run per (variant, seed) under a parent per stage invocation, with params,
    # code version, data hashes, per-epoch metrics, the test metrics and the artifacts.
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("raptor/SYNTH")
    runs = client.search_runs([exp.experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    parents = {r.info.run_id for r in runs if "mlflow.parentRunId" not in r.data.tags}
    assert len(children) == 4 and len(parents) == 2
    for r in children:
        variant, seed = r.data.tags["variant"], int(r.data.tags["seed"])
        assert r.data.tags["mlflow.parentRunId"] in parents
        assert r.data.params["rl.epochs"] == "2" and r.data.params["profile"] == "smoke"
        assert len(r.data.tags["git_commit"]) >= 7 or r.data.tags["git_commit"] == "unknown"
        assert "data.sha256.train.txt" in r.data.tags
        assert len(client.get_metric_history(r.info.run_id, "rl/reward")) == 2
        seed_metrics = json.loads((proj / f"runs/SYNTH/{variant}/eval/seed{seed}/metrics.json").read_text())
        assert r.data.metrics["test/mrr"] == pytest.approx(seed_metrics["mrr"])
        arts = {a.path for a in client.list_artifacts(r.info.run_id)}
        assert {"model", "predictions", "history"} <= arts
        if variant == "raptor":
            assert len(client.get_metric_history(r.info.run_id, "pretrain/bce")) == 2

    # Prefect's API saw the stage flows complete.
    names = {}
    for fr in _flow_runs(api):
        names.setdefault(fr["state_type"], 0)
        names[fr["state_type"]] += 1
    assert names.get("COMPLETED", 0) >= 9 and not names.get("FAILED")

    # Nothing changed: a second repro runs nothing.
    out = _run(["dvc", "repro"], proj, env)
    assert "Running stage" not in out

    # A parameter only the RAPTOR variant depends on leaves Pure-RL up to date.
    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["profiles"]["smoke"]["pretrain.learning_rate"] = 0.002
    params["pretrain"]["learning_rate"] = 0.002
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = _run(["dvc", "status", "finetune_pure_rl", "ingest", "graph"], proj, env)
    assert "changed" in status  # profiles changed: every learning stage lists it (documented)
    params["profiles"]["smoke"].pop("pretrain.learning_rate")
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = json.loads(_run(["dvc", "status", "--json"], proj, env).strip().splitlines()[-1])
    assert "finetune_raptor" in status, status
    assert "finetune_pure_rl" not in status and "label" not in status and "ingest" not in status, status


def test_ablation_pipeline(project):
    proj, env, api = project
    out = _run(["dvc", "repro", "ablation/dvc.yaml"], proj, env)
    assert "Running stage 'ablation/dvc.yaml:ablation'" in out or "Running stage 'ablation'" in out
    arms = json.loads((proj / "reports/SYNTH/ablation/ablation.json").read_text())["arms"]
    assert [a["pretrain_epochs"] for a in arms] == [0, 1]
    assert (proj / "reports/SYNTH/ablation/ablation_reward.png").exists()
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("raptor/SYNTH/ablation-pretrain-epochs")
    runs = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.tags["pretrain_epochs"] for r in runs) == ["0", "1"]
    assert all(len(client.get_metric_history(r.info.run_id, "rl/reward")) == 2 for r in runs)
