"""Tests for raptor.evaluation.ranking: filter index, time-aware filtered realistic ranks, metrics, artifacts."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raptor.evaluation.ranking import (
    FilterIndex,
    build_filter,
    evaluation_metrics,
    filtered_ranks,
    metrics_from_ranks,
    read_metrics,
    read_predictions,
    sorted_candidates,
    write_metrics,
    write_predictions,
)

NEG = -np.inf


# ------------------------------------------------------------------------------------------
# naive reference: one query at a time, full score vector, Python sets
# ------------------------------------------------------------------------------------------


def naive_filter(quads, num_relations):
    f = {}
    for s, r, o, t in np.asarray(quads).tolist():
        f.setdefault((s, r, t), set()).add(o)
        f.setdefault((o, r + num_relations, t), set()).add(s)
    return f


def naive_rank(cands, scores, gold, key, filt, num_entities):
    full = [-math.inf] * num_entities
    for e, sc in zip(cands, scores):
        if e >= 0:
            full[e] = sc
    removed = filt.get(tuple(key), set()) - {gold}
    g = full[gold]
    greater = equal = 0
    for e in range(num_entities):
        if e == gold or e in removed:
            continue
        if full[e] > g:
            greater += 1
        elif full[e] == g:
            equal += 1
    return 1 + greater + equal / 2


def one(cands, scores, gold, key, fi, num_entities, **kw):
    return filtered_ranks(
        np.array([cands], dtype=np.int64),
        np.array([scores], dtype=np.float64),
        np.array([gold]),
        np.array([key]),
        fi,
        num_entities,
        **kw,
    )[0]


# ------------------------------------------------------------------------------------------
# filter index
# ------------------------------------------------------------------------------------------


class TestBuildFilter:
    R = 3

    def splits(self):
        train = np.array([[0, 0, 1, 0], [0, 0, 2, 0], [3, 1, 0, 0], [0, 0, 1, 0]])  # one duplicate
        valid = np.array([[0, 0, 4, 0], [0, 0, 5, 1]])
        test = np.array([[2, 2, 0, 0], [0, 0, 6, 0]])
        return train, valid, test

    def test_union_of_splits_both_directions(self):
        train, valid, test = self.splits()
        fi = build_filter([train, valid, test], self.R)
        assert fi.answers_of(0, 0, 0).tolist() == [1, 2, 4, 6]  # all splits, duplicate dropped
        assert fi.answers_of(0, 0, 1).tolist() == [5]  # other timestamp kept apart
        assert fi.answers_of(1, 0 + self.R, 0).tolist() == [0]  # inverse of (0, 0, 1, 0)
        assert fi.answers_of(0, 1 + self.R, 0).tolist() == [3]  # inverse of (3, 1, 0, 0)
        assert fi.answers_of(0, 2 + self.R, 0).tolist() == [2]  # inverse of a test fact
        assert fi.answers_of(0, 1, 0).tolist() == []  # no such key
        assert fi.answers_of(0, 0, 99).tolist() == []  # time beyond the index
        assert fi.answers_of(99, 0, 0).tolist() == []  # subject beyond the index

    def test_array_equals_list_of_splits(self):
        parts = self.splits()
        a = build_filter(np.concatenate(parts), self.R)
        b = build_filter(list(parts), self.R)
        for x, y in ((a.keys, b.keys), (a.offsets, b.offsets), (a.answers, b.answers)):
            np.testing.assert_array_equal(x, y)

    def test_csr_invariants(self):
        rng = np.random.default_rng(1)
        quads = np.stack([rng.integers(0, 20, 500), rng.integers(0, 4, 500), rng.integers(0, 20, 500), rng.integers(0, 7, 500)], 1)
        fi = build_filter(quads, 4)
        assert np.all(np.diff(fi.keys) > 0)
        assert fi.offsets[0] == 0 and fi.offsets[-1] == fi.answers.size
        assert np.all(np.diff(fi.offsets) > 0)
        assert fi.answers.dtype == np.int32
        ref = naive_filter(quads, 4)
        assert fi.num_keys == len(ref)
        for (s, r, t), objs in ref.items():
            assert fi.answers_of(s, r, t).tolist() == sorted(objs)

    def test_vectorised_lookup(self):
        fi = build_filter(self.splits()[0], self.R)
        start, end = fi.lookup([0, 0, 1, -1], [0, 1, 3, 0], [0, 0, 0, 0])
        assert (end - start).tolist() == [2, 0, 1, 0]

    def test_empty(self):
        fi = build_filter(np.zeros((0, 4), dtype=np.int32), 2)
        assert fi.num_keys == 0 and fi.answers_of(0, 0, 0).size == 0
        r = filtered_ranks(np.array([[1, 0]]), np.array([[1.0, 0.5]]), np.array([0]), np.array([[0, 0, 0]]), fi, 3)
        assert r.tolist() == [2.0]

    @pytest.mark.parametrize(
        "quads, msg",
        [
            (np.array([[0, 3, 1, 0]]), "num_relations"),  # inverse ids must not be passed in
            (np.array([[0, 0, -1, 0]]), "negative"),
            (np.array([[0, 0, 1]]), r"\[n, 4\]"),
        ],
    )
    def test_bad_input(self, quads, msg):
        with pytest.raises(ValueError, match=msg):
            build_filter(quads, 3)

    def test_float_quads_rejected(self):
        with pytest.raises(TypeError, match="quadruples must be integers, got dtype float64"):
            build_filter(np.array([[0.0, 0, 1, 0]]), 3)


# ------------------------------------------------------------------------------------------
# filtered ranks: hand-computed cases
# ------------------------------------------------------------------------------------------


class TestFilteredRanksHand:
    R = 2
    E = 10
    # true facts for key (0, 0, t=5): objects 1, 2, 3; key (0, 0, t=6): object 4
    quads = np.array([[0, 0, 1, 5], [0, 0, 2, 5], [0, 0, 3, 5], [0, 0, 4, 6], [7, 1, 0, 5]])

    @property
    def fi(self):
        return build_filter(self.quads, self.R)

    def test_no_ties_no_filter_hits(self):
        # gold 1 at 0.5; entities 5, 6 above, 7 below
        r = one([5, 6, 1, 7], [0.9, 0.8, 0.5, 0.1], 1, [0, 0, 5], self.fi, self.E)
        assert r == 3.0

    def test_filtered_above_gold_are_removed(self):
        # 2 and 3 are true answers at t=5 -> filtered; 5 stays above the gold
        r = one([2, 3, 5, 1], [0.9, 0.8, 0.7, 0.5], 1, [0, 0, 5], self.fi, self.E)
        assert r == 2.0

    def test_time_aware_not_static(self):
        # 4 is a true answer only at t=6: not filtered for the t=5 query, filtered for a t=6 query
        assert one([4, 1], [0.9, 0.5], 1, [0, 0, 5], self.fi, self.E) == 2.0
        assert one([4, 9], [0.9, 0.5], 9, [0, 0, 6], self.fi, self.E) == 1.0
        # 2 is filtered at t=5, not at t=6
        assert one([2, 1], [0.9, 0.5], 1, [0, 0, 5], self.fi, self.E) == 1.0
        assert one([2, 4], [0.9, 0.5], 4, [0, 0, 6], self.fi, self.E) == 2.0

    def test_ties_realistic(self):
        # gold 1 tied with 5 and 6 (0.5), one above (7): optimistic 2, pessimistic 4 -> 3
        r = one([7, 5, 1, 6, 8], [0.9, 0.5, 0.5, 0.5, 0.1], 1, [0, 0, 5], self.fi, self.E)
        assert r == 3.0
        # a filtered entity in the tie does not count
        r = one([7, 5, 1, 2, 8], [0.9, 0.5, 0.5, 0.5, 0.1], 1, [0, 0, 5], self.fi, self.E)
        assert r == 2.5

    def test_gold_alone_at_top_and_tied_top(self):
        assert one([1, 5], [2.0, 1.0], 1, [0, 0, 5], self.fi, self.E) == 1.0
        assert one([1, 5], [2.0, 2.0], 1, [0, 0, 5], self.fi, self.E) == 1.5

    def test_unreached_gold(self):
        # reached non-filtered: 5, 6 (2); filtered: 2, 3 (one reached, one not); gold 1 unreached.
        # unreached non-filtered entities incl. gold: {0, 1, 4, 7, 8, 9} -> U = 6
        # rank = n_reached + 1 + (U - 1) / 2 = 2 + 1 + 2.5
        r = one([5, 6, 2, -1], [0.9, 0.8, 0.7, NEG], 1, [0, 0, 5], self.fi, self.E)
        assert r == 5.5

    def test_unreached_gold_candidate_with_minus_inf(self):
        # the gold listed with score -inf is unreached; so is entity 8 listed with -inf
        r = one([5, 6, 1, 8], [0.9, 0.8, NEG, NEG], 1, [0, 0, 5], self.fi, self.E)
        assert r == 5.5

    def test_gold_unreached_everything_unreached(self):
        # nothing reached, filter {2, 3} -> U = 8, rank = 1 + 7/2
        r = one([-1, -1], [NEG, NEG], 1, [0, 0, 5], self.fi, self.E)
        assert r == 4.5
        # empty candidate list (C = 0)
        r = filtered_ranks(np.zeros((1, 0), int), np.zeros((1, 0)), np.array([1]), np.array([[0, 0, 5]]), self.fi, self.E)
        assert r.tolist() == [4.5]

    def test_gold_not_in_filter(self):
        # gold 9 is no true answer of the key (e.g. filter built without the test split):
        # all of 1, 2, 3 are filtered
        r = one([1, 2, 3, 5, 9], [0.9, 0.9, 0.9, 0.8, 0.1], 9, [0, 0, 5], self.fi, self.E)
        assert r == 2.0
        r = one([1, 5], [0.9, 0.8], 9, [0, 0, 5], self.fi, self.E)  # unreached: U = 10-3-1
        assert r == 1 + 1 + (6 - 1) / 2

    def test_inverse_query(self):
        # (7, 1, 0, 5) gives inverse key (0, 1 + R, 5) -> {7}
        r = one([7, 8, 3], [0.9, 0.8, 0.5], 3, [0, 1 + self.R, 5], self.fi, self.E)
        assert r == 2.0
        r = one([7, 8, 3], [0.9, 0.8, 0.5], 3, [0, 1, 5], self.fi, self.E)  # forward: 7 not filtered
        assert r == 3.0

    def test_padding_score_ignored(self):
        r = one([-1, 5, 1, -1], [5.0, 0.9, 0.5, np.nan], 1, [0, 0, 5], self.fi, self.E)
        assert r == 2.0

    def test_infinite_plus_scores(self):
        r = one([5, 1, 6], [np.inf, np.inf, 0.0], 1, [0, 0, 5], self.fi, self.E)
        assert r == 1.5

    def test_batch_matches_single_and_dtype(self):
        ce = np.array([[5, 6, 1, 7], [2, 3, 5, 1], [-1, -1, -1, -1]], dtype=np.int32)
        cs = np.array([[0.9, 0.8, 0.5, 0.1], [0.9, 0.8, 0.7, 0.5], [NEG] * 4], dtype=np.float32)
        r = filtered_ranks(ce, cs, np.array([1, 1, 1], np.int32), np.array([[0, 0, 5]] * 3, np.int32), self.fi, self.E)
        assert r.dtype == np.float64 and r.tolist() == [3.0, 2.0, 4.5]

    def test_empty_batch(self):
        r = filtered_ranks(np.zeros((0, 3), int), np.zeros((0, 3)), np.zeros(0, int), np.zeros((0, 3), int), self.fi, self.E)
        assert r.shape == (0,)


class TestFilteredRanksErrors:
    fi = build_filter(np.array([[0, 0, 1, 0]]), 2)
    ok = dict(
        cand_entity=np.array([[1, 2]]),
        cand_score=np.array([[0.5, 0.4]]),
        gold=np.array([1]),
        query_keys=np.array([[0, 0, 0]]),
    )

    def call(self, num_entities=5, **over):
        kw = {**self.ok, **over}
        return filtered_ranks(kw["cand_entity"], kw["cand_score"], kw["gold"], kw["query_keys"], self.fi, num_entities)

    def test_ok(self):
        assert self.call().tolist() == [1.0]

    @pytest.mark.parametrize(
        "over, err, msg",
        [
            (dict(cand_entity=np.array([[1, 1]])), ValueError, "duplicate candidate entity 1 in query row 0"),
            (dict(cand_entity=np.array([[1, 2, 3]])), ValueError, "shape"),
            (dict(cand_entity=np.array([1, 2]), cand_score=np.array([0.5, 0.4])), ValueError, "2-D"),
            (dict(gold=np.array([1, 2])), ValueError, "gold must have shape"),
            (dict(query_keys=np.array([[0, 0]])), ValueError, "query_keys"),
            (dict(cand_entity=np.array([[1, 7]])), ValueError, r"\[-1, 5\)"),
            (dict(cand_entity=np.array([[1, -2]])), ValueError, r"\[-1, 5\)"),
            (dict(gold=np.array([5])), ValueError, "gold ids"),
            (dict(cand_score=np.array([[0.5, np.nan]])), ValueError, "NaN"),
            (dict(query_keys=np.array([[0, 4, 0]])), ValueError, "query relations"),
            (dict(query_keys=np.array([[5, 0, 0]])), ValueError, "query subjects"),
            (dict(query_keys=np.array([[0, 0, -1]])), ValueError, "query times"),
            (dict(cand_entity=np.array([[1.0, 2.0]])), TypeError, "integer"),
            (dict(cand_score=np.array([[1, 2]])), TypeError, "floating"),
        ],
    )
    def test_bad(self, over, err, msg):
        with pytest.raises(err, match=msg):
            self.call(**over)

    def test_duplicate_later_row_and_padding_not_duplicates(self):
        ce = np.array([[1, -1, -1], [2, 3, 2]])
        with pytest.raises(ValueError, match="row 1"):
            filtered_ranks(ce, np.zeros((2, 3)), np.array([1, 2]), np.zeros((2, 3), int), self.fi, 5)
        ce = np.array([[1, -1, -1], [2, 3, -1]])  # repeated -1 is padding, fine
        filtered_ranks(ce, np.zeros((2, 3)), np.array([1, 2]), np.zeros((2, 3), int), self.fi, 5)

    def test_filter_larger_than_entities(self):
        fi = build_filter(np.array([[0, 0, 9, 0]]), 2)
        with pytest.raises(ValueError, match="filter index"):
            filtered_ranks(np.array([[1]]), np.array([[0.5]]), np.array([1]), np.array([[0, 0, 0]]), fi, 5)

    def test_bad_num_entities(self):
        with pytest.raises(ValueError, match="num_entities"):
            self.call(num_entities=0)


# ------------------------------------------------------------------------------------------
# filtered ranks vs the naive reference (property-based)
# ------------------------------------------------------------------------------------------


@st.composite
def ranking_case(draw):
    E = draw(st.integers(1, 12))
    R = draw(st.integers(1, 3))
    T = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_quads = draw(st.integers(0, 40))
    quads = np.stack(
        [rng.integers(0, E, n_quads), rng.integers(0, R, n_quads), rng.integers(0, E, n_quads), rng.integers(0, T, n_quads)], 1
    ).reshape(-1, 4)
    Q = draw(st.integers(1, 15))
    C = draw(st.integers(0, E + 2))
    cand = np.full((Q, C), -1, dtype=np.int64)
    for q in range(Q):  # unique entities per row, random padding positions
        k = int(rng.integers(0, min(C, E) + 1))
        slots = rng.choice(C, size=k, replace=False)
        cand[q, slots] = rng.choice(E, size=k, replace=False)
    # few distinct score values -> many ties; include -inf (listed but unreached)
    levels = np.array([NEG, -1.0, 0.0, 0.0, 0.5, 1.0, 2.0])
    score = levels[rng.integers(0, len(levels), (Q, C))]
    score = np.where(cand < 0, rng.choice([NEG, 3.0], size=(Q, C)), score)  # padding score ignored
    if n_quads and draw(st.booleans()):  # queries drawn from the facts (gold in the filter)
        pick = quads[rng.integers(0, n_quads, Q)]
        inv = rng.random(Q) < 0.5
        s = np.where(inv, pick[:, 2], pick[:, 0])
        r = np.where(inv, pick[:, 1] + R, pick[:, 1])
        o = np.where(inv, pick[:, 0], pick[:, 2])
        keys = np.stack([s, r, pick[:, 3]], 1)
        gold = o
    else:
        keys = np.stack([rng.integers(0, E, Q), rng.integers(0, 2 * R, Q), rng.integers(0, T + 1, Q)], 1)
        gold = rng.integers(0, E, Q)
    if C:  # often put the gold into its row (when absent), so reached golds with ties are common
        for q in np.flatnonzero(rng.random(Q) < 0.6):
            if not (cand[q] == gold[q]).any():
                cand[q, rng.integers(0, C)] = gold[q]
    chunk = draw(st.sampled_from([None, 1, 2, 7]))
    return E, R, quads, cand, score, gold, keys, chunk


@settings(max_examples=300, deadline=None)
@given(ranking_case())
def test_matches_naive_reference(case):
    E, R, quads, cand, score, gold, keys, chunk = case
    fi = build_filter(quads, R)
    got = filtered_ranks(cand, score, gold, keys, fi, E, chunk_size=chunk)
    filt = naive_filter(quads, R)
    want = [naive_rank(cand[q], score[q], gold[q], keys[q], filt, E) for q in range(len(gold))]
    np.testing.assert_array_equal(got, np.array(want))
    assert np.all(got >= 1) and np.all(got <= E)


@settings(max_examples=200, deadline=None)
@given(ranking_case())
def test_the_device_ranks_equal_the_host_ranks(case):
    """:func:`filtered_ranks_on_device` (here on the CPU's torch) gives :func:`filtered_ranks`' ranks
    exactly: ties, filtered entities, unreached golds, golds in and out of the filter, padding."""
    import torch

    from raptor.evaluation.ranking import DeviceFilter, filtered_ranks_on_device

    E, R, quads, cand, score, gold, keys, _ = case
    fi = build_filter(quads, R)
    want = filtered_ranks(cand, score, gold, keys, fi, E)
    t = torch.from_numpy
    got = filtered_ranks_on_device(t(cand), t(score), t(gold.astype(np.int64)), t(keys.astype(np.int64)),
                                   DeviceFilter.of(fi, "cpu"), E)
    assert got.dtype == torch.float64
    np.testing.assert_array_equal(got.numpy(), want)


def test_the_device_filter_is_built_once_per_device_and_holds_the_widest_answer_set():
    from raptor.evaluation.ranking import DeviceFilter

    fi = build_filter(np.array([[0, 0, 1, 5], [0, 0, 2, 5], [0, 0, 3, 5], [4, 1, 0, 5]]), 2)
    d = DeviceFilter.of(fi, "cpu")
    assert DeviceFilter.of(fi, "cpu") is d and d.width == 3  # (0, 0, 5) -> {1, 2, 3}
    empty = DeviceFilter.of(build_filter(np.zeros((0, 4), np.int64), 2), "cpu")
    assert empty.width == 0


def test_matches_naive_reference_gold_in_beam():
    """Larger random cases where the gold is usually reached, with many ties."""
    rng = np.random.default_rng(7)
    E, R, T, Q, C = 60, 4, 5, 300, 25
    quads = np.stack([rng.integers(0, E, 400), rng.integers(0, R, 400), rng.integers(0, E, 400), rng.integers(0, T, 400)], 1)
    test = quads[rng.integers(0, 400, Q)]
    cand = np.stack([rng.choice(E, C, replace=False) for _ in range(Q)])
    put = rng.random(Q) < 0.8
    has = (cand == test[:, 2:3]).any(1)
    cand[put & ~has, 0] = test[put & ~has, 2]
    score = rng.integers(0, 6, (Q, C)).astype(float)
    fi = build_filter(quads, R)
    got = filtered_ranks(cand, score, test[:, 2], test[:, [0, 1, 3]], fi, E, chunk_size=37)
    filt = naive_filter(quads, R)
    want = [naive_rank(cand[q], score[q], test[q, 2], test[q, [0, 1, 3]], filt, E) for q in range(Q)]
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------------------------
# metrics
# ------------------------------------------------------------------------------------------


class TestMetrics:
    def test_hand_computed(self):
        ranks = [1, 2, 4, 10, 11]
        m = metrics_from_ranks(ranks)
        assert m["count"] == 5
        assert m["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 4 + 1 / 10 + 1 / 11) / 5)
        assert m["hits@1"] == pytest.approx(1 / 5)
        assert m["hits@3"] == pytest.approx(2 / 5)
        assert m["hits@10"] == pytest.approx(4 / 5)

    def test_fractional_ranks(self):
        m = metrics_from_ranks([1.5, 3.0, 3.5, 10.5])
        assert m["hits@1"] == 0.0
        assert m["hits@3"] == pytest.approx(2 / 4)  # 3.0 <= 3, 3.5 is not
        assert m["hits@10"] == pytest.approx(3 / 4)  # 10.5 is not
        assert m["mrr"] == pytest.approx((1 / 1.5 + 1 / 3 + 1 / 3.5 + 1 / 10.5) / 4)

    @pytest.mark.parametrize("bad, msg", [([], "no ranks: metrics of an empty query set are undefined"),
                                          ([0.5], "finite and >= 1"), ([np.nan], "finite and >= 1"),
                                          ([np.inf], "finite and >= 1"), ([[1.0]], r"ranks must be 1-D, got shape \(1, 1\)")])
    def test_bad(self, bad, msg):
        with pytest.raises(ValueError, match=msg):
            metrics_from_ranks(bad)

    def test_evaluation_metrics_directions(self):
        ranks = np.array([1.0, 2.0, 4.0, 20.0])
        rel = np.array([0, 1, 3, 2])  # R = 2: forward 0, 1; inverse 3, 2
        m = evaluation_metrics(ranks, rel, 2)
        assert m["queries"] == {"total": 4, "forward": 2, "inverse": 2}
        assert m["mrr"] == pytest.approx(metrics_from_ranks(ranks)["mrr"])
        assert m["forward"]["mrr"] == pytest.approx(0.75)
        assert m["inverse"]["hits@10"] == pytest.approx(0.5)
        assert "count" not in m
        m = evaluation_metrics(ranks[:2], rel[:2], 2)
        assert "inverse" not in m and m["queries"]["inverse"] == 0
        with pytest.raises(ValueError, match="2R"):
            evaluation_metrics(ranks, np.array([0, 1, 4, 2]), 2)


# ------------------------------------------------------------------------------------------
# artifacts
# ------------------------------------------------------------------------------------------


def test_sorted_candidates():
    ce = np.array([[3, 1, -1, 2, 0], [-1, -1, -1, -1, -1]])
    cs = np.array([[0.5, 0.9, 7.0, 0.5, NEG], [1.0] * 5])
    off, ent, sc = sorted_candidates(ce, cs)
    assert off.tolist() == [0, 3, 3]
    assert ent.tolist() == [1, 2, 3]  # tie 0.5: ascending id; -inf and padding dropped
    assert sc.tolist() == [0.9, 0.5, 0.5]


class TestPredictionsIO:
    def data(self):
        ce = np.array([[3, 1, -1, 2], [0, -1, -1, -1], [-1, -1, -1, -1]], dtype=np.int32)
        cs = np.array([[0.25, 0.75, NEG, 0.25], [1.5, NEG, NEG, NEG], [NEG] * 4])
        subj, rel, obj, tim = np.array([0, 1, 2]), np.array([0, 3, 1]), np.array([1, 0, 4]), np.array([5, 5, 6])
        return subj, rel, obj, tim, ce, cs

    def test_round_trip_and_schema(self, tmp_path):
        subj, rel, obj, tim, ce, cs = self.data()
        fi = build_filter(np.array([[0, 0, 1, 5], [0, 1, 1, 5]]), 2)
        keys = np.stack([subj, rel, tim], 1)
        ranks = filtered_ranks(ce, cs, obj, keys, fi, 6)
        path = tmp_path / "out" / "predictions.parquet"
        write_predictions(path, np.stack([subj, rel, obj, tim], 1), ce, cs, ranks)
        schema = pq.read_schema(path)
        assert str(schema.field("subject").type) == "int32"
        assert str(schema.field("relation").type) == "int32"
        assert str(schema.field("candidates").type) == "list<element: int32>"
        assert str(schema.field("scores").type) == "list<element: float>"
        assert str(schema.field("rank").type) == "double"
        assert "path_entities" not in schema.names
        assert list(tmp_path.joinpath("out").iterdir()) == [path]  # no temp files left
        p = read_predictions(path)
        assert len(p) == 3 and p.paths is None
        np.testing.assert_array_equal(p.relation, rel)
        np.testing.assert_array_equal(p.rank, ranks)
        assert p.row(0)[0].tolist() == [1, 2, 3] and p.row(0)[1].tolist() == [0.75, 0.25, 0.25]
        assert p.row(2)[0].tolist() == []
        # the stored candidates reproduce the ranks
        pe, ps = p.padded()
        assert pe.shape == (3, 3)
        np.testing.assert_array_equal(filtered_ranks(pe, ps, p.object, keys, fi, 6), ranks)

    def test_names_for_people(self, tmp_path):
        """With names the file reads without the dataset's dictionaries: the query's subject, relation
        (inverses named as such), gold object and best-scored candidate by name; none reached: null."""
        from raptor.data.dataset import Dataset

        subj, rel, obj, tim, ce, cs = self.data()
        ds = Dataset(splits={}, entity_names=[f"e{i}" for i in range(5)], relation_names=["visit", "host"], meta={})
        assert ds.relation_labels() == ["visit", "host", "inverse of visit", "inverse of host"]
        assert ds.relation_label(4) == "(stay)"
        path = tmp_path / "p.parquet"
        write_predictions(path, np.stack([subj, rel, obj, tim], 1), ce, cs, np.ones(3),
                          names=(ds.entity_names, ds.relation_labels()))
        t = pq.read_table(path).to_pydict()
        assert t["subject_name"] == ["e0", "e1", "e2"]
        assert t["relation_name"] == ["visit", "inverse of host", "host"]
        assert t["object_name"] == ["e1", "e0", "e4"]
        assert t["top_name"] == ["e1", "e0", None]  # row 0's best candidate is entity 1 (score 0.75)
        assert pq.read_schema(path).field("subject_name").type.value_type == "string"
        assert len(read_predictions(path)) == 3  # the id columns still read the same way
        with pytest.raises(ValueError, match="entity id is outside the 2 names given"):
            write_predictions(path, np.stack([subj, rel, obj, tim], 1), ce, cs, np.ones(3),
                              names=(["a", "b"], ds.relation_labels()))

    def test_best_paths(self, tmp_path):
        subj, rel, obj, tim, ce, cs = self.data()
        path = tmp_path / "p.parquet"
        bp = {
            "path_entities": np.array([[0, 3, 1], [1, 0, -1], [-1, -1, -1]]),
            "path_relations": [[0, 1], [2], []],
            "path_times": np.array([[4, 5], [3, -1], [-1, -1]]),
        }
        write_predictions(path, np.stack([subj, rel, obj, tim], 1), ce, cs, np.ones(3), best_path=bp)
        p = read_predictions(path)
        assert p.path("path_entities", 0).tolist() == [0, 3, 1]
        assert p.path("path_entities", 1).tolist() == [1, 0]
        assert p.path("path_relations", 1).tolist() == [2]
        assert p.path("path_times", 2).tolist() == []
        assert str(pq.read_schema(path).field("path_times").type) == "list<element: int32>"

    def test_bad_inputs_leave_no_file(self, tmp_path):
        subj, rel, obj, tim, ce, cs = self.data()
        path = tmp_path / "p.parquet"
        with pytest.raises(ValueError, match="rank"):
            write_predictions(path, np.stack([subj, rel, obj, tim], 1), ce, cs, np.ones(2))
        with pytest.raises(ValueError, match="queries"):
            write_predictions(path, np.stack([subj, rel, obj, tim], 1)[:2], ce, cs, np.ones(3))
        with pytest.raises(ValueError, match="best_path"):
            write_predictions(path, np.stack([subj, rel, obj, tim], 1), ce, cs, np.ones(3),
                              best_path={"path_entities": [[], [], []]})
        with pytest.raises(ValueError, match="trailing"):
            bad = {n: np.array([[-1, 1], [0, -1], [0, -1]]) for n in ("path_entities", "path_relations", "path_times")}
            write_predictions(path, np.stack([subj, rel, obj, tim], 1), ce, cs, np.ones(3), best_path=bad)
        assert list(tmp_path.iterdir()) == []

    def test_overwrite_is_atomic_replace(self, tmp_path):
        subj, rel, obj, tim, ce, cs = self.data()
        path = tmp_path / "p.parquet"
        write_predictions(path, np.stack([subj, rel, obj, tim], 1), ce, cs, np.full(3, 2.0))
        write_predictions(path, np.stack([subj, rel, obj, tim], 1), ce, cs, np.full(3, 3.0))
        assert read_predictions(path).rank.tolist() == [3.0] * 3
        assert len(list(tmp_path.iterdir())) == 1

    def test_empty_and_beamless(self, tmp_path):
        path = tmp_path / "p.parquet"
        write_predictions(path, np.zeros((0, 4), int), np.zeros((0, 3), int), np.zeros((0, 3)), np.zeros(0))
        p = read_predictions(path)
        assert len(p) == 0 and p.padded()[0].shape == (0, 0)
        write_predictions(path, [[1, 1, 1, 1]], np.zeros((1, 0), int), np.zeros((1, 0)), np.ones(1))
        assert read_predictions(path).row(0)[0].tolist() == []

    def test_not_a_predictions_file(self, tmp_path):
        import pyarrow as pa

        path = tmp_path / "x.parquet"
        pq.write_table(pa.table({"a": [1]}), path)
        with pytest.raises(ValueError, match="not a predictions file"):
            read_predictions(path)


class TestMetricsIO:
    def test_round_trip(self, tmp_path):
        m = evaluation_metrics(np.array([1.0, 2.0, 3.5]), np.array([0, 0, 2]), 2)
        path = tmp_path / "metrics.json"
        write_metrics(path, m)
        back = read_metrics(path)
        assert back == json.loads(json.dumps(m))
        assert set(back) >= {"mrr", "hits@1", "hits@3", "hits@10", "queries"}
        assert back["queries"] == {"total": 3, "forward": 2, "inverse": 1}

    def test_counts_passed_separately(self, tmp_path):
        m = metrics_from_ranks([1.0, 4.0])
        write_metrics(tmp_path / "m.json", m, queries={"total": 2, "forward": 1, "inverse": 1})
        back = read_metrics(tmp_path / "m.json")
        assert "count" not in back and back["queries"]["total"] == 2

    @pytest.mark.parametrize(
        "metrics, queries, msg",
        [
            ({"mrr": 0.5, "hits@1": 0.1, "hits@3": 0.2}, {"total": 1, "forward": 1, "inverse": 0}, "lack"),
            ({"mrr": 1.5, "hits@1": 0.1, "hits@3": 0.2, "hits@10": 0.3}, {"total": 1, "forward": 1, "inverse": 0}, "fraction"),
            ({"mrr": 0.5, "hits@1": 0.1, "hits@3": 0.2, "hits@10": 0.3}, None, "query counts"),
            ({"mrr": 0.5, "hits@1": 0.1, "hits@3": 0.2, "hits@10": 0.3}, {"total": 3, "forward": 1, "inverse": 1}, "inconsistent"),
        ],
    )
    def test_bad(self, tmp_path, metrics, queries, msg):
        with pytest.raises(ValueError, match=msg):
            write_metrics(tmp_path / "m.json", metrics, queries=queries)
        assert not (tmp_path / "m.json").exists()


def test_filter_index_is_frozen():
    fi = build_filter(np.array([[0, 0, 1, 0]]), 1)
    assert isinstance(fi, FilterIndex)
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        fi.num_relations = 3  # type: ignore[misc]


def test_docs_worked_example():
    """The worked example of docs/evaluation.md."""
    E, R = 8, 1
    fi = build_filter(np.array([[0, 0, 3, 4], [0, 0, 5, 4], [0, 0, 6, 2]]), R)  # (0, 0, ?, 4) -> {3, 5}
    ce = np.array([[1, 5, 3, 2, 7, 4], [1, 5, 2, 7, 4, -1]])
    cs = np.array([[0.9, 0.8, 0.6, 0.6, 0.6, 0.1], [0.9, 0.8, 0.6, 0.6, 0.1, NEG]])
    r = filtered_ranks(ce, cs, np.array([3, 3]), np.array([[0, 0, 4], [0, 0, 4]]), fi, E)
    assert r.tolist() == [3.0, 6.0]
    m = metrics_from_ranks(r)
    assert m["hits@1"] == 0.0 and m["hits@3"] == 0.5 and m["mrr"] == pytest.approx((1 / 3 + 1 / 6) / 2)
