"""What a result was computed from: the code it ran and the content of its inputs.

* :func:`module_files`: the source files of a module of this package and of every ``raptor``
  module it imports, transitively (read from the source with :mod:`ast`, nothing is imported);
  the stage graph lists them as DVC code dependencies.
* :func:`code_hash`: one SHA-256 over those files' contents (a comment change counts: cheap and safe).
* :func:`content_hash`: SHA-256 of a file, or of a folder's files (relative names and contents),
  so a run fingerprint changes when its data, graph, labels or initial weights do.
* :func:`runtime_record`: what else a run's numbers depend on (commit, library versions, threads, machine),
  kept in its ``summary.json`` and ``metrics.json``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import threading
from pathlib import Path
from typing import Callable, Iterable, Optional

PACKAGE = "raptor"
PACKAGE_DIR = Path(__file__).resolve().parents[1]

# CPython 3.11's AST constructor keeps its recursion depth in interpreter-wide state, so two
# threads parsing at once can fail with "SystemError: AST constructor recursion depth mismatch"
# (python/cpython#106905). Runs started together on a thread pool (`train.parallel_runs`) all hash
# their code first, so parsing is serialised here.
_PARSE_LOCK = threading.Lock()


def _module_path(module: str) -> Path | None:
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    parts = module.split(".")[1:]
    if not parts:
        return PACKAGE_DIR / "__init__.py"
    rel = Path(*parts)
    for cand in (PACKAGE_DIR / rel.with_suffix(".py"), PACKAGE_DIR / rel / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _imports(path: Path, module: str) -> set[str]:
    """``raptor`` modules imported anywhere in ``path`` (module level or inside functions)."""
    source = path.read_text()
    with _PARSE_LOCK:
        tree = ast.parse(source, filename=str(path))
    is_pkg = path.name == "__init__.py"
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[: len(base) - (node.level - 1)]
                target = ".".join(parent + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)  # `from . import x` imports module x
    return {m for m in found if _module_path(m) is not None}


@functools.lru_cache(maxsize=None)
def _closure(module: str) -> frozenset[str]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        path = _module_path(m)
        if path is None:
            raise ValueError(f"{m!r} is not a module of the {PACKAGE} package")
        seen.add(m)
        parts = m.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run too
        todo.extend(_imports(path, m) - seen)
    return frozenset(seen)


def module_files(modules: Iterable[str]) -> list[Path]:
    """Sorted source files of ``modules`` and of the ``raptor`` modules they import, transitively."""
    mods: set[str] = set()
    for m in modules:
        mods |= _closure(m)
    return sorted({_module_path(m) for m in mods})


def code_hash(modules: Iterable[str]) -> str:
    """SHA-256 over the sources :func:`module_files` lists (names relative to the package)."""
    h = hashlib.sha256()
    for path in module_files(modules):
        h.update(str(path.relative_to(PACKAGE_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def content_hash(path: str | Path, file_digest: Optional[Callable[[Path], str]] = None) -> str:
    """SHA-256 of a file's bytes, or of a folder's files (sorted relative names and contents).
    ``file_digest`` (a file -> hex SHA-256) replaces a file's plain digest, e.g. to leave out fields
    that do not describe the content (:func:`raptor.labeling.store.label_table_hash`)."""
    digest = file_digest or _file_digest
    path = Path(path)
    if path.is_file():
        return digest(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or folder: {path}")
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + b"\0" + bytes.fromhex(digest(f)))
    return h.hexdigest()


def _file_digest(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def runtime_record(device: str = "cpu") -> dict[str, object]:
    """What a run's numbers depend on besides its params and inputs, as its records keep it: the git commit
    of this package's checkout (``None`` outside one) and whether its tracked files had uncommitted
    changes, the versions of Python, torch, NumPy and numba, the threads torch computes with, the CPU's
    model and, on a GPU, the device's name. Bit-identical reruns are promised on the same machine, commit
    and thread count: this says which those were."""
    import platform
    import subprocess

    import numpy
    import torch

    def git(*args: str) -> Optional[str]:
        try:
            # --no-optional-locks: a status must not take the index lock from a user's commit
            return subprocess.run(["git", "--no-optional-locks", "-C", str(PACKAGE_DIR.parent), *args],
                                  capture_output=True, text=True, check=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", PACKAGE) if commit else None
    try:
        import numba

        numba_version: Optional[str] = numba.__version__
    except ImportError:
        numba_version = None
    dev = torch.device(device)
    return {
        "commit": commit or None, "dirty": None if dirty is None else bool(dirty),  # None: git could not tell
        "python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
        "numba": numba_version, "threads": torch.get_num_threads(), "cpu": _cpu_model(),
        "accelerator": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
    }


@functools.lru_cache(maxsize=1)
def _cpu_model() -> Optional[str]:
    """The CPU's model name (Linux: /proc/cpuinfo), else what :mod:`platform` says, else ``None``."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None
