"""The lock files are locks: every package pinned with its hashes, complete, and in step with pyproject.toml.

Static checks of requirements.lock (torch's CPU build), requirements-cuda.lock (CUDA build) and
requirements-server.lock (docker/compose.yaml's servers), plus the installed environment against the lock it
came from. No network: the dependency closure is computed from the installed packages' metadata.
"""
from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ("requirements.lock", "requirements-cuda.lock", "requirements-server.lock")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")
#: The Python release scripts/lock.sh resolves for (``--python-version``): every 3.11 from 3.11.0 up.
LOCK_PYTHON = "3.11.0"
CUDA_ONLY = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")


def parse_lock(name: str) -> dict[str, tuple[str, list[str]]]:
    """{canonical name: (version, [hash options])}; fails on any requirement that is not `name==version`."""
    text = (ROOT / name).read_text()
    entries: dict[str, tuple[str, list[str]]] = {}
    # A requirement is one logical line: physical lines joined at a trailing backslash, comments dropped.
    logical = re.sub(r"\\\n", " ", "\n".join(line.split("#", 1)[0] if not line.lstrip().startswith("--hash")
                                             else line for line in text.splitlines()))
    for line in logical.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        req, options = tokens[0], tokens[1:]
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", req)
        assert m, f"{name}: not an exact `name==version` pin: {line.strip()!r}"
        assert options and all(HASH.fullmatch(opt) for opt in options), f"{name}: {req} needs --hash=sha256:..."
        key = canonicalize_name(m[1])
        assert key not in entries, f"{name}: {key} listed twice"
        entries[key] = (m[2], options)
    return entries


def project_requirements(extras=("test",)) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return [Requirement(r) for r in reqs]


@pytest.mark.parametrize("lock", LOCKS)
def test_every_line_is_pinned_with_hashes(lock):
    entries = parse_lock(lock)
    assert len(entries) > 100
    assert "--index-url" not in (ROOT / lock).read_text() and "-e " not in (ROOT / lock).read_text()


@pytest.mark.parametrize("lock", LOCKS[:2])
def test_pyproject_pins_are_the_locks(lock):
    entries = parse_lock(lock)
    for req in project_requirements():
        spec = str(req.specifier)
        assert spec.startswith("==") and "," not in spec, f"pyproject.toml: {req} is not an exact pin"
        key = canonicalize_name(req.name)
        assert key in entries, f"{lock} lacks {req.name}"
        # torch==2.13.0 in pyproject.toml; requirements.lock has its CPU build 2.13.0+cpu (same public version).
        assert Version(entries[key][0]).public == Version(spec[2:]).public, \
            f"{req.name}: pyproject.toml {spec}, {lock} =={entries[key][0]}"


def test_torch_builds_are_explicit():
    cpu, cuda = parse_lock("requirements.lock"), parse_lock("requirements-cuda.lock")
    assert Version(cpu["torch"][0]).local == "cpu"
    assert Version(cuda["torch"][0]).local is None and cuda["torch"][0] == Version(cpu["torch"][0]).public
    assert not [n for n in cpu if CUDA_ONLY.match(n)], "the CPU lock holds CUDA packages"
    cuda_only = {n for n in cuda if CUDA_ONLY.match(n)}
    assert "triton" in cuda_only and any(n.startswith("nvidia-") for n in cuda_only)
    # Apart from torch's build and its CUDA packages the two environments are the same.
    assert set(cuda) - set(cpu) == cuda_only and set(cpu) <= set(cuda)
    assert {n: v for n, (v, _) in cpu.items() if n != "torch"} == \
           {n: cuda[n][0] for n in cpu if n != "torch"}


def test_server_lock_agrees_with_the_main_lock():
    main, server = parse_lock("requirements.lock"), parse_lock("requirements-server.lock")
    assert {"prefect", "mlflow", "asyncpg", "psycopg2-binary"} <= set(server) and "torch" not in server
    for name, (version, _) in server.items():
        if name in main:
            assert version == main[name][0], f"{name}: server lock {version}, requirements.lock {main[name][0]}"


def test_the_lock_is_resolved_for_the_python_this_file_assumes():
    assert f"--python-version {LOCK_PYTHON} " in (ROOT / "scripts/lock.sh").read_text()


def test_installers_check_hashes_and_pull_nothing_else():
    setup = (ROOT / "scripts/setup.sh").read_text()
    assert '--require-hashes --no-deps -r "$lock"' in setup
    assert "requirements.lock" in setup and "requirements-cuda.lock" in setup
    cpu = (ROOT / "docker/Dockerfile").read_text()
    assert "--require-hashes --no-deps" in cpu and "-r requirements.lock" in cpu
    cuda = (ROOT / "docker/Dockerfile.cuda").read_text()
    assert "--require-hashes --no-deps" in cuda and "-r requirements-cuda.lock" in cuda


def _installed_lock() -> str:
    torch_version = Version(metadata.version("torch"))
    return "requirements.lock" if torch_version.local == "cpu" else "requirements-cuda.lock"


def test_installed_environment_is_the_lock():
    """The environment running the tests holds exactly its lock's packages (pip freeze == lock)."""
    entries = parse_lock(_installed_lock())
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    installed.pop("raptor-tkg", None)
    installed.pop("pip", None)
    wrong = {n: (installed.get(n), v) for n, (v, _) in entries.items() if installed.get(n) != v}
    assert not wrong, f"installed vs {_installed_lock()}: {wrong} (run scripts/setup.sh)"
    assert set(installed) == set(entries), f"not in the lock: {sorted(set(installed) - set(entries))}"


def test_lock_is_the_dependency_closure_of_pyproject():
    """Following Requires-Dist (with extras and markers) from pyproject's pins reaches exactly the lock."""
    lock = _installed_lock()
    entries = parse_lock(lock)
    for name, (version, _) in entries.items():  # the metadata read below is the locked release's
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{name} is not installed here: the closure needs the lock's environment")
        if installed != version:
            pytest.skip(f"{name} {installed} is installed, {lock} has {version}")
    needed: set[str] = set()
    # This interpreter, and the oldest 3.11 the lock is resolved for (scripts/lock.sh): a package that
    # only an older patch release needs (async-timeout for redis before 3.11.3) is in the lock too.
    for env in (default_environment(), {**default_environment(), "python_full_version": LOCK_PYTHON}):
        todo = [(req, "") for req in project_requirements()]
        seen: dict[str, set[str]] = {}
        while todo:
            req, extra = todo.pop()
            if req.marker and not req.marker.evaluate({**env, "extra": extra}):
                continue
            key = canonicalize_name(req.name)
            assert key in entries, f"{lock} lacks {req.name} (needed as {req})"
            assert req.specifier.contains(entries[key][0], prereleases=True), \
                f"{lock}: {key}=={entries[key][0]} vs {req}"
            new_extras = {""} | set(req.extras)
            if key in seen and new_extras <= seen[key]:
                continue
            seen.setdefault(key, set()).update(new_extras)
            for dep in metadata.requires(key) or []:
                for ex in new_extras:
                    todo.append((Requirement(dep), ex))
        needed |= set(seen)
    assert needed == set(entries), f"{lock} lists packages nothing needs: {sorted(set(entries) - needed)}"
