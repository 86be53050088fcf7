"""Computing labels: the pairs to label (:func:`label_pairs`), the graph's in-edges
(:class:`InAdjacency`), and the chunk driver (:func:`iter_label_chunks`, :func:`compute_labels`),
which runs the numba kernels on a thread pool, or the reference implementation, chunk by chunk."""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import numpy as np

from raptor.config import LabelingConfig
from raptor.constants import ID_DTYPE
from raptor.data.graph import TemporalGraph
from raptor.labeling.kernels import _UNLIMITED, _dfs_kernel, _exact_h2_kernel, _pruned_h2_kernel
from raptor.labeling.reference import _reference_chunk
from raptor.labeling.table import (VISITED_MODES, VISITED_SUBJECT, VISITED_TARGET, LabelChunk, LabelTable,
                                   table_from_chunks)


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
# Driver
# ============================================================================================


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
