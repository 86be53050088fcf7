"""Tests for raptor.agents.recurrency.method: the recurrency baseline's scores against a naive per-query reference
(the formulas of nec-research/recurrency_baseline_tkg, see the module docstring), hand-computed
cases, ties, leakage, parameter selection, save/load and input checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raptor.config import ConfigError, RecurrencyConfig, params_from_dict
from raptor.evaluation.ranking import build_filter, filtered_ranks
from raptor.agents.recurrency.method import (
    RecurrencyModel,
    build_history,
    first_best,
    fit,
    load_model,
    rank_queries,
    save_model,
    score,
    score_dense,
)

# ------------------------------------------------------------------------------------------
# naive reference: one query at a time, Python lists, the reference code's formulas
# ------------------------------------------------------------------------------------------


def naive_scores(history, E, R, lambdas, alphas, queries, window=0, floor=1e-15):
    facts = [(s, r, o, t) for s, r, o, t in np.asarray(history).tolist()]
    facts += [(o, r + R, s, t) for s, r, o, t in facts]
    out = np.zeros((len(queries), E))
    for i, (s, r, _, t) in enumerate(np.asarray(queries).tolist()):
        lam, alpha = float(lambdas[r]), float(alphas[r])
        hist = [f for f in facts if f[1] == r and f[3] < t and (window == 0 or f[3] >= t - window)]
        if not hist:
            continue
        a, b = min(f[3] for f in hist), max(f[3] for f in hist)
        den = max(sum(2.0 ** (lam * (tau - t)) for tau in range(a, b)), floor)
        psi = np.zeros(E)
        xi = np.zeros(E)
        for fs, _, fo, ft in hist:
            if fs == s:
                psi[fo] += 2.0 ** (lam * (ft - t)) / den
            xi[fo] += 1.0 / len(hist)
        out[i] = alpha * psi + (1 - alpha) * xi
    return out


def naive_rank(scores_row, gold, filtered):
    g = scores_row[gold]
    others = [e for e in range(scores_row.shape[0]) if e != gold and e not in filtered]
    greater = sum(scores_row[e] > g for e in others)
    equal = sum(scores_row[e] == g for e in others)
    return 1.0 + greater + 0.5 * equal


def with_inverse(q, R):
    q = np.asarray(q, dtype=np.int64).reshape(-1, 4)
    return np.concatenate([q, np.stack([q[:, 2], q[:, 1] + R, q[:, 0], q[:, 3]], axis=1)])


@st.composite
def graphs(draw, max_facts=25):
    E = draw(st.integers(2, 6))
    R = draw(st.integers(1, 3))
    n = draw(st.integers(0, max_facts))
    fact = st.tuples(st.integers(0, E - 1), st.integers(0, R - 1), st.integers(0, E - 1), st.integers(0, 8))
    facts = np.array(draw(st.lists(fact, min_size=n, max_size=n)), dtype=np.int64).reshape(-1, 4)
    query = st.tuples(st.integers(0, E - 1), st.integers(0, 2 * R - 1), st.integers(0, E - 1), st.integers(0, 10))
    queries = np.array(draw(st.lists(query, min_size=1, max_size=12)), dtype=np.int64)
    lam_choices = st.sampled_from([0.0, 0.0001, 0.1, 0.5, 1.0001, 3.0])
    lambdas = np.array(draw(st.lists(lam_choices, min_size=2 * R, max_size=2 * R)))
    alphas = np.array(draw(st.lists(st.sampled_from([0.0, 0.3, 0.99999, 1.0]), min_size=2 * R, max_size=2 * R)))
    return E, R, facts, queries, lambdas, alphas


# ------------------------------------------------------------------------------------------
# scores
# ------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(graphs(), st.sampled_from([0, 1, 3]))
def test_scores_match_naive_reference(case, window):
    E, R, facts, queries, lambdas, alphas = case
    model = RecurrencyModel(lambdas, alphas, E, R, window=window)
    got = score_dense(model, facts, queries)
    want = naive_scores(facts, E, R, lambdas, alphas, queries, window=window)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
    # the prebuilt history gives the same
    np.testing.assert_array_equal(score_dense(model, build_history(facts, E, R), queries), got)


@settings(max_examples=100, deadline=None)
@given(graphs())
def test_ranks_match_naive_and_filtered_ranks(case):
    E, R, facts, queries, lambdas, alphas = case
    model = RecurrencyModel(lambdas, alphas, E, R)
    fi = build_filter(facts, R)
    ranks = rank_queries(model, facts, queries, fi, chunk_size=3)
    dense = naive_scores(facts, E, R, lambdas, alphas, queries)
    for i, (s, r, o, t) in enumerate(queries.tolist()):
        filtered = {f_o for f_s, f_r, f_o, f_t in with_inverse(facts, R).tolist() if (f_s, f_r, f_t) == (s, r, t)} - {o}
        assert ranks[i] == naive_rank(dense[i], o, filtered)
    # score() candidates through the project's ranking give the same ranks
    ent, sc = score(model, facts, queries, chunk_size=2)
    np.testing.assert_array_equal(filtered_ranks(ent, sc, queries[:, 2], queries[:, [0, 1, 3]], fi, E), ranks)


@settings(max_examples=60, deadline=None)
@given(graphs(), st.integers(0, 10))
def test_no_leakage_from_facts_at_or_after_query_time(case, extra_seed):
    E, R, facts, queries, lambdas, alphas = case
    t_q = int(queries[0, 3])
    rng = np.random.default_rng(extra_seed)
    future = np.stack(
        [rng.integers(0, E, 30), rng.integers(0, R, 30), rng.integers(0, E, 30), rng.integers(t_q, t_q + 4, 30)], axis=1
    )
    past = facts[facts[:, 3] < t_q]
    model = RecurrencyModel(lambdas, alphas, E, R)
    q = queries[:1]
    np.testing.assert_array_equal(score_dense(model, np.concatenate([past, future]), q), score_dense(model, past, q))


def test_hand_computed_strict_and_relaxed():
    # relation 0: (0, 0, 1) at t = 7 and t = 9 (seen at t-3 and t-1 for a query at t = 10), and (2, 0, 3) at t = 5
    facts = np.array([[0, 0, 1, 7], [0, 0, 1, 9], [2, 0, 3, 5]])
    E, R, lam, alpha = 4, 1, 0.5, 0.7
    model = RecurrencyModel.constant(E, R, lam, alpha)
    got = score_dense(model, facts, [[0, 0, 0, 10]])[0]
    den = sum(2.0 ** (lam * (tau - 10)) for tau in range(5, 9))  # tau = a .. b-1 = 5 .. 8
    psi1 = (2.0**-1.5 + 2.0**-0.5) / den
    assert got[1] == pytest.approx(alpha * psi1 + (1 - alpha) * 2 / 3, rel=1e-12)
    assert got[3] == pytest.approx((1 - alpha) * 1 / 3, rel=1e-12)
    assert got[0] == 0 and got[2] == 0
    # strict alone
    psi = score_dense(RecurrencyModel.constant(E, R, lam, 1.0), facts, [[0, 0, 0, 10]])[0]
    np.testing.assert_allclose(psi, [0, psi1, 0, 0], rtol=1e-12)
    # lambda = 0: no decay, D = b - a
    psi0 = score_dense(RecurrencyModel.constant(E, R, 0.0, 1.0), facts, [[0, 0, 0, 10]])[0]
    np.testing.assert_allclose(psi0, [0, 2 / 4, 0, 0], rtol=1e-12)
    # the inverse query (1, 0 + R, ?, 10) asks for the subject 0
    inv = score_dense(RecurrencyModel.constant(E, R, lam, 1.0), facts, [[1, 1, 0, 10]])[0]
    np.testing.assert_allclose(inv, [psi1, 0, 0, 0], rtol=1e-12)


def test_single_history_timestamp_uses_denominator_floor():
    facts = np.array([[0, 0, 1, 3]])  # a == b: the sum over [a, b) is empty
    got = score_dense(RecurrencyModel.constant(2, 1, 0.1, 1.0), facts, [[0, 0, 1, 5]])[0]
    assert got[1] == pytest.approx(2.0 ** (0.1 * (3 - 5)) / 1e-15)


def test_ties_rank_realistically():
    # objects 1 and 2 seen at the same times with (0, 0): equal scores, gold 1 ties with 2
    facts = np.array([[0, 0, 1, 2], [0, 0, 2, 2], [0, 0, 1, 4], [0, 0, 2, 4], [3, 0, 3, 1]])
    E, R = 5, 1
    model = RecurrencyModel.constant(E, R, 0.1, 0.5)
    q = np.array([[0, 0, 1, 6]])
    s = score_dense(model, facts, q)[0]
    assert s[1] == s[2] > s[3] > 0 and s[0] == s[4] == 0
    fi = build_filter(facts, R)
    assert rank_queries(model, facts, q, fi)[0] == 1.5
    ent, sc = score(model, facts, q)
    assert ent.tolist() == [[1, 2, 3]]  # ties by ascending id
    # an unreached gold ties with every other unreached, unfiltered entity: 3 reached + (2 - 1) / 2
    assert rank_queries(model, facts, np.array([[0, 0, 4, 6]]), fi)[0] == 4.5


def test_unseen_subject_relation_gets_no_strict_score():
    facts = np.array([[0, 0, 1, 1], [0, 0, 2, 2]])
    E, R = 4, 1
    strict = RecurrencyModel.constant(E, R, 0.1, 1.0)
    assert not score_dense(strict, facts, [[3, 0, 0, 5]]).any()  # subject 3 never with relation 0
    ent, sc = score(strict, facts, [[3, 0, 0, 5], [0, 0, 1, 5]])
    assert (ent[0] == -1).all() and np.isneginf(sc[0]).all()
    assert sorted(ent[1][ent[1] >= 0].tolist()) == [1, 2]
    # the relaxed part still scores the relation's objects
    mixed = score_dense(RecurrencyModel.constant(E, R, 0.1, 0.5), facts, [[3, 0, 0, 5]])[0]
    np.testing.assert_allclose(mixed, [0, 0.25, 0.25, 0])
    # a relation with no history at all: nothing
    assert not score_dense(RecurrencyModel.constant(E, 2, 0.1, 0.5), facts, [[0, 1, 0, 5], [0, 3, 0, 5]]).any()
    # no history facts at all
    assert not score_dense(strict, np.zeros((0, 4), np.int64), [[0, 0, 1, 5]]).any()


def test_top_k_keeps_the_best():
    facts = np.array([[0, 0, o, t] for o, t in [(1, 1), (2, 2), (3, 3), (4, 4)]])
    model = RecurrencyModel.constant(6, 1, 0.5, 1.0)
    ent, sc = score(model, facts, [[0, 0, 1, 5]], top_k=2)
    assert ent.tolist() == [[4, 3]] and (np.diff(sc[0]) < 0).all()


# ------------------------------------------------------------------------------------------
# parameter selection
# ------------------------------------------------------------------------------------------


def _first_max(values):
    """The first grid point whose MRR is within 1e-12 of the best (the library's tie rule, written plainly)."""
    best = max(values)
    return next(i for i, v in enumerate(values) if v >= best - 1e-12)


def _brute_force_selection(train, valid, E, R, cfg):
    """Per relation: first lambda with the best validation MRR (alpha = 1), then first alpha."""
    hist = np.concatenate([train, valid])
    fi = build_filter(hist, R)
    q = with_inverse(valid, R)
    rel = q[:, 1]
    lam = np.full(2 * R, cfg.default_lambda)
    alp = np.full(2 * R, cfg.default_alpha)
    mrr = np.array([[np.mean(1 / rank_queries(RecurrencyModel.constant(E, R, x, 1.0), hist, q[rel == r], fi)) if (rel == r).any() else np.nan
                     for x in cfg.lambda_grid] for r in range(2 * R)])
    for r in range(2 * R):
        if (rel == r).any():
            lam[r] = cfg.lambda_grid[int(_first_max(mrr[r]))]
    for r in range(2 * R):
        if (rel == r).any():
            m = [np.mean(1 / rank_queries(RecurrencyModel(lam, np.full(2 * R, a), E, R), hist, q[rel == r], fi)) for a in cfg.alpha_grid]
            alp[r] = cfg.alpha_grid[int(_first_max(m))]
    return lam, np.where(alp == 1.0, cfg.alpha_one_as, alp)


def test_fit_picks_the_best_grid_point_on_a_constructed_case():
    E, R = 6, 2
    train = np.array(
        # relation 0, subject 0: object 1 often long ago, object 2 once recently -> recency wins (large lambda)
        [[0, 0, 1, t] for t in range(0, 5)] + [[0, 0, 2, 8]]
        # relation 1, subject 3: object 4 often long ago, object 5 once recently -> frequency wins (lambda 0)
        + [[3, 1, 4, t] for t in range(0, 5)] + [[3, 1, 5, 8]]
    )
    valid = np.array([[0, 0, 2, 10], [3, 1, 4, 10]])
    cfg = RecurrencyConfig(lambda_grid=(0.0, 0.01, 2.0), alpha_grid=(0.0, 0.5, 1.0))
    model = fit(train, valid, E, R, cfg)
    assert model.lambdas[0] == 2.0 and model.lambdas[1] == 0.0
    # inverse relations: (2, 0 + R, ?, 10) -> 0 and (4, 1 + R, ?, 10) -> 3 are unambiguous: first grid values
    assert model.lambdas[2] == 0.0 and model.lambdas[3] == 0.0
    assert model.valid_queries.tolist() == [1, 1, 1, 1]
    assert model.valid_mrr_lambda[0].tolist() == [0.5, 0.5, 1.0]
    # relation 0 with lambda 2: psi ranks 2 first; alpha 0 (xi alone) ranks 1 first (5 of 6 facts)
    assert model.valid_mrr_alpha[0].tolist() == [0.5, 1.0, 1.0]
    assert model.alphas[0] == 0.5
    lam, alp = _brute_force_selection(train, valid, E, R, cfg)
    np.testing.assert_array_equal(model.lambdas, lam)
    np.testing.assert_array_equal(model.alphas, alp)


@settings(max_examples=25, deadline=None)
@given(graphs(max_facts=30), st.booleans())
def test_fit_matches_brute_force_selection(case, per_relation):
    E, R, facts, _, _, _ = case
    if facts.shape[0] < 2:
        return
    cut = np.median(facts[:, 3])
    train, valid = facts[facts[:, 3] <= cut], facts[facts[:, 3] > cut]
    cfg = RecurrencyConfig(lambda_grid=(0.0, 0.1, 1.0001), alpha_grid=(0.0, 0.5, 0.99, 1.0), per_relation=per_relation)
    model = fit(train, valid, E, R, cfg, chunk_size=2)
    if per_relation:
        lam, alp = _brute_force_selection(train, valid, E, R, cfg)
        np.testing.assert_array_equal(model.lambdas, lam)
        np.testing.assert_array_equal(model.alphas, alp)
        untrained = model.valid_queries == 0
        assert (model.lambdas[untrained] == cfg.default_lambda).all()
        assert (model.alphas[untrained] == cfg.default_alpha).all()
    elif valid.size:
        # one (lambda, alpha) for every relation (src/test.py applies the dataset's pair to all), from the grids
        assert len(set(model.lambdas.tolist())) == 1 and len(set(model.alphas.tolist())) == 1
        assert model.lambdas[0] in cfg.lambda_grid and model.alphas[0] in cfg.alpha_grid + (cfg.alpha_one_as,)
    assert (model.alphas != 1.0).all()


def test_a_tie_within_rounding_goes_to_the_first_grid_point():
    """Found by hypothesis: alpha 0 and alpha 1 give the same validation MRR for relation 0 (7/8), but
    summed by relation alpha 1's came out one ulp higher and won; the brute force (np.mean) took alpha 0."""
    facts = np.array([[0, 0, 0, 0]] * 6 + [[0, 0, 0, 1]] * 5 + [[0, 0, 1, 1]] * 2 + [[1, 0, 0, 0], [1, 0, 0, 1], [1, 0, 2, 0]])
    cut = np.median(facts[:, 3])
    train, valid = facts[facts[:, 3] <= cut], facts[facts[:, 3] > cut]
    cfg = RecurrencyConfig(lambda_grid=(0.0, 0.1, 1.0001), alpha_grid=(0.0, 0.5, 0.99, 1.0), per_relation=True)
    model = fit(train, valid, 3, 1, cfg, chunk_size=2)
    assert model.valid_mrr_alpha[0, 0] == 0.875 and abs(model.valid_mrr_alpha[0, 3] - 0.875) < 1e-15
    assert model.alphas[0] == 0.0
    lam, alp = _brute_force_selection(train, valid, 3, 1, cfg)
    np.testing.assert_array_equal(model.alphas, alp)
    assert first_best(np.array([0.5, 0.5 + 1e-16, 0.4])) == 0 and first_best(np.array([0.5, 0.6])) == 1


def test_fit_without_validation_queries_keeps_defaults():
    model = fit(np.array([[0, 0, 1, 0]]), np.zeros((0, 4), np.int64), 2, 1)
    assert model.lambdas.tolist() == [1.0001, 1.0001] and model.alphas.tolist() == [0.99999, 0.99999]


# ------------------------------------------------------------------------------------------
# save / load, input checks
# ------------------------------------------------------------------------------------------


def test_save_load_round_trip(tmp_path):
    train = np.array([[0, 0, 1, 0], [0, 0, 2, 1], [1, 1, 2, 1]])
    valid = np.array([[0, 0, 1, 2], [1, 1, 2, 3]])
    model = fit(train, valid, 3, 2, RecurrencyConfig(lambda_grid=(0.0, 0.5), alpha_grid=(0.5, 1.0), window=4))
    path = tmp_path / "sub" / "recurrency.npz"
    save_model(model, path)
    assert path.exists() and not [p for p in path.parent.iterdir() if p != path]
    back = load_model(path)
    for name in ("lambdas", "alphas", "lambda_grid", "alpha_grid", "valid_mrr_lambda", "valid_mrr_alpha", "valid_queries"):
        np.testing.assert_array_equal(getattr(back, name), getattr(model, name))
    assert (back.num_entities, back.num_relations, back.window, back.min_denominator) == (3, 2, 4, 1e-15)
    q = with_inverse(valid, 2)
    np.testing.assert_array_equal(score_dense(back, train, q), score_dense(model, train, q))
    np.savez(tmp_path / "other.npz", x=np.zeros(2))
    with pytest.raises(ValueError, match="not a recurrency model"):
        load_model(tmp_path / "other.npz")


def test_bad_inputs_raise_naming_what():
    model = RecurrencyModel.constant(3, 2, 0.1, 0.5)
    facts = np.array([[0, 0, 1, 0]])
    with pytest.raises(ValueError, match="queries must have shape"):
        score_dense(model, facts, np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match=r"queries: relation ids must lie in \[0, 4\)"):
        score_dense(model, facts, [[0, 4, 1, 2]])
    with pytest.raises(ValueError, match="queries: entity ids"):
        score_dense(model, facts, [[3, 0, 1, 2]])
    with pytest.raises(ValueError, match="queries: times must be >= 0"):
        score_dense(model, facts, [[0, 0, 1, -1]])
    with pytest.raises(ValueError, match="queries must hold integers"):
        score_dense(model, facts, np.array([[0.0, 0, 1, 2]]))
    with pytest.raises(ValueError, match="history quadruples: relation ids .*forward relations only"):
        score_dense(model, [[0, 2, 1, 0]], [[0, 0, 1, 2]])
    with pytest.raises(ValueError, match="history was built for"):
        score_dense(model, build_history(facts, 4, 2), [[0, 0, 1, 2]])
    with pytest.raises(ValueError, match="top_k must be positive"):
        score(model, facts, [[0, 0, 1, 2]], top_k=0)
    with pytest.raises(ValueError, match="valid_quads: relation ids"):
        fit(facts, [[0, 5, 1, 3]], 3, 2)
    with pytest.raises(ValueError, match="train_quads must have shape"):
        fit(np.zeros((1, 5), np.int64), facts, 3, 2)
    with pytest.raises(ValueError, match=r"lambdas and alphas must have shape \(4,\)"):
        RecurrencyModel(np.zeros(2), np.zeros(4), 3, 2)
    with pytest.raises(ValueError, match="alphas must lie in"):
        RecurrencyModel(np.zeros(4), np.full(4, 1.5), 3, 2)
    # the params section is checked where params are read, naming the key
    with pytest.raises(ConfigError, match=r"recurrency.lambda_grid: .*decays >= 0"):
        params_from_dict({"recurrency": {"lambda_grid": [-1.0]}})
    with pytest.raises(ConfigError, match=r"recurrency.alpha_grid: .*non-empty"):
        params_from_dict({"recurrency": {"alpha_grid": []}})
    with pytest.raises(ConfigError, match=r"recurrency.alpha_grid: .*in \[0, 1\]"):
        params_from_dict({"recurrency": {"alpha_grid": [0.5, 1.5]}})
    with pytest.raises(ConfigError, match=r"recurrency.window: .*>= 0"):
        params_from_dict({"recurrency": {"window": -2}})
    with pytest.raises(ConfigError, match=r"recurrency.window: expected an integer"):
        params_from_dict({"recurrency": {"window": 1.5}})
    with pytest.raises(ValueError, match="filter_index has num_relations"):
        rank_queries(model, facts, [[0, 0, 1, 2]], build_filter(facts, 1))


def test_config_defaults_are_the_papers():
    cfg = RecurrencyConfig()
    assert cfg.lambda_grid == [0, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.5, 0.9, 1.0001]
    assert cfg.alpha_grid == [0, 0.00001, 0.0001, 0.001, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999, 1]
    assert (cfg.per_relation, cfg.window, cfg.default_lambda, cfg.default_alpha, cfg.alpha_one_as) == (True, 0, 1.0001, 0.99999, 0.99999)
