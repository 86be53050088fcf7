import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from raptor.constants import inverse_relation
from raptor.data.graph import TemporalGraph, build_graph
from raptor.data.ingest import ingest


def test_inverse_augmentation_hand_built():
    quads = np.array([[0, 0, 1, 5], [1, 1, 2, 3]])
    g = TemporalGraph.from_quadruples(quads, num_entities=3, num_relations=2)
    assert g.num_edges == 4
    edges = {
        (int(src), int(g.relation[i]), int(g.neighbor[i]), int(g.time[i]))
        for src in range(3)
        for i in range(g.indptr[src], g.indptr[src + 1])
    }
    assert edges == {(0, 0, 1, 5), (1, 2, 0, 5), (1, 1, 2, 3), (2, 3, 1, 3)}
    # Entity 1 has edges at times 3 then 5: sorted by time inside its slice.
    assert list(g.time[g.indptr[1] : g.indptr[2]]) == [3, 5]
    assert inverse_relation(1, 2) == 3


def test_history_window_excludes_query_time():
    quads = np.array([[0, 0, 1, 1], [0, 0, 2, 2], [0, 1, 1, 3]])
    g = TemporalGraph.from_quadruples(quads, 3, 2)
    start, stop = g.before(np.array([0]), np.array([3]))
    assert list(g.time[start[0] : stop[0]]) == [1, 2]  # t < t_q only
    start, stop = g.window(0, 2, 2)  # empty window
    assert start == stop


def test_save_load_roundtrip(tmp_path):
    quads = np.array([[0, 0, 1, 5], [1, 1, 2, 3]])
    g = TemporalGraph.from_quadruples(quads, 3, 2)
    g.save(tmp_path / "g.npz")
    h = TemporalGraph.load(tmp_path / "g.npz")
    for name in ("indptr", "relation", "neighbor", "time"):
        np.testing.assert_array_equal(getattr(g, name), getattr(h, name))
        assert getattr(h, name).dtype == np.int32
    with pytest.raises(FileNotFoundError, match="raptor graph"):
        TemporalGraph.load(tmp_path / "missing.npz")


def test_window_rejects_unknown_entity():
    g = TemporalGraph.from_quadruples(np.array([[0, 0, 1, 0]]), 2, 1)
    with pytest.raises(IndexError, match="entity id 5"):
        g.window([5], 0, 1)


def test_build_graph_from_ingested(tiny_raw, tmp_path):
    ingest(tiny_raw, tmp_path / "data")
    summary = build_graph(tmp_path / "data", tmp_path / "graph.npz")
    assert summary["num_edges"] == 2 * summary["num_quadruples"] == 16


@st.composite
def graphs_and_queries(draw):
    n_ent = draw(st.integers(1, 8))
    n_rel = draw(st.integers(1, 3))
    n_q = draw(st.integers(0, 30))
    max_t = draw(st.integers(0, 10))
    quads = np.array(
        [
            [draw(st.integers(0, n_ent - 1)), draw(st.integers(0, n_rel - 1)), draw(st.integers(0, n_ent - 1)),
             draw(st.integers(0, max_t))]
            for _ in range(n_q)
        ],
        dtype=np.int64,
    ).reshape(-1, 4)
    b = draw(st.integers(1, 20))
    ents = np.array([draw(st.integers(0, n_ent - 1)) for _ in range(b)])
    lo = np.array([draw(st.integers(-2, max_t + 3)) for _ in range(b)])
    hi = np.array([draw(st.integers(-2, max_t + 3)) for _ in range(b)])
    return quads, n_ent, n_rel, ents, lo, hi


@settings(max_examples=200, deadline=None)
@given(graphs_and_queries())
def test_window_matches_naive_loop(case):
    quads, n_ent, n_rel, ents, lo, hi = case
    g = TemporalGraph.from_quadruples(quads, n_ent, n_rel)
    start, stop = g.window(ents, lo, hi)
    # Naive: every augmented edge of the entity with lo <= t < hi, as a multiset.
    aug = [(s, r, o, t) for s, r, o, t in quads.tolist()] + [(o, r + n_rel, s, t) for s, r, o, t in quads.tolist()]
    for i, e in enumerate(ents.tolist()):
        expected = sorted((t, r, o) for s, r, o, t in aug if s == e and lo[i] <= t < hi[i])
        got = [(int(g.time[j]), int(g.relation[j]), int(g.neighbor[j])) for j in range(start[i], stop[i])]
        assert got == expected  # contiguous, sorted by (time, relation, neighbor)


def _saved_graph(tmp_path):
    g = TemporalGraph.from_quadruples(np.array([[0, 0, 1, 5], [1, 1, 2, 3]]), 3, 2)
    g.save(tmp_path / "g.npz")
    return tmp_path / "g.npz"


def _arrays_of(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("case", ["truncated", "text", "empty", "npy", "nokey", "object", "badshape"])
def test_load_refuses_a_corrupted_graph_file_naming_it(tmp_path, case):
    good = _saved_graph(tmp_path)
    bad = tmp_path / f"{case}.npz"
    if case == "truncated":
        bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif case == "text":
        bad.write_text("junk\n")
    elif case == "empty":
        bad.write_bytes(b"")
    elif case == "npy":
        with open(bad, "wb") as fh:
            np.save(fh, np.arange(3))
    else:
        arrays = _arrays_of(good)
        if case == "nokey":
            del arrays["time"]
        elif case == "object":
            arrays["time"] = np.array([{"x": 1}] * len(arrays["time"]), dtype=object)
        else:
            arrays["time"] = arrays["time"][:1]
        with open(bad, "wb") as fh:
            np.savez(fh, **arrays)
    with pytest.raises(ValueError) as info:
        TemporalGraph.load(bad)
    message = str(info.value)
    assert message.startswith(f"{bad}: not a readable graph file (")
    assert message.endswith("rebuild it with `raptor graph`")
    if case == "nokey":
        assert "no time array" in message
    if case == "object":
        assert "pickled" in message
