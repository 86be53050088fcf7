"""End to end: `dvc repro` of the pipeline on a tiny synthetic dataset, through the Prefect flows."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from raptor.data import load_dataset
from raptor.graph import TemporalGraph
from raptor.synthetic import SyntheticSpec, write_raw

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pipeline")]


def _env(project: Path) -> dict:
    env = dict(os.environ)
    env.update(
        PATH=f"{BIN}:{env.get('PATH', '')}",
        PREFECT_HOME=str(project / ".prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90",
        DO_NOT_TRACK="true",
        MLFLOW_DISABLE_TELEMETRY="true",
        DVC_NO_ANALYTICS="1",
        MLFLOW_TRACKING_URI=f"sqlite:///{project / 'mlflow.db'}",
        GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t",
    )
    return env


def _run(cmd: list[str], cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A throwaway project: this repo's code and dvc.yaml, params pointing at a synthetic raw dataset."""
    proj = tmp_path_factory.mktemp("project")
    raw = write_raw(proj.parent / "raw-synth", SyntheticSpec(seed=3))
    for name in ("raptor", "flows", "tasks"):
        (proj / name).symlink_to(ROOT / name)
    shutil.copy(ROOT / "dvc.yaml", proj / "dvc.yaml")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"].update(dataset="SYNTH", raw_dir=str(raw))
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = _env(proj)
    _run(["git", "init", "-q"], proj, env)
    _run(["dvc", "init", "-q"], proj, env)
    return proj


def test_dvc_repro_end_to_end(project):
    env = _env(project)
    out = _run(["dvc", "repro"], project, env)
    assert "Running stage 'ingest'" in out and "Running stage 'graph'" in out

    ds = load_dataset(project / "data/SYNTH/ingested")
    graph = TemporalGraph.load(project / "data/SYNTH/graph.npz")
    assert graph.num_edges == 2 * len(ds.all_quadruples())
    assert ds.all_quadruples()[:, 3].min() == 0

    # Nothing changed: a second repro runs nothing.
    out = _run(["dvc", "repro"], project, env)
    assert "Running stage" not in out

    # Changing a parameter re-runs only the stages that depend on it: ingest re-runs; its output is
    # identical (time_step 1 is what was inferred), so graph is not re-run.
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["ingest"]["time_step"] = 1
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = _run(["dvc", "status"], project, env)
    assert "modified:" in out and "ingest.time_step" in out
    out = _run(["dvc", "repro"], project, env)
    assert "Running stage 'ingest'" in out and "Running stage 'graph'" not in out
