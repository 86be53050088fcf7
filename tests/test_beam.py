"""Beam search against exhaustive enumeration of all paths on tiny graphs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from raptor.agents.beam import SearchOptions, aggregate_scores, beam_search, explain, search_beams
from raptor.config import EnvConfig, EvalConfig, ModelConfig
from raptor.mdp.env import TemporalEnv
from raptor.data.graph import TemporalGraph
from raptor.agents.policy import Policy
from raptor.agents.rollout import candidate_tensors, query_embedding

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
        for a in np.flatnonzero(cands.mask[0]):  # STOP is not an action at TITer's first step
            nxt = env.step(state, cands, np.array([a]))
            hc2 = policy.advance_path(hc, torch.from_numpy(nxt.entity), torch.from_numpy(nxt.path_relation[:, -1].copy()),
                                      torch.from_numpy(nxt.query_time - nxt.time))
            rec(nxt, hc2, logp + float(lp[a]))

    with torch.no_grad():
        s0 = env.reset(np.asarray(query)[None])
        rec(s0, policy.initial_path_state(1), 0.0)
    return out


def tiny_setup(seed, K=2, n=25, E=7, R=2, T=6, max_actions=4, walk="forward"):
    rng = np.random.default_rng(seed)
    quads = np.unique(np.stack([rng.integers(0, E, n), rng.integers(0, R, n), rng.integers(0, E, n),
                                rng.integers(0, T, n)], 1), axis=0)
    graph = TemporalGraph.from_quadruples(quads, E, R)
    env = TemporalEnv(graph, EnvConfig(max_path_length=K, max_actions=max_actions), walk=walk)
    torch.manual_seed(seed)
    policy = Policy(E, R, SMALL, max_path_length=K)
    policy.eval()
    queries = np.stack([rng.integers(0, E, 6), rng.integers(0, 2 * R, 6), rng.integers(0, E, 6),
                        rng.integers(1, T + 1, 6)], 1)
    return env, policy, queries


@pytest.mark.parametrize("seed,K", [(0, 2), (1, 2), (2, 3), (3, 3)])
@pytest.mark.parametrize("rule", ["max", "logsumexp"])
@pytest.mark.parametrize("walk", ["forward", "backward"])
def test_beam_search_is_exact_when_beam_exceeds_paths(seed, K, rule, walk):
    env, policy, queries = tiny_setup(seed, K=K, walk=walk)
    res = beam_search(policy, env, queries, EvalConfig(beam_size=400, score_rule=rule), SearchOptions(chunk_size=4))
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


def test_small_beam_chunking_is_invariant():
    """The queries per chunk do not change the result (which paths a small beam keeps is checked
    against the naive beam search: test_small_beam_against_the_naive_beam_search)."""
    env, policy, queries = tiny_setup(5, K=3, n=40)
    cfg = EvalConfig(beam_size=3)
    a = beam_search(policy, env, queries, cfg, SearchOptions(chunk_size=1))
    b = beam_search(policy, env, queries, cfg, SearchOptions(chunk_size=6))
    np.testing.assert_array_equal(a.cand_entity, b.cand_entity)
    np.testing.assert_allclose(a.cand_score, b.cand_score, atol=1e-5)
    assert a.cand_entity.shape == (6, 3)


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


# ------------------------------------------------------------------------------------------------
# eval.rank_last_expansions (issue 39): every expansion of the last step is ranked, as TITer's
# Episode.beam_search returns them (its tester keeps the best score of an entity: score_rule max).
# ------------------------------------------------------------------------------------------------


def reference_beam(policy, env, query, W, last_expansions):
    """A naive beam search of one query, one state at a time: ``(final paths as (log-prob, entity),
    near_tie)``. The final paths are the ``W`` best of the last step's expansions, or all of them with
    ``last_expansions``; ``near_tie``: some cut fell between two scores closer than 1e-4 (an order the
    batched search may break differently)."""
    near_tie = False
    with torch.no_grad():
        state = env.reset(np.asarray(query)[None])
        beams = [(0.0, state, policy.initial_path_state(1))]
        for k in range(env.K):
            expansions = []
            for score, st, hc in beams:
                cands = env.candidates(st)
                ct = candidate_tensors(st, cands, "cpu")
                u = policy.state_input(query_embedding(policy, st, "cpu"), hc[0], st.step)
                z = policy.candidate_logits(policy.actor(u), ct.entity, ct.relation, ct.dt, ct.mask)
                lp = torch.log_softmax(z.float(), 1)[0]
                for a in np.flatnonzero(cands.mask[0]):
                    expansions.append((score + float(lp[a]), st, cands, a, hc))
            expansions.sort(key=lambda x: -x[0])
            if len(expansions) > W and expansions[W - 1][0] - expansions[W][0] < 1e-4:
                near_tie = True
            final = expansions if (last_expansions and k == env.K - 1) else expansions[:W]
            beams = []
            for score, st, cands, a, hc in final:
                nxt = env.step(st, cands, np.array([a]))
                if k < env.K - 1:
                    hc = policy.advance_path(hc, torch.from_numpy(nxt.entity),
                                             torch.from_numpy(nxt.path_relation[:, -1].copy()),
                                             torch.from_numpy(nxt.query_time - nxt.time))
                beams.append((score, nxt, hc))
    return [(score, int(st.entity[0])) for score, st, _ in beams], near_tie


def merge(paths, rule):
    by_entity: dict[int, list[float]] = {}
    for lp, e in paths:
        by_entity.setdefault(e, []).append(lp)
    return {e: (max(v) if rule == "max" else float(np.logaddexp.reduce(v))) for e, v in by_entity.items()}


@pytest.mark.parametrize("seed,K", [(0, 2), (1, 2), (2, 3), (3, 3), (4, 3)])
@pytest.mark.parametrize("rule", ["max", "logsumexp"])
@pytest.mark.parametrize("expansions", [False, True])
@pytest.mark.parametrize("walk", ["forward", "backward"])
def test_small_beam_against_the_naive_beam_search(seed, K, rule, expansions, walk):
    """Beam 3 on small random graphs (up to 3 x 5 expansions a step): the batched search ranks the
    entities of the naive search's final paths, merged by the score rule, with the same scores."""
    env, policy, queries = tiny_setup(seed, K=K, n=40, walk=walk)
    res = beam_search(policy, env, queries, EvalConfig(beam_size=3, score_rule=rule, rank_last_expansions=expansions),
                      SearchOptions(chunk_size=4))
    compared = 0
    for i, q in enumerate(queries):
        paths, near_tie = reference_beam(policy, env, q, 3, expansions)
        if near_tie:
            continue
        want = merge(paths, rule)
        got = {int(e): float(s) for e, s in zip(res.cand_entity[i], res.cand_score[i]) if e >= 0}
        assert set(got) == set(want)
        for e in want:
            assert got[e] == pytest.approx(want[e], abs=1e-4)
        assert res.path_score[i] == pytest.approx(max(p[0] for p in paths), abs=1e-4)
        compared += 1
    assert compared >= 4
    if not expansions:
        assert res.cand_entity.shape == (len(queries), 3)


