"""The RL step a CUDA graph replays (raptor/agents/actor_critic/graph_step.py), run uncaptured on the CPU:
an epoch through it trains exactly what the eager epoch trains (same batches, uniforms, gradients and
updates, bit for bit), whether rows overflow the fixed scan or not, for one seed and for stacked seeds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import synthetic_env

from raptor.agents.actor_critic import rl as rl_mod
from raptor.agents.actor_critic import seeds as seeds_mod
from raptor.agents.actor_critic.graph_step import GraphStep, draw_uniforms, graph_step, rl_forward, use_cuda_graph
from raptor.agents.actor_critic.stack import SeedUniforms, StackedPolicy
from raptor.agents.policy import Policy
from raptor.config import ModelConfig, RLConfig
from raptor.mdp.device_env import DeviceEnv, on_device
from raptor.runs.rundir import RunOptions

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = ModelConfig(entity_dim=16, relation_dim=16, time_dim=4, step_dim=4, mlp_hidden_dim=24)
#: a batch size that leaves an odd-sized last batch (redone exactly, as on the GPU)
RL = RLConfig(batch_size=96)
#: TITer's clipping (and decay per batch): the gradient norms are summed on the device, read once an epoch
RL_CLIP = RLConfig(batch_size=96, clip_gradient=0.5, weight_decay=1e-3, entropy_decay_per="batch")


@pytest.fixture(scope="module")
def synthetic():
    env, q, E, R, _ = synthetic_env(max_actions=6)
    assert len(q["train"]) % RL.batch_size, "the fixture must leave a smaller last batch"
    return env, q["train"], E, R


def policy(E, R, seed):
    torch.manual_seed(seed)
    return Policy(E, R, SMALL, 3)


def weights(module):
    return [p.detach().clone() for p in module.parameters()]


def one_seed_epochs(env, queries, E, R, step_env, epochs=2, rl=RL):
    pol = policy(E, R, 7)
    opt = rl_mod.make_optimizer(pol, rl)
    env_dev = on_device(env, "cpu", "torch")
    run = RunOptions(seed=7, progress=False)
    rows = []
    for epoch in range(epochs):
        target = step_env(pol, env_dev) if step_env else env_dev
        rows.append(rl_mod.train_epoch(pol, opt, target, queries, epoch, rl, run))
    return rows, weights(pol), target


def uncaptured(scan_pad, groups=1, rows=RL.batch_size):
    def make(model, env_dev):
        fixed = DeviceEnv(env_dev.host, "cpu", scan_pad=scan_pad)
        if groups == 1:
            terms = lambda ro, beta: rl_mod.actor_critic_terms(ro, RL.gamma, beta)  # noqa: E731
        else:
            terms = lambda ro, beta: rl_mod.grouped_actor_critic_terms(ro, RL.gamma, beta, groups)  # noqa: E731
        return GraphStep(model, fixed, env_dev, rows * groups, rl_forward(model, terms, "float32", "cpu"),
                         capture=False)
    return make


@pytest.mark.parametrize("rl", [RL, RL_CLIP], ids=["paper", "titer-defaults"])
@pytest.mark.parametrize("scan_pad", [256, 0])
def test_an_epoch_through_the_step_is_the_eager_epoch(synthetic, scan_pad, rl):
    env, queries, E, R = synthetic
    eager_rows, eager_w, _ = one_seed_epochs(env, queries, E, R, None, rl=rl)
    step_rows, step_w, step = one_seed_epochs(env, queries, E, R, uncaptured(scan_pad), rl=rl)
    assert step_rows == eager_rows
    assert ("grad_norm" in step_rows[0]) == bool(rl.clip_gradient)
    for a, b in zip(eager_w, step_w):
        assert torch.equal(a, b)
    # scan_pad 0 makes rows overflow (then redone exactly); 256 leaves none on this graph
    assert (step.redone > 0) == (scan_pad == 0)


@pytest.mark.parametrize("rl", [RL, RL_CLIP], ids=["paper", "titer-defaults"])
def test_stacked_seeds_through_the_step_are_the_eager_stacked_epoch(synthetic, rl):
    env, queries, E, R = synthetic
    env_dev = on_device(env, "cpu", "torch")
    runs = [RunOptions(seed=s, progress=False) for s in (3, 5)]
    out = []
    for make in (None, uncaptured(0, groups=2)):
        stack = StackedPolicy([policy(E, R, s) for s in (3, 5)])
        opt = rl_mod.make_optimizer(stack, rl)
        target = make(stack, env_dev) if make else env_dev
        rows = [seeds_mod.train_epoch(stack, opt, target, queries, e, rl, runs) for e in range(2)]
        out.append((rows, weights(stack)))
    assert out[0][0] == out[1][0]
    assert all(("grad_norm" in row) == bool(rl.clip_gradient) for row in out[0][0][0])
    for a, b in zip(out[0][1], out[1][1]):
        assert torch.equal(a, b)
    assert target.redone > 0


def test_the_uniforms_drawn_before_are_those_the_eager_rollout_draws():
    gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
    drawn = draw_uniforms(gens, 5, 3, "cpu")
    again = [torch.Generator().manual_seed(s) for s in (1, 2)]
    eager = SeedUniforms(again, 5, "cpu")
    for k in range(3):
        assert torch.equal(drawn[k], eager[k])


def test_the_graph_is_used_only_on_cuda_with_the_device_environment(synthetic):
    env, queries, E, R = synthetic
    env_dev = on_device(env, "cpu", "torch")
    assert not use_cuda_graph("auto", "cpu", env_dev)
    assert not use_cuda_graph("off", "cuda", env_dev)
    assert not use_cuda_graph("auto", "cuda", env)  # host candidates cannot be captured
    assert use_cuda_graph("auto", "cuda", env_dev)
    with pytest.raises(ValueError, match="cuda_graph"):
        use_cuda_graph("on", "cpu", env_dev)
    pol = policy(E, R, 0)
    assert graph_step(pol, env_dev, env, 8, None, RunOptions()) is env_dev


def test_a_step_needs_the_fixed_shape_environment(synthetic):
    env, queries, E, R = synthetic
    env_dev = on_device(env, "cpu", "torch")
    with pytest.raises(ValueError, match="scan_pad"):
        GraphStep(policy(E, R, 0), env_dev, env_dev, 8, None, capture=False)


def test_stacked_runs_must_agree_on_the_graph(synthetic):
    env, queries, E, R = synthetic
    runs = [RunOptions(seed=0, progress=False), RunOptions(seed=1, progress=False, cuda_graph="off")]
    with pytest.raises(ValueError, match="cuda_graph"):
        seeds_mod.train_seeds([policy(E, R, 0), policy(E, R, 1)], env, queries, RL, runs=runs)


def test_every_row_counts_once(synthetic):
    """The step's parts are per group, in LOSS_PARTS order, and the flag is not among them."""
    env, queries, E, R = synthetic
    env_dev = on_device(env, "cpu", "torch")
    stack = StackedPolicy([policy(E, R, s) for s in (3, 5)])
    step = uncaptured(256, groups=2, rows=8)(stack, env_dev)
    batch = np.concatenate([queries[:8], queries[8:16]])
    parts = step(batch, draw_uniforms([torch.Generator().manual_seed(g) for g in (0, 1)], 8, env.K, "cpu"), 0.01)
    assert parts.shape == (2, len(rl_mod.LOSS_PARTS))
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in stack.parameters())
    # Each group's row is its seed's batch alone: the one-seed step of that seed, its rows and uniforms.
    for g, (seed, rows) in enumerate([(3, queries[:8]), (5, queries[8:16])]):
        alone = uncaptured(256, groups=1, rows=8)(policy(E, R, seed), env_dev)
        want = alone(rows, draw_uniforms([torch.Generator().manual_seed(g)], 8, env.K, "cpu"), 0.01)
        torch.testing.assert_close(parts[g], want.reshape(-1))


