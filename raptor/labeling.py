"""Reachable-entity labeling (paper, "Reachable Entity Labeling", Algorithm 1) and action labels.

For every distinct training pair ``(o_q, t_q)`` (targets of the training queries in both
directions) this module computes the list ``L`` of ``(entity, hops, latest_time)``: the entities
``e`` that reach ``o_q`` by a *temporal simple path* ``e = x_h -> ... -> x_1 -> x_0 = o_q`` of
``h`` edges, with edge times non-decreasing in the forward direction and all before ``t_q``
(``< t_q`` with ``strict_history``, ``<= t_q`` otherwise), where ``latest_time`` is the latest time
at which such a path can *leave* ``e`` (the time of its first edge), maximised over paths.

Only hops ``1 .. K-1`` are produced (``K = env.max_path_length``): an action label needs
``h < K - k`` with ``k >= 0``, so an entry at hop ``K`` can never make a label positive.

Implementations (one interface, :func:`iter_label_chunks` / :func:`compute_labels`):

* ``reference`` -- Algorithm 1 as printed: a FIFO queue of ``(entity, time, visited set, hops)``,
  ``SelectTopN`` on the *set* of in-edges ``(e', t')`` with ``t' <= t_cur`` (at the root
  ``t' < t_q`` under ``strict_history``), then the visited filter, then ``IsLatest`` /
  ``RemoveEarlier``. Pure Python; for tests and benchmarks only.
* ``fast`` -- numba kernels run on worker threads (``nogil``): for ``K <= 3`` (hops <= 2) a
  specialised kernel, exact mode incremental over a target's query times; otherwise a general
  depth-first enumeration with the same pruning. With ``max_in_edges = N`` it equals ``reference``
  exactly (same tie-break); with ``None`` it is exact (equals brute-force enumeration of temporal
  simple paths).

``labeling.visited``: Algorithm 1 as printed starts its visited set at ``{o_q}`` (``"target"``, the
default), so a path may run back through the query subject ``e_q``, which the agent can never
revisit. ``"target_and_subject"`` (K <= 3) adds two columns per row -- ``via``, the unique intermediate
of a hop-2 row's latest paths, and ``latest_time_without_via`` -- from which :func:`action_labels`
(given ``query_subject``) and :meth:`LabelTable.get_for_query` give, per query, the labels of
Algorithm 1 with the visited set ``{o_q, e_q}``; the other columns are those of ``"target"``.

``SelectTopN`` tie-break: in-edges are the distinct ``(neighbor, time)`` pairs of the entity
(relations collapse, as in the printed set ``N_in``), ordered by ``(time, neighbor)``; the N kept
are the last N in that order -- latest times first, and among equal times at the cut the larger
entity ids. Visited entities are filtered *after* the selection, so they use up slots (as printed).

Storage: see :func:`write_labels` and ``docs/labeling.md``.
"""

from __future__ import annotations

import heapq
import json
import os
import time as _time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raptor.config import LabelingConfig
from raptor.constants import ID_DTYPE, pad_relation, stop_relation
from raptor.data.graph import TemporalGraph
from raptor.common.io import atomic_dir, atomic_write_json

LABEL_FORMAT_VERSION = 1
#: Format 2 = format 1 plus the ``VIA_COLUMNS`` (written only with ``visited = "target_and_subject"``,
#: so that a reader that knows only format 1 refuses such a table instead of misreading it).
LABEL_FORMAT_VERSION_VIA = 2
LABEL_FORMAT_VERSIONS = (LABEL_FORMAT_VERSION, LABEL_FORMAT_VERSION_VIA)
LABEL_COLUMNS: tuple[str, ...] = ("target", "query_time", "entity", "hops", "latest_time")
VIA_COLUMNS: tuple[str, ...] = ("via", "latest_time_without_via")
#: ``labeling.visited``: Algorithm 1's initial visited set. ``"target"``: ``{o_q}`` as printed (paths
#: through the query subject ``e_q`` count); ``"target_and_subject"``: ``{o_q, e_q}`` per training
#: query, as the agent (which never returns to ``e_q``) sees it; K <= 3 only.
VISITED_TARGET = "target"
VISITED_SUBJECT = "target_and_subject"
VISITED_MODES = (VISITED_TARGET, VISITED_SUBJECT)
LABELS_FILE = "labels.parquet"
PAIRS_FILE = "pairs.parquet"
SUMMARY_FILE = "summary.json"
#: Summary fields that say how or where a table was computed, not what it holds: a table labeled
#: again from the same inputs differs in these only, so :func:`label_table_hash` leaves them out.
RUN_SUMMARY_KEYS = ("wall_time_s", "stage_wall_time_s", "part_wall_time_s", "workers", "data_dir")

#: "No entry" sentinel in the kernels' dense per-entity arrays.
_NONE = -1
#: "No pruning" as an N for the kernels.
_UNLIMITED = np.int64(1) << 62


# ============================================================================================
# Inputs
# ============================================================================================


