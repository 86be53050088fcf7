"""Action labels on the device (:mod:`raptor.labeling.device`, torch, here on CPU) against the host's
(:func:`raptor.labeling.actions.action_labels`, numba): the same labels on random graphs and tables,
for every step, both ``labeling.visited`` modes, both history bounds, with STOP, padding and masks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from raptor.config import LabelingConfig
from raptor.data.graph import TemporalGraph
from raptor.labeling.actions import ON_ANSWER_LABELS, STOP_LABELS, ActionCandidates, LabelRule, action_labels
from raptor.labeling.compute import compute_labels
from raptor.labeling.device import CACHE_ATTRIBUTE, DeviceLabels, device_labels
from raptor.labeling.table import VISITED_SUBJECT, VISITED_TARGET, LabelTable

#: Where the device labels are checked: the CPU always (CI), a GPU where there is one.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@st.composite
def labeled_graph(draw):
    """``(E, R, T, graph, table)``: a random TKG and the table of a few random pairs, for a drawn K,
    visited mode, history bound and pruning."""
    E, R, T = draw(st.integers(2, 9)), draw(st.integers(1, 3)), draw(st.integers(1, 6))
    n = draw(st.integers(0, 40))
    quad = st.tuples(st.integers(0, E - 1), st.integers(0, R - 1), st.integers(0, E - 1), st.integers(0, T - 1))
    quads = np.array(draw(st.lists(quad, min_size=n, max_size=n)), dtype=np.int64).reshape(-1, 4)
    pairs = sorted(set(draw(st.lists(st.tuples(st.integers(0, E - 1), st.integers(0, T)), min_size=1, max_size=8))))
    visited = draw(st.sampled_from([VISITED_TARGET, VISITED_SUBJECT]))
    K = draw(st.sampled_from([2, 3] if visited == VISITED_SUBJECT else [2, 3, 4]))
    cfg = LabelingConfig(max_in_edges=draw(st.sampled_from([None, 2])), strict_history=draw(st.booleans()),
                         workers=1, visited=visited)
    graph = TemporalGraph.from_quadruples(quads, E, R)
    table = compute_labels(graph, np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]),
                           max_path_length=K, config=cfg)
    return E, R, T, graph, table


def random_candidates(rng, table: LabelTable, E: int, R: int, T: int, B: int, A: int):
    """``(targets, query_times, subjects, ActionCandidates of arrays)``: ``B`` queries of the table's
    pairs and ``A`` candidates each, with entities in ``[-1, E]`` (both ends padding), STOP and padding
    relations, a random mask, targets and entities of the pair's list among the candidates, and agents
    standing on their target, on an entity of the list, or on their subject."""
    p = rng.integers(0, table.num_pairs, B)
    tg, tq = table.pair_target[p].astype(np.int64), table.pair_time[p].astype(np.int64)
    ent = rng.integers(-1, E + 1, (B, A))
    ent = np.where(rng.random((B, A)) < 0.25, tg[:, None], ent)
    if table.num_rows:  # entities of the pair's own list
        lo, n_rows = table.pair_ptr[p], np.diff(table.pair_ptr)[p]
        row = np.minimum(lo[:, None] + (rng.random((B, A)) * n_rows[:, None]).astype(np.int64), table.num_rows - 1)
        ent = np.where((rng.random((B, A)) < 0.4) & (n_rows[:, None] > 0), table.entity[row], ent)
    rel = rng.integers(0, 2 * R + 2, (B, A))  # 2R = STOP, 2R + 1 = padding
    tim = rng.integers(0, T + 2, (B, A))
    cur = np.where(rng.random(B) < 0.3, tg, rng.integers(0, E, B))
    if table.num_rows:  # agents on an entity of the pair's list: STOP as a candidate is looked up there
        cur = np.where((rng.random(B) < 0.4) & (n_rows > 0) & (cur != tg), table.entity[row[:, 0]], cur)
    subject = np.where(rng.random(B) < 0.2, cur, rng.integers(0, E, B))  # (STOP on e_q: staying is no revisit)
    cands = ActionCandidates(ent, tim, relation=rel, num_relations=R, mask=rng.random((B, A)) < 0.9,
                             current_entity=cur)
    return tg, tq, subject, cands


def on(device, cands: ActionCandidates) -> ActionCandidates:
    """The same candidates as tensors on ``device``."""
    t = lambda a: None if a is None else torch.as_tensor(a).to(device)  # noqa: E731
    return ActionCandidates(t(cands.entity), t(cands.time), is_stop=t(cands.is_stop), relation=t(cands.relation),
                            num_relations=cands.num_relations, mask=t(cands.mask),
                            current_entity=t(cands.current_entity))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(labeled_graph(), st.integers(0, 2 ** 31 - 1))
@pytest.mark.parametrize("device", DEVICES)
def test_device_labels_are_the_host_labels(device, case, seed):
    E, R, T, _, table = case
    rng = np.random.default_rng(seed)
    B, A = 12, 7
    tg, tq, subject, cands = random_candidates(rng, table, E, R, T, B, A)
    dev = DeviceLabels.from_table(table, device)
    assert dev.max_run <= max(table.max_path_length - 1, 1)  # one row per hops value
    K = table.max_path_length
    tgt, tqt, subj = (torch.from_numpy(a).to(device) for a in (tg, tq, subject))
    rules = [LabelRule(stop=s, on_answer=a) for s in STOP_LABELS for a in ON_ANSWER_LABELS]
    for k, rule in itertools.product(range(K + 1), rules):  # k = K too: no budget left
        want = action_labels(table, tg, tq, k, cands, rule, query_subject=subject)
        got = dev.labels(tgt, tqt, k, on(device, cands), rule, query_subject=subj)
        assert got.dtype == torch.uint8 and got.device.type == torch.device(device).type
        np.testing.assert_array_equal(got.cpu().numpy(), want, err_msg=f"k = {k}, {rule}")
    # a step per row, and STOP given as a flag instead of a relation
    steps = rng.integers(0, K + 1, B)
    stop = cands.relation == 2 * R
    flags = ActionCandidates(cands.entity, cands.time, is_stop=stop, mask=cands.mask & (cands.relation != 2 * R + 1),
                             current_entity=cands.current_entity)
    want = action_labels(table, tg, tq, steps, flags, query_subject=subject)
    got = dev.labels(tgt, tqt, torch.from_numpy(steps).to(device), on(device, flags), query_subject=subj)
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    np.testing.assert_array_equal(got.cpu().numpy(), action_labels(table, tg, tq, steps, cands, query_subject=subject))


def test_a_table_with_longer_runs_than_one_row_per_hops():
    """The look-up reads as many rows per (pair, entity) as the table's longest run, whatever it is."""
    table = LabelTable(pair_target=np.array([0, 2], np.int32), pair_time=np.array([5, 5], np.int32),
                       pair_ptr=np.array([0, 4, 6]), entity=np.array([1, 1, 1, 3, 1, 4], np.int32),
                       hops=np.array([1, 1, 2, 3, 1, 1], np.int8), latest_time=np.array([1, 2, 4, 3, 0, 2], np.int16),
                       num_entities=5, max_path_length=4, strict_history=True, max_in_edges=None)
    dev = DeviceLabels.from_table(table)
    assert dev.max_run == 3
    ent = np.array([[1, 1, 1, 3, 4], [1, 4, 4, 3, 1]])
    tim = np.array([[2, 3, 4, 3, 2], [0, 2, 3, 1, 1]])
    for k in range(5):
        want = action_labels(table, [0, 2], [5, 5], k, ActionCandidates(ent, tim))
        got = dev.labels(torch.tensor([0, 2]), torch.tensor([5, 5]), k,
                         ActionCandidates(torch.from_numpy(ent), torch.from_numpy(tim)))
        np.testing.assert_array_equal(got.numpy(), want)
    assert action_labels(table, [0], [5], 0, ActionCandidates(ent[:1], tim[:1])).tolist() == [[1, 1, 1, 1, 0]]
    assert action_labels(table, [0], [5], 2, ActionCandidates(ent[:1], tim[:1])).tolist() == [[1, 0, 0, 0, 0]]


