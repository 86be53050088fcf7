"""`raptor ui` reopens a finished job's stores: real Prefect and MLflow servers on loopback."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import free_port, http_json

ROOT = Path(__file__).resolve().parents[1]

JOB = textwrap.dedent("""
    from prefect import flow
    from tasks import tracking

    @flow(name="tiny-job", flow_run_name="tiny-job-run")
    def job():
        run = tracking.start_run("raptor/UI", "UI-pure_rl-seed0", params={"rl.gamma": 0.9}, tags={"seed": 0})
        run.log_metrics({"rl/reward": 0.5}, step=1)
        run.finish()
        return run.run_id

    print(job())
""")


@pytest.mark.slow
def test_raptor_ui_serves_the_jobs_prefect_and_mlflow_stores(tmp_path):
    from raptor.commands import ui
    from raptor.pipeline.runenv import defaults

    # A tiny job logs to the project's embedded stores (ephemeral Prefect under .prefect/, mlflow.db).
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "PREFECT_HOME")}
    env.update(defaults(tmp_path), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", JOB], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = proc.stdout.strip().splitlines()[-1]

    seen = {}

    def ready(addresses):
        prefect = addresses["prefect"]
        seen["flow_runs"] = [r["name"] for r in http_json(f"{prefect}/api/flow_runs/filter", {})]
        base = addresses["mlflow"].split("/#")[0]
        exps = http_json(f"{base}/api/2.0/mlflow/experiments/search", {"max_results": 100})["experiments"]
        exp = next(e for e in exps if e["name"] == "raptor/UI")
        runs = http_json(f"{base}/api/2.0/mlflow/runs/search", {"experiment_ids": [exp["experiment_id"]]})["runs"]
        seen["runs"] = [r["info"]["run_id"] for r in runs]
        seen["addresses"] = addresses

    args = argparse.Namespace(root=str(tmp_path), prefect_port=free_port(), mlflow_port=free_port(), only=None,
                              timeout=180.0)
    assert ui.run(args, ready=ready) == 0
    assert "tiny-job-run" in seen["flow_runs"]
    assert seen["runs"] == [run_id]
    assert seen["addresses"]["mlflow"].endswith("workflowType=machine_learning")
