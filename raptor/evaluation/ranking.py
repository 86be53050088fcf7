"""Time-aware filtered ranking, link-prediction metrics and the prediction/metric artifacts.

Everything here is vectorised NumPy: no Python loop over queries (only over fixed-size chunks of
queries, to bound memory). See ``docs/evaluation.md`` for the definitions, with worked examples.

Conventions
-----------
* A query is ``(s, r, ?, t)`` with ``r`` in ``[0, 2R)``: forward relations ``r < R`` and inverse
  relations ``r + R`` (the query ``(o, r + R, ?, t)`` asks for the subject of ``(s, r, o, t)``).
* A model answers a query with a candidate list: ``cand_entity [Q, C]`` (entity ids, ``-1`` =
  padding) and ``cand_score [Q, C]`` (higher is better; the score of a padding slot is ignored).
  Every entity that is not a (non-padding) candidate scores ``-inf`` ("unreached"); a candidate
  whose score is ``-inf`` is unreached too.
* Time-aware filtering: for the query ``(s, r, ?, t)`` every *other* entity ``o'`` with
  ``(s, r, o', t)`` true in any split (train, valid or test, both directions) is removed from the
  ranking; the gold answer itself always stays. Facts at other timestamps are not filtered.
* Ties use the *realistic* rank: the mean of the optimistic rank ``1 + #greater`` and the
  pessimistic rank ``1 + #greater + #equal`` (other, non-filtered entities), i.e.
  ``rank = 1 + #greater + #equal / 2``. An unreached gold therefore ties with every unreached,
  non-filtered entity: ``rank = n_reached + 1 + (U - 1) / 2``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raptor.constants import HITS_AT, ID_DTYPE, METRIC_KEYS
from raptor.common.io import atomic_path, atomic_write_json


#: The tie semantics of every rank this module computes (see the module docstring), as reports state it.
TIE_RULE = "realistic: 1 + #greater + #equal / 2"

#: ``format`` tag stored in the Parquet schema metadata of predictions files.
PREDICTIONS_FORMAT = "raptor.predictions/v1"

#: Columns of the optional best-path part of a predictions file.
PATH_COLUMNS: tuple[str, ...] = ("path_entities", "path_relations", "path_times")

# Working-set budget (bytes) of the per-chunk dense [chunk, E + 1] buffers in filtered_ranks.
_CHUNK_BYTES = 8 << 20


# --------------------------------------------------------------------------------------------
# Filter index
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterIndex:
    """Time-aware filter: ``(subject, relation, time)`` -> sorted set of true answer entities.

    A CSR over sorted int64 keys ``key = (s * 2R + r) * (max_time + 1) + t``; the answers of
    ``keys[i]`` are ``answers[offsets[i]:offsets[i + 1]]`` (sorted, unique). Relations cover both
    directions (``r`` and ``r + R``). Look-ups are a vectorised ``searchsorted``.
    """

    keys: np.ndarray  # int64 [K], strictly increasing
    offsets: np.ndarray  # int64 [K + 1]
    answers: np.ndarray  # int32 [N]
    num_relations: int
    max_subject: int  # -1 for an empty index
    max_time: int  # -1 for an empty index

    @property
    def num_keys(self) -> int:
        return int(self.keys.shape[0])

    @property
    def max_answer(self) -> int:
        return int(self.answers.max()) if self.answers.size else -1

    def encode(self, subject, relation, time) -> tuple[np.ndarray, np.ndarray]:
        """``(key int64 [Q], in_range bool [Q])``; keys outside the index's ranges are not valid."""
        s = np.asarray(subject, dtype=np.int64)
        r = np.asarray(relation, dtype=np.int64)
        t = np.asarray(time, dtype=np.int64)
        n_rel = 2 * self.num_relations
        ok = (s >= 0) & (s <= self.max_subject) & (r >= 0) & (r < n_rel) & (t >= 0) & (t <= self.max_time)
        key = (np.where(ok, s, 0) * n_rel + np.where(ok, r, 0)) * (self.max_time + 1) + np.where(ok, t, 0)
        return key, ok

    def lookup(self, subject, relation, time) -> tuple[np.ndarray, np.ndarray]:
        """``(start, end)`` int64 [Q]: the answers of query i are ``answers[start[i]:end[i]]``."""
        key, ok = self.encode(subject, relation, time)
        pos = np.searchsorted(self.keys, key)
        pos_c = np.minimum(pos, max(self.num_keys - 1, 0))
        found = ok & (pos < self.num_keys)
        if self.num_keys:
            found &= self.keys[pos_c] == key
        start = np.where(found, self.offsets[pos_c], 0)
        end = np.where(found, self.offsets[np.minimum(pos_c + 1, self.num_keys)], 0)
        return start.astype(np.int64), end.astype(np.int64)

    def answers_of(self, subject: int, relation: int, time: int) -> np.ndarray:
        """The sorted true answers of one query (convenience for tests and inspection)."""
        start, end = self.lookup([subject], [relation], [time])
        return self.answers[start[0] : end[0]]