@pytest.mark.parametrize("seed,K", [(1, 2), (2, 3), (5, 3)])
@pytest.mark.parametrize("rule", ["max", "logsumexp"])
def test_last_expansions_add_entities_and_keep_the_beam(seed, K, rule):
    """The option changes what is ranked, not the search: the best path is the same; with ``max`` every
    entity of the surviving beam keeps its score and the added ones score below the beam's last; with a
    beam wider than all paths both rank the same (every expansion survives)."""
    env, policy, queries = tiny_setup(seed, K=K, n=40)
    beam = beam_search(policy, env, queries, EvalConfig(beam_size=3, score_rule=rule))
    every = beam_search(policy, env, queries, EvalConfig(beam_size=3, score_rule=rule, rank_last_expansions=True))
    for name in ("path_entity", "path_relation", "path_time", "path_score"):
        np.testing.assert_array_equal(getattr(beam, name), getattr(every, name))
    grew = 0
    for i in range(len(queries)):
        a = {int(e): float(s) for e, s in zip(beam.cand_entity[i], beam.cand_score[i]) if e >= 0}
        b = {int(e): float(s) for e, s in zip(every.cand_entity[i], every.cand_score[i]) if e >= 0}
        assert set(a) <= set(b)
        grew += len(b) > len(a)
        if rule == "max":
            assert all(b[e] == a[e] for e in a)
            if a and len(b) > len(a):
                assert max(b[e] for e in set(b) - set(a)) <= min(a.values())
        else:
            assert all(b[e] >= a[e] - 1e-6 for e in a)  # more paths can only add probability
        sc = every.cand_score[i][every.cand_entity[i] >= 0]
        assert np.all(np.diff(sc) <= 0) and np.all(np.isneginf(every.cand_score[i][every.cand_entity[i] < 0]))
    assert grew > 0
    wide = EvalConfig(beam_size=400, score_rule=rule)
    x = beam_search(policy, env, queries, wide)
    y = beam_search(policy, env, queries, replace(wide, rank_last_expansions=True))
    w = max(int((x.cand_entity >= 0).sum(1).max()), 1)
    np.testing.assert_array_equal(x.cand_entity[:, :w], y.cand_entity[:, :w])
    # max: the same floats; logsumexp sums an entity's paths in another order (rounding only)
    np.testing.assert_allclose(x.cand_score[:, :w], y.cand_score[:, :w], rtol=0, atol=0 if rule == "max" else 1e-6)
    assert np.all(y.cand_entity[:, w:] == -1)


