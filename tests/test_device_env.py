"""The device-resident environment (torch, here on CPU) against the host environment (numpy + numba):
the same candidates in the same slots, the same moves, rewards and training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from raptor.config import EnvConfig, ModelConfig, RLConfig
from raptor.mdp.device_env import DeviceEnv, on_device
from raptor.mdp.env import TemporalEnv
from raptor.data.graph import TemporalGraph
from raptor.agents.policy import Policy
from raptor.agents.actor_critic.rl import train_epoch, make_optimizer
from raptor.agents.rollout import rollout
from raptor.runs.rundir import RunOptions


#: Where the device environment is checked: the CPU always (CI), a GPU where there is one.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def random_graph(rng, E, R, T, n, hub: bool):
    quads = np.stack([rng.integers(0, E, n), rng.integers(0, R, n), rng.integers(0, E, n), rng.integers(0, T, n)], 1)
    if hub:  # many parallel edges between two entities: scans must skip long runs of visited targets
        m = n // 2
        quads[:m, 0], quads[:m, 2] = 0, 1
    quads = np.unique(quads, axis=0)
    return TemporalGraph.from_quadruples(quads, E, R)


def assert_same_candidates(host, dev):
    for name in ("entity", "relation", "time", "mask", "count"):
        np.testing.assert_array_equal(getattr(dev, name).cpu().numpy(), getattr(host, name), err_msg=name)


def assert_same_state(host, dev):
    got = dev.numpy()
    for name in ("query_entity", "query_relation", "query_time", "entity", "time", "visited", "path_entity",
                 "path_relation", "path_time"):
        np.testing.assert_array_equal(getattr(got, name), getattr(host, name), err_msg=name)
    assert got.step == host.step


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    E=st.integers(2, 10),
    R=st.integers(1, 3),
    T=st.integers(1, 8),
    n=st.integers(0, 120),
    cap=st.integers(1, 6),
    K=st.integers(1, 4),
    strict=st.booleans(),
    mask_before_cap=st.booleans(),
    cap_includes_stop=st.booleans(),
    walk=st.sampled_from(["forward", "backward"]),
    same_time=st.booleans(),
    hub=st.booleans(),
)
@pytest.mark.parametrize("device", DEVICES)
def test_walks_match_the_host_environment(device, seed, E, R, T, n, cap, K, strict, mask_before_cap,
                                          cap_includes_stop, walk, same_time, hub):
    rng = np.random.default_rng(seed)
    graph = random_graph(rng, E, R, T, n, hub)
    cfg = EnvConfig(max_path_length=K, max_actions=cap + int(cap_includes_stop), strict_history=strict,
                    mask_before_cap=mask_before_cap, cap_includes_stop=cap_includes_stop)
    host = TemporalEnv(graph, cfg).with_walk(walk, same_time)
    dev = DeviceEnv(host, device)
    B = 24
    queries = np.stack([rng.integers(0, E, B), rng.integers(0, 2 * R, B), rng.integers(0, E, B),
                        rng.integers(0, T + 1, B)], 1)
    hs, ds = host.reset(queries), dev.reset(torch.from_numpy(queries))
    assert_same_state(hs, ds)
    for _ in range(K):
        hc, dc = host.candidates(hs), dev.candidates(ds)
        assert_same_candidates(hc, dc)
        # a random valid action per row (STOP where allowed, else an edge)
        choice = np.array([rng.choice(np.flatnonzero(hc.mask[b])) for b in range(B)])
        hs, ds = host.step(hs, hc, choice), dev.step(ds, dc, torch.from_numpy(choice).to(device))
        assert_same_state(hs, ds)
    np.testing.assert_array_equal(dev.reward(ds).cpu().numpy(), host.reward(hs))


def test_hub_windows_skip_runs_of_visited_targets():
    """A window of 40 edges back to the visited query entity, with 3 other edges in between: the scan
    must pass all of them to fill a cap of 3 (a fixed-width scan of cap + a few would miss)."""
    quads = [(0, 0, 1, t) for t in range(40)] + [(1, 0, 2, 5), (1, 0, 3, 17), (1, 0, 4, 30)]
    graph = TemporalGraph.from_quadruples(np.array(quads), 5, 1)
    host = TemporalEnv(graph, EnvConfig(max_path_length=2, max_actions=3))
    dev = DeviceEnv(host)
    hs = host.move(host.reset(np.array([[0, 0, 4, 40]])), np.array([1]), np.array([0]), np.array([0]))
    ds = dev.move(dev.reset(np.array([[0, 0, 4, 40]])), torch.tensor([1]), torch.tensor([0]), torch.tensor([0]))
    hc, dc = host.candidates(hs), dev.candidates(ds)
    assert hc.entity[0].tolist() == [1, 4, 3, 2]  # STOP, then the three non-visited targets, latest first
    assert_same_candidates(hc, dc)


def test_rollouts_and_training_are_the_same_on_both_backends():
    rng = np.random.default_rng(3)
    graph = random_graph(rng, 12, 3, 10, 150, hub=True)
    host = TemporalEnv(graph, EnvConfig(max_path_length=3, max_actions=4))
    queries = np.stack([rng.integers(0, 12, 64), rng.integers(0, 6, 64), rng.integers(0, 12, 64),
                        rng.integers(1, 11, 64)], 1)
    model = ModelConfig(entity_dim=8, relation_dim=8, time_dim=4, step_dim=4, mlp_hidden_dim=8)
    rl = RLConfig(batch_size=16)
    results = []
    for backend in ("numpy", "torch"):
        torch.manual_seed(0)
        policy = Policy(12, 3, model, 3)
        env = on_device(host, "cpu", backend)
        assert isinstance(env, DeviceEnv) == (backend == "torch")
        ro = rollout(policy, env, queries, torch.Generator().manual_seed(1))
        metrics = train_epoch(policy, make_optimizer(policy, rl), env, queries, 0, rl, RunOptions(progress=False))
        results.append((ro, metrics, [p.detach().clone() for p in policy.parameters()]))
    (a, ma, pa), (b, mb, pb) = results
    torch.testing.assert_close(a.log_prob, b.log_prob, rtol=0, atol=0)
    torch.testing.assert_close(a.reward, b.reward, rtol=0, atol=0)
    assert ma == mb
    for x, y in zip(pa, pb):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_backend_choice():
    graph = random_graph(np.random.default_rng(0), 4, 1, 3, 10, hub=False)
    host = TemporalEnv(graph)
    assert on_device(host, "cpu") is host  # auto: the host environment off CUDA
    dev = on_device(host, "cpu", "torch")
    assert on_device(host, "cpu", "torch") is dev  # built once
    assert on_device(host.with_walk("backward"), "cpu", "torch").walk == "backward"
    with pytest.raises(ValueError, match="unknown environment backend 'gpu'"):
        on_device(host, "cpu", "gpu")
    with pytest.raises(ValueError, match="scan_pad must be >= 0 or None, got -1"):
        DeviceEnv(host, scan_pad=-1)


def test_a_query_past_the_graph_is_refused():
    graph = random_graph(np.random.default_rng(0), 4, 1, 3, 10, hub=False)
    dev = DeviceEnv(TemporalEnv(graph))
    last = graph.max_time
    dev.reset(np.array([[0, 0, 1, last + 1]]))  # the day after the graph: a forecast query
    with pytest.raises(ValueError, match=f"query time {last + 2} is past the graph's last day"):
        dev.reset(np.array([[0, 0, 1, last + 2]]))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 120), cap=st.integers(1, 5), pad=st.integers(0, 6),
       walk=st.sampled_from(["forward", "backward"]), mask_before_cap=st.booleans(), hub=st.booleans())
def test_fixed_shapes_give_the_same_candidates_or_flag_the_row(seed, n, cap, pad, walk, mask_before_cap, hub):
    """With fixed widths (no sync) a row's candidates are the exact ones, padded to the fixed width,
    unless the row is flagged as overflowing; a row is flagged only if its exact scan is wider."""
    rng = np.random.default_rng(seed)
    graph = random_graph(rng, 8, 2, 6, n, hub)
    host = TemporalEnv(graph, EnvConfig(max_path_length=3, max_actions=cap, mask_before_cap=mask_before_cap))
    host = host.with_walk(walk)
    exact, fixed = DeviceEnv(host), DeviceEnv(host, scan_pad=pad)
    queries = torch.from_numpy(np.stack([rng.integers(0, 8, 32), rng.integers(0, 4, 32), rng.integers(0, 8, 32),
                                         rng.integers(0, 7, 32)], 1))
    es = exact.reset(queries)
    for _ in range(3):
        ec, fc = exact.candidates(es), fixed.candidates(es)
        assert fc.width == cap + 1 and fc.overflow.dtype == torch.bool
        W_exact = exact.last_widths[0]
        assert fixed.last_widths == (cap + pad, cap + 1)
        ok = ~fc.overflow
        for name in ("entity", "relation", "time", "mask"):
            got, want = getattr(fc, name)[:, :ec.width], getattr(ec, name)
            assert torch.equal(got[ok], want[ok]), name
        assert not fc.mask[:, ec.width:].any()
        if W_exact <= cap + pad:
            assert not fc.overflow.any()
        choice = torch.from_numpy(np.array([rng.choice(np.flatnonzero(m)) for m in ec.mask.numpy()]))
        es = exact.step(es, ec, choice)


def test_the_hub_row_overflows_a_short_fixed_scan():
    quads = [(0, 0, 1, t) for t in range(40)] + [(1, 0, 2, 5), (1, 0, 3, 17), (1, 0, 4, 30)]
    host = TemporalEnv(TemporalGraph.from_quadruples(np.array(quads), 5, 1), EnvConfig(max_path_length=2, max_actions=3))
    for pad, flagged in ((10, True), (40, False)):  # the scan passes 40 edges back to entity 0
        dev = DeviceEnv(host, scan_pad=pad)
        s = dev.move(dev.reset(np.array([[0, 0, 4, 40]])), torch.tensor([1]), torch.tensor([0]), torch.tensor([0]))
        c = dev.candidates(s)
        assert c.overflow.tolist() == [flagged]
        if not flagged:
            assert c.entity[0].tolist() == [1, 4, 3, 2]


def test_a_fixed_shape_rollout_with_drawn_uniforms_is_the_exact_rollout():
    """What a captured step runs (fixed widths, uniforms drawn beforehand) samples the same episodes and
    computes the same loss as the exact rollout drawing its own uniforms, when no row overflows."""
    from raptor.agents.actor_critic.rl import LOSS_PARTS, actor_critic_loss, actor_critic_terms

    rng = np.random.default_rng(5)
    graph = random_graph(rng, 12, 3, 10, 150, hub=True)
    host = TemporalEnv(graph, EnvConfig(max_path_length=3, max_actions=4))
    queries = np.stack([rng.integers(0, 12, 32), rng.integers(0, 6, 32), rng.integers(0, 12, 32),
                        rng.integers(1, 11, 32)], 1)
    torch.manual_seed(0)
    policy = Policy(12, 3, ModelConfig(entity_dim=8, relation_dim=8, time_dim=4, step_dim=4, mlp_hidden_dim=8), 3)
    exact = rollout(policy, DeviceEnv(host), queries, torch.Generator().manual_seed(1))
    u = torch.rand((3, 32), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    fixed = rollout(policy, DeviceEnv(host, scan_pad=200), torch.from_numpy(queries), uniforms=u)
    assert exact.overflow is None and not bool(fixed.overflow)
    assert torch.equal(exact.final.entity, fixed.final.entity)
    torch.testing.assert_close(exact.log_prob, fixed.log_prob)
    loss_e, parts_e = actor_critic_loss(exact, 0.95, 0.01)
    loss_f, parts_f = actor_critic_terms(fixed, 0.95, 0.01)
    torch.testing.assert_close(loss_e, loss_f)
    assert list(parts_e) == list(LOSS_PARTS)
    torch.testing.assert_close(torch.tensor(list(parts_e.values())), parts_f)
    short = rollout(policy, DeviceEnv(host, scan_pad=0), torch.from_numpy(queries), uniforms=u)
    assert bool(short.overflow)  # the hub pair's parallel edges do not fit a scan of the cap alone
