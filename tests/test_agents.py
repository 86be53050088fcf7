"""The agents registry (:mod:`raptor.agents`): behaviour lives with the agents, names elsewhere are data."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from raptor.runs import checkpoints
from raptor.agents import variants
from raptor.agents import AGENTS, agent_of, get_agent
from raptor.agents.base import load_model
from raptor.config import ModelConfig, Params, TITerConfig

ROOT = Path(__file__).resolve().parents[1]
#: Outside these (the registry, the variants' data, the interface and each agent's adapter), no code
#: branches on an agent's or a variant's name.
REGISTRY_FILES = {ROOT / "raptor" / "agents" / n for n in ("__init__.py", "variants.py", "base.py")} | set(
    (ROOT / "raptor" / "agents").glob("*/agent.py"))


def _names_in(node: ast.AST) -> list[str]:
    """The agent and variant names among the string constants of ``node`` (a literal or a literal collection)."""
    names = set(AGENTS) | set(variants.VARIANTS)
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in elts if isinstance(e, ast.Constant) and e.value in names]


def _branches_on_names(path: Path) -> list[str]:
    """``file:line: name`` of each comparison with, or match case on, an agent or variant name in ``path``."""
    where = os.path.relpath(path, ROOT)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                found += [f"{where}:{node.lineno}: {n!r}" for n in _names_in(operand)]
        elif isinstance(node, ast.match_case):
            for pat in ast.walk(node.pattern):
                if isinstance(pat, ast.MatchValue):
                    found += [f"{where}:{pat.lineno}: {n!r}" for n in _names_in(pat.value)]
    return found


def test_no_code_branches_on_an_agent_or_variant_name():
    """Which agent runs is the registry's decision: `== "titer"`, `in ("pure_rl", ...)` or a `case "raptor":`
    anywhere in raptor/, tasks/, flows/ outside the registry and the agents' adapters is a scattered branch."""
    files = [f for d in ("raptor", "tasks", "flows") for f in (ROOT / d).rglob("*.py")
             if f not in REGISTRY_FILES]
    assert all(f.is_file() for f in REGISTRY_FILES) and len(REGISTRY_FILES) == 6
    assert len(files) > 30
    found = [hit for f in files for hit in _branches_on_names(f)]
    assert not found, "branches on agent/variant names:\n" + "\n".join(found)


def test_the_grep_finds_such_branches(tmp_path):
    f = tmp_path / "branchy.py"
    f.write_text('if v.agent == "titer":\n    pass\nok = x in ("pure_rl", "other")\n'
                 'match v:\n    case "raptor":\n        pass\nname = "raptor"\n')
    assert [h.split(": ", 1)[1] for h in _branches_on_names(f)] == ["'titer'", "'pure_rl'", "'raptor'"]


def test_importing_the_registry_imports_no_agent():
    code = ("import sys, raptor.agents, raptor.agents.variants; v = raptor.agents.variants.get('titer'); "
            "bad = [m for m in ('raptor.agents.titer.training', 'raptor.agents.policy', 'raptor.agents.actor_critic.rl', 'raptor.runs.checkpoints', 'torch') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_every_variant_names_a_registered_agent_with_its_interface():
    for v in variants.VARIANTS.values():
        agent = get_agent(v.agent)
        assert agent.name == v.agent and v.params == agent.sections and v.training == agent.training
        assert all(m.startswith("raptor.agents.") for m in agent.code)
        assert agent.precision(Params(), "cpu") in ("float32", "bfloat16", "float64")  # float64: no network
    with pytest.raises(ValueError, match="unknown agent 'nope'"):
        get_agent("nope")
    with pytest.raises(ValueError, match="unknown agent"):
        variants.Variant("x", "X", pretrained=False, agent="nope")


def _ctx(params: Params) -> SimpleNamespace:
    """The part of :class:`raptor.pipeline.experiment.Context` that building a policy reads."""
    return SimpleNamespace(dataset=SimpleNamespace(num_entities=7, num_relations=3), params=params)


SMALL_PARAMS = Params(model=ModelConfig(entity_dim=8, relation_dim=8, time_dim=2, step_dim=2, mlp_hidden_dim=8),
                      titer=TITerConfig(entity_dim=8, relation_dim=6, time_dim=2, state_dim=6, mlp_hidden_dim=8))


@pytest.mark.parametrize("name", list(AGENTS))
def test_each_agent_builds_saves_and_loads_its_policy(name, tmp_path):
    agent = get_agent(name)
    policy = agent.build(_ctx(SMALL_PARAMS), seed=3)
    meta = checkpoints.model_meta(policy, {"agent": name}, seed=3)
    checkpoints.save_model(tmp_path / "m.pt", policy, meta)
    for loaded, got in (load_model(tmp_path / "m.pt"), agent.load(tmp_path / "m.pt")):
        assert type(loaded) is type(policy) and agent_of(got) == name
        assert loaded.state_dict().keys() == policy.state_dict().keys()
        assert all(torch.equal(a, loaded.state_dict()[k]) for k, a in policy.state_dict().items())
    # the same seed builds the same weights
    again = agent.build(_ctx(SMALL_PARAMS), seed=3)
    assert all(torch.equal(a, again.state_dict()[k]) for k, a in policy.state_dict().items())
    other = get_agent(next(n for n in AGENTS if n != name))
    with pytest.raises(checkpoints.CheckpointError, match=f"not a {other.name} model"):
        other.load(tmp_path / "m.pt")


def test_model_files_written_before_agents_had_names_still_load(tmp_path):
    """A TITer model records ``architecture: titer`` and no agent; an actor-critic one neither."""
    titer = get_agent("titer").build(_ctx(SMALL_PARAMS), seed=0)
    checkpoints.save_model(tmp_path / "t.pt", titer, checkpoints.model_meta(titer, {"architecture": "titer"}, 0))
    loaded, meta = load_model(tmp_path / "t.pt")
    assert type(loaded) is type(titer) and "agent" not in meta
    assert all(torch.equal(a, loaded.state_dict()[k]) for k, a in titer.state_dict().items())
    ac = get_agent("actor_critic").build(_ctx(SMALL_PARAMS), seed=0)
    checkpoints.save_model(tmp_path / "a.pt", ac, checkpoints.model_meta(ac, {}, 0))
    assert type(load_model(tmp_path / "a.pt")[0]) is type(ac)


def test_test_time_behaviour_is_the_agents():
    """TITer's inductive mean is installed on the test split only (and only with titer.inductive_mean),
    and removed after; the actor-critic agent evaluates its policy as it is."""
    import dataclasses

    import numpy as np

    ctx = _ctx(SMALL_PARAMS)
    ctx.dataset.splits = {"train": np.array([[0, 0, 1, 0], [1, 1, 2, 1], [2, 2, 3, 2]], dtype=np.int64)}
    ac = get_agent("actor_critic")
    policy = ac.build(ctx, seed=0)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    with ac.test_time(ctx, policy, {}, "test"):
        assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items())
    titer = get_agent("titer")
    tp = titer.build(ctx, seed=0)
    assert tp.inductive is None
    with titer.test_time(ctx, tp, {}, "valid"):  # validation runs without TITer's inductive mean
        assert tp.inductive is None
    with titer.test_time(ctx, tp, {}, "test"):
        assert tp.inductive is not None
    assert tp.inductive is None
    off = _ctx(dataclasses.replace(SMALL_PARAMS, titer=dataclasses.replace(SMALL_PARAMS.titer, inductive_mean=False)))
    off.dataset.splits = ctx.dataset.splits
    with titer.test_time(off, tp, {}, "test"):
        assert tp.inductive is None