def hand_policy(values, E, R, K):
    """A policy whose logit of an action is ``values[e']`` (``e'``: its target; STOP's is ``e_k``): the
    actor's output is the constant ``[1, 0, ...]`` and ``Emb_E[e, 0] = values[e]``."""
    torch.manual_seed(0)
    policy = Policy(E, R, SMALL, max_path_length=K)
    with torch.no_grad():
        last = policy.actor_mlp[-1]
        last.weight.zero_()
        last.bias.zero_()
        last.bias[0] = 1.0
        policy.entity_emb.weight[:E, 0] = torch.tensor(values, dtype=torch.float32)
    policy.eval()
    return policy


def test_gold_outside_the_beam_is_ranked_with_last_expansions_by_hand():
    """Query (0, r0, ?, t=5), gold 4, K = 2, beam 2, E = 6; entity 3 is another true answer at t = 5
    (filtered). Edges 0->1 (t1), 0->2 (t2), 1->3, 1->4, 1->5, 2->5 (t3); logits by target entity
    v = (0, 3, 2, 1, 0.5, 0). Step 0 keeps [1] and [2] (STOP at 0 is third); step 1 expands them into
    [1,STOP] [1,3] [1,4] [1,5] [2,STOP] [2,5], of which [1,STOP] and [2,STOP] survive.

    Beam only: reached {1, 2}, gold unreached: rank = n_reached + 1 + (U - 1)/2 with U = 6 - 1 - 2 = 3,
    so 4 (either rule). Every expansion: log-probabilities (computed below from the softmaxes by hand)
    1: -0.586, 3: -2.586, 4: -3.086, 5: -3.586 and -3.476; 2: -1.476. With max, 5 scores -3.476 < 4's,
    so only 1 and 2 are above the gold (3 is filtered): rank 3. With logsumexp, 5 scores
    log(e^-3.586 + e^-3.476) = -2.83 > -3.086: rank 4."""
    from raptor.evaluation.ranking import build_filter, filtered_ranks

    E, R, K = 6, 1, 2
    quads = np.array([[0, 0, 1, 1], [0, 0, 2, 2], [1, 0, 3, 3], [1, 0, 4, 3], [1, 0, 5, 3], [2, 0, 5, 3]])
    env = TemporalEnv(TemporalGraph.from_quadruples(quads, E, R), EnvConfig(max_path_length=K, max_actions=10))
    v = [0.0, 3.0, 2.0, 1.0, 0.5, 0.0]
    policy = hand_policy(v, E, R, K)
    query = np.array([[0, 0, 4, 5]])
    true_at_5 = np.array([[0, 0, 3, 5], [0, 0, 4, 5]])
    filt = build_filter([quads, true_at_5], R)

    ex = np.exp
    L0 = np.log(ex(v[0]) + ex(v[1]) + ex(v[2]))  # step 0 from 0: STOP, 1, 2
    a, b = v[1] - L0, v[2] - L0
    L1 = np.log(ex(v[1]) + ex(v[3]) + ex(v[4]) + ex(v[5]))  # from 1: STOP, 3, 4, 5 (0 visited)
    L2 = np.log(ex(v[2]) + ex(v[5]))  # from 2: STOP, 5
    paths = [(a + v[1] - L1, 1), (a + v[3] - L1, 3), (a + v[4] - L1, 4), (a + v[5] - L1, 5),
             (b + v[2] - L2, 2), (b + v[5] - L2, 5)]
    assert sorted(p[0] for p in paths)[-3] < b + v[2] - L2 < a + v[1] - L1  # [1,STOP], [2,STOP] survive
    for rule, rank_every in (("max", 3.0), ("logsumexp", 4.0)):
        for every, want_rank in ((False, 4.0), (True, rank_every)):
            res = beam_search(policy, env, query, EvalConfig(beam_size=2, score_rule=rule, rank_last_expansions=every))
            got = {int(e): float(s) for e, s in zip(res.cand_entity[0], res.cand_score[0]) if e >= 0}
            want = merge(paths if every else paths[:1] + paths[4:5], rule)
            assert set(got) == set(want) and all(got[e] == pytest.approx(want[e], abs=1e-5) for e in want)
            rank = filtered_ranks(res.cand_entity, res.cand_score, query[:, 2], query[:, [0, 1, 3]], filt, E)
            assert rank.tolist() == [want_rank], (rule, every)
            assert res.path_entity[0].tolist() == [1, 1]  # the best path: 0 -> 1, then STOP