def test_a_step_that_cannot_be_captured_warns_and_trains_the_same(synthetic, monkeypatch):
    """A capture that fails (an op that synchronises) must not end the run: the step goes on uncaptured."""
    env, queries, E, R = synthetic
    eager_rows, eager_w, _ = one_seed_epochs(env, queries, E, R, None, epochs=1)

    def failing_capture(self, warmup=3):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(GraphStep, "_capture", failing_capture)

    def capturing(model, env_dev):
        step = uncaptured(256)(model, env_dev)
        step.capture = True
        return step

    with pytest.warns(RuntimeWarning, match="could not be captured"):
        rows, w, step = one_seed_epochs(env, queries, E, R, capturing, epochs=1)
    assert rows == eager_rows and all(torch.equal(a, b) for a, b in zip(eager_w, w))
    assert step.graph is None and not step.capture


# ------------------------------------------------------------------------------------------------
# The trainers' own wiring (rl.train, seeds.train_seeds, pretrain.pretrain, pretrain_seeds.pretrain_seeds):
# with the graph's condition forced true and the capture off, a run goes through GraphStep and must
# train exactly what it trains eagerly.
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def forced_steps(monkeypatch):
    """Every trainer's ``graph_step`` returns an uncaptured GraphStep (on the CPU); the steps made are listed."""
    from raptor.agents.actor_critic import graph_step as gs

    made = []
    real_init = GraphStep.__init__

    def init(self, *args, **kwargs):
        kwargs["capture"] = False
        real_init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(gs, "use_cuda_graph", lambda mode, device, env: mode == "auto" and isinstance(env, DeviceEnv))
    monkeypatch.setattr(GraphStep, "__init__", init)
    return made


