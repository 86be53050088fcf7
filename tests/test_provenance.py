"""raptor.common.provenance: code closures and hashes."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from raptor.common import provenance


def test_module_files_follow_imports_transitively():
    files = {p.name for p in provenance.module_files(["raptor.common.provenance"])}
    assert files == {"__init__.py", "provenance.py"}
    rl = {p.name for p in provenance.module_files(["raptor.agents.actor_critic.rl"])}
    assert {"rl.py", "rollout.py", "sampling.py", "loop.py", "__init__.py"} <= rl


def test_code_hash_changes_with_the_closure():
    assert provenance.code_hash(["raptor.agents.actor_critic.rl"]) != provenance.code_hash(["raptor.common.provenance"])
    assert provenance.code_hash(["raptor.agents.actor_critic.rl"]) == provenance.code_hash(["raptor.agents.actor_critic.rl"])


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
            hashes = list(pool.map(lambda _: provenance.code_hash(["raptor.agents.actor_critic.rl"]), range(4)))
    finally:
        provenance._closure.cache_clear()
    assert most == 1
    assert len(set(hashes)) == 1


# ------------------------------------------------------------------------------------------------
# Cache keys follow what a stage runs: an edit reaches only the stages and runs that run the code
# ------------------------------------------------------------------------------------------------

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from raptor.pipeline import stages  # noqa: E402
from raptor.pipeline.experiment import run_code  # noqa: E402

ALL_VARIANTS = ["pure_rl", "raptor", "titer"]
TITER_FILES = {"raptor/agents/titer/training.py", "raptor/agents/titer/dirichlet.py", "raptor/agents/titer/agent.py"}


def _stage(name: str):
    return next(s for s in stages.main_stages(ALL_VARIANTS) + stages.ablation_stages() if s.name == name)


@pytest.mark.parametrize("name", ["pretrain", "ablation-pretrain", "finetune-pure_rl", "finetune-raptor",
                                  "evaluate-pure_rl", "evaluate-raptor", "ablation"])
def test_titer_code_is_no_dependency_of_the_other_stages(name):
    assert not set(stages.code_deps(_stage(name))) & TITER_FILES
    assert TITER_FILES <= set(stages.code_deps(_stage("finetune-titer")))


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of the package that provenance hashes instead of the real one; ``edit(file)`` appends
    a comment to one of its files."""
    pkg = tmp_path / "raptor"
    shutil.copytree(provenance.PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "PACKAGE_DIR", pkg)
    provenance._closure.cache_clear()

    def edit(rel: str) -> None:
        with (pkg / rel).open("a") as fh:
            fh.write("\n# an edit\n")
        provenance._closure.cache_clear()

    yield edit
    provenance._closure.cache_clear()


def _hashes() -> dict[str, str]:
    """The code hashes the runs record: each variant's RL run, a pretraining run (its module)."""
    out = {v: provenance.code_hash(run_code(v)) for v in ALL_VARIANTS}
    out["pretrain"] = provenance.code_hash(["raptor.agents.actor_critic.pretrain"])
    return out


@pytest.mark.parametrize("edited", ["agents/titer/training.py", "agents/titer/dirichlet.py", "agents/titer/agent.py"])
def test_an_edit_in_titer_changes_only_titer_runs_code_hash(package_copy, edited):
    before = _hashes()
    package_copy(edited)
    after = _hashes()
    assert {k for k in before if before[k] != after[k]} == {"titer"}


@pytest.mark.parametrize("edited", ["labeling/kernels.py", "labeling/store.py"])
def test_an_edit_in_labeling_changes_only_the_pretraining_code_hash(package_copy, edited):
    """The pretrained variant's RL runs see labeling through their initial weights (an input), not their code."""
    before = _hashes()
    package_copy(edited)
    after = _hashes()
    assert {k for k in before if before[k] != after[k]} == {"pretrain"}


@pytest.mark.parametrize("edited", ["raptor/labeling/kernels.py", "raptor/labeling/store.py"])
def test_an_edit_in_labeling_reaches_label_pretrain_and_the_pretrained_variant_only(edited):
    """Through code deps (label, pretrain) and then through the outputs the stages read (DVC's graph)."""
    main = stages.main_stages(ALL_VARIANTS)
    direct = {s.name for s in main if edited in stages.code_deps(s)}
    assert direct == {"label", "pretrain"}
    reached, outs = set(direct), {p for s in main if s.name in direct for p in s.outputs.values()}
    changed = True
    while changed:
        changed = False
        for s in main:
            if s.name not in reached and set(s.inputs.values()) & outs:
                reached.add(s.name)
                outs |= set(s.outputs.values())
                changed = True
    per_variant = {n for n in reached if n.startswith(("finetune-", "evaluate-"))}
    assert per_variant == {"finetune-raptor", "evaluate-raptor"}
    assert not reached & {"ingest", "graph", "finetune-pure_rl", "finetune-titer", "evaluate-pure_rl",
                          "evaluate-titer"}


def test_pretraining_runs_no_experiment_code():
    files = {p.relative_to(provenance.PACKAGE_DIR).as_posix() for p in provenance.module_files(["raptor.agents.actor_critic.pretrain"])}
    assert not files & {"pipeline/experiment.py", "agents/beam.py", "evaluation/ranking.py", "agents/titer/training.py",
                         "agents/titer/dirichlet.py", "agents/actor_critic/rl.py", "agents/titer/agent.py"}, sorted(files)
    deps = set(stages.code_deps(_stage("pretrain")))
    assert not deps & {"raptor/pipeline/experiment.py", "raptor/agents/beam.py", "raptor/agents/actor_critic/rl.py", "raptor/agents/titer/training.py"}


def test_runtime_record_names_the_commit_versions_threads_and_machine():
    import subprocess

    import numpy
    import torch

    from raptor.common.provenance import PACKAGE_DIR, runtime_record

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        r = runtime_record("cpu")
    finally:
        torch.set_num_threads(threads)
    head = subprocess.run(["git", "-C", str(PACKAGE_DIR.parent), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert r["commit"] == (head.stdout.strip() or None) and isinstance(r["dirty"], bool) == bool(r["commit"])
    assert (r["torch"], r["numpy"], r["threads"], r["accelerator"]) == (torch.__version__, numpy.__version__, 1, None)
    assert r["python"].count(".") == 2 and r["cpu"]