# ------------------------------------------------------------------------------------------------
# The device search (issue 37): every step as tensor work on the device environment, beams padded
# instead of dropped; here on the CPU (DeviceEnv with torch tensors), against the host search.
# ------------------------------------------------------------------------------------------------


def test_device_aggregation_equals_the_hosts_ties_included():
    from raptor.agents.beam import aggregate_scores_on_device

    rng = np.random.default_rng(0)
    Q, W, E = 50, 12, 9
    ent = rng.integers(0, E, (Q, W))
    score = np.round(rng.normal(size=(Q, W)), 1).astype(np.float32)  # rounded: many equal scores
    score[rng.random((Q, W)) < 0.2] = -np.inf  # dead beams
    for rule in ("max", "logsumexp"):
        want_e, want_s = aggregate_scores(ent, score, rule)
        got_e, got_s = aggregate_scores_on_device(torch.from_numpy(ent), torch.from_numpy(score), E, rule)
        if rule == "max":  # same order: decreasing score, ties by entity id
            np.testing.assert_array_equal(got_e.numpy(), want_e)
            np.testing.assert_array_equal(got_s.numpy(), want_s)
        else:  # sums in another order: the same entities with the same scores up to rounding
            for q in range(Q):
                assert dict(zip(got_e[q].tolist(), got_s[q].tolist())).keys() == dict(zip(want_e[q], want_s[q])).keys()
            np.testing.assert_allclose(got_s.numpy(), want_s, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed,K", [(0, 2), (2, 3), (3, 3), (4, 3)])
@pytest.mark.parametrize("rule", ["max", "logsumexp"])
@pytest.mark.parametrize("walk", ["forward", "backward"])
@pytest.mark.parametrize("beam", [3, 400])
@pytest.mark.parametrize("expansions", [False, True])
def test_the_device_search_finds_the_host_searchs_beams(seed, K, rule, walk, beam, expansions):
    """The same candidates and best paths; with ``eval.rank_last_expansions`` the same candidates over
    every expansion of the last step, in as many columns."""
    env, policy, queries = tiny_setup(seed, K=K, n=40, walk=walk)
    cfg = EvalConfig(beam_size=beam, score_rule=rule, rank_last_expansions=expansions)
    host = beam_search(policy, env, queries, cfg, SearchOptions(chunk_size=4, backend="host"))
    dev = beam_search(policy, env, queries, cfg, SearchOptions(backend="device", device_chunk_size=4))
    assert dev.cand_entity.shape == host.cand_entity.shape
    np.testing.assert_array_equal(dev.cand_entity, host.cand_entity)
    np.testing.assert_allclose(dev.cand_score, host.cand_score, rtol=1e-6, atol=1e-6)
    for a in ("path_entity", "path_relation", "path_time"):
        np.testing.assert_array_equal(getattr(dev, a), getattr(host, a), err_msg=a)
    np.testing.assert_allclose(dev.path_score, host.path_score, rtol=1e-6)


def test_the_device_search_keeps_every_beam_of_the_host_search_on_a_dataset():
    """Beam 20 on the synthetic dataset, 300 queries: the final beams (scores and paths) equal the
    host search's, the dead (padding) ones included."""
    from helpers import synthetic_env

    from raptor.agents.beam import search_beams_on_device
    from raptor.mdp.device_env import on_device

    env, q, E, R, _ = synthetic_env(max_actions=30)
    torch.manual_seed(0)
    policy = Policy(E, R, SMALL, env.K)
    queries = q["valid"][:300]
    host = search_beams(policy, env, queries, 20)
    dev = search_beams_on_device(policy, on_device(env, "cpu", "torch"), queries, 20)
    W = host.score.shape[1]
    assert dev.score.shape[1] == 20 and W <= 20 and torch.isneginf(dev.score[:, W:]).all()
    np.testing.assert_allclose(dev.score[:, :W].numpy(), host.score, rtol=1e-6, atol=1e-6)
    live = np.isfinite(host.score)
    for a in ("entity", "relation", "time"):
        np.testing.assert_array_equal(getattr(dev, a)[:, :W].numpy()[live], getattr(host, a)[live], err_msg=a)


def test_the_device_search_ranks_the_answers_as_the_host_does():
    """:func:`search_and_rank`: the ranks computed on the device (chunk by chunk) equal the host's
    filtered ranks of the host search's candidates, for both score rules and with the last step's
    expansions; queries drawn from the facts, so golds sit in their filters."""
    from raptor.agents.beam import search_and_rank
    from raptor.evaluation.ranking import build_filter

    for seed, K in ((0, 2), (2, 3), (4, 3)):
        env, policy, _ = tiny_setup(seed, K=K, n=40)
        rng = np.random.default_rng(seed)
        quads = np.unique(np.stack([rng.integers(0, 7, 40), rng.integers(0, 2, 40), rng.integers(0, 7, 40),
                                    rng.integers(0, 6, 40)], 1), axis=0)
        fi = build_filter(quads, 2)
        queries = np.concatenate([quads[:, [0, 1, 2, 3]] + [0, 0, 0, 1], rng.integers(0, [7, 4, 7, 7], (10, 4))])
        for rule in ("max", "logsumexp"):
            for expansions in (False, True):
                cfg = EvalConfig(beam_size=3, score_rule=rule, rank_last_expansions=expansions)
                host, want = search_and_rank(policy, env, queries, fi, cfg, SearchOptions(backend="host"))
                dev, got = search_and_rank(policy, env, queries, fi, cfg, SearchOptions(backend="device",
                                                                                        device_chunk_size=5))
                np.testing.assert_array_equal(dev.cand_entity, host.cand_entity)
                if rule == "max":
                    np.testing.assert_array_equal(got, want)
                else:  # sums in another order: a tie may break differently only within rounding
                    np.testing.assert_allclose(got, want, atol=0.5)
                    assert (got == want).mean() > 0.95
                assert len(np.unique(want)) > 2  # not a degenerate case


def test_search_and_rank_wants_answers():
    from raptor.agents.beam import search_and_rank
    from raptor.evaluation.ranking import build_filter

    env, policy, queries = tiny_setup(0)
    with pytest.raises(ValueError, match=r"\[Q, 4\] queries"):
        search_and_rank(policy, env, queries[:, [0, 1, 3]], build_filter(np.zeros((0, 4), np.int64), 2))


def test_the_search_backend_is_chosen_and_checked():
    from raptor.agents.beam import _use_device_search

    assert not _use_device_search(SearchOptions(), EvalConfig())  # auto on the CPU: the host search
    assert _use_device_search(SearchOptions(backend="device"), EvalConfig())
    assert _use_device_search(SearchOptions(backend="device"), EvalConfig(rank_last_expansions=True))
    with pytest.raises(ValueError, match="unknown beam search backend"):
        _use_device_search(SearchOptions(backend="gpu"), EvalConfig())