def test_pairs_never_labeled_are_flagged_and_refused_at_the_read():
    """The host raises at the look-up; the device flags the rows (no read) and labels them as an empty
    list would (only the target and STOP rules), and :meth:`raise_missing` gives the host's error."""
    graph = TemporalGraph.from_quadruples(np.array([(1, 0, 0, 2), (2, 0, 1, 1)]), 4, 1)
    table = compute_labels(graph, np.array([0]), np.array([3]), max_path_length=3, config=LabelingConfig(workers=1))
    dev = DeviceLabels.from_table(table)
    tg, tq = np.array([0, 0, 1, 0, 0]), np.array([3, 4, 3, -1, 9])
    assert dev.missing(torch.from_numpy(tg), torch.from_numpy(tq)).tolist() == [False, True, True, True, True]
    ent, tim = np.array([[1, 2, 0, 1]] * 5), np.array([[2, 1, 2, 0]] * 5)
    is_stop = np.array([[True, False, False, False]] * 5)
    cands = ActionCandidates(ent, tim, is_stop=is_stop, current_entity=np.array([1, 1, 1, 1, 1]))
    got = dev.labels(torch.from_numpy(tg), torch.from_numpy(tq), 0, on("cpu", cands)).numpy()
    np.testing.assert_array_equal(got[0], action_labels(table, tg[:1], tq[:1], 0, ActionCandidates(
        ent[:1], tim[:1], is_stop=is_stop[:1], current_entity=np.array([1])))[0])
    assert got[0].tolist() == [0, 1, 1, 1]
    assert got[1:].tolist() == [[0, 0, 1, 0], [1, 0, 0, 1], [0, 0, 0, 0], [0, 0, 1, 0]]
    for b in range(1, 5):
        with pytest.raises(ValueError) as host:
            table.pair_index(tg[b:b + 1], tq[b:b + 1])
        with pytest.raises(ValueError) as device:
            dev.raise_missing(torch.from_numpy(tg[b:]), torch.from_numpy(tq[b:]))
        assert str(device.value) == str(host.value)
    dev.raise_missing(torch.from_numpy(tg[:1]), torch.from_numpy(tq[:1]))  # all labeled: nothing raised