def _as_quads(all_quads) -> np.ndarray:
    if isinstance(all_quads, (list, tuple)):
        parts = [np.asarray(q) for q in all_quads]
        if not parts:
            return np.zeros((0, 4), dtype=np.int64)
        for p in parts:
            if p.ndim != 2 or p.shape[1] != 4:
                raise ValueError(f"each split must be an [n, 4] quadruple array, got shape {p.shape}")
        quads = np.concatenate(parts, axis=0)
    else:
        quads = np.asarray(all_quads)
    if quads.ndim != 2 or quads.shape[1] != 4:
        raise ValueError(f"quadruples must have shape [n, 4] (s, r, o, t), got {quads.shape}")
    if quads.size and not np.issubdtype(quads.dtype, np.integer):
        raise TypeError(f"quadruples must be integers, got dtype {quads.dtype}")
    return quads.astype(np.int64, copy=False)


def build_filter(all_quads, num_relations: int) -> FilterIndex:
    """Build the time-aware filter index from quadruples of all splits.

    Args:
        all_quads: int ``[n, 4]`` forward quadruples ``(s, r, o, t)`` with ``0 <= r < R`` (e.g.
            ``Dataset.all_quadruples()``), or a list of such arrays (one per split).
        num_relations: ``R``; each quadruple also contributes its inverse ``(o, r + R, s, t)``.
    """
    num_relations = int(num_relations)
    if num_relations <= 0:
        raise ValueError(f"num_relations must be positive, got {num_relations}")
    quads = _as_quads(all_quads)
    if quads.size:
        if quads.min() < 0:
            raise ValueError("quadruples contain negative ids or times")
        if quads[:, 1].max() >= num_relations:
            raise ValueError(
                f"relation id {int(quads[:, 1].max())} >= num_relations={num_relations}; pass forward "
                "quadruples only (inverse relations are added here)"
            )
    s, r, o, t = quads[:, 0], quads[:, 1], quads[:, 2], quads[:, 3]
    subj = np.concatenate([s, o])
    rel = np.concatenate([r, r + num_relations])
    obj = np.concatenate([o, s])
    tim = np.concatenate([t, t])
    max_subject = int(subj.max()) if subj.size else -1
    max_time = int(tim.max()) if tim.size else -1
    if subj.size and (max_subject + 1) * (2 * num_relations) * (max_time + 1) >= 2**62:
        raise ValueError("id/time ranges too large for the int64 key encoding")
    index = FilterIndex(
        keys=np.zeros(0, np.int64),
        offsets=np.zeros(1, np.int64),
        answers=np.zeros(0, ID_DTYPE),
        num_relations=num_relations,
        max_subject=max_subject,
        max_time=max_time,
    )
    if not subj.size:
        return index
    key, _ = index.encode(subj, rel, tim)
    order = np.lexsort((obj, key))
    key, obj = key[order], obj[order]
    keep = np.ones(key.shape[0], dtype=bool)
    keep[1:] = (key[1:] != key[:-1]) | (obj[1:] != obj[:-1])  # drop duplicate (key, answer) pairs
    key, obj = key[keep], obj[keep]
    new_key = np.ones(key.shape[0], dtype=bool)
    new_key[1:] = key[1:] != key[:-1]
    starts = np.flatnonzero(new_key)
    offsets = np.append(starts, key.shape[0]).astype(np.int64)
    return FilterIndex(
        keys=key[starts].copy(),
        offsets=offsets,
        answers=obj.astype(ID_DTYPE),
        num_relations=num_relations,
        max_subject=max_subject,
        max_time=max_time,
    )


def context_filter(ctx) -> FilterIndex:
    """The time-aware filter of a run context's dataset (all splits; :class:`raptor.runs.context.Context`),
    built once and kept in ``ctx.cache``."""
    index = ctx.cache.get("filter")
    if index is None:
        index = ctx.cache["filter"] = build_filter(ctx.dataset.all_quadruples(), ctx.dataset.num_relations)
    return index


# --------------------------------------------------------------------------------------------
# Filtered ranks
# --------------------------------------------------------------------------------------------


