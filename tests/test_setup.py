"""scripts/setup.sh's choices, run for real against a stand-in pip: which lock it installs where torch's CPU
build can or cannot be had, what it says, that it removes what the lock does not list, and that a second run
does nothing. Its Python is this test's own (the venv of the suite), so the script's own Python steps run as
they do in a set-up; only ``python -m pip`` is recorded instead of run (no network, no change to any venv)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # each set-up ends by importing torch, Prefect, MLflow and DVC: seconds

#: ``.venv/bin/python`` of the sandbox: ``-m pip ...`` appended to $PIP_LOG (failing an install of torch alone
#: when $TORCH_FAILS is set), and listing ``$EXTRA`` as an installed distribution; anything else: the real Python.
FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  shift 2
  [ "$1" = "--disable-pip-version-check" ] && shift
  echo "pip $*" >> "$PIP_LOG"
  last="${@: -1}"
  if [ -n "${TORCH_FAILS:-}" ] && [ -f "$last" ] && [ "$(grep -c '==' "$last")" = 1 ] && grep -q '^torch==' "$last"; then
    exit 1
  fi
  exit 0
fi
if [ "$1" = "-" ] && [ -n "${EXTRA:-}" ]; then  # the script's list of packages the lock does not hold
  echo "$EXTRA"; exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


@pytest.fixture
def sandbox(tmp_path):
    """A copy of what setup.sh reads (itself, the locks, pyproject.toml) with a stand-in .venv/bin/python."""
    for name in ("requirements.lock", "requirements-cuda.lock", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts/setup.sh", tmp_path / "scripts/setup.sh")
    python = tmp_path / ".venv/bin/python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "params.local.yaml").write_text("")  # the script's last step makes it where missing
    (tmp_path / "wheels").mkdir()
    return tmp_path


def setup(root: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run the sandbox's setup.sh; its result and the pip commands it ran."""
    log = root / "pip.log"
    log.unlink(missing_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAPTOR_")}
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=root, capture_output=True, text=True, timeout=300,
                          env={**base, "PIP_LOG": str(log), "REAL_PYTHON": sys.executable, "PYTHON": sys.executable,
                               "RAPTOR_WHEELS": str(root / "wheels"), "RAPTOR_TORCH_INDEX": "http://unreachable.invalid",
                               **env})
    return proc, log.read_text().splitlines() if log.exists() else []


def installed_lock(pips: list[str]) -> str | None:
    locks = [c.rsplit(" ", 1)[1] for c in pips if c.startswith("pip install") and c.endswith(".lock")]
    return locks[-1] if locks else None


def test_auto_takes_the_cpu_lock_where_torch_cpu_installs_and_a_second_run_does_nothing(sandbox):
    proc, pips = setup(sandbox)
    assert proc.returncode == 0, proc.stderr
    assert installed_lock(pips) == "requirements.lock"
    torch_install = next(c for c in pips if "--extra-index-url" in c or "--find-links" in c)
    assert "--extra-index-url http://unreachable.invalid" in torch_install  # no wheel in RAPTOR_WHEELS
    assert any(c.startswith("pip check") for c in pips) and "setup: ok (torch " in proc.stdout
    again, pips = setup(sandbox)
    assert again.returncode == 0 and pips == []  # the stamp matches the lock: nothing installed
    # a wheel in RAPTOR_WHEELS is taken from there
    (sandbox / ".venv/.raptor-setup-stamp").unlink()
    version = next(line for line in (sandbox / "requirements.lock").read_text().splitlines() if line.startswith("torch=="))
    version = version.split("==")[1].split()[0]
    (sandbox / "wheels" / f"torch-{version}-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
    _, pips = setup(sandbox)
    assert any(f"--find-links {sandbox / 'wheels'}" in c for c in pips)


def test_auto_says_when_it_falls_back_to_the_cuda_lock_and_cpu_refuses_with_where_it_looked(sandbox):
    proc, pips = setup(sandbox, TORCH_FAILS="1")
    assert proc.returncode == 0, proc.stderr
    assert installed_lock(pips) == "requirements-cuda.lock"
    said = [line for line in proc.stdout.splitlines() if "installing requirements-cuda.lock instead" in line]
    assert len(said) == 1 and str(sandbox / "wheels") in said[0] and "RAPTOR_TORCH=cuda" in said[0]
    (sandbox / ".venv/.raptor-setup-stamp").unlink()
    proc, pips = setup(sandbox, TORCH_FAILS="1", RAPTOR_TORCH="cpu")
    assert proc.returncode == 1 and installed_lock(pips) is None
    assert "torch's CPU build (torch==" in proc.stderr and "RAPTOR_WHEELS" in proc.stderr
    proc, _ = setup(sandbox, RAPTOR_TORCH="gpu")
    assert proc.returncode == 1 and "RAPTOR_TORCH must be cpu, cuda or auto, not 'gpu'" in proc.stderr


def test_what_the_lock_does_not_list_is_removed(sandbox):
    proc, pips = setup(sandbox, EXTRA="nvidia-cublas-cu13 triton")
    assert proc.returncode == 0, proc.stderr
    assert "setup: removing packages not in requirements.lock: nvidia-cublas-cu13 triton" in proc.stdout
    assert "pip uninstall --quiet -y nvidia-cublas-cu13 triton" in pips