def run_weights(policies):
    return [w for p in policies for w in weights(p)]


@pytest.mark.parametrize("scan_pad", [256, 0])
def test_rl_train_through_the_step_equals_eager(synthetic, forced_steps, scan_pad):
    env, queries, E, R = synthetic
    out = []
    for mode in ("off", "auto"):
        pol = policy(E, R, 7)
        run = RunOptions(seed=7, epochs=2, progress=False, resume=False, env_backend="torch", cuda_graph=mode,
                         graph_scan_pad=scan_pad)
        res = rl_mod.train(pol, env, queries, RL, run=run)
        out.append(([{k: v for k, v in row.items() if k != "seconds"} for row in res.history], weights(pol)))
    assert len(forced_steps) == 1 and (forced_steps[0].redone > 0) == (scan_pad == 0)
    assert out[0][0] == out[1][0]
    assert all(torch.equal(a, b) for a, b in zip(out[0][1], out[1][1]))


def test_stacked_rl_through_the_step_equals_eager(synthetic, forced_steps):
    env, queries, E, R = synthetic
    out = []
    for mode in ("off", "auto"):
        pols = [policy(E, R, s) for s in (3, 5)]
        runs = [RunOptions(seed=s, epochs=2, progress=False, resume=False, env_backend="torch", cuda_graph=mode,
                           graph_scan_pad=0) for s in (3, 5)]
        results = seeds_mod.train_seeds(pols, env, queries, RL, runs=runs)
        out.append(([[{k: v for k, v in row.items() if k != "seconds"} for row in r.history] for r in results],
                    run_weights(pols)))
    assert len(forced_steps) == 1 and forced_steps[0].parts_shape[0] == 2 and forced_steps[0].redone > 0
    assert out[0][0] == out[1][0]
    assert all(torch.equal(a, b) for a, b in zip(out[0][1], out[1][1]))