def _check_rank_inputs(cand_entity, cand_score, gold, query_keys, num_entities):
    cand_entity = np.asarray(cand_entity)
    cand_score = np.asarray(cand_score)
    gold = np.asarray(gold)
    query_keys = np.asarray(query_keys)
    if cand_entity.ndim != 2:
        raise ValueError(f"cand_entity must be 2-D [Q, C], got shape {cand_entity.shape}")
    if cand_score.shape != cand_entity.shape:
        raise ValueError(f"cand_score shape {cand_score.shape} != cand_entity shape {cand_entity.shape}")
    q = cand_entity.shape[0]
    if gold.shape != (q,):
        raise ValueError(f"gold must have shape ({q},), got {gold.shape}")
    if query_keys.shape != (q, 3):
        raise ValueError(f"query_keys must have shape ({q}, 3) (subject, relation, time), got {query_keys.shape}")
    if cand_entity.size and not np.issubdtype(cand_entity.dtype, np.integer):
        raise TypeError(f"cand_entity must be integer, got {cand_entity.dtype}")
    if gold.size and not np.issubdtype(gold.dtype, np.integer):
        raise TypeError(f"gold must be integer, got {gold.dtype}")
    if query_keys.size and not np.issubdtype(query_keys.dtype, np.integer):
        raise TypeError(f"query_keys must be integer, got {query_keys.dtype}")
    if cand_score.size and not np.issubdtype(cand_score.dtype, np.floating):
        raise TypeError(f"cand_score must be floating point, got {cand_score.dtype}")
    num_entities = int(num_entities)
    if num_entities <= 0:
        raise ValueError(f"num_entities must be positive, got {num_entities}")
    if cand_entity.size:
        lo, hi = int(cand_entity.min()), int(cand_entity.max())
        if lo < -1 or hi >= num_entities:
            raise ValueError(f"cand_entity ids must lie in [-1, {num_entities}) (-1 = padding), got [{lo}, {hi}]")
    if gold.size and (gold.min() < 0 or gold.max() >= num_entities):
        raise ValueError(f"gold ids must lie in [0, {num_entities})")
    if q and (query_keys[:, 0].min() < 0 or query_keys[:, 0].max() >= num_entities):
        raise ValueError(f"query subjects must lie in [0, {num_entities})")
    if q and query_keys[:, 2].min() < 0:
        raise ValueError("query times must be >= 0")
    return cand_entity, cand_score, gold.astype(np.int64), query_keys, num_entities


