"""The benchmark scripts are not run by the tests (they time real data), but the library names they import
must exist: a rename in ``raptor/`` must not leave a benchmark that fails at its first line."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parent.parent / "benchmarks").glob("*.py"))


def raptor_imports(path: Path) -> list[tuple[str, str | None]]:
    """``(module, name)`` of every ``from raptor... import name`` (``name`` None for ``import raptor...``)."""
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "raptor":
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.split(".")[0] == "raptor"]
    return out


def missing_names(path: Path) -> list[str]:
    missing = []
    for module, name in raptor_imports(path):
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{module} ({exc})")
            continue
        if name is not None and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    return missing


def test_the_check_finds_a_name_that_does_not_exist(tmp_path):
    script = tmp_path / "stale.py"
    script.write_text("import torch\nfrom raptor.config import load_resolved, no_such_function\n"
                      "from raptor.no_such_module import x\n")
    assert missing_names(script)[0] == "raptor.config.no_such_function"
    assert missing_names(script)[1].startswith("raptor.no_such_module (")
    assert len(missing_names(script)) == 2


@pytest.mark.parametrize("path", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_a_benchmarks_library_imports_exist(path):
    assert missing_names(path) == [], f"{path.name} imports names raptor/ does not have"