@pytest.fixture(scope="module")
def labeled():
    from raptor.config import EnvConfig, LabelingConfig
    from raptor.data.dataset import with_inverse_queries
    from raptor.data.graph import TemporalGraph
    from raptor.data.synthetic import SyntheticSpec, generate
    from raptor.labeling.compute import compute_labels, label_pairs
    from raptor.mdp.env import TemporalEnv

    spec = SyntheticSpec(seed=1)
    splits = generate(spec)
    graph = TemporalGraph.from_quadruples(np.concatenate(list(splits.values())), spec.num_entities, spec.num_relations)
    env = TemporalEnv(graph, EnvConfig(max_actions=6))
    train = with_inverse_queries(splits["train"], spec.num_relations).astype(np.int64)
    targets, times = label_pairs(splits["train"])
    table = compute_labels(graph, targets, times, max_path_length=3, config=LabelingConfig(max_in_edges=200))
    return spec, env, train, table


def pretrain_config():
    from raptor.config import PretrainConfig

    return PretrainConfig(batch_size=96)


@pytest.mark.parametrize("no_reachable", ["policy", "stop"])
def test_pretraining_through_the_step_equals_eager(labeled, forced_steps, no_reachable):
    from dataclasses import replace

    from raptor.agents.actor_critic.pretrain import pretrain

    spec, env, train, table = labeled
    cfg = replace(pretrain_config(), no_reachable=no_reachable)
    assert len(train) % cfg.batch_size, "the fixture must leave a smaller last batch"
    out = []
    for mode in ("off", "auto"):
        pol = policy(spec.num_entities, spec.num_relations, 2)
        run = RunOptions(seed=2, epochs=2, progress=False, resume=False, env_backend="torch", cuda_graph=mode,
                         graph_scan_pad=0)
        history = pretrain(pol, env, table, train, cfg, run)
        out.append(([{k: v for k, v in row.items() if k != "seconds"} for row in history], weights(pol)))
    assert len(forced_steps) == 1 and forced_steps[0].redone > 0
    assert out[0][0] == out[1][0]
    assert all(torch.equal(a, b) for a, b in zip(out[0][1], out[1][1]))


def test_stacked_pretraining_through_the_step_equals_eager(labeled, forced_steps):
    from raptor.agents.actor_critic.pretrain_seeds import pretrain_seeds

    spec, env, train, table = labeled
    out = []
    for mode in ("off", "auto"):
        pols = [policy(spec.num_entities, spec.num_relations, s) for s in (3, 5)]
        runs = [RunOptions(seed=s, epochs=2, progress=False, resume=False, env_backend="torch", cuda_graph=mode,
                           graph_scan_pad=256) for s in (3, 5)]
        histories = pretrain_seeds(pols, env, table, train, pretrain_config(), runs)
        out.append(([[{k: v for k, v in row.items() if k != "seconds"} for row in h] for h in histories],
                    run_weights(pols)))
    assert len(forced_steps) == 1 and forced_steps[0].parts_shape[0] == 2
    assert out[0][0] == out[1][0]
    assert all(torch.equal(a, b) for a, b in zip(out[0][1], out[1][1]))


def test_a_partitioned_table_pretrains_without_the_step(labeled, forced_steps, tmp_path):
    """Its parts change between batches (a graph holds one table's tensors): eager, and says nothing."""
    from raptor.agents.actor_critic.pretrain import pretrain_step
    from raptor.labeling.store import PartitionedLabels

    spec, env, train, table = labeled
    env_dev = on_device(env, "cpu", "torch")
    fake = PartitionedLabels.__new__(PartitionedLabels)
    assert pretrain_step(policy(spec.num_entities, spec.num_relations, 0), env_dev, env, fake, 1, pretrain_config(),
                         RunOptions(env_backend="torch")) is env_dev
    assert isinstance(pretrain_step(policy(spec.num_entities, spec.num_relations, 0), env_dev, env, table, 1,
                                    pretrain_config(), RunOptions(env_backend="torch")), GraphStep)
