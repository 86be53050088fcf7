"""The reference implementation: Algorithm 1 of the paper as printed, in pure Python (tests,
benchmarks and ``labeling.implementation: reference``): per pair (:func:`reference_labels`,
:func:`reference_labels_via`) and per chunk of pairs (:func:`_reference_chunk`, which the driver
:func:`raptor.labeling.compute.iter_label_chunks` calls)."""

from __future__ import annotations

import heapq
from collections import deque
from typing import Optional

import numpy as np

from raptor.data.graph import TemporalGraph
from raptor.labeling.table import LabelChunk


def _time_then_entity(et: tuple[int, int]) -> tuple[int, int]:
    return et[1], et[0]


def _algorithm1(graph, target, query_time, max_hops, max_in_edges, strict_history, visited0):
    """Algorithm 1's FIFO search from ``target`` with the visited set initialised to ``visited0``;
    yields ``(entity, hop, time, parent)`` for every in-edge it records (after ``SelectTopN`` and
    the visited filter; ``parent`` is the entity expanded, i.e. the next entity on the path)."""
    queue: deque = deque()
    queue.append((int(target), int(query_time), frozenset(int(v) for v in visited0), 0, True))
    nbr, tim = graph.neighbor, graph.time
    while queue:
        e_cur, t_cur, v_cur, ell, is_root = queue.popleft()
        if ell >= max_hops:
            continue
        # N_in = {(e', t') | (e', r', e_cur, t') in Q, t' <= t_cur}: the in-edges of e_cur are its
        # out-edges in the inverse-augmented graph; the CSR window gives those with time < hi.
        hi = t_cur if (is_root and strict_history) else t_cur + 1
        lo_i, hi_i = graph.window(e_cur, 0, hi)
        n_in = set(zip(nbr[int(lo_i) : int(hi_i)].tolist(), tim[int(lo_i) : int(hi_i)].tolist()))
        # SelectTopN: largest t' first; ties at equal t' by larger entity id (documented tie-break).
        if max_in_edges is None:
            pruned = sorted(n_in, key=_time_then_entity, reverse=True)
        else:
            pruned = heapq.nlargest(max_in_edges, n_in, key=_time_then_entity)
        for e2, t2 in pruned:
            if e2 not in v_cur:
                queue.append((e2, t2, v_cur | {e2}, ell + 1, False))
                yield e2, ell + 1, t2, e_cur


def reference_labels(
    graph: TemporalGraph,
    target: int,
    query_time: int,
    max_hops: int,
    max_in_edges: Optional[int] = 200,
    strict_history: bool = True,
    query_subject: Optional[int] = None,
) -> dict[tuple[int, int], int]:
    """Algorithm 1 for one pair; returns ``{(entity, hops): latest_time}``.

    ``max_hops`` plays the role of the printed ``K`` (we call it with ``K - 1``: hop-``K`` records
    can never label an action, and dropping the last level leaves the lower levels unchanged).
    The printed ``N_in`` uses ``t' <= t_cur`` at every level; at the root (``t_cur = t_q``) we use
    ``t' < t_q`` when ``strict_history`` (the history ``H`` of the paper), ``<=`` otherwise.
    ``L`` is kept as a mapping ``(entity, hop) -> time``: ``IsLatest`` is "no record at that hop
    with a time >= t'", ``RemoveEarlier`` + insert is an overwrite.

    ``query_subject`` (``e_q`` of one query): the visited set starts as ``{o_q, e_q}`` instead of
    ``{o_q}`` -- the labels of ``visited = "target_and_subject"`` for that query, by definition
    (``e_q`` still uses its ``SelectTopN`` slots: the visited filter comes after the selection).
    """
    visited0 = {int(target)} if query_subject is None else {int(target), int(query_subject)}
    L: dict[tuple[int, int], int] = {}
    for e2, hop, t2, _ in _algorithm1(graph, target, query_time, max_hops, max_in_edges, strict_history, visited0):
        key = (e2, hop)
        if key not in L or L[key] < t2:  # IsLatest, then RemoveEarlier + insert
            L[key] = t2
    return L


def reference_labels_via(
    graph: TemporalGraph,
    target: int,
    query_time: int,
    max_hops: int,
    max_in_edges: Optional[int] = 200,
    strict_history: bool = True,
) -> dict[tuple[int, int], tuple[int, int, int]]:
    """Algorithm 1 for one pair (visited ``{o_q}``) with the columns of ``visited =
    "target_and_subject"``: ``{(entity, hops): (latest_time, via, latest_time_without_via)}``.

    For a hop-2 record, ``via`` is the intermediate ``x`` (``entity -> x -> o_q``) of its latest
    paths when only one intermediate attains ``latest_time``, and ``latest_time_without_via`` the
    latest time over the paths through any other intermediate (-1: none); otherwise (hop 1, or a
    tie between intermediates) ``via = -1`` and the time is ``latest_time``. Only for ``max_hops <= 2``.
    """
    if max_hops > 2:
        raise ValueError(f"via columns need max_hops <= 2 (K <= 3), got {max_hops}")
    per: dict[tuple[int, int], dict[int, int]] = {}
    for e2, hop, t2, parent in _algorithm1(graph, target, query_time, max_hops, max_in_edges, strict_history,
                                           {int(target)}):
        d = per.setdefault((e2, hop), {})
        d[parent] = max(d.get(parent, -1), t2)
    out = {}
    for key, by_parent in per.items():
        best = max(by_parent.values())
        tops = [x for x, t in by_parent.items() if t == best]
        if key[1] == 2 and len(tops) == 1:
            rest = [t for x, t in by_parent.items() if x != tops[0]]
            out[key] = (best, tops[0], max(rest, default=-1))
        else:
            out[key] = (best, -1, best)
    return out


def _reference_chunk(graph, tgt, tms, max_hops, max_in_edges, strict_history, track=False) -> LabelChunk:
    counts = np.zeros(len(tgt), np.int64)
    ents, hops, lats, vias, alts = [], [], [], [], []
    for i, (o, t) in enumerate(zip(tgt.tolist(), tms.tolist())):
        if track:
            items = sorted(reference_labels_via(graph, o, t, max_hops, max_in_edges, strict_history).items())
        else:
            items = sorted(reference_labels(graph, o, t, max_hops, max_in_edges, strict_history).items())
        counts[i] = len(items)
        for (e, h), rec in items:
            ents.append(e)
            hops.append(h)
            if track:
                lats.append(rec[0])
                vias.append(rec[1])
                alts.append(rec[2])
            else:
                lats.append(rec)
    return LabelChunk(
        tgt, tms, counts, np.asarray(ents, np.int32), np.asarray(hops, np.int8), np.asarray(lats, np.int32),
        np.asarray(vias, np.int32) if track else None, np.asarray(alts, np.int32) if track else None,
    )