def label_pairs(train_quads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``(o_q, t_q)`` pairs of the training queries in both directions, sorted.

    A quadruple ``(s, r, o, t)`` gives the query ``(s, r, ?, t)`` answered by ``o`` and the inverse
    query ``(o, r + R, ?, t)`` answered by ``s``; so the targets are both ``o`` and ``s``.

    Returns:
        ``(targets, query_times)``: int32 arrays sorted by ``(target, query_time)``, unique.
    """
    quads = np.asarray(train_quads)
    if quads.ndim != 2 or quads.shape[1] != 4:
        raise ValueError(f"quadruples must have shape [n, 4], got {quads.shape}")
    tgt = np.concatenate([quads[:, 2], quads[:, 0]]).astype(np.int64)
    tim = np.concatenate([quads[:, 3], quads[:, 3]]).astype(np.int64)
    if len(tgt) == 0:
        return np.zeros(0, ID_DTYPE), np.zeros(0, ID_DTYPE)
    stride = int(tim.max()) + 1
    key = np.unique(tgt * stride + tim)
    return (key // stride).astype(ID_DTYPE), (key % stride).astype(ID_DTYPE)


@dataclass(frozen=True, eq=False)
class InAdjacency:
    """Per entity, its distinct in-neighbours ``(neighbor, time)`` sorted by ``(time, neighbor)``.

    Because the graph holds every edge and its inverse, the in-edges of ``e`` are its out-edges;
    relations are dropped and duplicate ``(neighbor, time)`` pairs collapse (Algorithm 1's ``N_in``
    is a set of ``(e', t')``).
    """

    indptr: np.ndarray  # int64 [E + 1]
    neighbor: np.ndarray  # int32 [M']
    time: np.ndarray  # int32 [M']
    num_entities: int

    @classmethod
    def from_graph(cls, graph: TemporalGraph) -> "InAdjacency":
        e = graph.num_entities
        src = np.repeat(np.arange(e, dtype=np.int64), np.diff(graph.indptr.astype(np.int64)))
        nbr = graph.neighbor.astype(np.int64)
        tim = graph.time.astype(np.int64)
        t_stride = int(tim.max()) + 1 if len(tim) else 1
        key = (src * t_stride + tim) * (e + 1) + nbr
        key = np.unique(key)
        nb = (key % (e + 1)).astype(ID_DTYPE)
        rest = key // (e + 1)
        tm = (rest % t_stride).astype(ID_DTYPE)
        sr = rest // t_stride
        indptr = np.zeros(e + 1, dtype=np.int64)
        np.cumsum(np.bincount(sr, minlength=e), out=indptr[1:])
        return cls(indptr=indptr, neighbor=nb, time=tm, num_entities=e)


# ============================================================================================
# numba kernels (nogil: run on a thread pool, one chunk of whole targets per call)
# ============================================================================================


@numba.njit(cache=True, nogil=True, inline="always")
def _lower_bound(arr, lo, hi, value):
    """First index in ``arr[lo:hi]`` (sorted) with ``arr[i] >= value``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if arr[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def _grow(ent, hop, lat, n, need):
    cap = len(ent)
    if n + need <= cap:
        return ent, hop, lat
    new_cap = max(2 * cap, n + need, 1024)
    e2 = np.empty(new_cap, np.int32)
    h2 = np.empty(new_cap, np.int8)
    l2 = np.empty(new_cap, np.int32)
    e2[:n] = ent[:n]
    h2[:n] = hop[:n]
    l2[:n] = lat[:n]
    return e2, h2, l2


@numba.njit(cache=True, nogil=True)
def _grow_via(via, alt, n, need, track):
    """``_grow`` for the optional ``via`` / ``latest_time_without_via`` columns (empty unless ``track``)."""
    cap = len(via)
    if not track or n + need <= cap:
        return via, alt
    new_cap = max(2 * cap, n + need, 1024)
    v2 = np.empty(new_cap, np.int32)
    a2 = np.empty(new_cap, np.int32)
    v2[:n] = via[:n]
    a2[:n] = alt[:n]
    return v2, a2


@numba.njit(cache=True, nogil=True, inline="always")
def _via_of(best, arg, alt_best):
    """``(via, latest_time_without_via)`` of a hop-2 record: ``via`` is the intermediate of its best
    paths when it is unique (``alt_best < best``), else -1 and the time is ``best`` itself."""
    if alt_best < best:
        return arg, alt_best
    return -1, best


@numba.njit(cache=True, nogil=True)
def _emit(allt, n_all, f1, best2, ent, hop, lat, n, track, arg2, alt2, via, alt):
    """Append the rows of one pair (entities in ``allt[:n_all]``, already sorted); with ``track``
    also their ``via`` / ``latest_time_without_via`` (hop-1 rows: -1 / ``latest_time``)."""
    ent, hop, lat = _grow(ent, hop, lat, n, 2 * n_all)
    via, alt = _grow_via(via, alt, n, 2 * n_all, track)
    for i in range(n_all):
        e = allt[i]
        if f1[e] >= 0:
            ent[n] = e
            hop[n] = 1
            lat[n] = f1[e]
            if track:
                via[n] = -1
                alt[n] = f1[e]
            n += 1
        if best2[e] >= 0:
            ent[n] = e
            hop[n] = 2
            lat[n] = best2[e]
            if track:
                via[n], alt[n] = _via_of(best2[e], arg2[e], alt2[e])
            n += 1
    return ent, hop, lat, via, alt, n


@numba.njit(cache=True, nogil=True)
def _exact_h2_kernel(indptr, nbr, tim, num_entities, targets, tgt_ptr, pair_times, strict, max_hops, track):
    """Exact labels for hops <= 2, incremental over each target's sorted query times.

    hop 1: ``f1[x]`` = latest in-edge ``x -> o`` before the bound (``x != o``).
    hop 2: ``best2[e]`` = max over ``x`` with ``f1[x]`` of the latest ``e -> x`` at ``<= f1[x]``
    (``e`` not in ``{o, x}``). For paths of <= 2 edges this DP over the last hop is exactly the
    maximum over simple paths: ``f1[x]`` never depends on ``e``. Because ``f1`` only grows with
    ``t_q``, each ``x``'s in-list is scanned once per target (``scanned[x]``) and maxima carry over.
    With ``track`` (``visited = "target_and_subject"``) also ``arg2[e]``, the intermediate of the best
    path, and ``alt2[e]``, the best over paths through any other intermediate (top-2 over distinct
    intermediates; order-independent, so it carries over the query times like the maxima).
    """
    n_pairs = tgt_ptr[-1]
    counts = np.zeros(n_pairs, np.int64)
    f1 = np.full(num_entities, -1, np.int32)
    best2 = np.full(num_entities, -1, np.int32)
    arg2 = np.full(num_entities, -1, np.int32)
    alt2 = np.full(num_entities, -1, np.int32)
    scanned = np.full(num_entities, -1, np.int64)
    inall = np.zeros(num_entities, np.bool_)
    dirty = np.zeros(num_entities, np.bool_)
    allt = np.empty(num_entities, np.int32)
    dlist = np.empty(num_entities, np.int32)
    ent = np.empty(1024, np.int32)
    hop = np.empty(1024, np.int8)
    lat = np.empty(1024, np.int32)
    via = np.empty(1024 if track else 0, np.int32)
    alt = np.empty(1024 if track else 0, np.int32)
    n = 0
    for ti in range(len(targets)):
        o = targets[ti]
        p = indptr[o]
        pend = indptr[o + 1]
        n_all = 0
        for j in range(tgt_ptr[ti], tgt_ptr[ti + 1]):
            bound = pair_times[j] if strict else pair_times[j] + 1
            n_dirty = 0
            grew = False
            while p < pend and tim[p] < bound:
                x = nbr[p]
                tau = tim[p]
                p += 1
                if x == o or max_hops < 1:
                    continue
                if not inall[x]:
                    inall[x] = True
                    allt[n_all] = x
                    n_all += 1
                    grew = True
                if tau > f1[x]:
                    f1[x] = tau
                    if not dirty[x]:
                        dirty[x] = True
                        dlist[n_dirty] = x
                        n_dirty += 1
            for d in range(n_dirty):
                x = dlist[d]
                dirty[x] = False
                if max_hops < 2:
                    continue
                s = scanned[x]
                if s < 0:
                    s = indptr[x]
                lim = f1[x]
                end = indptr[x + 1]
                while s < end and tim[s] <= lim:
                    e = nbr[s]
                    t2 = tim[s]
                    s += 1
                    if e == o or e == x:
                        continue
                    if t2 > best2[e]:
                        if not inall[e]:
                            inall[e] = True
                            allt[n_all] = e
                            n_all += 1
                            grew = True
                        if track and arg2[e] != x:
                            alt2[e] = best2[e]
                            arg2[e] = x
                        best2[e] = t2
                    elif track and t2 > alt2[e] and arg2[e] != x:
                        alt2[e] = t2
                scanned[x] = s
            if grew:
                allt[:n_all] = np.sort(allt[:n_all])
            start = n
            ent, hop, lat, via, alt, n = _emit(allt, n_all, f1, best2, ent, hop, lat, n, track, arg2, alt2, via, alt)
            counts[j] = n - start
        for i in range(n_all):
            e = allt[i]
            f1[e] = -1
            best2[e] = -1
            arg2[e] = -1
            alt2[e] = -1
            scanned[e] = -1
            inall[e] = False
    m = n if track else 0
    return counts, ent[:n].copy(), hop[:n].copy(), lat[:n].copy(), via[:m].copy(), alt[:m].copy()


@numba.njit(cache=True, nogil=True)
def _pruned_h2_kernel(indptr, nbr, tim, num_entities, targets, tgt_ptr, pair_times, strict, max_hops, track, top_n):
    """Algorithm 1 with ``SelectTopN`` for hops <= 2, one pair at a time.

    Root window: the last ``N`` distinct in-edges of ``o`` before the bound. For each root entry
    ``(x, tau)`` (x != o) the level-2 window is the last ``N`` in-edges of ``x`` with time <= tau;
    windows of the same ``x`` are visited in increasing ``tau`` so their union is scanned once
    (``last_stop[x]``). Level-2 entries are records only (never expanded). ``track``: as in
    :func:`_exact_h2_kernel`, over the intermediates ``x`` of the root window.
    """
    n_pairs = tgt_ptr[-1]
    counts = np.zeros(n_pairs, np.int64)
    f1 = np.full(num_entities, -1, np.int32)
    best2 = np.full(num_entities, -1, np.int32)
    arg2 = np.full(num_entities, -1, np.int32)
    alt2 = np.full(num_entities, -1, np.int32)
    last_stop = np.full(num_entities, -1, np.int64)
    inall = np.zeros(num_entities, np.bool_)
    allt = np.empty(num_entities, np.int32)
    ent = np.empty(1024, np.int32)
    hop = np.empty(1024, np.int8)
    lat = np.empty(1024, np.int32)
    via = np.empty(1024 if track else 0, np.int32)
    alt = np.empty(1024 if track else 0, np.int32)
    n = 0
    for ti in range(len(targets)):
        o = targets[ti]
        ob = indptr[o]
        oe = indptr[o + 1]
        for j in range(tgt_ptr[ti], tgt_ptr[ti + 1]):
            bound = pair_times[j] if strict else pair_times[j] + 1
            stop = _lower_bound(tim, ob, oe, bound)
            begin = max(ob, stop - top_n)
            n_all = 0
            if max_hops >= 1:
                for i in range(begin, stop):
                    x = nbr[i]
                    tau = tim[i]
                    if x == o:
                        continue
                    if not inall[x]:
                        inall[x] = True
                        allt[n_all] = x
                        n_all += 1
                    if tau > f1[x]:
                        f1[x] = tau
                    if max_hops < 2:
                        continue
                    xb = indptr[x]
                    xs = _lower_bound(tim, xb, indptr[x + 1], tau + 1)
                    k = max(xb, xs - top_n, last_stop[x])
                    while k < xs:
                        e = nbr[k]
                        t2 = tim[k]
                        k += 1
                        if e == o or e == x:
                            continue
                        if t2 > best2[e]:
                            if not inall[e]:
                                inall[e] = True
                                allt[n_all] = e
                                n_all += 1
                            if track and arg2[e] != x:
                                alt2[e] = best2[e]
                                arg2[e] = x
                            best2[e] = t2
                        elif track and t2 > alt2[e] and arg2[e] != x:
                            alt2[e] = t2
                    if xs > last_stop[x]:
                        last_stop[x] = xs
            allt[:n_all] = np.sort(allt[:n_all])
            start = n
            ent, hop, lat, via, alt, n = _emit(allt, n_all, f1, best2, ent, hop, lat, n, track, arg2, alt2, via, alt)
            counts[j] = n - start
            for i in range(n_all):
                e = allt[i]
                f1[e] = -1
                best2[e] = -1
                arg2[e] = -1
                alt2[e] = -1
                last_stop[e] = -1
                inall[e] = False
    m = n if track else 0
    return counts, ent[:n].copy(), hop[:n].copy(), lat[:n].copy(), via[:m].copy(), alt[:m].copy()


@numba.njit(cache=True, nogil=True)
def _dfs_kernel(indptr, nbr, tim, num_entities, targets, tgt_ptr, pair_times, strict, max_hops, track, top_n):
    """Any number of hops: depth-first enumeration of Algorithm 1's search tree (records are
    order-independent maxima, so DFS order gives the same ``L`` as the printed FIFO queue).

    Exponential in ``max_hops`` without pruning; used for ``K > 3`` and as a cross-check.
    ``track`` (only for ``max_hops <= 2``, checked by the caller): the hop-2 rows' ``via`` as in
    :func:`_exact_h2_kernel`, the intermediate being ``node[1]``.
    """
    H = max_hops
    n_pairs = tgt_ptr[-1]
    counts = np.zeros(n_pairs, np.int64)
    best = np.full((H + 1, num_entities), -1, np.int32)
    arg2 = np.full(num_entities, -1, np.int32)
    alt2 = np.full(num_entities, -1, np.int32)
    inall = np.zeros(num_entities, np.bool_)
    visited = np.zeros(num_entities, np.bool_)
    allt = np.empty(num_entities, np.int32)
    node = np.empty(H + 1, np.int32)
    cur = np.empty(H + 1, np.int64)
    end = np.empty(H + 1, np.int64)
    ent = np.empty(1024, np.int32)
    hop = np.empty(1024, np.int8)
    lat = np.empty(1024, np.int32)
    via = np.empty(1024 if track else 0, np.int32)
    alt = np.empty(1024 if track else 0, np.int32)
    n = 0
    for ti in range(len(targets)):
        o = targets[ti]
        for j in range(tgt_ptr[ti], tgt_ptr[ti + 1]):
            bound = pair_times[j] if strict else pair_times[j] + 1
            n_all = 0
            if H >= 1:
                stop = _lower_bound(tim, indptr[o], indptr[o + 1], bound)
                node[0] = o
                cur[0] = max(indptr[o], stop - top_n)
                end[0] = stop
                visited[o] = True
                d = 0
                while d >= 0:
                    if cur[d] < end[d]:
                        i = cur[d]
                        cur[d] += 1
                        e = nbr[i]
                        if visited[e]:
                            continue
                        tau = tim[i]
                        h = d + 1
                        if tau > best[h, e]:
                            if track and h == 2 and arg2[e] != node[1]:
                                alt2[e] = best[h, e]
                                arg2[e] = node[1]
                            best[h, e] = tau
                            if not inall[e]:
                                inall[e] = True
                                allt[n_all] = e
                                n_all += 1
                        elif track and h == 2 and tau > alt2[e] and arg2[e] != node[1]:
                            alt2[e] = tau
                        if h < H:
                            d = h
                            node[d] = e
                            visited[e] = True
                            es = _lower_bound(tim, indptr[e], indptr[e + 1], tau + 1)
                            cur[d] = max(indptr[e], es - top_n)
                            end[d] = es
                    else:
                        visited[node[d]] = False
                        d -= 1
            allt[:n_all] = np.sort(allt[:n_all])
            start = n
            ent, hop, lat = _grow(ent, hop, lat, n, H * n_all)
            via, alt = _grow_via(via, alt, n, H * n_all, track)
            for a in range(n_all):
                e = allt[a]
                for h in range(1, H + 1):
                    if best[h, e] >= 0:
                        ent[n] = e
                        hop[n] = h
                        lat[n] = best[h, e]
                        if track:
                            if h == 2:
                                via[n], alt[n] = _via_of(best[h, e], arg2[e], alt2[e])
                            else:
                                via[n] = -1
                                alt[n] = best[h, e]
                        n += 1
                        best[h, e] = -1
                arg2[e] = -1
                alt2[e] = -1
                inall[e] = False
            counts[j] = n - start
    m = n if track else 0
    return counts, ent[:n].copy(), hop[:n].copy(), lat[:n].copy(), via[:m].copy(), alt[:m].copy()


# ============================================================================================
# Reference: Algorithm 1 as printed
# ============================================================================================


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


# ============================================================================================
# Driver
# ============================================================================================


@dataclass
class LabelChunk:
    """Labels of a run of consecutive pairs (sorted by ``(target, query_time)``)."""

    pair_target: np.ndarray  # int32 [p]
    pair_time: np.ndarray  # int32 [p]
    counts: np.ndarray  # int64 [p], rows per pair
    entity: np.ndarray  # int32 [m], sorted by (entity, hops) inside each pair
    hops: np.ndarray  # int8 [m]
    latest_time: np.ndarray  # int32 [m]
    #: visited = "target_and_subject" only (else None): int32 [m] each, see reference_labels_via.
    via: Optional[np.ndarray] = None
    latest_time_without_via: Optional[np.ndarray] = None


def resolve_workers(workers: int) -> int:
    if workers and workers > 0:
        return int(workers)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def _check_pairs(graph: TemporalGraph, targets: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    targets = np.asarray(targets)
    times = np.asarray(times)
    if targets.shape != times.shape or targets.ndim != 1:
        raise ValueError(
            f"targets and query_times must be 1-D of the same length, got {targets.shape} and {times.shape}"
        )
    if targets.size and (targets.min() < 0 or targets.max() >= graph.num_entities):
        raise ValueError(f"target ids must be in [0, {graph.num_entities})")
    if times.size and times.min() < 0:
        raise ValueError("query times must be >= 0")
    targets = targets.astype(np.int64)
    times = times.astype(np.int64)
    stride = int(times.max()) + 1 if times.size else 1
    key = np.unique(targets * stride + times)
    return (key // stride).astype(ID_DTYPE), (key % stride).astype(ID_DTYPE)


@dataclass(frozen=True)
class ChunkOptions:
    """How :func:`iter_label_chunks` / :func:`compute_labels` run; none of it changes the table.

    ``pairs_per_chunk``: pairs per computed chunk (default: from the pair count and the workers);
    ``progress(n)``: called with the pairs finished per chunk; ``adjacency``: the graph's
    :class:`InAdjacency` if already built; ``kernel`` (fast implementation): ``"auto"`` (specialised
    kernels for K <= 3, depth-first otherwise) or ``"dfs"`` (the general depth-first kernel for any K;
    a cross-check in tests)."""

    pairs_per_chunk: Optional[int] = None
    progress: Optional[Callable[[int], None]] = None
    adjacency: Optional[InAdjacency] = None
    kernel: str = "auto"


@dataclass(frozen=True)
class WriteOptions:
    """How :func:`write_labels` / :func:`write_label_part` write; none of it changes the table.

    ``progress(n)``: called with the pairs finished per chunk; ``compression_level``: zstd level of
    ``labels.parquet``; ``extra_summary``: more keys for ``summary.json`` (:func:`write_labels`);
    ``input_hash``: the hash of the inputs a part is labeled from (:func:`write_label_part`: a part
    already there is kept only when it matches)."""

    progress: Optional[Callable[[int], None]] = None
    compression_level: int = 1
    extra_summary: Optional[dict] = None
    input_hash: Optional[str] = None


@dataclass(frozen=True)
class ActionCandidates:
    """The candidate actions :func:`action_labels` labels, ``[B, A]`` each, and the agent's entity.

    ``entity``, ``time``: int ``[B, A]``. ``is_stop``: bool ``[B, A]``; or give ``relation``
    ``[B, A]`` and ``num_relations`` (STOP is relation ``2R``, padding ``2R + 1``). ``mask``: optional
    bool ``[B, A]``, False = padding (entities outside ``[0, E)`` are padding as well).
    ``current_entity``: int ``[B]``, the agent's entity (needed for STOP)."""

    entity: Any
    time: Any
    is_stop: Any = None
    relation: Any = None
    num_relations: Optional[int] = None
    mask: Any = None
    current_entity: Any = None


def _chunks_by_target(targets: np.ndarray, pairs_per_chunk: int) -> list[tuple[int, int]]:
    """Split sorted pairs into ``[lo, hi)`` ranges that never split a target."""
    n = len(targets)
    if n == 0:
        return []
    change = np.flatnonzero(np.diff(targets)) + 1
    starts = np.concatenate([[0], change])
    bounds = [0]
    for s in starts[1:]:
        if s - bounds[-1] >= pairs_per_chunk:
            bounds.append(int(s))
    bounds.append(n)
    return list(zip(bounds[:-1], bounds[1:]))


def iter_label_chunks(
    graph: TemporalGraph,
    targets: np.ndarray,
    query_times: np.ndarray,
    *,
    max_path_length: int,
    config: LabelingConfig = LabelingConfig(),
    options: ChunkOptions = ChunkOptions(),
) -> Iterator[LabelChunk]:
    """Label the distinct pairs ``(targets[i], query_times[i])``; yield chunks in sorted order.

    ``config``: ``max_in_edges``, ``strict_history``, ``implementation``, ``workers`` and
    ``visited`` (``partitions`` is not read here); ``options``: :class:`ChunkOptions`.
    Pairs are deduplicated and sorted by ``(target, query_time)``; rows inside a pair are sorted by
    ``(entity, hops)``. ``options.progress(n)`` is called with the number of pairs finished per chunk.
    At most ``2 * workers`` chunks are in flight, so memory stays bounded on large datasets.
    ``visited = "target_and_subject"``: the same rows, plus the ``via`` columns
    (:func:`reference_labels_via`) from which :func:`action_labels` derives, per query, the labels
    of Algorithm 1 with the visited set ``{o_q, e_q}``; only for ``max_path_length <= 3``.
    """
    max_in_edges, strict_history, visited = config.max_in_edges, config.strict_history, config.visited
    implementation, workers = config.implementation, config.workers
    pairs_per_chunk, progress = options.pairs_per_chunk, options.progress
    adjacency, kernel = options.adjacency, options.kernel
    if max_path_length < 1:
        raise ValueError(f"max_path_length must be >= 1, got {max_path_length}")
    check_visited(visited, max_path_length)
    track = visited == VISITED_SUBJECT
    if max_in_edges is not None and max_in_edges < 1:
        raise ValueError(f"max_in_edges must be a positive integer or None, got {max_in_edges}")
    if implementation not in ("fast", "reference"):
        raise ValueError(f"implementation must be 'fast' or 'reference', got {implementation!r}")
    if kernel not in ("auto", "dfs"):
        raise ValueError(f"kernel must be 'auto' or 'dfs', got {kernel!r}")
    tgt, tms = _check_pairs(graph, targets, query_times)
    max_hops = max_path_length - 1
    if len(tgt) == 0:
        return
    if implementation == "reference":
        step = pairs_per_chunk or 256
        for lo in range(0, len(tgt), step):
            hi = min(lo + step, len(tgt))
            yield _reference_chunk(graph, tgt[lo:hi], tms[lo:hi], max_hops, max_in_edges, strict_history, track)
            if progress:
                progress(hi - lo)
        return

    adj = adjacency if adjacency is not None else InAdjacency.from_graph(graph)
    n_workers = resolve_workers(workers)
    if pairs_per_chunk is None:
        pairs_per_chunk = int(np.clip(len(tgt) // (n_workers * 48), 64, 4096))
    ranges = _chunks_by_target(tgt, pairs_per_chunk)

    def run(lo: int, hi: int) -> LabelChunk:
        t_sub = tgt[lo:hi]
        change = np.flatnonzero(np.diff(t_sub)) + 1
        starts = np.concatenate([[0], change]).astype(np.int64)
        uniq = t_sub[starts].astype(np.int64)
        ptr = np.concatenate([starts, [hi - lo]]).astype(np.int64)
        times = tms[lo:hi].astype(np.int64)
        args = (adj.indptr, adj.neighbor, adj.time, adj.num_entities, uniq, ptr, times, bool(strict_history), max_hops,
                track)
        if max_hops <= 2 and max_in_edges is None and kernel == "auto":
            counts, ent, hop, lat, via, alt = _exact_h2_kernel(*args)
        elif max_hops <= 2 and kernel == "auto":
            counts, ent, hop, lat, via, alt = _pruned_h2_kernel(*args, np.int64(max_in_edges))
        else:
            n = _UNLIMITED if max_in_edges is None else np.int64(max_in_edges)
            counts, ent, hop, lat, via, alt = _dfs_kernel(*args, n)
        if not track:
            via = alt = None
        return LabelChunk(t_sub, tms[lo:hi], counts, ent, hop, lat, via, alt)

    if n_workers == 1 or len(ranges) == 1:
        for lo, hi in ranges:
            chunk = run(lo, hi)
            if progress:
                progress(hi - lo)
            yield chunk
        return
    with ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="raptor-label") as pool:
        pending: deque = deque()
        it = iter(ranges)
        for lo, hi in it:
            pending.append((hi - lo, pool.submit(run, lo, hi)))
            if len(pending) >= 2 * n_workers:
                break
        while pending:
            size, fut = pending.popleft()
            chunk = fut.result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append((nxt[1] - nxt[0], pool.submit(run, *nxt)))
            if progress:
                progress(size)
            yield chunk


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


def check_visited(visited: str, max_path_length: int) -> None:
    """``labeling.visited`` is known, and ``"target_and_subject"`` comes with ``K <= 3``.

    With ``K <= 3`` (hops <= 2) only a hop-2 row's intermediate can be ``e_q`` (a candidate entity
    never is: the agent starts there and cannot return), so one alternative time per row suffices.
    Longer paths would need one alternative per intermediate position, and the agent's own earlier
    steps would be on its visited set as well, which ``{o_q, e_q}`` does not express: refused.
    """
    if visited not in VISITED_MODES:
        raise ValueError(f"labeling.visited must be one of {list(VISITED_MODES)}, got {visited!r}")
    if visited == VISITED_SUBJECT and max_path_length > 3:
        raise ValueError(
            f"labeling.visited = {VISITED_SUBJECT!r} is implemented for env.max_path_length <= 3 only "
            f"(got K = {max_path_length}); use labeling.visited = {VISITED_TARGET!r}"
        )


# ============================================================================================
# In-memory table and lookup
# ============================================================================================


@dataclass(eq=False)
class LabelTable:
    """All ``L`` lists in memory: a pair index and a CSR of rows.

    Pairs are sorted by ``(target, query_time)``; the rows of pair ``p`` are positions
    ``pair_ptr[p]:pair_ptr[p+1]`` of ``entity`` / ``hops`` / ``latest_time``, sorted by
    ``(entity, hops)`` so a candidate entity is found by binary search inside its pair.
    ``entity`` int32, ``hops`` int8, ``latest_time`` int16 when times fit (else int32): 7 bytes a
    row (about 2.4 GB for ICEWS18 exact, less with pruning).

    A table labeled with ``visited = "target_and_subject"`` also holds ``via`` (int32) and
    ``latest_time_without_via`` (the dtype of ``latest_time``), 13 bytes a row in all; the labels of
    a query with subject ``e_q`` are then those of Algorithm 1 with the visited set ``{o_q, e_q}``
    (:meth:`get_for_query`, :func:`action_labels`).
    """

    pair_target: np.ndarray
    pair_time: np.ndarray
    pair_ptr: np.ndarray
    entity: np.ndarray
    hops: np.ndarray
    latest_time: np.ndarray
    num_entities: int
    max_path_length: int
    strict_history: bool
    max_in_edges: Optional[int]
    meta: dict = field(default_factory=dict)
    via: Optional[np.ndarray] = None
    latest_time_without_via: Optional[np.ndarray] = None

    @property
    def visited(self) -> str:
        """``labeling.visited`` of the table: ``"target_and_subject"`` iff it has the via columns."""
        return VISITED_TARGET if self.via is None else VISITED_SUBJECT

    def __post_init__(self) -> None:
        stride = int(self.pair_time.max()) + 2 if len(self.pair_time) else 1
        self._stride = stride
        self._pair_key = self.pair_target.astype(np.int64) * stride + self.pair_time.astype(np.int64)
        if len(self._pair_key) > 1 and not np.all(np.diff(self._pair_key) > 0):
            raise ValueError("label table pairs must be unique and sorted by (target, query_time)")

    @property
    def num_pairs(self) -> int:
        return int(len(self.pair_target))

    @property
    def num_rows(self) -> int:
        return int(len(self.entity))

    def pair_index(self, targets, query_times) -> np.ndarray:
        """int64 index of each ``(target, query_time)``; ValueError if one was never labeled."""
        t = np.asarray(targets, dtype=np.int64)
        q = np.asarray(query_times, dtype=np.int64)
        t, q = np.broadcast_arrays(t, q)
        key = t * self._stride + np.clip(q, 0, self._stride - 1)
        idx = np.searchsorted(self._pair_key, key)
        idx_c = np.minimum(idx, max(len(self._pair_key) - 1, 0))
        ok = (len(self._pair_key) > 0) & (q >= 0) & (q < self._stride - 1)
        if len(self._pair_key):
            ok = ok & (self._pair_key[idx_c] == key)
        if not np.all(ok):
            bad = np.flatnonzero(~np.asarray(ok).ravel())[0]
            raise ValueError(
                f"pair (target={int(t.ravel()[bad])}, query_time={int(q.ravel()[bad])}) is not in the label table "
                "(only training query pairs are labeled)"
            )
        return idx_c

    def get(self, target: int, query_time: int) -> dict[tuple[int, int], int]:
        """``{(entity, hops): latest_time}`` of one pair (for tests and inspection)."""
        p = int(self.pair_index([target], [query_time])[0])
        lo, hi = int(self.pair_ptr[p]), int(self.pair_ptr[p + 1])
        return {
            (int(e), int(h)): int(t)
            for e, h, t in zip(self.entity[lo:hi], self.hops[lo:hi], self.latest_time[lo:hi])
        }

    def to_dict(self, with_via: bool = False) -> dict[tuple[int, int], dict[tuple[int, int], Any]]:
        """``{(target, query_time): {(entity, hops): latest_time}}``; ``with_via``: the values are
        ``(latest_time, via, latest_time_without_via)`` (tables with the via columns only)."""
        if with_via and self.via is None:
            raise ValueError("this label table has no via columns (labeled with labeling.visited = 'target')")
        out = {}
        for p in range(self.num_pairs):
            lo, hi = int(self.pair_ptr[p]), int(self.pair_ptr[p + 1])
            if with_via:
                rows = zip(self.entity[lo:hi], self.hops[lo:hi], zip(self.latest_time[lo:hi].tolist(),
                           self.via[lo:hi].tolist(), self.latest_time_without_via[lo:hi].tolist()))
                out[(int(self.pair_target[p]), int(self.pair_time[p]))] = {
                    (int(e), int(h)): tuple(int(x) for x in v) for e, h, v in rows}
            else:
                out[(int(self.pair_target[p]), int(self.pair_time[p]))] = {
                    (int(e), int(h)): int(t)
                    for e, h, t in zip(self.entity[lo:hi], self.hops[lo:hi], self.latest_time[lo:hi])
                }
        return out

    def get_for_query(self, target: int, query_time: int, query_subject: int) -> dict[tuple[int, int], int]:
        """``{(entity, hops): latest_time}`` of Algorithm 1 with the visited set ``{o_q, e_q}`` for
        the query ``(e_q = query_subject, ?, o_q = target, t_q = query_time)``: ``e_q``'s own rows
        dropped, and a hop-2 row whose best paths all run through ``e_q`` (``via == e_q``) takes
        ``latest_time_without_via`` (dropped when -1). Needs the via columns."""
        if self.via is None:
            raise ValueError("this label table has no via columns: label with labeling.visited = "
                             f"{VISITED_SUBJECT!r} to get the labels of a query with e_q visited")
        s = int(query_subject)
        p = int(self.pair_index([target], [query_time])[0])
        lo, hi = int(self.pair_ptr[p]), int(self.pair_ptr[p + 1])
        out = {}
        for e, h, t, v, a in zip(self.entity[lo:hi].tolist(), self.hops[lo:hi].tolist(),
                                 self.latest_time[lo:hi].tolist(), self.via[lo:hi].tolist(),
                                 self.latest_time_without_via[lo:hi].tolist()):
            if e == s:
                continue
            t = a if v == s else t
            if t >= 0:
                out[(e, h)] = t
        return out


def _time_dtype(max_time: int):
    return np.int16 if max_time < np.iinfo(np.int16).max else np.int32


def table_from_chunks(
    chunks: Iterable[LabelChunk],
    *,
    num_entities: int,
    max_path_length: int,
    strict_history: bool,
    max_in_edges: Optional[int],
    visited: str = VISITED_TARGET,
) -> LabelTable:
    chunks = list(chunks)
    cat = lambda name, dt: (  # noqa: E731
        np.concatenate([getattr(c, name) for c in chunks]).astype(dt, copy=False) if chunks else np.zeros(0, dt)
    )
    counts = cat("counts", np.int64)
    ptr = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    lat = cat("latest_time", np.int32)
    tdt = _time_dtype(int(lat.max()) if len(lat) else 0)
    via_cols = {}
    if visited == VISITED_SUBJECT:
        via_cols = {"via": cat("via", np.int32), "latest_time_without_via": cat("latest_time_without_via", tdt)}
    return LabelTable(
        pair_target=cat("pair_target", np.int32),
        pair_time=cat("pair_time", np.int32),
        pair_ptr=ptr,
        entity=cat("entity", np.int32),
        hops=cat("hops", np.int8),
        latest_time=lat.astype(tdt),
        num_entities=num_entities,
        max_path_length=max_path_length,
        strict_history=strict_history,
        max_in_edges=max_in_edges,
        **via_cols,
    )


def compute_labels(
    graph: TemporalGraph,
    targets: np.ndarray,
    query_times: np.ndarray,
    *,
    max_path_length: int,
    config: LabelingConfig = LabelingConfig(),
    options: ChunkOptions = ChunkOptions(),
) -> LabelTable:
    """All labels in memory (small graphs, tests). Large datasets: :func:`write_labels`.
    ``config`` and ``options``: as in :func:`iter_label_chunks`."""
    chunks = iter_label_chunks(graph, targets, query_times, max_path_length=max_path_length, config=config,
                               options=options)
    return table_from_chunks(
        chunks,
        num_entities=graph.num_entities,
        max_path_length=max_path_length,
        strict_history=config.strict_history,
        max_in_edges=config.max_in_edges,
        visited=config.visited,
    )


# ============================================================================================
# Action labels
# ============================================================================================


@numba.njit(cache=True, nogil=True)
def _action_label_kernel(pair, steps, cand_entity, cand_time, stop, valid, current, targets, bound_t,
                         pair_ptr, entity, hops, latest, K, use_via, subject, via, latest_without_via):
    """``use_via`` (visited = "target_and_subject"): ``subject[b]`` = ``e_q`` is visited -- never a
    reachable candidate, and a row whose best paths all run through it (``via == e_q``) counts with
    ``latest_without_via`` (-1: no other path)."""
    B, A = cand_entity.shape
    y = np.zeros((B, A), np.uint8)
    for b in range(B):
        p = pair[b]
        lo0 = pair_ptr[p]
        hi0 = pair_ptr[p + 1]
        budget = K - steps[b]  # need hops < budget
        o = targets[b]
        s = subject[b] if use_via else -1
        for a in range(A):
            if not valid[b, a]:
                continue
            if stop[b, a]:
                if current[b] == o:
                    y[b, a] = 1
                continue
            e = cand_entity[b, a]
            t = cand_time[b, a]
            if e == o:
                if t <= bound_t[b] and budget > 0:
                    y[b, a] = 1
                continue
            if use_via and e == s:
                continue
            i = _lower_bound(entity, lo0, hi0, e)
            while i < hi0 and entity[i] == e:
                if hops[i] < budget:
                    lt = latest_without_via[i] if (use_via and via[i] == s) else latest[i]
                    if t <= lt:
                        y[b, a] = 1
                        break
                i += 1
    return y


def action_labels(
    table: LabelTable,
    targets,
    query_times,
    step,
    candidates: ActionCandidates,
    K: Optional[int] = None,
    *,
    query_subject=None,
) -> np.ndarray:
    """Reachability labels ``y[B, A]`` (uint8 0/1) of the candidate actions at step ``k``.

    ``y = 1`` iff ``L(o_q, t_q)`` holds ``(entity, t̄, h̄)`` with ``cand_time <= t̄`` and
    ``h̄ < K - k`` (paper, Self-Supervised Pretraining); plus two rules the list cannot express:
    a candidate whose entity is ``o_q`` itself is reachable (``h̄ = 0``, ``t̄`` = the last time
    allowed before ``t_q``), and STOP is reachable iff the agent already stands on ``o_q``.
    Padding candidates get 0.

    With a table labeled ``visited = "target_and_subject"``, ``L`` is that of the query's own
    visited set ``{o_q, e_q}`` (:meth:`LabelTable.get_for_query`), so ``query_subject`` is required;
    with a ``"target"`` table it is ignored (the paper's ``L``, paths through ``e_q`` included).

    Args:
        table: the :class:`LabelTable`.
        targets, query_times: int ``[B]``, the query's answer ``o_q`` and time ``t_q``.
        step: ``k`` as an int or int ``[B]`` (0-based number of actions already taken).
        candidates: the :class:`ActionCandidates` (entity, time, STOP, mask, the agent's entity).
        K: the maximum path length (default: the table's).
        query_subject: int ``[B]``, the query's subject ``e_q`` (used by tables with via columns).
    """
    K = table.max_path_length if K is None else int(K)
    cand_entity, cand_time, cand_is_stop = candidates.entity, candidates.time, candidates.is_stop
    cand_relation, num_relations, cand_mask = candidates.relation, candidates.num_relations, candidates.mask
    current_entity = candidates.current_entity
    ce = np.asarray(cand_entity, dtype=np.int64)
    if ce.ndim != 2:
        raise ValueError(f"cand_entity must be [B, A], got shape {ce.shape}")
    B, A = ce.shape
    ct = np.asarray(cand_time, dtype=np.int64)
    if ct.shape != ce.shape:
        raise ValueError(f"cand_time shape {ct.shape} differs from cand_entity shape {ce.shape}")
    tg = np.asarray(targets, dtype=np.int64).reshape(-1)
    qt = np.asarray(query_times, dtype=np.int64).reshape(-1)
    if len(tg) != B or len(qt) != B:
        raise ValueError(f"targets and query_times must have length B={B}")
    steps = np.broadcast_to(np.asarray(step, dtype=np.int64), (B,)).copy()
    if np.any(steps < 0):
        raise ValueError("step must be >= 0")
    valid = (ce >= 0) & (ce < table.num_entities)
    if cand_mask is not None:
        valid &= np.asarray(cand_mask, dtype=bool)
    if cand_relation is not None:
        if num_relations is None:
            raise ValueError("cand_relation needs num_relations")
        rel = np.asarray(cand_relation, dtype=np.int64)
        if rel.shape != ce.shape:
            raise ValueError(f"cand_relation shape {rel.shape} differs from cand_entity shape {ce.shape}")
        stop = rel == stop_relation(num_relations)
        valid &= rel != pad_relation(num_relations)
        if cand_is_stop is not None:
            stop |= np.asarray(cand_is_stop, dtype=bool)
    elif cand_is_stop is not None:
        stop = np.asarray(cand_is_stop, dtype=bool)
        if stop.shape != ce.shape:
            raise ValueError(f"cand_is_stop shape {stop.shape} differs from cand_entity shape {ce.shape}")
    else:
        stop = np.zeros_like(valid)
    if current_entity is None:
        if np.any(stop & valid):
            raise ValueError("STOP candidates need current_entity")
        cur = np.full(B, -1, np.int64)
    else:
        cur = np.asarray(current_entity, dtype=np.int64).reshape(-1)
        if len(cur) != B:
            raise ValueError(f"current_entity must have length B={B}")
    use_via = table.via is not None
    if use_via:
        if query_subject is None:
            raise ValueError(f"label table labeled with labeling.visited = {VISITED_SUBJECT!r}: "
                             "action_labels needs query_subject (e_q of every query)")
        subj = np.asarray(query_subject, dtype=np.int64).reshape(-1)
        if len(subj) != B:
            raise ValueError(f"query_subject must have length B={B}")
        via, alt = table.via, table.latest_time_without_via
    else:
        subj = np.zeros(0, np.int64)
        via, alt = np.zeros(0, np.int32), np.zeros(0, table.latest_time.dtype)
    pair = table.pair_index(tg, qt) if B else np.zeros(0, np.int64)
    bound_t = qt - 1 if table.strict_history else qt
    return _action_label_kernel(
        pair.astype(np.int64), steps, ce, ct, np.ascontiguousarray(stop), np.ascontiguousarray(valid), cur, tg,
        bound_t, table.pair_ptr, table.entity, table.hops, table.latest_time, np.int64(K),
        use_via, subj, via, alt,
    )


# ============================================================================================
# Storage
# ============================================================================================


def _parquet_writer(path: Path, schema: pa.Schema, compression_level: int) -> pq.ParquetWriter:
    return pq.ParquetWriter(
        path,
        schema,
        compression="zstd",
        compression_level=compression_level,
        # Plain encoding + zstd: measured on ICEWS14 exact, this is both the smallest (17 MB for
        # 25.6M rows, vs 33 MB with dictionary / delta encodings) and the fastest to write.
        use_dictionary=False,
        write_statistics=["target", "query_time"],
    )


LABEL_SCHEMA = pa.schema([(c, pa.int32()) for c in LABEL_COLUMNS])
LABEL_SCHEMA_VIA = pa.schema([(c, pa.int32()) for c in LABEL_COLUMNS + VIA_COLUMNS])
PAIR_SCHEMA = pa.schema(
    [("target", pa.int32()), ("query_time", pa.int32()), ("row_start", pa.int64()), ("num_rows", pa.int32())]
)


def _rows_per_pair(counts: np.ndarray) -> dict[str, float]:
    """Quantiles ``q0 q50 q90 q99 q100`` and the mean of the rows per pair (summary.json)."""
    out = {f"q{int(q * 100)}": float(np.quantile(counts, q)) if len(counts) else 0.0 for q in (0.0, 0.5, 0.9, 0.99, 1.0)}
    out["mean"] = float(counts.mean()) if len(counts) else 0.0
    return out


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def write_labels(
    out_dir: str | Path,
    graph: TemporalGraph,
    targets: np.ndarray,
    query_times: np.ndarray,
    *,
    max_path_length: int,
    config: LabelingConfig = LabelingConfig(),
    options: WriteOptions = WriteOptions(),
) -> dict:
    """Label the pairs and write ``out_dir`` atomically; returns the summary (``options``:
    :class:`WriteOptions`; its ``input_hash`` is not read here).

    Layout of ``out_dir``:

    * ``labels.parquet``: int32 ``target, query_time, entity, hops, latest_time``, sorted by
      ``(target, query_time, entity, hops)``; plain encoding + zstd (level 1), which on this
      sorted data beat dictionary and delta encodings in both size and speed; one row group per
      computed chunk (whole targets), with min/max statistics on target and query_time.
    * ``pairs.parquet``: every labeled pair with ``row_start`` and ``num_rows`` (pairs with an
      empty ``L`` appear here only) -- the loader builds the CSR from it without decoding the
      ``target`` / ``query_time`` columns.
    * ``summary.json``: counts, rows-per-pair quantiles, bytes, mode, wall time, parameters.

    With ``config.visited = "target_and_subject"``, ``labels.parquet`` has two more int32 columns,
    ``via`` and ``latest_time_without_via`` (:func:`reference_labels_via`), and the summary says
    ``format_version`` 2; otherwise the files are those of format 1.
    """
    t0 = _time.perf_counter()
    compression_level, extra_summary = options.compression_level, options.extra_summary
    out_dir = Path(out_dir)
    mode = "exact" if config.max_in_edges is None else f"top{config.max_in_edges}"
    track = config.visited == VISITED_SUBJECT
    schema = LABEL_SCHEMA_VIA if track else LABEL_SCHEMA
    pair_t: list[np.ndarray] = []
    pair_q: list[np.ndarray] = []
    pair_c: list[np.ndarray] = []
    max_time = 0
    with atomic_dir(out_dir) as tmp:
        writer = _parquet_writer(tmp / LABELS_FILE, schema, compression_level)
        try:
            for ch in iter_label_chunks(graph, targets, query_times, max_path_length=max_path_length, config=config,
                                        options=ChunkOptions(progress=options.progress)):
                pair_t.append(ch.pair_target)
                pair_q.append(ch.pair_time)
                pair_c.append(ch.counts)
                if len(ch.entity) == 0:
                    continue
                max_time = max(max_time, int(ch.latest_time.max()))
                cols = [
                    pa.array(np.repeat(ch.pair_target, ch.counts)),
                    pa.array(np.repeat(ch.pair_time, ch.counts)),
                    pa.array(ch.entity),
                    pa.array(ch.hops.astype(np.int32)),
                    pa.array(ch.latest_time),
                ]
                if track:
                    cols += [pa.array(ch.via), pa.array(ch.latest_time_without_via)]
                batch = pa.record_batch(cols, schema=schema)
                writer.write_batch(batch, row_group_size=max(len(ch.entity), 1))
        finally:
            writer.close()
        p_t = np.concatenate(pair_t) if pair_t else np.zeros(0, np.int32)
        p_q = np.concatenate(pair_q) if pair_q else np.zeros(0, np.int32)
        p_c = np.concatenate(pair_c) if pair_c else np.zeros(0, np.int64)
        starts = np.zeros(len(p_c), np.int64)
        if len(p_c):
            np.cumsum(p_c[:-1], out=starts[1:])
        pq.write_table(
            pa.table(
                [pa.array(p_t), pa.array(p_q), pa.array(starts), pa.array(p_c.astype(np.int32))], schema=PAIR_SCHEMA
            ),
            tmp / PAIRS_FILE,
            compression="zstd",
        )
        rows = int(p_c.sum())
        quant = _rows_per_pair(p_c)
        summary = {
            "format_version": LABEL_FORMAT_VERSION_VIA if track else LABEL_FORMAT_VERSION,
            "pairs": int(len(p_c)),
            "rows": rows,
            "rows_per_pair": quant,
            "mode": mode,
            "visited": config.visited,
            "max_in_edges": config.max_in_edges,
            "strict_history": config.strict_history,
            "implementation": config.implementation,
            "workers": resolve_workers(config.workers),
            "max_path_length": int(max_path_length),
            "max_hops": int(max_path_length) - 1,
            "num_entities": int(graph.num_entities),
            "num_relations": int(graph.num_relations),
            "max_latest_time": int(max_time),
            "tie_break": "SelectTopN keeps the last N distinct (neighbor, time) in-edges in (time, neighbor) order",
        }
        if extra_summary:
            summary.update(extra_summary)
        summary["bytes_on_disk"] = _dir_bytes(tmp)
        summary["wall_time_s"] = round(_time.perf_counter() - t0, 3)
        atomic_write_json(tmp / SUMMARY_FILE, summary)
    return summary


def label_table_hash(directory: str | Path) -> str:
    """SHA-256 of what the label table in ``directory`` holds: its files as
    :func:`raptor.common.provenance.content_hash` hashes them, except that each ``summary.json`` is hashed
    without its :data:`RUN_SUMMARY_KEYS`. The Parquet files are written deterministically, so
    labeling the same pairs again (another run, another number of workers) hashes alike and a
    pretraining run that read the table continues instead of starting afresh."""
    import hashlib

    from raptor.common.provenance import _file_digest, content_hash

    def digest(f: Path) -> str:
        if f.name != SUMMARY_FILE:
            return _file_digest(f)
        summary = {k: v for k, v in json.loads(f.read_text()).items() if k not in RUN_SUMMARY_KEYS}
        return hashlib.sha256(json.dumps(summary, sort_keys=True).encode()).hexdigest()

    _check_label_dir(Path(directory))
    return content_hash(directory, file_digest=digest)


def _check_label_dir(directory: Path) -> dict:
    if not directory.is_dir():
        raise FileNotFoundError(f"label directory not found: {directory} (run `raptor label` first)")
    summary_path = directory / SUMMARY_FILE
    if not summary_path.exists():
        raise FileNotFoundError(f"{summary_path} not found: {directory} is not a label directory")
    summary = json.loads(summary_path.read_text())
    if summary.get("format_version") not in LABEL_FORMAT_VERSIONS:
        raise ValueError(
            f"{summary_path}: label format version {summary.get('format_version')}, expected one of "
            f"{list(LABEL_FORMAT_VERSIONS)}"
        )
    visited = summary.setdefault("visited", VISITED_TARGET)  # tables written before the option: {o_q}
    if (visited == VISITED_SUBJECT) != (summary["format_version"] == LABEL_FORMAT_VERSION_VIA):
        raise ValueError(f"{summary_path}: visited = {visited!r} does not match label format version "
                         f"{summary['format_version']} (the via columns come with format {LABEL_FORMAT_VERSION_VIA})")
    names = (PAIRS_FILE, LABELS_FILE) if not summary.get("parts") else ()
    for name in names:
        if not (directory / name).exists():
            raise FileNotFoundError(f"{directory / name} not found: {directory} is not a label directory")
    return summary


def load_label_table(directory: str | Path) -> LabelTable:
    """Read a directory written by :func:`write_labels` (or :func:`merge_label_parts`) into a
    :class:`LabelTable`.

    Reads row group by row group into preallocated arrays (int32 entity, int8 hops, int16 time),
    so the peak memory is the final table plus one row group. A partitioned directory's parts
    cover disjoint, increasing target ranges, so their tables concatenate in order.
    """
    directory = Path(directory)
    summary = _check_label_dir(directory)
    parts = [directory / name for name in summary["parts"]] if summary.get("parts") else [directory]
    pair_cols: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    files = []
    for part in parts:
        if part != directory:
            _check_label_dir(part)
        pairs = pq.read_table(part / PAIRS_FILE)
        p_c = pairs.column("num_rows").to_numpy().astype(np.int64)
        pf = pq.ParquetFile(part / LABELS_FILE)
        if pf.metadata.num_rows != int(p_c.sum()):
            raise ValueError(f"{part}: {LABELS_FILE} has {pf.metadata.num_rows} rows, {PAIRS_FILE} says {int(p_c.sum())}")
        pair_cols.append((pairs.column("target").to_numpy().astype(np.int32),
                          pairs.column("query_time").to_numpy().astype(np.int32), p_c))
        files.append(pf)
    p_t = np.concatenate([c[0] for c in pair_cols])
    p_q = np.concatenate([c[1] for c in pair_cols])
    p_c = np.concatenate([c[2] for c in pair_cols])
    ptr = np.zeros(len(p_c) + 1, np.int64)
    np.cumsum(p_c, out=ptr[1:])
    n_rows = int(ptr[-1])
    tdt = _time_dtype(int(summary.get("max_latest_time", np.iinfo(np.int32).max - 1)))
    ent = np.empty(n_rows, np.int32)
    hop = np.empty(n_rows, np.int8)
    lat = np.empty(n_rows, tdt)
    track = summary["visited"] == VISITED_SUBJECT
    via_cols = {"via": np.empty(n_rows, np.int32), "latest_time_without_via": np.empty(n_rows, tdt)} if track else {}
    columns = ["entity", "hops", "latest_time"] + (list(VIA_COLUMNS) if track else [])
    pos = 0
    for pf in files:
        for g in range(pf.num_row_groups):
            rg = pf.read_row_group(g, columns=columns)
            m = rg.num_rows
            ent[pos : pos + m] = rg.column("entity").to_numpy()
            hop[pos : pos + m] = rg.column("hops").to_numpy()
            lat[pos : pos + m] = rg.column("latest_time").to_numpy()
            for name, arr in via_cols.items():
                arr[pos : pos + m] = rg.column(name).to_numpy()
            pos += m
    return LabelTable(
        pair_target=p_t,
        pair_time=p_q,
        pair_ptr=ptr,
        entity=ent,
        hops=hop,
        latest_time=lat,
        num_entities=int(summary["num_entities"]),
        max_path_length=int(summary["max_path_length"]),
        strict_history=bool(summary["strict_history"]),
        max_in_edges=summary.get("max_in_edges"),
        meta=summary,
        **via_cols,
    )


# ============================================================================================
# Partitions: the same table computed in independent parts (other processes or machines)
# ============================================================================================

#: A part's folder name inside a partitioned label directory (and its staging folder).
PART_NAME = "part-{:05d}"


def part_target_ranges(targets: np.ndarray, num_entities: int, num_parts: int) -> list[tuple[int, int]]:
    """``num_parts`` half-open target-id ranges covering ``[0, num_entities)``, cut at target
    boundaries so that each holds about the same number of pairs (``targets``: the pairs' targets).
    A part may be empty when one target holds more than a part's share."""
    if num_parts < 1:
        raise ValueError(f"num_parts must be >= 1, got {num_parts}")
    per_target = np.bincount(np.asarray(targets, np.int64), minlength=num_entities)
    cum = np.cumsum(per_target)
    total = int(cum[-1]) if len(cum) else 0
    cuts = [0]
    for k in range(1, num_parts):
        cuts.append(max(int(np.searchsorted(cum, total * k / num_parts, side="left")) + 1, cuts[-1]))
    cuts.append(num_entities)
    cuts = [min(c, num_entities) for c in cuts]
    return list(zip(cuts[:-1], cuts[1:]))


def _part_settings(summary: dict) -> dict:
    keys = ("format_version", "mode", "max_in_edges", "strict_history", "max_path_length", "num_entities",
            "num_relations", "num_parts", "target_range", "input")
    return {**{k: summary.get(k) for k in keys}, "visited": summary.get("visited", VISITED_TARGET)}


def write_label_part(
    staging_dir: str | Path,
    part: int,
    graph: TemporalGraph,
    pairs: tuple[np.ndarray, np.ndarray],
    *,
    max_path_length: int,
    config: LabelingConfig = LabelingConfig(),
    options: WriteOptions = WriteOptions(),
) -> dict:
    """Label part ``part`` of ``num_parts = config.partitions`` (the pairs ``(targets, query_times)``,
    as :func:`label_pairs` gives them, whose target is in its :func:`part_target_ranges` range) into
    ``staging_dir/part-NNNNN``, atomically; returns its summary.

    A part already there with the same settings and ``options.input_hash`` is kept (an interrupted
    partitioned run resumes), any other is replaced. ``options.extra_summary`` is not read: a part's
    summary records its range and input instead.
    """
    num_parts, input_hash = config.partitions, options.input_hash
    targets, query_times = pairs
    if not 0 <= part < num_parts:
        raise ValueError(f"part must be in [0, {num_parts}), got {part}")
    lo, hi = part_target_ranges(targets, graph.num_entities, num_parts)[part]
    mode = "exact" if config.max_in_edges is None else f"top{config.max_in_edges}"
    extra = {"part": part, "num_parts": num_parts, "target_range": [lo, hi], "input": input_hash}
    out = Path(staging_dir) / PART_NAME.format(part)
    version = LABEL_FORMAT_VERSION_VIA if config.visited == VISITED_SUBJECT else LABEL_FORMAT_VERSION
    want = _part_settings({"format_version": version, "mode": mode, "max_in_edges": config.max_in_edges,
                           "strict_history": config.strict_history, "max_path_length": int(max_path_length),
                           "num_entities": int(graph.num_entities), "num_relations": int(graph.num_relations),
                           "visited": config.visited, **extra})
    if (out / SUMMARY_FILE).exists():
        have = json.loads((out / SUMMARY_FILE).read_text())
        if _part_settings(have) == want:
            return have
    mask = (np.asarray(targets) >= lo) & (np.asarray(targets) < hi)
    return write_labels(out, graph, np.asarray(targets)[mask], np.asarray(query_times)[mask],
                        max_path_length=max_path_length, config=config,
                        options=WriteOptions(progress=options.progress, compression_level=options.compression_level,
                                             extra_summary=extra))


def merge_label_parts(staging_dir: str | Path, out_dir: str | Path, num_parts: int,
                      extra_summary: Optional[dict] = None) -> dict:
    """Assemble the parts in ``staging_dir`` into the label directory ``out_dir`` (atomically:
    hard links, so the staging folder stays valid until the new directory is in place, then it is
    removed); returns the directory's summary. Refuses missing parts and parts of other settings."""
    import shutil

    staging_dir, out_dir = Path(staging_dir), Path(out_dir)
    names = [PART_NAME.format(i) for i in range(num_parts)]
    summaries = []
    for name in names:
        f = staging_dir / name / SUMMARY_FILE
        if not f.exists():
            raise FileNotFoundError(f"{staging_dir / name}: part {name} of {num_parts} is missing (label it first)")
        summaries.append(json.loads(f.read_text()))
    settings = [{k: v for k, v in _part_settings(s).items() if k not in ("target_range",)} for s in summaries]
    if any(st != settings[0] for st in settings) or any(s.get("part") != i for i, s in enumerate(summaries)):
        raise ValueError(f"{staging_dir}: the parts were labeled with different settings or inputs; label again")
    counts = np.concatenate([pq.read_table(staging_dir / n / PAIRS_FILE, columns=["num_rows"]).column(0).to_numpy()
                             for n in names]).astype(np.int64)
    quant = _rows_per_pair(counts)
    first = summaries[0]
    summary = {k: first[k] for k in ("format_version", "mode", "max_in_edges", "strict_history", "implementation",
                                      "workers", "max_path_length", "max_hops", "num_entities", "num_relations",
                                      "tie_break")}
    summary["visited"] = first.get("visited", VISITED_TARGET)
    summary.update({"pairs": int(len(counts)), "rows": int(counts.sum()), "rows_per_pair": quant,
                    "max_latest_time": max(int(s["max_latest_time"]) for s in summaries), "parts": names,
                    "part_wall_time_s": [s["wall_time_s"] for s in summaries]})
    if extra_summary:
        summary.update(extra_summary)
    with atomic_dir(out_dir) as tmp:
        for name in names:
            (tmp / name).mkdir()
            for f in (staging_dir / name).iterdir():
                os.link(f, tmp / name / f.name)
        summary["bytes_on_disk"] = _dir_bytes(tmp)
        atomic_write_json(tmp / SUMMARY_FILE, summary)
    shutil.rmtree(staging_dir, ignore_errors=True)
    return summary


class PartitionedLabels:
    """A partitioned label directory read one part at a time: what pretraining holds in memory with
    ``pretrain.labels_in_memory: part`` is one part's :class:`LabelTable`, not the whole table."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        summary = _check_label_dir(self.directory)
        if not summary.get("parts"):
            raise ValueError(f"{self.directory} is not partitioned: reading labels one part at a time "
                             f"(pretrain.labels_in_memory: part) needs labeling.partitions > 1")
        self.parts = [self.directory / name for name in summary["parts"]]
        self.target_ranges = [tuple(_check_label_dir(p)["target_range"]) for p in self.parts]
        self.max_path_length = int(summary["max_path_length"])
        self.meta = summary

    @property
    def num_parts(self) -> int:
        return len(self.parts)

    def load(self, part: int) -> LabelTable:
        return load_label_table(self.parts[part])


def staging_dir_of(out_dir: str | Path) -> Path:
    """Where the parts of ``out_dir`` are labeled before they are merged (a sibling folder)."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + ".parts")


# ============================================================================================
# Stage entry point
# ============================================================================================


def _label_inputs(data_dir: str | Path, graph_path: Optional[str | Path]):
    """``(dataset meta, graph, targets, times)`` of the training pairs of an ingested dataset."""
    from raptor.data.dataset import load_dataset

    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"dataset folder not found: {data_dir} (run `raptor ingest` first)")
    ds = load_dataset(data_dir)
    train = ds.splits["train"]
    if len(train) == 0:
        raise ValueError(f"{data_dir}: the train split is empty; nothing to label")
    if graph_path is not None:
        graph = TemporalGraph.load(graph_path)
        if graph.num_entities != ds.num_entities or graph.num_relations != ds.num_relations:
            raise ValueError(
                f"{graph_path}: graph has {graph.num_entities} entities / {graph.num_relations} relations, "
                f"dataset {data_dir} has {ds.num_entities} / {ds.num_relations}"
            )
    else:
        graph = TemporalGraph.from_quadruples(ds.all_quadruples(), ds.num_entities, ds.num_relations)
    targets, times = label_pairs(train)
    return ds.meta, graph, targets, times


def _progress(show: bool, total: int, desc: str):
    if not show:
        return None
    from raptor.common.progress import progress_bar

    return progress_bar(total=total, unit="pair", desc=desc, mininterval=0.5, dynamic_ncols=True)


def label_part(
    data_dir: str | Path,
    out_dir: str | Path,
    part: int,
    *,
    max_path_length: int,
    config: LabelingConfig = LabelingConfig(),
    graph_path: Optional[str | Path] = None,
    show_progress: bool = False,
) -> dict:
    """One part of ``config.partitions`` of the label directory ``out_dir``, into its staging folder
    (:func:`staging_dir_of`): independent of the other parts, so parts run in other processes or on
    other machines (the label flow maps them over the task runner: threads or a Dask cluster)."""
    from raptor.common.provenance import content_hash

    meta, graph, targets, times = _label_inputs(data_dir, graph_path)
    bar = _progress(show_progress, len(targets), f"labeling part {part}")
    try:
        return write_label_part(staging_dir_of(out_dir), part, graph, (targets, times),
                                max_path_length=max_path_length, config=config,
                                options=WriteOptions(progress=bar.update if bar is not None else None,
                                                     input_hash=content_hash(data_dir)))
    finally:
        if bar is not None:
            bar.close()


def merge_parts(data_dir: str | Path, out_dir: str | Path, config: LabelingConfig = LabelingConfig()) -> dict:
    """Assemble the ``config.partitions`` parts labeled by :func:`label_part` into ``out_dir``."""
    from raptor.data.dataset import load_dataset

    meta = load_dataset(data_dir).meta
    return merge_label_parts(staging_dir_of(out_dir), out_dir, config.partitions,
                             extra_summary={"dataset": meta.get("dataset"), "data_dir": str(data_dir)})


def label_dataset(
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    max_path_length: int,
    config: LabelingConfig = LabelingConfig(),
    graph_path: Optional[str | Path] = None,
    show_progress: bool = True,
) -> dict:
    """The ``raptor label`` stage: ingested dataset -> label directory; returns the summary.

    The graph holds all three splits (the one graph the environment uses); the ``< t_q`` window
    keeps only the history of each pair, so for the time-ordered splits this equals labeling on
    the training split alone. ``graph_path`` reuses the ``raptor graph`` output instead. With
    ``config.partitions > 1`` the parts are labeled one after the other here (resuming those already
    done) and merged: the same table, in a partitioned directory.
    """
    started = _time.perf_counter()
    if config.partitions > 1:
        for part in range(config.partitions):
            label_part(data_dir, out_dir, part, max_path_length=max_path_length, config=config,
                       graph_path=graph_path, show_progress=show_progress)
        summary = merge_parts(data_dir, out_dir, config)
        summary["stage_wall_time_s"] = round(_time.perf_counter() - started, 3)
        return summary
    meta, graph, targets, times = _label_inputs(data_dir, graph_path)
    bar = _progress(show_progress, len(targets), "labeling")
    try:
        summary = write_labels(
            out_dir,
            graph,
            targets,
            times,
            max_path_length=max_path_length,
            config=config,
            options=WriteOptions(progress=bar.update if bar is not None else None,
                                 extra_summary={"dataset": meta.get("dataset"), "data_dir": str(data_dir)}),
        )
    finally:
        if bar is not None:
            bar.close()
    summary["stage_wall_time_s"] = round(_time.perf_counter() - started, 3)
    return summary
