"""What a newcomer does: `git clone` the committed repo (with ../shared beside it) and run the
README's main-job command, `scripts/run.sh`, there, on the real ICEWS14 data with the `ci` profile.

This catches what tests inside the work tree cannot: an ignore rule that breaks DVC, a file the
job needs that is not committed, a tracked file the job edits, a missing install step.

The clone's .venv is created here and layered on this test run's environment (a .pth file and the
console scripts), so the clone's own `scripts/setup.sh` runs (checks the lock's pins, installs the
project) without a 3-minute reinstall of the pinned stack that this run was itself set up from.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

pytestmark = [pytest.mark.slow, pytest.mark.shared_data, pytest.mark.xdist_group("fresh-clone")]


def _layered_venv(repo: Path) -> None:
    base_python = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base_python), "-m", "venv", str(repo / ".venv")], check=True)
    outer_bin = Path(sys.executable).parent
    site = Path(subprocess.run([str(repo / ".venv/bin/python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "_outer_stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    shebang = f"#!{outer_bin}/python"
    for script in outer_bin.iterdir():
        target = repo / ".venv/bin" / script.name
        if target.exists() or not script.is_file():
            continue
        try:
            text = script.read_text()
        except UnicodeDecodeError:
            continue
        if text.startswith(shebang + "\n"):
            target.write_text(f"#!{repo / '.venv/bin/python'}" + text[len(shebang):])
            target.chmod(0o755)


def test_readme_main_job_runs_from_a_fresh_clone(tmp_path):
    assert (SHARED / "data" / "ICEWS14" / "train.txt").is_file(), f"the raw data must be at {SHARED}/data"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    subprocess.run(["git", "checkout", "-q", head.stdout.strip()], cwd=repo, check=True)
    (tmp_path / "shared").symlink_to(SHARED)
    _layered_venv(repo)

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "MLFLOW_", "DVC_", "VIRTUAL_ENV"))}  # the clone's own defaults
    outer_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != outer_bin)
    readme = (repo / "README.md").read_text()
    assert "scripts/run.sh" in readme and "scripts/test.sh" in readme

    proc = subprocess.run(["scripts/run.sh", "--profile", "ci"], cwd=repo, env=env, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    ran = _ran_stages(log)
    for stage in ("params", "ingest@ICEWS14", "label@ICEWS14", "pretrain@ICEWS14", "finetune-raptor@ICEWS14",
                  "evaluate-pure_rl@ICEWS14", "finetune-titer@ICEWS14", "evaluate-titer@ICEWS14", "report@ICEWS14"):
        assert stage in ran, (stage, ran)
    assert "Starting temporary server" not in log  # every stage used the job's one server
    report = json.loads((repo / "reports/ICEWS14/report/report.json").read_text())
    # the three systems of the paper and the recurrency baseline
    assert set(report["summaries"]) == {"pure_rl", "raptor", "titer", "recurrency"}

    # The job edited no tracked file and left nothing untracked but DVC's lock (which users commit).
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True)
    assert status.stdout.splitlines() == ["?? dvc.lock"], status.stdout

    # One Prefect pipeline run, every stage a named subflow of it (the job's server kept the database).
    query = ("import json, os, urllib.request\n"
             "req = urllib.request.Request(os.environ['PREFECT_API_URL'] + '/flow_runs/filter', data=b'{}',\n"
             "                             headers={'Content-Type': 'application/json'})\n"
             "print(json.dumps([[r['name'], r['parent_task_run_id'], r['state_type']]\n"
             "                  for r in json.load(urllib.request.urlopen(req))]))\n")
    proc = subprocess.run([str(repo / ".venv/bin/python"), "-m", "flows.server", "--port", str(free_port()), "--",
                           str(repo / ".venv/bin/python"), "-c", query], cwd=repo, env={**env, **_defaults(repo)},
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    top = [name for name, parent, _ in runs if parent is None]
    assert top == ["pipeline"], runs
    subflows = {name for name, parent, state in runs if parent is not None and state == "COMPLETED"}
    assert {"ingest-ICEWS14", "label-ICEWS14", "pretrain-ICEWS14", "finetune-ICEWS14-pure_rl",
            "finetune-ICEWS14-raptor", "evaluate-ICEWS14-raptor", "report-ICEWS14"} <= subflows, subflows

    # Run again: everything is cached; nothing runs, not even the params resolution (it depends on
    # params.yaml and params.local.yaml, which did not change).
    again = subprocess.run(["scripts/run.sh", "--profile", "ci"], cwd=repo, env=env, capture_output=True, text=True)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert _ran_stages(again.stdout + again.stderr) == []


def _ran_stages(log: str) -> list[str]:
    """Stages the pipeline flow ran, from its log lines ``<stage>: running `<command>```."""
    return re.findall(r"(\S+): running `", log)


def _defaults(repo: Path) -> dict:
    from raptor.pipeline.runenv import defaults

    return defaults(repo)
