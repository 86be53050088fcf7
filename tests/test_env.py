"""The MDP environment against a naive per-row construction from the quadruples."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from raptor.config import EnvConfig
from raptor.constants import pad_entity, pad_relation, stop_relation
from raptor.mdp.env import NO_ENTITY, TemporalEnv
from raptor.data.graph import TemporalGraph


def naive_candidates(quads, R, e_k, t_k, t_q, visited, cap, strict, mask_before_cap):
    """List of (entity, relation, time), most recent first, exactly as the paper defines A_s."""
    edges = []
    for s, r, o, t in quads:
        edges.append((s, r, o, t))
        edges.append((o, r + R, s, t))
    hi_ok = (lambda t: t < t_q) if strict else (lambda t: t <= t_q)
    window = sorted((t, r, o) for s, r, o, t in edges if s == e_k and t_k <= t and hi_ok(t))
    window = window[::-1]  # most recent first (ties: reverse (relation, neighbor) order)
    if mask_before_cap:
        kept = [(o, r, t) for t, r, o in window if o not in visited][:cap]
    else:
        kept = [(o, r, t) for t, r, o in window[:cap] if o not in visited]
    return kept


def random_graph(rng, E, R, T, n):
    quads = np.stack([rng.integers(0, E, n), rng.integers(0, R, n), rng.integers(0, E, n), rng.integers(0, T, n)], 1)
    quads = np.unique(quads, axis=0)
    return quads, TemporalGraph.from_quadruples(quads, E, R)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    E=st.integers(2, 12),
    R=st.integers(1, 4),
    T=st.integers(1, 8),
    n=st.integers(0, 80),
    cap=st.integers(1, 6),
    K=st.integers(1, 4),
    strict=st.booleans(),
    mask_before_cap=st.booleans(),
    cap_includes_stop=st.booleans(),
)
def test_candidates_match_naive(seed, E, R, T, n, cap, K, strict, mask_before_cap, cap_includes_stop):
    rng = np.random.default_rng(seed)
    quads, graph = random_graph(rng, E, R, T, n)
    cfg = EnvConfig(max_path_length=K, max_actions=cap + int(cap_includes_stop), strict_history=strict,
                    mask_before_cap=mask_before_cap, cap_includes_stop=cap_includes_stop)
    assert cfg.edge_cap == cap  # with STOP inside the cap, max_actions = edges + 1
    env = TemporalEnv(graph, cfg)
    B = 16
    queries = np.stack([rng.integers(0, E, B), rng.integers(0, 2 * R, B), rng.integers(0, E, B),
                        rng.integers(0, T + 1, B)], 1)
    state = env.reset(queries)
    assert np.all(state.time == 0)  # t_0 = 0
    for k in range(K):
        cands = env.candidates(state)
        assert cands.entity.shape == cands.mask.shape and cands.width <= cap + 1
        for b in range(B):
            vis = [v for v in state.visited[b] if v != NO_ENTITY]
            assert state.entity[b] in vis
            want = naive_candidates(quads.tolist(), R, state.entity[b], state.time[b], state.query_time[b],
                                    vis, cap, strict, mask_before_cap)
            c = int(cands.count[b])
            got = list(zip(cands.entity[b, 1:1 + c].tolist(), cands.relation[b, 1:1 + c].tolist(),
                           cands.time[b, 1:1 + c].tolist()))
            assert got == want
            # STOP in slot 0 keeps e_k and t_k; padding after the kept edges
            assert (cands.entity[b, 0], cands.relation[b, 0], cands.time[b, 0]) == (
                state.entity[b], stop_relation(R), state.time[b])
            assert cands.mask[b, : c + 1].all() and not cands.mask[b, c + 1:].any()
            assert np.all(cands.entity[b, c + 1:] == pad_entity(E))
            assert np.all(cands.relation[b, c + 1:] == pad_relation(R))
        # random valid step (STOP included)
        choice = np.array([rng.integers(0, int(cands.count[b]) + 1) for b in range(B)])
        nxt = env.step(state, cands, choice)
        rows = np.arange(B)
        assert np.array_equal(nxt.entity, cands.entity[rows, choice])
        assert np.array_equal(nxt.time, cands.time[rows, choice])
        stop = choice == 0
        assert np.array_equal(nxt.entity[stop], state.entity[stop]) and np.array_equal(nxt.time[stop], state.time[stop])
        # time never decreases along a path; visited gains the new entity
        assert np.all(nxt.time >= state.time)
        for b in range(B):
            assert nxt.entity[b] in nxt.visited[b, : k + 2]
        assert nxt.step == k + 1 and nxt.path_entity.shape == (B, k + 1)
        state = nxt
    with pytest.raises(ValueError, match=rf"state at step {K} is terminal \(K = {K}\)"):
        env.candidates(state)
    r = env.reward(state)
    assert np.array_equal(r, (state.entity == queries[:, 2]).astype(np.float32))


def test_simple_path_and_cap_order_hand_built():
    # entity 0 has edges to 1 (t=0), 2 (t=1), 1 (t=2), 3 (t=3); query at t=5
    quads = np.array([[0, 0, 1, 0], [0, 0, 2, 1], [0, 1, 1, 2], [0, 0, 3, 3]])
    g = TemporalGraph.from_quadruples(quads, 4, 2)
    q = np.array([[0, 0, 3, 5]])
    # cap 2 after the mask: visited {0, 1} drops both edges to 1 -> keeps 3 (t=3) and 2 (t=1)
    env = TemporalEnv(g, EnvConfig(max_actions=2, mask_before_cap=True))
    s = env.reset(q)
    c = env.candidates(s)
    assert c.entity[0, 1:].tolist() == [3, 1]  # nothing visited yet but e_q
    s1 = env.move(s, np.array([1]), np.array([0]), np.array([0]))
    # at entity 1, time 0: edges back to 0 (inverse) are visited -> only STOP
    c1 = env.candidates(s1)
    assert c1.width == 1 and c1.relation[0, 0] == stop_relation(2)
    # visited {0, 1} starting again from 0 at t=0 (artificial state): cap 2 applied after the mask
    s2 = env.move(s1, np.array([0]), np.array([2]), np.array([0]))
    c2 = env.candidates(s2)
    assert c2.entity[0, 1:1 + c2.count[0]].tolist() == [3, 2]
    env_b = TemporalEnv(g, EnvConfig(max_actions=2, mask_before_cap=False))
    c3 = env_b.candidates(s2)  # cap first: the 2 most recent are (3, t=3), (1, t=2); 1 is visited
    assert c3.entity[0, 1:1 + c3.count[0]].tolist() == [3]


def test_strict_history_excludes_query_time():
    quads = np.array([[0, 0, 1, 2], [0, 0, 2, 3]])
    g = TemporalGraph.from_quadruples(quads, 3, 1)
    q = np.array([[0, 0, 2, 3]])
    strict = TemporalEnv(g, EnvConfig(strict_history=True)).candidates(TemporalEnv(g).reset(q))
    loose = TemporalEnv(g, EnvConfig(strict_history=False)).candidates(TemporalEnv(g).reset(q))
    assert strict.entity[0, 1:1 + strict.count[0]].tolist() == [1]
    assert loose.entity[0, 1:1 + loose.count[0]].tolist() == [2, 1]


def test_step_rejects_padding():
    quads = np.array([[0, 0, 1, 0]])
    g = TemporalGraph.from_quadruples(quads, 3, 1)
    env = TemporalEnv(g)
    s = env.reset(np.array([[2, 0, 1, 5], [0, 0, 1, 5]]))
    c = env.candidates(s)
    assert c.width == 2 and c.count.tolist() == [0, 1]
    with pytest.raises(ValueError, match="a chosen action is padding"):
        env.step(s, c, np.array([1, 1]))


def test_cap_includes_stop_keeps_one_edge_fewer():
    # entity 0 has edges at t = 0..3; query at t = 5
    quads = np.array([[0, 0, 1, 0], [0, 0, 2, 1], [0, 0, 3, 2], [0, 0, 4, 3]])
    g = TemporalGraph.from_quadruples(quads, 5, 1)
    q = np.array([[0, 0, 4, 5]])
    on_top = TemporalEnv(g, EnvConfig(max_actions=3)).candidates(TemporalEnv(g).reset(q))
    inside = TemporalEnv(g, EnvConfig(max_actions=3, cap_includes_stop=True)).candidates(TemporalEnv(g).reset(q))
    assert on_top.width == 4 and on_top.entity[0, 1:].tolist() == [4, 3, 2]  # STOP + 3 edges
    assert inside.width == 3 and inside.entity[0, 1:].tolist() == [4, 3]  # 3 actions, STOP one of them
    assert inside.relation[0, 0] == stop_relation(1)


# ---------------------------------------------------------------- TITer's walk (walk="backward")


def naive_titer_candidates(quads, R, e_k, t_k, t_q, step, max_actions, edge_cap, same_time):
    """TITer's ``Env.get_padd_actions`` for one row, from its code (model/environment.py): the edges
    of ``e_k`` with ``t' < t_k`` (``t' <= t_k`` when ``same_time`` and ``t_k != t_q``), most recent first,
    no visited filter; ``max_actions`` of them at step 0, ``edge_cap`` after. Ties at one timestamp come
    in reverse (relation, neighbor) order, as in the forward walk (TITer: networkx insertion order)."""
    edges = []
    for s, r, o, t in quads:
        edges.append((s, r, o, t))
        edges.append((o, r + R, s, t))
    inclusive = same_time and t_k != t_q
    window = sorted((t, r, o) for s, r, o, t in edges if s == e_k and (t <= t_k if inclusive else t < t_k))[::-1]
    cap = max_actions if step == 0 else edge_cap
    return [(o, r, t) for t, r, o in window][:cap]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    E=st.integers(2, 12),
    R=st.integers(1, 4),
    T=st.integers(1, 8),
    n=st.integers(0, 80),
    cap=st.integers(1, 6),
    K=st.integers(1, 4),
    same_time=st.booleans(),
    cap_includes_stop=st.booleans(),
)
def test_titer_walk_matches_titers_code(seed, E, R, T, n, cap, K, same_time, cap_includes_stop):
    rng = np.random.default_rng(seed)
    quads, graph = random_graph(rng, E, R, T, n)
    cfg = EnvConfig(max_path_length=K, max_actions=cap + int(cap_includes_stop), cap_includes_stop=cap_includes_stop)
    env = TemporalEnv(graph, cfg, walk="backward", same_time=same_time)
    B = 16
    queries = np.stack([rng.integers(0, E, B), rng.integers(0, 2 * R, B), rng.integers(0, E, B),
                        rng.integers(0, T + 1, B)], 1)
    state = env.reset(queries)
    assert np.array_equal(state.time, queries[:, 3])  # t_0 = t_q
    for k in range(K):
        cands = env.candidates(state)
        for b in range(B):
            want = naive_titer_candidates(quads.tolist(), R, state.entity[b], state.time[b], state.query_time[b], k,
                                          cfg.max_actions, cfg.edge_cap, same_time)
            c = int(cands.count[b])
            got = list(zip(cands.entity[b, 1:1 + c].tolist(), cands.relation[b, 1:1 + c].tolist(),
                           cands.time[b, 1:1 + c].tolist()))
            assert got == want
            # NO_OP (slot 0) keeps e_k and t_k; at step 0 it is an action only where no edge is
            assert (cands.entity[b, 0], cands.relation[b, 0], cands.time[b, 0]) == (
                state.entity[b], stop_relation(R), state.time[b])
            assert cands.mask[b, 0] == (k > 0 or c == 0)
            assert cands.mask[b, 1:c + 1].all() and not cands.mask[b, c + 1:].any()
        valid = [np.flatnonzero(cands.mask[b]) for b in range(B)]
        choice = np.array([rng.choice(v) for v in valid])
        nxt = env.step(state, cands, choice)
        assert np.all(nxt.time <= state.time)  # backwards in time
        state = nxt


def test_titer_walk_hand_built():
    # entity 0: edges to 1 (t=1), 2 (t=2), 1 (t=3); entity 1: edge back to 0 at t=0; query (0, r, ?, t=3)
    quads = np.array([[0, 0, 1, 1], [0, 0, 2, 2], [0, 1, 1, 3], [1, 0, 0, 0]])
    g = TemporalGraph.from_quadruples(quads, 3, 2)
    q = np.array([[0, 0, 2, 3]])
    env = TemporalEnv(g, EnvConfig(max_actions=5), walk="backward")
    s = env.reset(q)
    c = env.candidates(s)
    # t' < 3: (2, t=2), (1, t=1), (1, t=0, inverse of 1 -> 0); the t=3 edge is the query's own time,
    # and no lower bound; NO_OP masked at step 0
    assert c.entity[0, 1:1 + c.count[0]].tolist() == [2, 1, 1] and c.time[0, 1:4].tolist() == [2, 1, 0]
    assert not c.mask[0, 0]
    s1 = env.move(s, np.array([1]), np.array([0]), np.array([1]))
    c1 = env.candidates(s1)
    # at entity 1, time 1: the inverse edge back to the visited e_q at t=1 is not < 1, the one at t=0 is
    # kept (revisits allowed), and NO_OP is an action again
    assert c1.entity[0, 1:1 + c1.count[0]].tolist() == [0] and c1.time[0, 1] == 0 and c1.mask[0, 0]
    inclusive = env.with_walk("backward", same_time=True).candidates(s1)
    assert sorted(inclusive.entity[0, 1:1 + inclusive.count[0]].tolist()) == [0, 0]  # t=1 too after the first hop
    # an isolated query entity keeps NO_OP at step 0 (TITer: `continue` before dropping it)
    lone = env.candidates(env.reset(np.array([[2, 0, 0, 0]])))
    assert lone.count[0] == 0 and lone.mask[0, 0]
    assert env.with_walk("forward").reset(q).time[0] == 0
    with pytest.raises(ValueError, match="unknown walk"):
        TemporalEnv(g, walk="backwards")
