"""The label table in memory: :class:`LabelTable` (a pair index and a CSR of rows, with its
lookups), :class:`LabelChunk` (the rows of a run of pairs, as the implementations yield them),
:func:`table_from_chunks`, and the ``labeling.visited`` modes a table can be labeled with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

import numpy as np

#: ``labeling.visited``: Algorithm 1's initial visited set. ``"target"``: ``{o_q}`` as printed (paths
#: through the query subject ``e_q`` count); ``"target_and_subject"``: ``{o_q, e_q}`` per training
#: query, as the agent (which never returns to ``e_q``) sees it; K <= 3 only.
VISITED_TARGET = "target"
VISITED_SUBJECT = "target_and_subject"
VISITED_MODES = (VISITED_TARGET, VISITED_SUBJECT)


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
