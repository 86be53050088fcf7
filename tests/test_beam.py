"""Beam search against exhaustive enumeration of all paths on tiny graphs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raptor.beam import aggregate_scores, beam_search, explain, search_beams
from raptor.config import EnvConfig, EvalConfig, ModelConfig
from raptor.env import TemporalEnv
from raptor.graph import TemporalGraph
from raptor.policy import Policy
from raptor.rollout import candidate_tensors, query_embedding

pytestmark = pytest.mark.usefixtures("one_torch_thread")


SMALL = ModelConfig(entity_dim=16, relation_dim=12, time_dim=5, step_dim=4, mlp_hidden_dim=24)


def enumerate_paths(policy, env, query):
    """All K-step paths of one query with their log-probabilities (depth-first, batch of 1)."""
    out = []

    def rec(state, hc, logp):
        if state.step == env.K:
            out.append((logp, state.path_entity[0].tolist(), state.path_relation[0].tolist(),
                        state.path_time[0].tolist()))
            return
        cands = env.candidates(state)
        ct = candidate_tensors(state, cands, "cpu")
        q = query_embedding(policy, state, "cpu")
        u = policy.state_input(q, hc[0], state.step)
        z = policy.candidate_logits(policy.actor(u), ct.entity, ct.relation, ct.dt, ct.mask)
        lp = torch.log_softmax(z.float(), 1)[0]
        for a in range(int(cands.count[0]) + 1):
            nxt = env.step(state, cands, np.array([a]))
            hc2 = policy.advance_path(hc, torch.from_numpy(nxt.entity), torch.from_numpy(nxt.path_relation[:, -1].copy()),
                                      torch.from_numpy(nxt.query_time - nxt.time))
            rec(nxt, hc2, logp + float(lp[a]))

    with torch.no_grad():
        s0 = env.reset(np.asarray(query)[None])
        rec(s0, policy.initial_path_state(1), 0.0)
    return out


def tiny_setup(seed, K=2, n=25, E=7, R=2, T=6, max_actions=4):
    rng = np.random.default_rng(seed)
    quads = np.unique(np.stack([rng.integers(0, E, n), rng.integers(0, R, n), rng.integers(0, E, n),
                                rng.integers(0, T, n)], 1), axis=0)
    graph = TemporalGraph.from_quadruples(quads, E, R)
    env = TemporalEnv(graph, EnvConfig(max_path_length=K, max_actions=max_actions))
    torch.manual_seed(seed)
    policy = Policy(E, R, SMALL, max_path_length=K)
    policy.eval()
    queries = np.stack([rng.integers(0, E, 6), rng.integers(0, 2 * R, 6), rng.integers(0, E, 6),
                        rng.integers(1, T + 1, 6)], 1)
    return env, policy, queries


@pytest.mark.parametrize("seed,K", [(0, 2), (1, 2), (2, 3), (3, 3)])
@pytest.mark.parametrize("rule", ["max", "logsumexp"])
def test_beam_search_is_exact_when_beam_exceeds_paths(seed, K, rule):
    env, policy, queries = tiny_setup(seed, K=K)
    res = beam_search(policy, env, queries, EvalConfig(beam_size=400, score_rule=rule), chunk_size=4)
    for i, q in enumerate(queries):
        paths = enumerate_paths(policy, env, q)
        assert len(paths) <= 400
        by_entity: dict[int, list[float]] = {}
        for lp, ents, _, _ in paths:
            by_entity.setdefault(ents[-1], []).append(lp)
        want = {e: (max(v) if rule == "max" else float(np.logaddexp.reduce(v))) for e, v in by_entity.items()}
        got = {int(e): float(s) for e, s in zip(res.cand_entity[i], res.cand_score[i]) if e >= 0}
        assert set(got) == set(want)
        for e in want:
            assert got[e] == pytest.approx(want[e], abs=1e-4)
        # sorted by decreasing score, padding after
        sc = res.cand_score[i][res.cand_entity[i] >= 0]
        assert np.all(np.diff(sc) <= 1e-6)
        assert np.all(np.isneginf(res.cand_score[i][res.cand_entity[i] < 0]))
        # total probability over all paths is 1
        assert np.logaddexp.reduce([p[0] for p in paths]) == pytest.approx(0.0, abs=1e-4)
        best = max(paths, key=lambda p: p[0])
        assert res.path_score[i] == pytest.approx(best[0], abs=1e-4)
        assert res.path_entity[i, -1] == best[1][-1] or abs(sorted(p[0] for p in paths)[-2] - best[0]) < 1e-5


def test_small_beam_keeps_top_paths_and_chunking_is_invariant():
    env, policy, queries = tiny_setup(5, K=3, n=40)
    cfg = EvalConfig(beam_size=3)
    a = beam_search(policy, env, queries, cfg, chunk_size=1)
    b = beam_search(policy, env, queries, cfg, chunk_size=6)
    np.testing.assert_array_equal(a.cand_entity, b.cand_entity)
    np.testing.assert_allclose(a.cand_score, b.cand_score, atol=1e-5)
    assert a.cand_entity.shape == (6, 3)
    # the first step keeps the best actions of the first step exactly
    beams = search_beams(policy, env, queries[:1], 3)
    assert beams.score.shape[1] <= 3


def test_aggregate_scores_rules():
    ent = np.array([[3, 1, 3, 2, 1]])
    sc = np.array([[-1.0, -2.0, -0.5, -np.inf, -3.0]], dtype=np.float32)
    e, s = aggregate_scores(ent, sc, "max")
    assert e[0].tolist()[:2] == [3, 1] and e[0, 2] == -1
    np.testing.assert_allclose(s[0, :2], [-0.5, -2.0])
    e, s = aggregate_scores(ent, sc, "logsumexp")
    np.testing.assert_allclose(s[0, :2], [np.logaddexp(-1, -0.5), np.logaddexp(-2, -3)], rtol=1e-6)


def test_explain_lists_entities_with_paths():
    env, policy, queries = tiny_setup(2, K=3, n=40)
    out = explain(policy, env, queries[0], EvalConfig(beam_size=50), top_k=3)
    assert 1 <= len(out) <= 3
    for item in out:
        assert item["paths"]
        for p in item["paths"]:
            assert len(p["hops"]) == 3 and p["hops"][-1]["to"] == item["entity"]
            assert p["hops"][0]["from"] == queries[0][0]
            times = [h["time"] for h in p["hops"]]
            assert all(t < queries[0][3] for t in times)