def filtered_ranks(
    cand_entity,
    cand_score,
    gold,
    query_keys,
    filter_index: FilterIndex,
    num_entities: int,
    *,
    chunk_size: int | None = None,
) -> np.ndarray:
    """Time-aware filtered realistic rank of each gold answer among all ``num_entities`` entities.

    Args:
        cand_entity: int ``[Q, C]`` candidate entities per query, ``-1`` = padding. Each entity may
            appear at most once per row (``ValueError`` otherwise).
        cand_score: float ``[Q, C]`` scores (higher is better); padding slots are ignored; ``-inf``
            means unreached; NaN is an error.
        gold: int ``[Q]`` the answer of each query.
        query_keys: int ``[Q, 3]`` ``(subject, relation, time)`` of each query (inverse queries use
            ``relation + R``).
        filter_index: from :func:`build_filter` (all splits).
        num_entities: ``E``; the ranking is over entities ``0 .. E-1``.
        chunk_size: queries per chunk (default: sized so the dense ``[chunk, E+1]`` buffers stay
            ~8 MiB).

    Returns:
        float64 ``[Q]``: ``1 + #greater + #equal / 2`` over non-filtered entities other than the
        gold, where every non-candidate entity scores ``-inf``.
    """
    cand_entity, cand_score, gold, query_keys, E = _check_rank_inputs(
        cand_entity, cand_score, gold, query_keys, num_entities
    )
    if filter_index.max_answer >= E:
        raise ValueError(f"filter index holds entity {filter_index.max_answer} >= num_entities={E}")
    Q, C = cand_entity.shape
    ranks = np.empty(Q, dtype=np.float64)
    if Q == 0:
        return ranks
    rel = query_keys[:, 1]
    if rel.min() < 0 or rel.max() >= 2 * filter_index.num_relations:
        raise ValueError(
            f"query relations must lie in [0, 2R={2 * filter_index.num_relations}) (inverse = r + R), "
            f"got [{int(rel.min())}, {int(rel.max())}]"
        )
    start_all, end_all = filter_index.lookup(query_keys[:, 0], query_keys[:, 1], query_keys[:, 2])
    if chunk_size is None:
        chunk_size = max(1, _CHUNK_BYTES // (5 * (E + 1)))
    chunk_size = int(max(1, min(chunk_size, Q)))
    # Dense per-chunk buffers over all entities (+1 column for padding): the filter mask and the
    # column each entity was scattered to (duplicate detection). Only touched positions are
    # reset, so the buffers are allocated once.
    mask = np.zeros((chunk_size, E + 1), dtype=bool)
    col_of = np.zeros((chunk_size, E + 1), dtype=np.int16 if C < 2**15 else np.int32)
    cols = np.broadcast_to(np.arange(C, dtype=col_of.dtype), (chunk_size, C))
    answers = filter_index.answers
    for lo in range(0, Q, chunk_size):
        hi = min(lo + chunk_size, Q)
        n = hi - lo
        ent = cand_entity[lo:hi]
        sc = cand_score[lo:hi]
        g = gold[lo:hi]
        rows = np.arange(n)
        is_cand = ent >= 0
        if np.isnan(sc).any() and (np.isnan(sc) & is_cand).any():
            qi = int(np.argwhere(np.isnan(sc) & is_cand)[0, 0])
            raise ValueError(f"cand_score is NaN for a non-padding candidate in query row {lo + qi}")
        ent_c = np.where(is_cand, ent, E)  # padding -> the spare column E

        # duplicate check: scatter each slot's column, read back; an entity written twice reads
        # back the later column at its earlier slot.
        col_of[rows[:, None], ent_c] = cols[:n]
        dup = (col_of[rows[:, None], ent_c] != cols[:n]) & is_cand
        if dup.any():
            qi, ci = np.argwhere(dup)[0]
            raise ValueError(
                f"duplicate candidate entity {int(ent[qi, ci])} in query row {lo + int(qi)}; "
                "candidate lists must be unique per row (merge duplicates, e.g. keep the max score)"
            )

        # filter mask: the query's true answers at its timestamp, minus the gold
        st, en = start_all[lo:hi], end_all[lo:hi]
        cnt = en - st
        f_rows = np.repeat(rows, cnt)
        f_idx = np.repeat(st - np.concatenate(([0], np.cumsum(cnt)[:-1])), cnt) + np.arange(int(cnt.sum()))
        f_ent = answers[f_idx]
        mask[f_rows, f_ent] = True
        gold_in_filter = mask[rows, g]
        mask[rows, g] = False
        filtered = mask[rows[:, None], ent_c]
        mask[f_rows, f_ent] = False
        n_filtered = cnt - gold_in_filter  # filtered entities other than the gold

        is_gold = ent == g[:, None]
        has_gold = is_gold.any(axis=1)
        gold_col = is_gold.argmax(axis=1) if C else np.zeros(n, dtype=np.intp)
        gold_score = np.where(has_gold, sc[rows, gold_col], -np.inf) if C else np.full(n, -np.inf)
        other = is_cand & ~filtered & ~is_gold
        greater = np.count_nonzero(other & (sc > gold_score[:, None]), axis=1)
        equal = np.count_nonzero(other & (sc == gold_score[:, None]), axis=1)
        # an unreached gold (score -inf) ties with every non-filtered entity outside the
        # finite-score candidates: candidates scored -inf and all non-candidates alike.
        unreached = gold_score == -np.inf
        equal = np.where(unreached, E - 1 - n_filtered - greater, equal)
        ranks[lo:hi] = 1.0 + greater + 0.5 * equal
    return ranks


class DeviceFilter:
    """A :class:`FilterIndex` as int64 tensors on one device, for :func:`filtered_ranks_on_device`.

    ``width`` is the largest answer set of any key (read once, here): the filter answers of a batch
    of queries are gathered into a fixed ``[Q, width]`` block, so no shape depends on the batch's
    data and nothing is read back to the host."""

    def __init__(self, index: FilterIndex, device):
        import torch

        self.index = index
        self.device = torch.device(device)
        self.keys = torch.from_numpy(np.ascontiguousarray(index.keys, dtype=np.int64)).to(self.device)
        self.offsets = torch.from_numpy(np.ascontiguousarray(index.offsets, dtype=np.int64)).to(self.device)
        self.answers = torch.from_numpy(index.answers.astype(np.int64)).to(self.device)
        self.width = int(np.diff(index.offsets).max(initial=0))

    @staticmethod
    def of(index: FilterIndex, device) -> "DeviceFilter":
        """The device copy of ``index``, built once per device and kept on the index."""
        import torch

        cache = index.__dict__.setdefault("_device_copies", {})  # a frozen dataclass: no attribute set
        key = str(torch.device(device))
        if key not in cache:
            cache[key] = DeviceFilter(index, device)
        return cache[key]


def filtered_ranks_on_device(cand_entity, cand_score, gold, query_keys, dfilter: DeviceFilter, num_entities: int):
    """:func:`filtered_ranks` as tensor operations on the device of ``dfilter``: the same ranks.

    Args (tensors on that device):
        cand_entity: int64 ``[Q, C]``, ``-1`` = padding, unique per row (not checked here: the device
            beam search's :func:`raptor.agents.beam.aggregate_scores_on_device` merges duplicates).
        cand_score: float ``[Q, C]``, ``-inf`` = unreached; no NaN (not checked).
        gold: int64 ``[Q]``; query_keys: int64 ``[Q, 3]`` ``(subject, relation, time)``.

    Returns float64 ``[Q]``: ``1 + #greater + #equal / 2`` as :func:`filtered_ranks`. The filter answers
    of each query are sorted (a :class:`FilterIndex` keeps them so, padded here with ``E``), so whether a
    candidate is filtered is a batched ``searchsorted`` over ``[Q, width]``.
    """
    import torch

    index, E = dfilter.index, int(num_entities)
    s, r, t = query_keys[:, 0], query_keys[:, 1], query_keys[:, 2]
    n_rel = 2 * index.num_relations
    ok = (s >= 0) & (s <= index.max_subject) & (r >= 0) & (r < n_rel) & (t >= 0) & (t <= index.max_time)
    key = (torch.where(ok, s, 0) * n_rel + torch.where(ok, r, 0)) * (index.max_time + 1) + torch.where(ok, t, 0)
    n_keys = dfilter.keys.shape[0]
    Q = cand_entity.shape[0]
    if n_keys:
        pos = torch.searchsorted(dfilter.keys, key).clamp(max=n_keys - 1)
        found = ok & (dfilter.keys[pos] == key)
        start = torch.where(found, dfilter.offsets[pos], 0)
        count = torch.where(found, dfilter.offsets[pos + 1] - dfilter.offsets[pos], 0)
    else:
        start = count = torch.zeros(Q, dtype=torch.int64, device=cand_entity.device)
    F = max(dfilter.width, 1)
    slot = torch.arange(F, device=cand_entity.device)
    inside = slot[None, :] < count[:, None]
    filt = torch.where(inside, dfilter.answers[(start[:, None] + slot[None, :]).clamp(max=max(len(dfilter.answers) - 1, 0))]
                       if len(dfilter.answers) else E, E)  # [Q, F], sorted, padded with E
    gold_in_filter = (filt == gold[:, None]).any(1)
    n_filtered = count - gold_in_filter.to(torch.int64)  # filtered entities other than the gold

    is_cand = cand_entity >= 0
    at = torch.searchsorted(filt, cand_entity.clamp(min=0).contiguous()).clamp(max=F - 1)
    filtered = filt.gather(1, at) == cand_entity
    is_gold = cand_entity == gold[:, None]
    neg_inf = torch.tensor(-torch.inf, dtype=cand_score.dtype, device=cand_score.device)
    gold_score = torch.where(is_gold, cand_score, neg_inf).amax(1, keepdim=True) if cand_entity.shape[1] else \
        neg_inf.expand(Q, 1)
    other = is_cand & ~filtered & ~is_gold
    greater = (other & (cand_score > gold_score)).sum(1)
    equal = (other & (cand_score == gold_score)).sum(1)
    # an unreached gold ties with every non-filtered entity outside the finite-score candidates
    unreached = torch.isneginf(gold_score[:, 0])
    equal = torch.where(unreached, E - 1 - n_filtered - greater, equal)
    return 1.0 + greater.to(torch.float64) + 0.5 * equal.to(torch.float64)


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------


def _check_ranks(ranks) -> np.ndarray:
    ranks = np.asarray(ranks, dtype=np.float64)
    if ranks.ndim != 1:
        raise ValueError(f"ranks must be 1-D, got shape {ranks.shape}")
    if ranks.size == 0:
        raise ValueError("no ranks: metrics of an empty query set are undefined")
    if not np.isfinite(ranks).all() or ranks.min() < 1.0:
        raise ValueError("ranks must be finite and >= 1")
    return ranks


def metrics_from_ranks(ranks) -> dict:
    """MRR and Hits@{1,3,10} (fractions in [0, 1]) plus ``count``.

    ``hits@k`` is the fraction of queries with ``rank <= k`` on the realistic (possibly fractional)
    rank: a gold tied with ``m`` others just below ``k`` can fall out (e.g. rank 1.5 is not a
    Hits@1). This is the deterministic tie convention, not the expected Hits@k under random
    tie-breaking.
    """
    ranks = _check_ranks(ranks)
    out = {"mrr": float(np.mean(1.0 / ranks))}
    for k in HITS_AT:
        out[f"hits@{k}"] = float(np.mean(ranks <= k))
    out["count"] = int(ranks.size)
    return out


def evaluation_metrics(ranks, query_relation, num_relations: int) -> dict:
    """The ``metrics.json`` content: headline metrics over all queries, query counts and per-direction
    metrics (``forward``: relation < R, ``inverse``: relation >= R; a direction with no queries is
    omitted)."""
    ranks = _check_ranks(ranks)
    rel = np.asarray(query_relation)
    if rel.shape != ranks.shape:
        raise ValueError(f"query_relation shape {rel.shape} != ranks shape {ranks.shape}")
    if rel.min() < 0 or rel.max() >= 2 * num_relations:
        raise ValueError(f"query relations must lie in [0, 2R={2 * num_relations})")
    fwd = rel < num_relations
    out = metrics_from_ranks(ranks)
    del out["count"]
    out["queries"] = {"total": int(ranks.size), "forward": int(fwd.sum()), "inverse": int((~fwd).sum())}
    for name, sel in (("forward", fwd), ("inverse", ~fwd)):
        if sel.any():
            m = metrics_from_ranks(ranks[sel])
            del m["count"]
            out[name] = m
    return out


def write_metrics(path: str | Path, metrics: Mapping, *, queries: Mapping | None = None) -> None:
    """Write ``metrics.json`` atomically.

    ``metrics`` must hold ``mrr`` and ``hits@{1,3,10}`` (fractions) and the query counts, either as
    ``metrics["queries"] = {"total", "forward", "inverse"}`` (as from :func:`evaluation_metrics`)
    or passed as ``queries=``. Other keys are written as they are.
    """
    out = dict(metrics)
    if queries is not None:
        out["queries"] = dict(queries)
    out.pop("count", None)
    missing = [k for k in METRIC_KEYS if k not in out]
    if missing:
        raise ValueError(f"metrics lack {missing}")
    for k in METRIC_KEYS:
        v = float(out[k])
        if not (math.isfinite(v) and 0.0 <= v <= 1.0):
            raise ValueError(f"metric {k}={out[k]!r} is not a fraction in [0, 1]")
        out[k] = v
    q = out.get("queries")
    if not isinstance(q, Mapping) or not {"total", "forward", "inverse"} <= set(q):
        raise ValueError("metrics need query counts {'total', 'forward', 'inverse'} (metrics['queries'] or queries=)")
    q = {k: int(v) for k, v in q.items()}
    if q["total"] != q["forward"] + q["inverse"]:
        raise ValueError(f"query counts inconsistent: {q}")
    out["queries"] = q
    atomic_write_json(path, out)


def read_metrics(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


# --------------------------------------------------------------------------------------------
# Predictions
# --------------------------------------------------------------------------------------------


def _ragged_from(value, q: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int32 [q+1], values int32) from a -1-padded 2-D array or a sequence of sequences."""
    if isinstance(value, np.ndarray) and value.ndim == 2:
        if value.shape[0] != q:
            raise ValueError(f"{name} has {value.shape[0]} rows, expected {q}")
        valid = value >= 0
        if value.shape[1] > 1 and (valid[:, 1:] & ~valid[:, :-1]).any():
            raise ValueError(f"{name}: padding (-1) must be trailing")
        lengths = valid.sum(axis=1)
        values = value[valid]
    else:
        seqs = list(value)
        if len(seqs) != q:
            raise ValueError(f"{name} has {len(seqs)} rows, expected {q}")
        lengths = np.array([len(x) for x in seqs], dtype=np.int64)
        values = np.concatenate([np.asarray(x, dtype=np.int64).reshape(-1) for x in seqs]) if q else np.zeros(0)
    offsets = np.zeros(q + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets.astype(np.int32), np.asarray(values).astype(ID_DTYPE)


def sorted_candidates(cand_entity, cand_score) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reached candidates per row by descending score (ties: ascending entity id), as CSR.

    Padding (-1) and ``-inf``-scored slots are dropped. Returns ``(offsets int64 [Q+1], entity
    int32, score float64)``.
    """
    ent = np.asarray(cand_entity)
    sc = np.asarray(cand_score, dtype=np.float64)
    reached = (ent >= 0) & (sc > -np.inf)
    neg = np.where(reached, -sc, np.inf)
    tie = np.where(reached, ent, np.iinfo(np.int64).max)
    order = np.lexsort((tie, neg), axis=-1) if ent.shape[1] else np.zeros(ent.shape, dtype=np.intp)
    ent_s = np.take_along_axis(ent, order, axis=1)
    sc_s = np.take_along_axis(sc, order, axis=1)
    keep = np.take_along_axis(reached, order, axis=1)
    offsets = np.zeros(ent.shape[0] + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=offsets[1:])
    return offsets, ent_s[keep].astype(ID_DTYPE), sc_s[keep]


def predictions_table(
    queries,
    cand_entity,
    cand_score,
    rank,
    best_path: Mapping | None = None,
    names: tuple[Sequence[str], Sequence[str]] | None = None,
) -> pa.Table:
    """The table of ``predictions.parquet`` (:func:`write_predictions`), one row per query of the int
    ``[Q, 4]`` ``queries`` ``(subject, relation, object, time)``.

    Columns: int32 ``subject``, ``relation`` (inverse queries as ``relation + R``), ``object``
    (the gold), ``time``; ``candidates`` list<int32> (every reached entity, by descending score,
    ties by ascending id) and ``scores`` list<float32> aligned with it; float64 ``rank``.
    ``best_path`` (optional) maps ``path_entities``, ``path_relations``, ``path_times`` each to a
    ``[Q, L]`` int array padded with trailing ``-1`` or to a sequence of per-query sequences;
    written as list<int32> columns. ``names`` (optional): ``(entity names by id, relation labels by
    query relation id 0 .. 2R - 1)``, for the columns ``subject_name``, ``relation_name``,
    ``object_name`` and ``top_name`` (the best-scored candidate; null when none was reached), strings
    dictionary-encoded (each name stored once).
    """
    ent = np.asarray(cand_entity)
    sc = np.asarray(cand_score)
    if ent.ndim != 2 or sc.shape != ent.shape:
        raise ValueError(f"cand_entity/cand_score must be 2-D of equal shape, got {ent.shape}, {sc.shape}")
    q = ent.shape[0]
    qs = np.asarray(queries)
    if qs.shape != (q, 4):
        raise ValueError(f"queries (subject, relation, object, time) must have shape ({q}, 4), got {qs.shape}")
    cols = {}
    for i, name in enumerate(("subject", "relation", "object", "time")):
        cols[name] = pa.array(qs[:, i].astype(ID_DTYPE), type=pa.int32())
    rank = np.asarray(rank, dtype=np.float64)
    if rank.shape != (q,):
        raise ValueError(f"rank must have shape ({q},), got {rank.shape}")
    offsets, c_ent, c_sc = sorted_candidates(ent, sc)
    off = pa.array(offsets.astype(np.int32), type=pa.int32())
    cols["candidates"] = pa.ListArray.from_arrays(off, pa.array(c_ent, type=pa.int32()))
    cols["scores"] = pa.ListArray.from_arrays(off, pa.array(c_sc.astype(np.float32), type=pa.float32()))
    cols["rank"] = pa.array(rank, type=pa.float64())
    if best_path is not None:
        unknown = set(best_path) - set(PATH_COLUMNS)
        missing = set(PATH_COLUMNS) - set(best_path)
        if unknown or missing:
            raise ValueError(f"best_path needs exactly {PATH_COLUMNS}; missing {sorted(missing)}, unknown {sorted(unknown)}")
        for name in PATH_COLUMNS:
            p_off, p_val = _ragged_from(best_path[name], q, name)
            cols[name] = pa.ListArray.from_arrays(pa.array(p_off, type=pa.int32()), pa.array(p_val, type=pa.int32()))
    if names is not None:
        cols.update(_name_columns(qs, offsets, c_ent, *names))
    return pa.table(cols).replace_schema_metadata({"format": PREDICTIONS_FORMAT})


def write_predictions(path: str | Path, queries, cand_entity, cand_score, rank, best_path: Mapping | None = None,
                      names: tuple[Sequence[str], Sequence[str]] | None = None) -> None:
    """Write ``predictions.parquet`` atomically: :func:`predictions_table` of the same arguments."""
    table = predictions_table(queries, cand_entity, cand_score, rank, best_path, names)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def _name_columns(queries: np.ndarray, offsets: np.ndarray, candidates: np.ndarray, entity_names: Sequence[str],
                  relation_labels: Sequence[str]) -> dict[str, pa.Array]:
    ents = pa.array(list(entity_names), type=pa.string())
    rels = pa.array(list(relation_labels), type=pa.string())
    for what, ids, table in (("entity", queries[:, [0, 2]], ents), ("relation", queries[:, 1], rels)):
        if ids.size and (ids.min() < 0 or ids.max() >= len(table)):
            raise ValueError(f"a query's {what} id is outside the {len(table)} names given")
    has = np.diff(offsets) > 0
    top = np.where(has, candidates[np.minimum(offsets[:-1], max(len(candidates) - 1, 0))] if len(candidates) else 0, 0)

    def named(ids, table, mask=None) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(np.asarray(ids, dtype=np.int32), mask=mask), table)

    return {"subject_name": named(queries[:, 0], ents), "relation_name": named(queries[:, 1], rels),
            "object_name": named(queries[:, 2], ents), "top_name": named(top, ents, mask=~has)}


@dataclass(frozen=True)
class Predictions:
    """A predictions file in arrays. List columns are CSR: row i is ``values[offsets[i]:offsets[i+1]]``."""

    subject: np.ndarray
    relation: np.ndarray
    object: np.ndarray
    time: np.ndarray
    rank: np.ndarray
    cand_offsets: np.ndarray
    candidates: np.ndarray
    scores: np.ndarray
    paths: dict[str, tuple[np.ndarray, np.ndarray]] | None = None  # name -> (offsets, values)

    def __len__(self) -> int:
        return int(self.subject.shape[0])

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.cand_offsets[i], self.cand_offsets[i + 1]
        return self.candidates[a:b], self.scores[a:b]

    def padded(self) -> tuple[np.ndarray, np.ndarray]:
        """``(cand_entity [Q, Cmax] -1-padded, cand_score [Q, Cmax] float64 -inf-padded)``."""
        lengths = np.diff(self.cand_offsets)
        width = int(lengths.max()) if lengths.size else 0
        q = len(self)
        ent = np.full((q, width), -1, dtype=ID_DTYPE)
        sc = np.full((q, width), -np.inf, dtype=np.float64)
        pos = np.arange(self.candidates.shape[0]) - np.repeat(self.cand_offsets[:-1], lengths)
        rows = np.repeat(np.arange(q), lengths)
        ent[rows, pos] = self.candidates
        sc[rows, pos] = self.scores
        return ent, sc

    def path(self, name: str, i: int) -> np.ndarray:
        if self.paths is None:
            raise KeyError("this predictions file has no best-path columns")
        off, val = self.paths[name]
        return val[off[i] : off[i + 1]]


def _list_column(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    col = table.column(name).combine_chunks()
    if isinstance(col, pa.ChunkedArray):  # no chunks at all
        col = pa.array([], type=col.type)
    offsets = np.asarray(col.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    values = col.flatten().to_numpy(zero_copy_only=False)
    return offsets - offsets[0], values


def read_predictions(path: str | Path) -> Predictions:
    table = pq.read_table(path)
    names = set(table.column_names)
    required = {"subject", "relation", "object", "time", "candidates", "scores", "rank"}
    if not required <= names:
        raise ValueError(f"{path} is not a predictions file: missing {sorted(required - names)}")

    def col(n, dtype):
        return table.column(n).to_numpy().astype(dtype)

    off, cands = _list_column(table, "candidates")
    off_s, scores = _list_column(table, "scores")
    if not np.array_equal(off, off_s):
        raise ValueError(f"{path}: candidates and scores are not aligned")
    paths = None
    if set(PATH_COLUMNS) <= names:
        paths = {}
        for n in PATH_COLUMNS:
            o, v = _list_column(table, n)
            paths[n] = (o, v.astype(ID_DTYPE))
    return Predictions(
        subject=col("subject", ID_DTYPE),
        relation=col("relation", ID_DTYPE),
        object=col("object", ID_DTYPE),
        time=col("time", ID_DTYPE),
        rank=col("rank", np.float64),
        cand_offsets=off,
        candidates=cands.astype(ID_DTYPE),
        scores=scores.astype(np.float32),
        paths=paths,
    )


__all__ = [
    "HITS_AT",
    "METRIC_KEYS",
    "FilterIndex",
    "Predictions",
    "build_filter",
    "evaluation_metrics",
    "filtered_ranks",
    "metrics_from_ranks",
    "read_metrics",
    "read_predictions",
    "sorted_candidates",
    "write_metrics",
    "write_predictions",
]
