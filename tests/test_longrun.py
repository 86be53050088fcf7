"""scripts/longrun.sh: its refusals, which must leave nothing behind (the long runs themselves are
exercised by hand: a tiny budget trained, resumed and tested, docs/deployment.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "longrun.sh"


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LONGRUN_DIR": str(tmp_path / "lr")}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, code, message", [
    (("bogus",), 2, "unknown command 'bogus'"),
    (("start",), 2, "name at least one VARIANT:SEED"),
    (("start", "--frobnicate", "raptor:0"), 2, "unknown option --frobnicate"),
])
def test_bad_commands_are_refused_and_create_nothing(tmp_path, args, code, message):
    r = _run(*args, tmp_path=tmp_path)
    assert r.returncode == code, r.stderr
    assert message in r.stderr
    assert not (tmp_path / "lr").exists()


def test_help_and_status_of_an_empty_folder(tmp_path):
    r = _run("--help", tmp_path=tmp_path)
    assert r.returncode == 0 and "scripts/longrun.sh start" in r.stdout and "set -euo" not in r.stdout
    r = _run("status", tmp_path=tmp_path)
    assert r.returncode == 0 and "no long runs under" in r.stdout