def test_empty_tables_and_batches_and_errors():
    graph = TemporalGraph.from_quadruples(np.array([(1, 0, 0, 2)]), 3, 1)
    table = compute_labels(graph, np.array([0]), np.array([3]), max_path_length=3, config=LabelingConfig(workers=1))
    empty = compute_labels(graph, np.zeros(0, np.int64), np.zeros(0, np.int64), max_path_length=3,
                           config=LabelingConfig(workers=1))
    one = torch.tensor([0])
    cands = ActionCandidates(torch.tensor([[1, 0]]), torch.tensor([[2, 2]]))
    assert DeviceLabels.from_table(empty).missing(one, torch.tensor([3])).tolist() == [True]
    assert DeviceLabels.from_table(empty).labels(one, torch.tensor([3]), 0, cands).tolist() == [[0, 1]]
    dev = DeviceLabels.from_table(table)
    assert dev.labels(one, torch.tensor([3]), 0, cands).tolist() == [[1, 1]]
    none = ActionCandidates(torch.zeros((0, 4), dtype=torch.int64), torch.zeros((0, 4), dtype=torch.int64))
    assert dev.labels(torch.zeros(0), torch.zeros(0), 0, none).shape == (0, 4)
    with pytest.raises(ValueError, match="shape"):
        dev.labels(one, torch.tensor([3]), 0, ActionCandidates(torch.tensor([[1]]), torch.tensor([[1, 2]])))
    with pytest.raises(ValueError, match="step must be >= 0"):
        dev.labels(one, torch.tensor([3]), -1, cands)
    with pytest.raises(ValueError, match="current_entity"):
        dev.labels(one, torch.tensor([3]), 0, ActionCandidates(torch.tensor([[1]]), torch.tensor([[1]]),
                                                                 is_stop=torch.tensor([[True]])))
    subj = compute_labels(graph, np.array([0]), np.array([3]), max_path_length=3,
                          config=LabelingConfig(workers=1, visited=VISITED_SUBJECT))
    with pytest.raises(ValueError, match="needs query_subject|need query_subject"):
        DeviceLabels.from_table(subj).labels(one, torch.tensor([3]), 0, cands)
    assert DeviceLabels.from_table(subj).visited == VISITED_SUBJECT and dev.visited == VISITED_TARGET


def test_device_copies_are_made_once_per_table_and_device():
    graph = TemporalGraph.from_quadruples(np.array([(1, 0, 0, 2)]), 3, 1)
    table = compute_labels(graph, np.array([0]), np.array([3]), max_path_length=3, config=LabelingConfig(workers=1))
    dev = device_labels(table, "cpu")
    assert device_labels(table, "cpu") is dev and getattr(table, CACHE_ATTRIBUTE) == {"cpu": dev}
    assert device_labels(dev, "cpu") is dev  # a device copy passes through
    other = compute_labels(graph, np.array([0]), np.array([3]), max_path_length=3, config=LabelingConfig(workers=1))
    assert device_labels(other, "cpu") is not dev  # another table (a partition's next part): its own copy
