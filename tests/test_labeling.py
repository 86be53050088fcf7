"""Reachable-entity labeling: exact = brute force, pruned fast = Algorithm 1, action labels, storage."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raptor.common.io import OutputError
from raptor.config import LabelingConfig
from raptor.data.graph import TemporalGraph
from raptor.labeling.actions import ActionCandidates, LabelRule, action_labels
from raptor.labeling.compute import ChunkOptions, compute_labels, label_pairs
from raptor.labeling.reference import reference_labels, reference_labels_via
from raptor.labeling.stage import label_dataset
from raptor.labeling.store import (
    LABELS_FILE,
    LABEL_COLUMNS,
    SUMMARY_FILE,
    VIA_COLUMNS,
    PartitionedLabels,
    WriteOptions,
    label_table_hash,
    load_label_table,
    merge_label_parts,
    part_target_ranges,
    write_label_part,
    write_labels,
)
from raptor.labeling.table import VISITED_SUBJECT

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_H = WriteOptions(input_hash="h")
_CONFIG_FIELDS = ("max_in_edges", "strict_history", "implementation", "workers", "visited")


def _compute(graph, targets, query_times, *, max_path_length, **kw):
    """:func:`compute_labels` with the settings as flat keywords (``LabelingConfig`` fields and
    ``ChunkOptions`` fields), as the tests write them."""
    config = LabelingConfig(**{k: kw.pop(k) for k in _CONFIG_FIELDS if k in kw})
    return compute_labels(graph, targets, query_times, max_path_length=max_path_length, config=config,
                          options=ChunkOptions(**kw))


def _action(table, targets, query_times, step, cand_entity, cand_time, cand_is_stop=None, current_entity=None,
            K=None, *, cand_relation=None, num_relations=None, cand_mask=None, query_subject=None, **rule):
    """:func:`action_labels` with the candidates as separate arrays, as the tests write them (``rule``: the
    :class:`LabelRule`'s other fields)."""
    cands = ActionCandidates(cand_entity, cand_time, is_stop=cand_is_stop, relation=cand_relation,
                             num_relations=num_relations, mask=cand_mask, current_entity=current_entity)
    return action_labels(table, targets, query_times, step, cands, LabelRule(K=K, **rule), query_subject=query_subject)



# ------------------------------------------------------------------------------------------------
# Brute force: forward enumeration of temporal simple paths (independent of both implementations)
# ------------------------------------------------------------------------------------------------


def brute_force(quads, num_entities, target, query_time, max_hops, strict=True):
    """{(entity, hops): latest first-edge time} over simple paths e -> ... -> target of <= max_hops
    edges (either direction of a quadruple), times non-decreasing, all < t_q (or <= t_q)."""
    adj: dict[int, list[tuple[int, int]]] = {}
    for s, _, o, t in quads:
        adj.setdefault(s, []).append((o, t))
        adj.setdefault(o, []).append((s, t))
    allowed = (lambda t: t < query_time) if strict else (lambda t: t <= query_time)
    out: dict[tuple[int, int], int] = {}

    def walk(start, cur, path, t_prev, first, hops):
        for nb, t in adj.get(cur, []):
            if not allowed(t) or t < t_prev or nb in path:
                continue
            f = t if first is None else first
            if nb == target:
                key = (start, hops + 1)
                out[key] = max(out.get(key, -1), f)
            elif hops + 1 < max_hops:
                walk(start, nb, path | {nb}, t, f, hops + 1)

    for e in range(num_entities):
        if e != target:
            walk(e, e, {e}, -1, None, 0)
    return out


@st.composite
def small_tkg(draw):
    e = draw(st.integers(2, 9))
    t = draw(st.integers(1, 6))
    n = draw(st.integers(0, 30))
    quad = st.tuples(st.integers(0, e - 1), st.integers(0, 2), st.integers(0, e - 1), st.integers(0, t - 1))
    quads = draw(st.lists(quad, min_size=n, max_size=n))
    pairs = draw(st.lists(st.tuples(st.integers(0, e - 1), st.integers(0, t)), min_size=1, max_size=8))
    return e, np.array(quads, dtype=np.int64).reshape(-1, 4), pairs


def _graph(e, quads):
    return TemporalGraph.from_quadruples(quads, e, 3)


def _table(graph, pairs, **kw):
    tg = np.array([p[0] for p in pairs])
    tq = np.array([p[1] for p in pairs])
    return _compute(graph, tg, tq, **kw).to_dict()


# ------------------------------------------------------------------------------------------------
# Properties on random TKGs
# ------------------------------------------------------------------------------------------------


@SETTINGS
@given(small_tkg(), st.sampled_from([2, 3, 4]), st.booleans())
def test_exact_equals_brute_force(tkg, K, strict):
    e, quads, pairs = tkg
    g = _graph(e, quads)
    got = _table(g, pairs, max_path_length=K, max_in_edges=None, strict_history=strict, workers=2, pairs_per_chunk=1)
    for (o, t), rows in got.items():
        assert rows == brute_force(quads.tolist(), e, o, t, K - 1, strict), (o, t)
    if K == 3:  # the general depth-first kernel agrees with the specialised one
        dfs = _table(g, pairs, max_path_length=K, max_in_edges=None, strict_history=strict, workers=1, kernel="dfs")
        assert dfs == got


@SETTINGS
@given(small_tkg(), st.sampled_from([2, 3, 4]), st.sampled_from([1, 2, 3, 5]), st.booleans())
def test_pruned_fast_equals_reference(tkg, K, N, strict):
    e, quads, pairs = tkg
    g = _graph(e, quads)
    kw = dict(max_path_length=K, max_in_edges=N, strict_history=strict)
    fast = _table(g, pairs, workers=2, pairs_per_chunk=1, **kw)
    ref = _table(g, pairs, implementation="reference", **kw)
    assert fast == ref
    if K == 3:
        assert _table(g, pairs, workers=1, kernel="dfs", **kw) == fast
    # Pruning only removes paths: every pruned record is dominated by an exact one.
    exact = _table(g, pairs, max_path_length=K, max_in_edges=None, strict_history=strict, workers=1)
    for pair, rows in fast.items():
        for key, t in rows.items():
            assert exact[pair][key] >= t


@SETTINGS
@given(small_tkg())
def test_reference_without_pruning_is_exact(tkg):
    e, quads, pairs = tkg
    g = _graph(e, quads)
    ref = _table(g, pairs, max_path_length=3, max_in_edges=None, implementation="reference")
    for (o, t), rows in ref.items():
        assert rows == brute_force(quads.tolist(), e, o, t, 2)


# ------------------------------------------------------------------------------------------------
# Hand-worked cases
# ------------------------------------------------------------------------------------------------

# Target 0, t_q = 10. Hop 1: 1 (latest 8), 2 (3), 3 (1). Hop 2: 3 -> 1 at 7 <= 8, 2 -> 1 at 6 <= 8,
# 4 -> 2 at 2 <= 3; 3 -> 2 at 4 > 3 and 4 -> 1 at 9 > 8 are too late. 5 -> 0 at 10 = t_q.
HAND = np.array(
    [
        (1, 0, 0, 5), (1, 0, 0, 8), (2, 0, 0, 3), (3, 0, 1, 7), (3, 0, 2, 4), (4, 0, 2, 2),
        (4, 0, 1, 9), (5, 0, 0, 10), (2, 0, 1, 6), (0, 0, 3, 1),
    ]
)
HAND_L = {(1, 1): 8, (2, 1): 3, (3, 1): 1, (2, 2): 6, (3, 2): 7, (4, 2): 2}


@pytest.fixture(scope="module")
def hand_graph():
    return TemporalGraph.from_quadruples(HAND, 6, 1)


@pytest.mark.parametrize("implementation", ["fast", "reference"])
def test_hand_worked_exact(hand_graph, implementation):
    kw = dict(max_path_length=3, max_in_edges=None, implementation=implementation)
    assert _table(hand_graph, [(0, 10)], strict_history=True, **kw)[(0, 10)] == HAND_L
    # Paper-literal <= t_q also admits the edge at t_q itself.
    assert _table(hand_graph, [(0, 10)], strict_history=False, **kw)[(0, 10)] == {**HAND_L, (5, 1): 10}
    # K = 2: hop 1 only.
    got = _table(hand_graph, [(0, 10)], max_path_length=2, max_in_edges=None, implementation=implementation)
    assert got[(0, 10)] == {k: v for k, v in HAND_L.items() if k[1] == 1}


@pytest.mark.parametrize("implementation", ["fast", "reference"])
def test_hand_worked_pruning_counts_visited_slots(hand_graph, implementation):
    kw = dict(max_path_length=3, implementation=implementation)
    # N=1: the root keeps (1, 8); 1's latest in-edge at <= 8 is (0, 8), the visited target: nothing more.
    assert _table(hand_graph, [(0, 10)], max_in_edges=1, **kw)[(0, 10)] == {(1, 1): 8}
    # N=2: the root keeps (1, 8), (1, 5); from (1, 8) the window is (0, 8), (3, 7).
    assert _table(hand_graph, [(0, 10)], max_in_edges=2, **kw)[(0, 10)] == {(1, 1): 8, (3, 2): 7}


@pytest.mark.parametrize("implementation", ["fast", "reference"])
def test_tie_break_prefers_larger_entity_and_collapses_relations(implementation):
    quads = np.array([(1, 0, 0, 5), (2, 0, 0, 5), (2, 1, 0, 5), (2, 2, 0, 4)])
    g = TemporalGraph.from_quadruples(quads, 3, 3)
    got = _table(g, [(0, 9)], max_path_length=2, max_in_edges=1, implementation=implementation)
    assert got[(0, 9)] == {(2, 1): 5}
    # (2, 5) via two relations is one element of N_in, so N=2 reaches entity 1 too.
    got = _table(g, [(0, 9)], max_path_length=2, max_in_edges=2, implementation=implementation)
    assert got[(0, 9)] == {(2, 1): 5, (1, 1): 5}


def test_simple_paths_differ_from_walks():
    # 1 -(2)-> 2 -(3)-> 1 -(5)-> 0 is a temporal walk of 3 edges but not a simple path: no (1, 3).
    quads = np.array([(1, 0, 0, 5), (1, 0, 2, 2), (2, 0, 1, 3)])
    g = TemporalGraph.from_quadruples(quads, 3, 1)
    for kw in (dict(), dict(implementation="reference")):
        got = _table(g, [(0, 9)], max_path_length=4, max_in_edges=None, **kw)[(0, 9)]
        assert got == {(1, 1): 5, (2, 2): 3}
    assert brute_force(quads.tolist(), 3, 0, 9, 3) == {(1, 1): 5, (2, 2): 3}


def test_label_pairs_both_directions():
    quads = np.array([(0, 0, 1, 3), (2, 1, 1, 3), (1, 0, 0, 4)])
    tg, tq = label_pairs(quads)
    assert list(zip(tg.tolist(), tq.tolist())) == [(0, 3), (0, 4), (1, 3), (1, 4), (2, 3)]
    assert tg.dtype == np.int32 and tq.dtype == np.int32


# ------------------------------------------------------------------------------------------------
# Action labels
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hand_table(hand_graph):
    return _compute(hand_graph, [0, 1], [10, 10], max_path_length=3, max_in_edges=None)


def test_action_labels_hand_worked(hand_table):
    P = 6  # padding entity E
    ent = np.array(
        [
            [1, 1, 3, 4, 0, 5, 2, P],  # k = 0: hops 1 and 2 allowed
            [3, 3, 2, 2, 0, 1, 1, P],  # k = 1: hop 1 only; current entity = target
            [1, 0, 1, 2, 2, 0, 0, P],  # k = 2: only the target itself
        ]
    )
    tim = np.array(
        [
            [8, 9, 7, 3, 9, 1, 0, 0],
            [7, 1, 3, 5, 0, 8, 8, 0],
            [2, 5, 1, 1, 1, 10, 0, 0],  # the target at t_q itself is not a strict-history action
        ]
    )
    stop = np.zeros_like(ent, dtype=bool)
    stop[:, 6] = True  # column 6 is STOP (its entity is the current one)
    stop[1, 4] = True
    mask = np.ones_like(stop)
    mask[1, 5] = False  # explicit padding of an otherwise reachable candidate
    cur = np.array([2, 0, 1])
    y = _action(hand_table, [0, 0, 0], [10, 10, 10], [0, 1, 2], ent, tim, stop, cur, 3, cand_mask=mask)
    expected = np.array(
        [
            [1, 0, 1, 0, 1, 0, 0, 0],
            [0, 1, 1, 0, 1, 0, 1, 0],
            [0, 1, 0, 0, 0, 0, 0, 0],
        ],
        dtype=np.uint8,
    )
    np.testing.assert_array_equal(y, expected)
    # Same with relation ids: R = 1, STOP = 2, padding = 3; and a scalar step.
    rel = np.where(stop, 2, 0)
    rel[:, 7] = 3
    ent2 = ent.copy()
    ent2[:, 7] = 1  # a padding relation wins even over a real entity
    y2 = _action(hand_table, [0] * 3, [10] * 3, [0, 1, 2], ent2, tim, None, cur, cand_relation=rel,
                         num_relations=1, cand_mask=mask)
    np.testing.assert_array_equal(y2, expected)
    y0 = _action(hand_table, [0], [10], 0, ent[:1], tim[:1], stop[:1], cur[:1])
    np.testing.assert_array_equal(y0, expected[:1])


def test_action_labels_target_time_bound(hand_graph):
    strict = _compute(hand_graph, [0], [10], max_path_length=3, max_in_edges=None, strict_history=True)
    loose = _compute(hand_graph, [0], [10], max_path_length=3, max_in_edges=None, strict_history=False)
    ent, tim = np.array([[0, 5]]), np.array([[10, 10]])
    np.testing.assert_array_equal(_action(strict, [0], [10], 0, ent, tim), [[0, 0]])
    np.testing.assert_array_equal(_action(loose, [0], [10], 0, ent, tim), [[1, 1]])


def test_action_labels_errors(hand_table):
    ent = np.array([[1]])
    with pytest.raises(ValueError, match="not in the label table"):
        _action(hand_table, [3], [10], 0, ent, ent)
    with pytest.raises(ValueError, match="not in the label table"):
        _action(hand_table, [0], [11], 0, ent, ent)
    with pytest.raises(ValueError, match="shape"):
        _action(hand_table, [0], [10], 0, ent, np.array([[1, 2]]))
    with pytest.raises(ValueError, match="current_entity"):
        _action(hand_table, [0], [10], 0, ent, ent, np.array([[True]]))
    with pytest.raises(ValueError, match="step"):
        _action(hand_table, [0], [10], -1, ent, ent)
    assert _action(hand_table, [], [], 0, np.zeros((0, 4)), np.zeros((0, 4))).shape == (0, 4)


def test_stop_as_a_candidate_and_nothing_but_stop_on_the_answer(hand_table):
    """The two readings of what the table cannot say, by hand on the same states as above. Row 0 stands on
    entity 2 at k = 0 (the pair's list holds (2, hop 1, t̄ 3), (2, hop 2, t̄ 4)), row 1 on the answer 0 at k = 1,
    row 2 on entity 1 at k = 2 (no budget for a row of the list); column 6 is STOP, row 1's column 4 too."""
    P = 6
    ent = np.array([[1, 1, 3, 4, 0, 5, 2, P], [3, 3, 2, 2, 0, 1, 0, P], [1, 0, 1, 2, 2, 0, 1, P]])
    tim = np.array([[8, 9, 7, 3, 9, 1, 0, 0], [7, 1, 3, 5, 0, 8, 0, 0], [2, 5, 1, 1, 1, 10, 2, 0]])
    stop = np.zeros_like(ent, dtype=bool)
    stop[:, 6] = True
    stop[1, 4] = True
    mask = np.ones_like(stop)
    mask[1, 5] = False
    cur = np.array([2, 0, 1])
    args = (hand_table, [0, 0, 0], [10, 10, 10], [0, 1, 2], ent, tim, stop, cur, 3)
    default = np.array([[1, 0, 1, 0, 1, 0, 0, 0], [0, 1, 1, 0, 1, 0, 1, 0], [0, 1, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(_action(*args, cand_mask=mask), default)
    # STOP as the candidate (2, t_k = 0) at k = 0: 2 reaches the answer within 3 - 0 steps -> 1; on the
    # answer -> 1 as before; at k = 2 on entity 1 nothing is left but the answer itself -> 0
    as_candidate = default.copy()
    as_candidate[0, 6] = 1
    np.testing.assert_array_equal(_action(*args, cand_mask=mask, stop="as_candidate"), as_candidate)
    late = tim.copy()
    late[0, 6] = 7  # STOP's time t_k after the latest time (6) at which 2 still reaches the answer
    np.testing.assert_array_equal(_action(hand_table, [0, 0, 0], [10, 10, 10], [0, 1, 2], ent, late, stop, cur,
                                          3, cand_mask=mask, stop="as_candidate"), default)
    # on the answer (row 1) only STOP is left: its moves to 3 and 2, reachable by the table, get 0
    stop_only = default.copy()
    stop_only[1] = [0, 0, 0, 0, 1, 0, 1, 0]
    np.testing.assert_array_equal(_action(*args, cand_mask=mask, on_answer="stop_only"), stop_only)
    with pytest.raises(ValueError, match="stop = 'maybe', expected one of on_answer, as_candidate"):
        LabelRule(stop="maybe")
    with pytest.raises(ValueError, match="on_answer = 'x', expected one of table, stop_only"):
        LabelRule(on_answer="x")


@SETTINGS
@given(small_tkg(), st.integers(0, 2), st.integers(0, 2**31 - 1), st.sampled_from(["on_answer", "as_candidate"]),
       st.sampled_from(["table", "stop_only"]))
def test_action_labels_match_definition(tkg, k, seed, stop_rule, on_answer):
    e, quads, pairs = tkg
    g = _graph(e, quads)
    table = _compute(g, [p[0] for p in pairs], [p[1] for p in pairs], max_path_length=3, max_in_edges=None)
    rng = np.random.default_rng(seed)
    B, A = len(pairs), 6
    tg = np.array([p[0] for p in pairs])
    tq = np.array([p[1] for p in pairs])
    ent = rng.integers(0, e + 1, (B, A))
    tim = rng.integers(0, 7, (B, A))
    stop = rng.random((B, A)) < 0.2
    cur = np.where(rng.random(B) < 0.3, tg, rng.integers(0, e, B))
    y = _action(table, tg, tq, k, ent, tim, stop, cur, 3, stop=stop_rule, on_answer=on_answer)
    for b in range(B):
        rows = table.get(int(tg[b]), int(tq[b]))

        def listed(entity, time):  # the paper's rule: (entity, t̄, h̄) in L with time <= t̄ and h̄ < K - k
            return any(ee == entity and time <= t and h < 3 - k for (ee, h), t in rows.items())

        for a in range(A):
            if ent[b, a] == e:
                want = 0
            elif stop[b, a]:
                want = int(cur[b] == tg[b] or (stop_rule == "as_candidate" and listed(cur[b], tim[b, a])))
            elif cur[b] == tg[b] and on_answer == "stop_only":
                want = 0
            elif ent[b, a] == tg[b]:
                want = int(tim[b, a] < tq[b])
            else:
                want = int(listed(ent[b, a], tim[b, a]))
            assert y[b, a] == want


# ------------------------------------------------------------------------------------------------
# Storage
# ------------------------------------------------------------------------------------------------


def _synthetic_graph():
    from raptor.data.synthetic import SyntheticSpec, generate

    spec = SyntheticSpec(num_entities=40, num_timestamps=20, seed=3)
    splits = generate(spec)
    quads = np.concatenate(list(splits.values()))
    return TemporalGraph.from_quadruples(quads, spec.num_entities, spec.num_relations), splits["train"]


@pytest.mark.parametrize("max_in_edges", [None, 3])
def test_write_read_round_trip(tmp_path, max_in_edges):
    g, train = _synthetic_graph()
    tg, tq = label_pairs(train)
    cfg = LabelingConfig(max_in_edges=max_in_edges, workers=2)
    out = tmp_path / "labels"
    (out).mkdir()
    (out / "stale.txt").write_text("old")  # a folder of other files is not a label table: refused
    with pytest.raises(OutputError, match=r"labels holds files and is not a label table"):
        write_labels(out, g, tg, tq, max_path_length=3, config=cfg)
    (out / "summary.json").write_text('{"pairs": 1, "rows": 1, "max_path_length": 3}')  # a previous table's
    summary = write_labels(out, g, tg, tq, max_path_length=3, config=cfg)  # replaced as a whole
    assert not (out / "stale.txt").exists()
    loaded = load_label_table(out)
    direct = _compute(g, tg, tq, max_path_length=3, max_in_edges=max_in_edges, workers=1)
    assert loaded.to_dict() == direct.to_dict()
    assert loaded.num_pairs == len(tg) == summary["pairs"] and loaded.num_rows == summary["rows"] > 0
    assert summary["mode"] == ("exact" if max_in_edges is None else "top3")
    assert summary["bytes_on_disk"] > 0 and summary["rows_per_pair"]["q100"] >= summary["rows_per_pair"]["q50"]
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["rows"] == summary["rows"]
    import pyarrow.parquet as pq

    t = pq.read_table(out / "labels.parquet")
    assert t.column_names == list(LABEL_COLUMNS)
    assert all(str(f.type) == "int32" for f in t.schema)
    cols = [t.column(c).to_numpy().astype(np.int64) for c in ("target", "query_time", "entity", "hops")]
    key = np.lexsort(cols[::-1])
    assert np.array_equal(key, np.arange(len(key)))  # sorted by (target, query_time, entity, hops)
    # Same answers from the loaded table.
    ent = np.full((len(tg), 1), 0)
    np.testing.assert_array_equal(
        _action(loaded, tg, tq, 0, ent, ent), _action(direct, tg, tq, 0, ent, ent)
    )


@given(st.lists(st.integers(0, 30), min_size=0, max_size=60), st.integers(1, 8))
@settings(max_examples=60, deadline=None)
def test_part_target_ranges_cover_and_balance(targets, num_parts):
    t = np.array(targets, np.int64)
    ranges = part_target_ranges(t, 31, num_parts)
    assert len(ranges) == num_parts and ranges[0][0] == 0 and ranges[-1][1] == 31
    assert all(lo <= hi for lo, hi in ranges) and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    sizes = [int(((t >= lo) & (t < hi)).sum()) for lo, hi in ranges]
    biggest_target = int(np.bincount(t, minlength=31).max()) if len(t) else 0
    assert max(sizes) <= len(t) / num_parts + biggest_target  # a part exceeds its share by at most one target


@pytest.mark.parametrize("max_in_edges", [None, 3])
def test_partitioned_labels_equal_the_whole_table_and_resume(tmp_path, max_in_edges):
    g, train = _synthetic_graph()
    tg, tq = label_pairs(train)
    cfg = LabelingConfig(max_in_edges=max_in_edges, workers=1, partitions=3)
    whole = write_labels(tmp_path / "whole", g, tg, tq, max_path_length=3, config=cfg)
    staging, out = tmp_path / "labels.parts", tmp_path / "labels"
    parts = [write_label_part(staging, i, g, (tg, tq), max_path_length=3, config=cfg, options=_H)
             for i in range(3)]
    assert sum(p["pairs"] for p in parts) == whole["pairs"] and all(p["pairs"] > 0 for p in parts)
    # A part already labeled with the same settings and input is kept; another input relabels it.
    before = (staging / "part-00001" / "labels.parquet").stat().st_mtime_ns
    write_label_part(staging, 1, g, (tg, tq), max_path_length=3, config=cfg, options=_H)
    assert (staging / "part-00001" / "labels.parquet").stat().st_mtime_ns == before
    relabeled = write_label_part(staging, 1, g, (tg, tq), max_path_length=3, config=cfg,
                                 options=WriteOptions(input_hash="other"))
    assert relabeled["input"] == "other"
    with pytest.raises(ValueError, match="different settings or inputs"):
        merge_label_parts(staging, out, 3)
    write_label_part(staging, 1, g, (tg, tq), max_path_length=3, config=cfg, options=_H)
    with pytest.raises(FileNotFoundError, match="part part-00003 of 4 is missing"):
        merge_label_parts(staging, out, 4)
    summary = merge_label_parts(staging, out, 3)
    assert not staging.exists() and summary["parts"] == ["part-00000", "part-00001", "part-00002"]
    assert (summary["pairs"], summary["rows"]) == (whole["pairs"], whole["rows"])
    assert summary["rows_per_pair"] == whole["rows_per_pair"]
    merged, direct = load_label_table(out), load_label_table(tmp_path / "whole")
    for name in ("pair_target", "pair_time", "pair_ptr", "entity", "hops", "latest_time"):
        np.testing.assert_array_equal(getattr(merged, name), getattr(direct, name))


def test_label_dataset_in_partitions_equals_one_piece(params_file, tiny_raw, tmp_path):
    from raptor.data.ingest import ingest

    ingest(tiny_raw, tmp_path / "data")
    one = label_dataset(tmp_path / "data", tmp_path / "one", max_path_length=3, show_progress=False)
    two = label_dataset(tmp_path / "data", tmp_path / "two", max_path_length=3, show_progress=False,
                        config=LabelingConfig(partitions=2))
    assert two["parts"] == ["part-00000", "part-00001"] and two["rows"] == one["rows"] > 0
    assert load_label_table(tmp_path / "two").to_dict() == load_label_table(tmp_path / "one").to_dict()


def test_label_table_hash_is_what_the_table_holds_not_how_it_was_computed(params_file, tiny_raw, tmp_path):
    """Labeling the same pairs again (other workers, another folder, another run's wall time) hashes
    alike, though the summaries differ; other labels or a changed file hash differently."""
    from raptor.data.ingest import ingest
    from raptor.common.provenance import content_hash

    ingest(tiny_raw, tmp_path / "data")
    label_dataset(tmp_path / "data", tmp_path / "a", max_path_length=3, show_progress=False,
                  config=LabelingConfig(workers=1))
    label_dataset(tmp_path / "data", tmp_path / "b", max_path_length=3, show_progress=False,
                  config=LabelingConfig(workers=2))
    summary = json.loads((tmp_path / "b" / SUMMARY_FILE).read_text())
    summary["wall_time_s"] += 1.0
    (tmp_path / "b" / SUMMARY_FILE).write_text(json.dumps(summary))
    assert content_hash(tmp_path / "a") != content_hash(tmp_path / "b")
    assert label_table_hash(tmp_path / "a") == label_table_hash(tmp_path / "b")
    label_dataset(tmp_path / "data", tmp_path / "c", max_path_length=3, show_progress=False,
                  config=LabelingConfig(max_in_edges=1))
    assert load_label_table(tmp_path / "c").to_dict() != load_label_table(tmp_path / "a").to_dict()
    assert label_table_hash(tmp_path / "c") != label_table_hash(tmp_path / "a")
    summary["rows"] += 1  # a field about the content counts
    (tmp_path / "b" / SUMMARY_FILE).write_text(json.dumps(summary))
    assert label_table_hash(tmp_path / "a") != label_table_hash(tmp_path / "b")
    # the partitioned layout: every part's files count, its summaries' timings do not
    label_dataset(tmp_path / "data", tmp_path / "p", max_path_length=3, show_progress=False,
                  config=LabelingConfig(partitions=2))
    before = label_table_hash(tmp_path / "p")
    part = tmp_path / "p" / "part-00001" / SUMMARY_FILE
    part.write_text(json.dumps({**json.loads(part.read_text()), "wall_time_s": 123.0}))
    assert label_table_hash(tmp_path / "p") == before
    with (tmp_path / "p" / "part-00001" / LABELS_FILE).open("ab") as fh:
        fh.write(b"x")
    assert label_table_hash(tmp_path / "p") != before
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a label directory"):
        label_table_hash(tmp_path / "empty")


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="raptor label"):
        load_label_table(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a label directory"):
        load_label_table(tmp_path / "empty")
    g, train = _synthetic_graph()
    tg, tq = label_pairs(train[:20])
    out = tmp_path / "l"
    write_labels(out, g, tg, tq, max_path_length=3)
    s = json.loads((out / "summary.json").read_text())
    s["format_version"] = 999
    (out / "summary.json").write_text(json.dumps(s))
    with pytest.raises(ValueError, match="format version"):
        load_label_table(out)


@pytest.mark.parametrize("damage", ["truncate", "text", "flip_tail"])
@pytest.mark.parametrize("name", [LABELS_FILE, "pairs.parquet"])
def test_an_unreadable_label_parquet_is_named_with_what_to_do(tmp_path, name, damage):
    g, train = _synthetic_graph()
    tg, tq = label_pairs(train[:20])
    out = tmp_path / "l"
    write_labels(out, g, tg, tq, max_path_length=3)
    f = out / name
    data = f.read_bytes()
    if damage == "truncate":
        f.write_bytes(data[: len(data) // 2])
    elif damage == "text":
        f.write_text("not parquet\n")
    else:  # a damaged footer: the magic bytes survive, the metadata does not
        f.write_bytes(data[:-12] + b"\xff" * 8 + data[-4:])
    with pytest.raises(ValueError) as info:
        load_label_table(out)
    message = str(info.value)
    assert message.startswith(f"{f}: not a readable label file (")
    assert message.endswith("re-run `raptor label`")


def test_an_invalid_label_summary_is_named(tmp_path):
    g, train = _synthetic_graph()
    tg, tq = label_pairs(train[:20])
    out = tmp_path / "l"
    write_labels(out, g, tg, tq, max_path_length=3)
    (out / "summary.json").write_text('{"pairs": 3,')
    with pytest.raises(ValueError) as info:
        load_label_table(out)
    assert str(info.value).startswith(f"{out / 'summary.json'}: not valid JSON (")
    assert str(info.value).endswith("re-run `raptor label`")


def test_bad_inputs():
    g, _ = _synthetic_graph()
    with pytest.raises(ValueError, match="target ids"):
        _compute(g, [g.num_entities], [1], max_path_length=3)
    with pytest.raises(ValueError, match="query times"):
        _compute(g, [0], [-1], max_path_length=3)
    with pytest.raises(ValueError, match="same length"):
        _compute(g, [0, 1], [1], max_path_length=3)
    with pytest.raises(ValueError, match="max_path_length"):
        _compute(g, [0], [1], max_path_length=0)
    with pytest.raises(ValueError, match="max_in_edges"):
        _compute(g, [0], [1], max_path_length=3, max_in_edges=0)
    with pytest.raises(ValueError, match="implementation"):
        _compute(g, [0], [1], max_path_length=3, implementation="slow")
    with pytest.raises(ValueError, match=r"\[n, 4\]"):
        label_pairs(np.zeros((3, 3)))
    assert _compute(g, [], [], max_path_length=3).num_pairs == 0


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------


def test_label_cli(params_file, tiny_raw, tmp_path, capsys):
    from raptor.cli import main

    params = str(params_file)
    assert main(["ingest", "--raw", str(tiny_raw), "--out", str(tmp_path / "d"), "--params", params]) == 0
    rc = main(["label", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "l"), "--params", params,
               "--exact", "--no-progress"])
    assert rc == 0
    assert "exact" in capsys.readouterr().out
    table = load_label_table(tmp_path / "l")
    assert table.max_in_edges is None and table.max_path_length == 3
    # Train (days shifted to 0): (0,0,1,0) (1,1,2,1) (2,2,3,2) (0,1,3,2); pair (3, 2): 2 -> 3 and
    # 0 -> 3 are at t_q itself, so nothing reaches 3 strictly before day 2.
    assert table.get(3, 2) == {}
    assert table.get(2, 1) == {}
    assert table.get(2, 2) == {(1, 1): 1, (0, 2): 0}  # 0 -(0)-> 1 -(1)-> 2
    rc = main(["label", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "l2"), "--params", params,
               "--no-strict-history", "--max-in-edges", "5", "--workers", "1"])
    assert rc == 0
    assert load_label_table(tmp_path / "l2").get(3, 2) == {(2, 1): 2, (0, 1): 2, (1, 2): 1}


def test_label_cli_parts_then_merge(params_file, tiny_raw, tmp_path, capsys):
    """A cluster array's jobs: `raptor label --partitions 2 --part I` each, then `--merge`."""
    from raptor.cli import main

    params = str(params_file)
    assert main(["ingest", "--raw", str(tiny_raw), "--out", str(tmp_path / "d"), "--params", params]) == 0
    base = ["label", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "l"), "--params", params, "--no-progress",
            "--partitions", "2"]
    assert main(base + ["--merge"]) == 1 and "part part-00000 of 2 is missing" in capsys.readouterr().err
    assert main(base + ["--part", "1"]) == 0 and main(base + ["--part", "0"]) == 0
    assert not (tmp_path / "l").exists() and (tmp_path / "l.parts" / "part-00001").is_dir()
    assert main(base + ["--merge"]) == 0 and "2 parts" in capsys.readouterr().out
    assert main(["label", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "one"), "--params", params,
                 "--no-progress"]) == 0
    assert load_label_table(tmp_path / "l").to_dict() == load_label_table(tmp_path / "one").to_dict()


def test_label_cli_missing_input_is_one_clear_line(params_file, tmp_path, capsys):
    from raptor.cli import main

    rc = main(["label", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "l"), "--params",
               str(params_file), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("raptor label: error:") and "raptor ingest" in err
    assert "Traceback" not in err


# ================================================================================================
# labeling.visited = "target_and_subject": Algorithm 1 with the visited set {o_q, e_q} per query
# ================================================================================================
#
# The table is per pair (o_q, t_q); e_q is a per-query input of action_labels / get_for_query. The
# naive reference is Algorithm 1 run per query with its visited set initialised to {o_q, e_q}
# (reference_labels(..., query_subject=e_q)) and, for exact labels, forward enumeration of the
# simple paths that avoid e_q (brute_force_avoiding).

SUBJ = VISITED_SUBJECT


def brute_force_avoiding(quads, num_entities, target, query_time, max_hops, avoid, strict=True):
    """brute_force over the simple paths that do not touch ``avoid`` (an entity that is visited
    from the start, like o_q): neither as the start nor on the way."""
    adj: dict[int, list[tuple[int, int]]] = {}
    for s, _, o, t in quads:
        adj.setdefault(s, []).append((o, t))
        adj.setdefault(o, []).append((s, t))
    allowed = (lambda t: t < query_time) if strict else (lambda t: t <= query_time)
    out: dict[tuple[int, int], int] = {}

    def walk(start, cur, path, t_prev, first, hops):
        for nb, t in adj.get(cur, []):
            if not allowed(t) or t < t_prev or nb in path or (nb == avoid and nb != target):
                continue
            f = t if first is None else first
            if nb == target:
                out[(start, hops + 1)] = max(out.get((start, hops + 1), -1), f)
            elif hops + 1 < max_hops:
                walk(start, nb, path | {nb}, t, f, hops + 1)

    for e in range(num_entities):
        if e != target and e != avoid:
            walk(e, e, {e}, -1, None, 0)
    return out


def _tables(g, pairs, **kw):
    """The subject-mode table of every implementation (fast specialised, fast depth-first,
    reference), as {(o, t): {(e, h): (latest, via, without_via)}}; asserts they are identical."""
    fast = _compute(g, [p[0] for p in pairs], [p[1] for p in pairs], visited=SUBJ, workers=2,
                            pairs_per_chunk=1, **kw)
    d = fast.to_dict(with_via=True)
    dfs = _compute(g, [p[0] for p in pairs], [p[1] for p in pairs], visited=SUBJ, workers=1, kernel="dfs",
                           **kw)
    ref = _compute(g, [p[0] for p in pairs], [p[1] for p in pairs], visited=SUBJ, implementation="reference",
                           **kw)
    assert dfs.to_dict(with_via=True) == d
    assert ref.to_dict(with_via=True) == d
    return fast


@SETTINGS
@given(small_tkg(), st.sampled_from([2, 3]), st.booleans())
def test_subject_mode_exact_equals_naive_per_query(tkg, K, strict):
    e, quads, pairs = tkg
    g = _graph(e, quads)
    kw = dict(max_path_length=K, max_in_edges=None, strict_history=strict)
    table = _tables(g, pairs, **kw)
    for o, t in set(pairs):
        for s in range(e):  # every possible query subject, o_q itself included
            got = table.get_for_query(o, t, s)
            assert got == brute_force_avoiding(quads.tolist(), e, o, t, K - 1, s, strict), (o, t, s)
            assert got == reference_labels(g, o, t, K - 1, None, strict, query_subject=s), (o, t, s)


@SETTINGS
@given(small_tkg(), st.sampled_from([2, 3]), st.sampled_from([1, 2, 3, 5]), st.booleans())
def test_subject_mode_pruned_equals_algorithm1_per_query(tkg, K, N, strict):
    e, quads, pairs = tkg
    g = _graph(e, quads)
    table = _tables(g, pairs, max_path_length=K, max_in_edges=N, strict_history=strict)
    for o, t in set(pairs):
        for s in range(e):
            assert table.get_for_query(o, t, s) == reference_labels(g, o, t, K - 1, N, strict, query_subject=s)


@SETTINGS
@given(small_tkg(), st.sampled_from([None, 1, 2, 5]))
def test_subject_mode_keeps_the_default_rows(tkg, N):
    """The option adds two columns and changes nothing else: the default mode's table is the
    subject-mode table without them, and a default table ignores query_subject."""
    e, quads, pairs = tkg
    g = _graph(e, quads)
    kw = dict(max_path_length=3, max_in_edges=N)
    default = _compute(g, [p[0] for p in pairs], [p[1] for p in pairs], **kw)
    subj = _compute(g, [p[0] for p in pairs], [p[1] for p in pairs], visited=SUBJ, **kw)
    assert default.via is None and default.visited == "target" and subj.visited == SUBJ
    for name in ("pair_target", "pair_time", "pair_ptr", "entity", "hops", "latest_time"):
        np.testing.assert_array_equal(getattr(subj, name), getattr(default, name))
    assert np.all(subj.latest_time_without_via <= subj.latest_time)
    assert np.all((subj.via == -1) == (subj.latest_time_without_via == subj.latest_time))
    assert np.all(subj.via[subj.hops == 1] == -1)
    rng = np.random.default_rng(0)
    B, A = len(pairs), 5
    tg, tq = [p[0] for p in pairs], [p[1] for p in pairs]
    ent, tim = rng.integers(0, e, (B, A)), rng.integers(0, 7, (B, A))
    subject = rng.integers(0, e, B)
    np.testing.assert_array_equal(_action(default, tg, tq, 0, ent, tim, query_subject=subject),
                                  _action(default, tg, tq, 0, ent, tim))


@SETTINGS
@given(small_tkg(), st.integers(0, 2), st.sampled_from([None, 2]), st.integers(0, 2**31 - 1))
def test_subject_mode_action_labels_match_definition(tkg, k, N, seed):
    e, quads, pairs = tkg
    g = _graph(e, quads)
    tg = np.array([p[0] for p in pairs])
    tq = np.array([p[1] for p in pairs])
    table = _compute(g, tg, tq, max_path_length=3, max_in_edges=N, visited=SUBJ)
    rng = np.random.default_rng(seed)
    B, A = len(pairs), 6
    subject = rng.integers(0, e, B)
    ent = rng.integers(0, e + 1, (B, A))
    tim = rng.integers(0, 7, (B, A))
    stop = rng.random((B, A)) < 0.2
    cur = rng.integers(0, e, B)
    y = _action(table, tg, tq, k, ent, tim, stop, cur, 3, query_subject=subject)
    for b in range(B):
        rows = reference_labels(g, int(tg[b]), int(tq[b]), 2, N, query_subject=int(subject[b]))
        for a in range(A):
            if ent[b, a] == e:
                want = 0
            elif stop[b, a]:
                want = int(cur[b] == tg[b])
            elif ent[b, a] == tg[b]:
                want = int(tim[b, a] < tq[b])
            else:  # e_q itself has no row: it is visited
                want = int(any(ee == ent[b, a] and tim[b, a] <= t and h < 3 - k for (ee, h), t in rows.items()))
            assert y[b, a] == want, (b, a)


# e_q = 1 asks (1, r, ?, 9), answer o_q = 0. The agent's step-0 candidates: 2 at time 3 and 0 at 5.
# 2 reaches 0 only as 2 -(3)-> 1 -(5)-> 0, back through e_q: reachable for Algorithm 1 as printed,
# not for an agent that can never return to 1.
ONLY_THROUGH_EQ = np.array([(1, 0, 0, 5), (1, 0, 2, 3)])


@pytest.mark.parametrize("max_in_edges", [None, 2, 200])
@pytest.mark.parametrize("implementation", ["fast", "reference"])
def test_hand_worked_path_through_the_query_subject(max_in_edges, implementation):
    from raptor.mdp.env import TemporalEnv

    g = TemporalGraph.from_quadruples(ONLY_THROUGH_EQ, 3, 1)
    kw = dict(max_path_length=3, max_in_edges=max_in_edges, implementation=implementation)
    default = _compute(g, [0], [9], **kw)
    subj = _compute(g, [0], [9], visited=SUBJ, **kw)
    assert default.get(0, 9) == subj.get(0, 9) == {(1, 1): 5, (2, 2): 3}
    assert subj.to_dict(with_via=True)[(0, 9)] == {(1, 1): (5, -1, 5), (2, 2): (3, 1, -1)}
    assert subj.get_for_query(0, 9, 1) == {}  # e_q = 1 visited: nothing reaches 0
    assert subj.get_for_query(0, 9, 2) == {(1, 1): 5}  # another subject: 1 is an ordinary intermediate
    # The environment's step-0 candidates of the query, labeled in both modes.
    env = TemporalEnv(g)
    state = env.reset(np.array([[1, 0, 0, 9]]))
    c = env.candidates(state)
    assert c.entity[0, 1:].tolist() == [0, 2] and c.time[0, 1:].tolist() == [5, 3]
    args = (state.answer, state.query_time, 0, c.entity, c.time)
    kw2 = dict(current_entity=state.entity, cand_relation=c.relation, num_relations=1, cand_mask=c.mask,
               query_subject=state.query_entity)
    assert _action(default, *args, **kw2).tolist() == [[0, 1, 1]]
    assert _action(subj, *args, **kw2).tolist() == [[0, 1, 0]]
    # STOP as a candidate on e_q = 1: staying is no revisit, and 1 reaches 0 at 5 -> 1 in both modes
    assert _action(default, *args, **kw2, stop="as_candidate").tolist() == [[1, 1, 1]]
    assert _action(subj, *args, **kw2, stop="as_candidate").tolist() == [[1, 1, 0]]


def test_hand_worked_alternative_intermediate():
    # As above plus 2 -(2)-> 3 -(4)-> 0 and an earlier 1 -(1)- 2: 2's best hop-2 path runs through
    # e_q = 1 (leaves 2 at 3); the best one avoiding it goes through 3 (leaves 2 at 2).
    quads = np.vstack([ONLY_THROUGH_EQ, [(2, 0, 3, 2), (3, 0, 0, 4), (1, 0, 2, 1)]])
    g = TemporalGraph.from_quadruples(quads, 4, 1)
    subj = _compute(g, [0], [9], max_path_length=3, max_in_edges=None, visited=SUBJ)
    assert subj.to_dict(with_via=True)[(0, 9)][(2, 2)] == (3, 1, 2)
    assert subj.get_for_query(0, 9, 1) == {(3, 1): 4, (2, 2): 2}
    ent, tim = np.array([[2, 2]]), np.array([[3, 1]])  # the candidate 2 at time 3 and at time 1
    assert _action(subj, [0], [9], 0, ent, tim, query_subject=[1]).tolist() == [[0, 1]]
    assert _action(subj, [0], [9], 0, ent, tim, query_subject=[3]).tolist() == [[1, 1]]


def test_subject_mode_on_environment_walks():
    """Labels of the environment's candidates along random walks (training queries both ways, the
    pretraining call) equal Algorithm 1 run per query with visited {o_q, e_q}, N = 3 and exact."""
    from raptor.data.dataset import with_inverse_queries
    from raptor.mdp.env import TemporalEnv
    from raptor.data.synthetic import SyntheticSpec, generate

    spec = SyntheticSpec(num_entities=40, num_timestamps=20, seed=3)
    splits = generate(spec)
    g = TemporalGraph.from_quadruples(np.concatenate(list(splits.values())), spec.num_entities, spec.num_relations)
    env = TemporalEnv(g)
    queries = with_inverse_queries(splits["train"], spec.num_relations)[::7].astype(np.int64)
    tg, tq = label_pairs(splits["train"])
    rng = np.random.default_rng(0)
    for N in (None, 3):
        table = _compute(g, tg, tq, max_path_length=3, max_in_edges=N, visited=SUBJ, workers=1)
        refs = {}
        state = env.reset(queries)
        differs = 0
        for k in range(env.K):
            c = env.candidates(state)
            y = _action(table, state.answer, state.query_time, k, c.entity, c.time,
                                current_entity=state.entity, cand_relation=c.relation,
                                num_relations=spec.num_relations, cand_mask=c.mask, query_subject=state.query_entity)
            for b in range(state.batch_size):
                q = (int(state.answer[b]), int(state.query_time[b]), int(state.query_entity[b]))
                if q not in refs:
                    refs[q] = reference_labels(g, q[0], q[1], 2, N, query_subject=q[2])
                for a in range(1, int(c.count[b]) + 1):
                    e, t = int(c.entity[b, a]), int(c.time[b, a])
                    want = (e == q[0] and t < q[1]) or any(
                        ee == e and t <= lt and h < 3 - k for (ee, h), lt in refs[q].items())
                    assert y[b, a] == want, (k, b, a)
            if k == 0:
                plain = _action(table, state.answer, state.query_time, 0, c.entity, c.time,
                                        current_entity=state.entity, cand_relation=c.relation,
                                        num_relations=spec.num_relations, cand_mask=c.mask,
                                        query_subject=np.full(state.batch_size, -1))
                differs = int((plain != y).sum())
            choice = np.array([rng.integers(0, int(n) + 1) for n in c.count])
            state = env.step(state, c, choice)
        assert differs > 0  # the synthetic graph has paths back through e_q


def test_subject_mode_storage_round_trip_and_parts(tmp_path):
    import pyarrow.parquet as pq

    g, train = _synthetic_graph()
    tg, tq = label_pairs(train)
    cfg = LabelingConfig(max_in_edges=3, workers=1, visited=SUBJ)
    s = write_labels(tmp_path / "one", g, tg, tq, max_path_length=3, config=cfg)
    assert s["format_version"] == 2 and s["visited"] == SUBJ
    assert pq.read_schema(tmp_path / "one" / "labels.parquet").names == list(LABEL_COLUMNS + VIA_COLUMNS)
    loaded = load_label_table(tmp_path / "one")
    direct = _compute(g, tg, tq, max_path_length=3, max_in_edges=3, visited=SUBJ)
    assert loaded.visited == SUBJ and loaded.to_dict(with_via=True) == direct.to_dict(with_via=True)
    assert loaded.latest_time_without_via.dtype == loaded.latest_time.dtype
    # The default mode still writes format 1 (five columns) and says so.
    d = write_labels(tmp_path / "default", g, tg, tq, max_path_length=3, config=LabelingConfig(max_in_edges=3))
    assert d["format_version"] == 1 and d["visited"] == "target"
    assert pq.read_schema(tmp_path / "default" / "labels.parquet").names == list(LABEL_COLUMNS)
    # Partitioned: same table; parts of the other mode are relabeled, not merged.
    cfg3 = LabelingConfig(max_in_edges=3, workers=1, visited=SUBJ, partitions=3)
    staging = tmp_path / "p.parts"
    for i in range(3):
        write_label_part(staging, i, g, (tg, tq), max_path_length=3, config=cfg3, options=_H)
    before = (staging / "part-00001" / "labels.parquet").stat().st_mtime_ns
    write_label_part(staging, 1, g, (tg, tq), max_path_length=3, config=cfg3, options=_H)
    assert (staging / "part-00001" / "labels.parquet").stat().st_mtime_ns == before
    back = write_label_part(staging, 1, g, (tg, tq), max_path_length=3, options=_H,
                            config=LabelingConfig(max_in_edges=3, workers=1, partitions=3))
    assert back["visited"] == "target"
    with pytest.raises(ValueError, match="different settings"):
        merge_label_parts(staging, tmp_path / "p", 3)
    write_label_part(staging, 1, g, (tg, tq), max_path_length=3, config=cfg3, options=_H)
    merged = merge_label_parts(staging, tmp_path / "p", 3)
    assert merged["visited"] == SUBJ and merged["format_version"] == 2
    assert load_label_table(tmp_path / "p").to_dict(with_via=True) == direct.to_dict(with_via=True)
    assert PartitionedLabels(tmp_path / "p").load(0).visited == SUBJ


def test_subject_mode_old_tables_and_errors(tmp_path):
    g, train = _synthetic_graph()
    tg, tq = label_pairs(train[:20])
    # A table written before the option (no "visited" in its summary) reads as the default mode.
    out = tmp_path / "old"
    write_labels(out, g, tg, tq, max_path_length=3)
    s = json.loads((out / "summary.json").read_text())
    del s["visited"]
    (out / "summary.json").write_text(json.dumps(s))
    old = load_label_table(out)
    assert old.visited == "target" and old.via is None
    with pytest.raises(ValueError, match="no via columns"):
        old.get_for_query(int(tg[0]), int(tq[0]), 0)
    with pytest.raises(ValueError, match="no via columns"):
        old.to_dict(with_via=True)
    # A version / mode mismatch is refused.
    s["visited"] = SUBJ
    (out / "summary.json").write_text(json.dumps(s))
    with pytest.raises(ValueError, match="does not match label format version 1"):
        load_label_table(out)
    # Subject-mode tables need e_q in action_labels.
    subj = _compute(g, tg, tq, max_path_length=3, visited=SUBJ)
    ent = np.array([[1]])
    with pytest.raises(ValueError, match="needs query_subject"):
        _action(subj, tg[:1], tq[:1], 0, ent, ent)
    with pytest.raises(ValueError, match="query_subject must have length"):
        _action(subj, tg[:1], tq[:1], 0, ent, ent, query_subject=[1, 2])
    # K > 3 is refused, naming the setting; so is an unknown mode.
    with pytest.raises(ValueError, match=r"labeling.visited = 'target_and_subject' .*env.max_path_length <= 3 only \(got K = 4\)"):
        _compute(g, tg, tq, max_path_length=4, visited=SUBJ)
    with pytest.raises(ValueError, match="labeling.visited must be one of"):
        _compute(g, tg, tq, max_path_length=3, visited="subject")
    with pytest.raises(ValueError, match="max_hops <= 2"):
        reference_labels_via(g, int(tg[0]), int(tq[0]), 3)


def test_subject_mode_config():
    from raptor.config import ConfigError, params_from_dict

    assert LabelingConfig().visited == "target"
    p = params_from_dict({"labeling": {"visited": "target_and_subject"}})
    assert p.labeling.visited == SUBJ
    with pytest.raises(ConfigError, match="labeling.visited: expected one of"):
        params_from_dict({"labeling": {"visited": "subject"}})
    with pytest.raises(ConfigError, match=r"labeling.visited: 'target_and_subject' .* <= 3 only \(got 4\)"):
        params_from_dict({"labeling": {"visited": "target_and_subject"}, "env": {"max_path_length": 4}})
    assert params_from_dict({"env": {"max_path_length": 4}}).labeling.visited == "target"


def test_subject_mode_pretrain_batch():
    """Pretraining runs on a subject-mode table and labels fewer candidates reachable."""
    import torch

    from raptor.config import ModelConfig
    from raptor.data.dataset import with_inverse_queries
    from raptor.mdp.env import TemporalEnv
    from raptor.agents.policy import Policy
    from raptor.agents.actor_critic.pretrain import pretrain_batch
    from raptor.data.synthetic import SyntheticSpec, generate

    spec = SyntheticSpec(seed=1)
    splits = generate(spec)
    g = TemporalGraph.from_quadruples(np.concatenate(list(splits.values())), spec.num_entities, spec.num_relations)
    env = TemporalEnv(g)
    train = with_inverse_queries(splits["train"], spec.num_relations)
    tg, tq = label_pairs(splits["train"])
    small = ModelConfig(entity_dim=16, relation_dim=16, time_dim=4, step_dim=4, mlp_hidden_dim=16)
    rates = {}
    for mode in ("target", SUBJ):
        table = _compute(g, tg, tq, max_path_length=3, max_in_edges=200, visited=mode)
        torch.manual_seed(0)
        policy = Policy(spec.num_entities, spec.num_relations, small)
        pb = pretrain_batch(policy, env, table, train[:64], torch.Generator().manual_seed(0))
        assert torch.isfinite(pb.loss)
        rates[mode] = pb.stats["label_positive_rate"]
    assert 0 < rates[SUBJ] < rates["target"]
