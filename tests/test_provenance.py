"""raptor.provenance: code closures and hashes."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from raptor import provenance


def test_module_files_follow_imports_transitively():
    files = {p.name for p in provenance.module_files(["raptor.provenance"])}
    assert files == {"__init__.py", "provenance.py"}
    rl = {p.name for p in provenance.module_files(["raptor.rl"])}
    assert {"rl.py", "rollout.py", "sampling.py", "loop.py", "__init__.py"} <= rl


def test_code_hash_changes_with_the_closure():
    assert provenance.code_hash(["raptor.rl"]) != provenance.code_hash(["raptor.provenance"])
    assert provenance.code_hash(["raptor.rl"]) == provenance.code_hash(["raptor.rl"])


def test_parallel_runs_never_parse_at_once(monkeypatch):
    """Runs on a thread pool hash their code together; CPython 3.11 fails when two threads build
    an AST at the same moment (python/cpython#106905), so parsing must be serialised."""
    real_parse = provenance.ast.parse
    active, most = 0, 0
    guard = threading.Lock()

    def slow_parse(*args, **kwargs):
        nonlocal active, most
        with guard:
            active += 1
            most = max(most, active)
        time.sleep(0.005)  # widen the window in which another thread could enter
        try:
            return real_parse(*args, **kwargs)
        finally:
            with guard:
                active -= 1

    monkeypatch.setattr(provenance.ast, "parse", slow_parse)
    provenance._closure.cache_clear()
    try:
        with ThreadPoolExecutor(4) as pool:
            hashes = list(pool.map(lambda _: provenance.code_hash(["raptor.rl"]), range(4)))
    finally:
        provenance._closure.cache_clear()
    assert most == 1
    assert len(set(hashes)) == 1
