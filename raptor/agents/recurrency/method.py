"""The recurrency baseline (Gastinger et al., IJCAI 2024, "History repeats itself: a baseline for
temporal knowledge graph forecasting"): training-free scores for ``(s, r, ?, t)`` queries, as pure
vectorised NumPy (no loop over queries; only over fixed-size chunks of queries to bound memory).

Reference code: https://github.com/nec-research/recurrency_baseline_tkg (commit 5f19639, the
2025 "Update 1 + 2" version whose ICEWS14 combined score is MRR 37.4 / Hits@10 51.5). Paths below
are in that repository.

Formulas (``H_t`` = the history before the query time: every fact ``(s', r', o', t')`` of any split
with ``t' < t`` -- the single-step setting, ``window = 0``, ``src/test.py:25`` and
``src/utils/utils.py:83-85``; with ``window = n > 0`` also ``t' >= t - n``, ``utils.py:78-82``. The
history holds every fact in both directions: ``(o, r + R, s, t)`` for each ``(s, r, o, t)``,
``src/data/data_handler.py:39-44``, ``src/test.py:62-66``, which is how subject queries are answered):

* strict recurrency (``src/utils/baselinepsi.py:48-66``, decay ``src/utils/utils.py:42-54``)::

      psi(o | s, r, t) = sum_{(s, r, o, t') in H_t} 2 ** (lambda_r * (t' - t))  /  D(r, t)
      D(r, t) = max(1e-15, sum_{tau = a}^{b - 1} 2 ** (lambda_r * (tau - t)))

  with ``a`` / ``b`` the smallest / largest timestamp of the relation-``r`` facts in ``H_t``
  (``baselinepsi.py:31-45``, ``np.arange(min_ts, max_ts)`` so ``b`` itself is excluded;
  the ``1e-15`` floor is ``src/utils/apply_baselines.py:124``; the reference applies it only on the
  first timestamp of a worker's chunk and divides by an unfloored 0 later, giving ``inf``; here the
  floor is applied always). Every occurrence counts (repeated facts add up). Summed over
  occurrences, not only the last one.

* relaxed recurrency (``src/utils/baselinexi.py:13-40``, used at ``apply_baselines.py:168-170``):
  the object distribution of the query relation, independent of the subject::

      xi(o | r, t) = #{(., r, o, t') in H_t} / #{(., r, ., t') in H_t}

* combination (``src/utils/apply_baselines.py:178``)::

      score(o) = alpha_r * psi(o) + (1 - alpha_r) * xi(o)

  (the reference multiplies by 1000, a constant factor that changes no rank; left out here). An
  entity with score 0 is not a candidate ("unreached" in ``raptor.evaluation.ranking``'s terms).

Parameter selection (``src/parameter_selection.py``, run per relation by ``run.sh`` step A).1):
for each of the ``2R`` relations (inverse relations have their own parameters) with validation
queries, on the validation queries of that relation with history train + valid before ``t``
(``parameter_selection.py:78-80,130,161``):

1. ``lambda_r`` = the first grid value with the best validation MRR of ``psi`` alone (alpha = 1,
   xi off; ``parameter_selection.py:140-183``; strict ``>`` so the earliest grid value wins ties);
2. ``alpha_r`` = the first grid value with the best validation MRR of the combination with
   ``lambda_r`` (``parameter_selection.py:185-230``);
3. relations without validation queries keep the defaults ``lambda = 1.0001`` (last grid value) and
   ``alpha = 0.99999`` (``parameter_selection.py:95-96,118,122``); a selected ``alpha = 1`` is used as
   ``0.99999`` so that xi still breaks psi's ties (``src/test.py:122-123``).

The validation MRR here is the time-aware filtered MRR with ``raptor.evaluation.ranking``'s tie rule
(realistic: ``1 + #greater + #equal / 2``); the reference ranks ties by the order of an unstable
``torch.sort`` (``src/utils/utils.py:270-282``), which is implementation-defined.

Deviations (all documented above): scores are not multiplied by 1000; ``D`` is always floored at
``1e-15``; psi is computed for every relation (the reference only for relations that occur in
train/valid, ``src/write_baseline_rules.py:18``, so a relation seen only in test gets xi alone there);
ties are ranked realistically.

Times must be integer steps (``raptor ingest``'s day indices); the reference works on steps too
(``data_handler.py:22-27`` divides by the spacing of the first two timestamps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from raptor.config import RecurrencyConfig
from raptor.common.io import atomic_path
from raptor.evaluation.ranking import FilterIndex, build_filter

#: Format tag stored in a saved model.
MODEL_FORMAT = "raptor.agents.recurrency.method/v1"

# Working-set budget (bytes) of one dense [chunk, E] float64 score buffer.
_CHUNK_BYTES = 32 << 20


# --------------------------------------------------------------------------------------------
# Configuration and model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecurrencyModel:
    """Selected parameters, one per relation id ``0 .. 2R-1`` (inverse relations ``r + R``)."""

    lambdas: np.ndarray  # float64 [2R] decay of psi
    alphas: np.ndarray  # float64 [2R] weight of psi (as used for scoring: 1 -> alpha_one_as)
    num_entities: int
    num_relations: int  # R (forward relations)
    window: int = 0
    min_denominator: float = 1e-15
    #: Selection record (NaN where not selected): validation MRR per relation and grid value.
    lambda_grid: np.ndarray = field(default_factory=lambda: np.zeros(0))
    alpha_grid: np.ndarray = field(default_factory=lambda: np.zeros(0))
    valid_mrr_lambda: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # [2R, n_lambda]
    valid_mrr_alpha: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # [2R, n_alpha]
    valid_queries: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # [2R]

    def __post_init__(self) -> None:
        n = 2 * int(self.num_relations)
        if int(self.num_relations) <= 0 or int(self.num_entities) <= 0:
            raise ValueError(f"num_relations and num_entities must be positive, got {self.num_relations}, {self.num_entities}")
        lam = np.asarray(self.lambdas, dtype=np.float64)
        alp = np.asarray(self.alphas, dtype=np.float64)
        if lam.shape != (n,) or alp.shape != (n,):
            raise ValueError(f"lambdas and alphas must have shape ({n},) (2R), got {lam.shape} and {alp.shape}")
        if not np.isfinite(lam).all() or lam.min() < 0:
            raise ValueError("lambdas must be finite and >= 0")
        if not np.isfinite(alp).all() or alp.min() < 0 or alp.max() > 1:
            raise ValueError("alphas must lie in [0, 1]")
        if int(self.window) < 0:
            raise ValueError(f"window must be >= 0, got {self.window}")
        object.__setattr__(self, "lambdas", lam)
        object.__setattr__(self, "alphas", alp)

    @classmethod
    def constant(cls, num_entities: int, num_relations: int, lam: float, alpha: float, *, window: int = 0) -> "RecurrencyModel":
        """The same ``(lambda, alpha)`` for every relation (no selection)."""
        n = 2 * int(num_relations)
        return cls(np.full(n, float(lam)), np.full(n, float(alpha)), int(num_entities), int(num_relations), int(window))


def save_model(model: RecurrencyModel, path: str | Path) -> None:
    """Write ``model`` to ``path`` (``.npz``) atomically."""
    arrays = {
        "format": np.array(MODEL_FORMAT),
        "lambdas": model.lambdas,
        "alphas": model.alphas,
        "num_entities": np.int64(model.num_entities),
        "num_relations": np.int64(model.num_relations),
        "window": np.int64(model.window),
        "min_denominator": np.float64(model.min_denominator),
        "lambda_grid": np.asarray(model.lambda_grid, np.float64),
        "alpha_grid": np.asarray(model.alpha_grid, np.float64),
        "valid_mrr_lambda": np.asarray(model.valid_mrr_lambda, np.float64),
        "valid_mrr_alpha": np.asarray(model.valid_mrr_alpha, np.float64),
        "valid_queries": np.asarray(model.valid_queries, np.int64),
    }
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:  # a file object: np.savez would append ".npz" to a path
            np.savez(fh, **arrays)


def load_model(path: str | Path) -> RecurrencyModel:
    """Read a model written by :func:`save_model`."""
    with np.load(path, allow_pickle=False) as z:
        if "format" not in z.files or str(z["format"]) != MODEL_FORMAT:
            raise ValueError(f"{path} is not a recurrency model ({MODEL_FORMAT})")
        return RecurrencyModel(
            lambdas=z["lambdas"],
            alphas=z["alphas"],
            num_entities=int(z["num_entities"]),
            num_relations=int(z["num_relations"]),
            window=int(z["window"]),
            min_denominator=float(z["min_denominator"]),
            lambda_grid=z["lambda_grid"],
            alpha_grid=z["alpha_grid"],
            valid_mrr_lambda=z["valid_mrr_lambda"],
            valid_mrr_alpha=z["valid_mrr_alpha"],
            valid_queries=z["valid_queries"],
        )


# --------------------------------------------------------------------------------------------
# History index
# --------------------------------------------------------------------------------------------


def _check_quads(quads, name: str, *, num_entities: int, max_relation: int, what: str) -> np.ndarray:
    q = np.asarray(quads)
    if q.ndim != 2 or q.shape[1] != 4:
        raise ValueError(f"{name} must have shape [n, 4] (s, r, o, t), got {q.shape}")
    if q.size and not np.issubdtype(q.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {q.dtype}")
    q = q.astype(np.int64, copy=False)
    if q.size:
        ent = q[:, [0, 2]]
        if ent.min() < 0 or ent.max() >= num_entities:
            raise ValueError(f"{name}: entity ids must lie in [0, {num_entities}), got [{int(ent.min())}, {int(ent.max())}]")
        if q[:, 1].min() < 0 or q[:, 1].max() >= max_relation:
            raise ValueError(
                f"{name}: relation ids must lie in [0, {max_relation}) ({what}), got [{int(q[:, 1].min())}, {int(q[:, 1].max())}]"
            )
        if q[:, 3].min() < 0:
            raise ValueError(f"{name}: times must be >= 0, got {int(q[:, 3].min())}")
    return q


@dataclass(frozen=True)
class RecurrencyHistory:
    """Facts (both directions) indexed for the baseline's look-ups. Build with :func:`build_history`.

    * ``sr_*``: facts sorted by ``(s, r, o, t)``; ``sr_key = s * 2R + r``.
    * ``rt_*``: facts sorted by ``(r, t)``; ``rt_key = r * T + t`` (``T = max_time + 2``).
    * ``ro_*``: facts sorted by ``(r, o, t)``; ``ro_key = g * T + t`` with ``g`` the index of the
      ``(r, o)`` pair in ``pair_r``/``pair_o`` (sorted, unique); ``rel_ptr`` [2R + 1] is the CSR of
      the pairs of each relation.
    """

    num_entities: int
    num_relations: int
    time_span: int  # T
    sr_key: np.ndarray
    sr_obj: np.ndarray
    sr_time: np.ndarray
    rt_key: np.ndarray
    rt_time: np.ndarray
    ro_key: np.ndarray
    pair_o: np.ndarray
    rel_ptr: np.ndarray

    @property
    def num_facts(self) -> int:
        """Facts held, both directions counted (twice the forward facts)."""
        return int(self.sr_key.shape[0])


def build_history(quads, num_entities: int, num_relations: int) -> RecurrencyHistory:
    """Index forward quadruples ``(s, r, o, t)`` (``r < R``, every split that may serve as history:
    only facts before each query's time are ever used) together with their inverses."""
    E, R = int(num_entities), int(num_relations)
    if E <= 0 or R <= 0:
        raise ValueError(f"num_entities and num_relations must be positive, got {num_entities}, {num_relations}")
    if isinstance(quads, (list, tuple)):
        quads = np.concatenate([np.asarray(x).reshape(-1, 4) for x in quads], axis=0) if quads else np.zeros((0, 4), np.int64)
    q = _check_quads(quads, "history quadruples", num_entities=E, max_relation=R, what="forward relations only; inverses are added here")
    s = np.concatenate([q[:, 0], q[:, 2]])
    r = np.concatenate([q[:, 1], q[:, 1] + R])
    o = np.concatenate([q[:, 2], q[:, 0]])
    t = np.concatenate([q[:, 3], q[:, 3]])
    T = int(t.max()) + 2 if t.size else 2
    n_rel = 2 * R
    if E * n_rel * T >= 2**62:
        raise ValueError("id/time ranges too large for the int64 key encoding")

    order = np.lexsort((t, o, r, s))
    sr_key = (s * n_rel + r)[order]
    sr_obj = o[order]
    sr_time = t[order]

    order = np.lexsort((t, r))
    rt_key = (r * T + t)[order]
    rt_time = t[order]

    order = np.lexsort((t, o, r))
    r_s, o_s, t_s = r[order], o[order], t[order]
    new_pair = np.ones(r_s.shape[0], dtype=bool)
    new_pair[1:] = (r_s[1:] != r_s[:-1]) | (o_s[1:] != o_s[:-1])
    pair_id = np.cumsum(new_pair) - 1
    pair_r, pair_o = r_s[new_pair], o_s[new_pair]
    ro_key = pair_id * T + t_s
    rel_ptr = np.zeros(n_rel + 1, dtype=np.int64)
    np.cumsum(np.bincount(pair_r, minlength=n_rel), out=rel_ptr[1:])
    return RecurrencyHistory(E, R, T, sr_key, sr_obj, sr_time, rt_key, rt_time, ro_key, pair_o, rel_ptr)


def _as_history(history, num_entities: int, num_relations: int) -> RecurrencyHistory:
    if isinstance(history, RecurrencyHistory):
        if history.num_entities != num_entities or history.num_relations != num_relations:
            raise ValueError(
                f"history was built for {history.num_entities} entities / {history.num_relations} relations, "
                f"the model has {num_entities} / {num_relations}"
            )
        return history
    return build_history(history, num_entities, num_relations)


def _expand(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For segments ``[starts[i], ends[i])``: ``(row, index)`` of every element, rows ascending."""
    cnt = np.maximum(ends - starts, 0)
    total = int(cnt.sum())
    rows = np.repeat(np.arange(starts.shape[0]), cnt)
    first = np.cumsum(cnt) - cnt
    idx = np.arange(total, dtype=np.int64) - np.repeat(first - starts, cnt)
    return rows, idx


# --------------------------------------------------------------------------------------------
# Per-query parts (independent of lambda and alpha)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Parts:
    """Everything the scores of a block of queries need, for any (lambda, alpha).

    psi: the history occurrences ``(s, r, o, t' < t)`` of each query, grouped by ``(query, o)``:
    ``occ_dt`` = ``t - t'`` per occurrence, ``grp_start`` the first occurrence of each group,
    ``grp_row`` / ``grp_obj`` the group's query row and object. ``den_lo``/``den_hi`` = ``t - b + 1``
    and ``t - a`` (the exponents' range of ``D``), ``has_rel`` whether relation r has history.
    xi: ``xi_row`` / ``xi_obj`` / ``xi_val`` the nonzero relaxed scores.
    """

    n: int
    occ_dt: np.ndarray
    occ_grp: np.ndarray
    grp_start: np.ndarray
    grp_row: np.ndarray
    grp_obj: np.ndarray
    den_lo: np.ndarray
    den_hi: np.ndarray
    has_rel: np.ndarray
    xi_row: np.ndarray
    xi_obj: np.ndarray
    xi_val: np.ndarray


def _parts(h: RecurrencyHistory, queries: np.ndarray, window: int) -> _Parts:
    n = queries.shape[0]
    n_rel = 2 * h.num_relations
    T = h.time_span
    s, r, t = queries[:, 0], queries[:, 1], queries[:, 3]
    tq = np.minimum(t, T - 1)  # later times see the whole history; keys stay in range
    lo_t = np.maximum(t - window, 0) if window > 0 else np.zeros_like(t)
    lo_t = np.minimum(lo_t, T - 1)

    # psi: occurrences of (s, r, ., t') with lo_t <= t' < t, grouped by object
    key = s * n_rel + r
    st = np.searchsorted(h.sr_key, key, "left")
    en = np.searchsorted(h.sr_key, key, "right")
    rows, idx = _expand(st, en)
    occ_t = h.sr_time[idx]
    keep = (occ_t < t[rows]) & (occ_t >= lo_t[rows])
    rows, idx, occ_t = rows[keep], idx[keep], occ_t[keep]
    obj = h.sr_obj[idx]
    new = np.ones(rows.shape[0], dtype=bool)
    new[1:] = (rows[1:] != rows[:-1]) | (obj[1:] != obj[:-1])
    grp_start = np.flatnonzero(new)
    occ_grp = np.cumsum(new) - 1

    # D: timestamps of relation r's history in the window
    a_pos = np.searchsorted(h.rt_key, r * T + lo_t, "left")
    b_pos = np.searchsorted(h.rt_key, r * T + tq, "left")
    has_rel = b_pos > a_pos
    a = np.where(has_rel, h.rt_time[np.minimum(a_pos, max(h.rt_time.shape[0] - 1, 0))] if h.rt_time.size else 0, 0)
    b = np.where(has_rel, h.rt_time[np.maximum(b_pos - 1, 0)] if h.rt_time.size else 0, 0)

    # xi: counts of (r, o, t') in the window for every object o ever seen with r
    p_rows, g = _expand(h.rel_ptr[r], h.rel_ptr[r + 1])
    hi = np.searchsorted(h.ro_key, g * T + tq[p_rows], "left")
    lo = np.searchsorted(h.ro_key, g * T + lo_t[p_rows], "left")
    cnt = hi - lo
    nz = cnt > 0
    p_rows, g, cnt = p_rows[nz], g[nz], cnt[nz]
    total = np.bincount(p_rows, weights=cnt, minlength=n)
    xi_val = cnt / total[p_rows]

    return _Parts(
        n=n,
        occ_dt=(t[rows] - occ_t).astype(np.float64),
        occ_grp=occ_grp,
        grp_start=grp_start,
        grp_row=rows[grp_start],
        grp_obj=obj[grp_start],
        den_lo=(t - b + 1).astype(np.float64),
        den_hi=(t - a).astype(np.float64),
        has_rel=has_rel,
        xi_row=p_rows,
        xi_obj=h.pair_o[g],
        xi_val=xi_val,
    )


def _denominator(lam: np.ndarray, lo: np.ndarray, hi: np.ndarray, floor: float) -> np.ndarray:
    """``max(floor, sum_{k = lo}^{hi} 2 ** (-lam * k))`` per row (the psi normaliser D, with
    ``k = t - tau`` for ``tau`` in ``[a, b)``), in closed form; exponents stay <= 0."""
    n_terms = hi - lo + 1  # = b - a
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        x = lam * math.log(2.0)
        geo = np.exp(-x * lo) * (-np.expm1(-x * n_terms)) / (-np.expm1(-x))
    d = np.where(lam > 0, geo, n_terms)
    d = np.where(n_terms > 0, d, 0.0)
    return np.maximum(d, floor)


def _psi_values(parts: _Parts, lam_row: np.ndarray, floor: float) -> np.ndarray:
    """psi of every ``(query, object)`` group, with per-query-row decay ``lam_row`` [n]."""
    if parts.grp_start.size == 0:
        return np.zeros(0)
    w = np.exp2(-lam_row[parts.grp_row[parts.occ_grp]] * parts.occ_dt)
    num = np.add.reduceat(w, parts.grp_start)
    den = _denominator(lam_row, parts.den_lo, parts.den_hi, floor)
    return num / den[parts.grp_row]


def _dense(parts: _Parts, E: int, psi: np.ndarray | None, alpha_row: np.ndarray | None) -> np.ndarray:
    """float64 ``[n, E]``: ``alpha * psi + (1 - alpha) * xi`` (``alpha_row None``: psi alone)."""
    out = np.zeros((parts.n, E), dtype=np.float64)
    if alpha_row is None:
        out[parts.grp_row, parts.grp_obj] = psi
        return out
    out[parts.xi_row, parts.xi_obj] = (1.0 - alpha_row[parts.xi_row]) * parts.xi_val
    out[parts.grp_row, parts.grp_obj] += alpha_row[parts.grp_row] * psi
    return out


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------


def _check_queries(queries, E: int, R: int) -> np.ndarray:
    return _check_quads(queries, "queries", num_entities=E, max_relation=2 * R, what="inverse relations are r + R")


def _chunks(n: int, E: int, chunk_size: int | None) -> Iterator[slice]:
    size = chunk_size if chunk_size is not None else max(1, _CHUNK_BYTES // (8 * E))
    if int(size) <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    for lo in range(0, n, int(size)):
        yield slice(lo, min(lo + int(size), n))


def score_dense(model: RecurrencyModel, history, queries) -> np.ndarray:
    """float64 ``[Q, E]`` scores ``alpha_r * psi + (1 - alpha_r) * xi`` of every entity for each query
    ``(s, r, o, t)`` (``r`` in ``[0, 2R)``; the object column is ignored). 0 = no evidence.

    ``history``: a :class:`RecurrencyHistory` or forward quadruples (all splits may be passed: only
    facts before each query's time count). Memory is ``Q * E * 8`` bytes: chunk large query sets
    (or use :func:`score` / :func:`rank_queries`).
    """
    E, R = model.num_entities, model.num_relations
    q = _check_queries(queries, E, R)
    h = _as_history(history, E, R)
    parts = _parts(h, q, model.window)
    lam = model.lambdas[q[:, 1]]
    return _dense(parts, E, _psi_values(parts, lam, model.min_denominator), model.alphas[q[:, 1]])


def _to_candidates(dense: np.ndarray, top_k: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Entities with a positive score, by descending score (ties: ascending id), -1 / -inf padded."""
    n, E = dense.shape
    width = int((dense > 0).sum(axis=1).max()) if n else 0
    if top_k is not None:
        width = min(width, int(top_k))
    if width == 0:
        return np.full((n, 0), -1, np.int64), np.full((n, 0), -np.inf)
    if width < E // 4:
        part = np.argpartition(-dense, width - 1, axis=1)[:, :width]
        part_sc = np.take_along_axis(dense, part, axis=1)
        order = np.lexsort((part, -part_sc), axis=1)
        ent = np.take_along_axis(part, order, axis=1)
    else:
        ent = np.argsort(-dense, axis=1, kind="stable")[:, :width]
    sc = np.take_along_axis(dense, ent, axis=1)
    ok = sc > 0
    return np.where(ok, ent, -1).astype(np.int64), np.where(ok, sc, -np.inf)


def score(
    model: RecurrencyModel, history, queries, *, top_k: int | None = None, chunk_size: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Candidate lists in ``raptor.evaluation.ranking``'s form: ``(cand_entity int64 [Q, C], cand_score float64 [Q, C])``.

    Every entity with a positive score (or the ``top_k`` best), by descending score, ties by
    ascending id; padding ``-1`` / ``-inf``. Entities left out score ``-inf`` for
    :func:`raptor.evaluation.ranking.filtered_ranks` (here: no evidence, score 0, so they tie with each other
    exactly as the dense scores do). ``C`` is the largest candidate count of any query (up to
    ``E``): for large query sets use :func:`rank_queries` or pass ``top_k``.
    """
    E, R = model.num_entities, model.num_relations
    q = _check_queries(queries, E, R)
    if top_k is not None and int(top_k) <= 0:
        raise ValueError(f"top_k must be positive, got {top_k}")
    h = _as_history(history, E, R)
    ents, scs = [], []
    for sl in _chunks(q.shape[0], E, chunk_size):
        e, s = _to_candidates(score_dense(model, h, q[sl]), top_k)
        ents.append(e)
        scs.append(s)
    width = max((e.shape[1] for e in ents), default=0)
    cand_entity = np.full((q.shape[0], width), -1, np.int64)
    cand_score = np.full((q.shape[0], width), -np.inf)
    lo = 0
    for e, s in zip(ents, scs):
        cand_entity[lo : lo + e.shape[0], : e.shape[1]] = e
        cand_score[lo : lo + e.shape[0], : e.shape[1]] = s
        lo += e.shape[0]
    return cand_entity, cand_score


def _filter_mask(fi: FilterIndex, q: np.ndarray, E: int) -> np.ndarray:
    """bool ``[n, E]``: entities filtered out for each query (true answers at t other than the gold)."""
    n = q.shape[0]
    mask = np.zeros((n, E), dtype=bool)
    st, en = fi.lookup(q[:, 0], q[:, 1], q[:, 3])
    rows, idx = _expand(st, en)
    mask[rows, fi.answers[idx]] = True
    mask[np.arange(n), q[:, 2]] = False
    return mask


def _dense_ranks(scores: np.ndarray, gold: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Realistic rank ``1 + #greater + #equal / 2`` of the gold among the ``other`` entities."""
    g = scores[np.arange(scores.shape[0]), gold][:, None]
    greater = np.count_nonzero((scores > g) & other, axis=1)
    equal = np.count_nonzero((scores == g) & other, axis=1)
    return 1.0 + greater + 0.5 * equal


def rank_queries(
    model: RecurrencyModel, history, queries, filter_index: FilterIndex, *, chunk_size: int | None = None
) -> np.ndarray:
    """Time-aware filtered realistic ranks (float64 ``[Q]``) of the gold (column 2) of each query,
    chunked over queries; the same ranks as :func:`score` + :func:`raptor.evaluation.ranking.filtered_ranks`."""
    E, R = model.num_entities, model.num_relations
    q = _check_queries(queries, E, R)
    if filter_index.num_relations != R:
        raise ValueError(f"filter_index has num_relations={filter_index.num_relations}, the model {R}")
    h = _as_history(history, E, R)
    ranks = np.empty(q.shape[0], dtype=np.float64)
    for sl in _chunks(q.shape[0], E, chunk_size):
        qc = q[sl]
        other = ~_filter_mask(filter_index, qc, E)
        other[np.arange(qc.shape[0]), qc[:, 2]] = False
        ranks[sl] = _dense_ranks(score_dense(model, h, qc), qc[:, 2], other)
    return ranks


# --------------------------------------------------------------------------------------------
# Parameter selection
# --------------------------------------------------------------------------------------------


def _grid_ranks(parts: _Parts, q: np.ndarray, other: np.ndarray, E: int, lam_grid, lam_sel, alpha_grid, floor):
    """Ranks of one chunk for every lambda (psi alone) and, with ``lam_sel`` [n] given, for every alpha."""
    gold = q[:, 2]
    if lam_sel is None:
        out = np.empty((len(lam_grid), parts.n))
        for i, lam in enumerate(lam_grid):
            psi = _psi_values(parts, np.full(parts.n, lam), floor)
            out[i] = _dense_ranks(_dense(parts, E, psi, None), gold, other)
        return out
    psi = _psi_values(parts, lam_sel, floor)
    out = np.empty((len(alpha_grid), parts.n))
    for i, a in enumerate(alpha_grid):
        out[i] = _dense_ranks(_dense(parts, E, psi, np.full(parts.n, a)), gold, other)
    return out


#: Validation MRRs closer than this count as a tie, which goes to the first grid point: the same mean summed
#: in another order (by relation here, pairwise in ``np.mean``) can differ in the last bit, and a grid
#: point must not win by rounding.
TIE_TOLERANCE = 1e-12


def first_best(values: np.ndarray) -> np.ndarray:
    """Index of the first maximum along the last axis, values within :data:`TIE_TOLERANCE` of the
    maximum counting as equal (NaN ignored unless all are NaN)."""
    values = np.asarray(values, dtype=np.float64)
    top = np.nanmax(np.where(np.isnan(values), -np.inf, values), axis=-1, keepdims=True)
    return np.argmax(values >= top - TIE_TOLERANCE, axis=-1)


def _select(rr: np.ndarray, rel: np.ndarray, n_rel: int, per_relation: bool):
    """``(best index per relation [n_rel] or -1, mrr [n_rel, G])`` from reciprocal ranks ``rr [G, Q]``;
    the best is the first grid point within :data:`TIE_TOLERANCE` of the highest validation MRR."""
    G = rr.shape[0]
    counts = np.bincount(rel, minlength=n_rel)
    if per_relation:
        sums = np.stack([np.bincount(rel, weights=rr[i], minlength=n_rel) for i in range(G)], axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mrr = sums / counts[:, None]
        best = np.where(counts > 0, first_best(np.where(counts[:, None] > 0, mrr, -1.0)), -1)
        return best, np.where(counts[:, None] > 0, mrr, np.nan)
    overall = rr.mean(axis=1)
    best = int(first_best(overall))
    return np.full(n_rel, best), np.broadcast_to(overall, (n_rel, G)).copy()


def fit(
    train_quads,
    valid_quads,
    num_entities: int,
    num_relations: int,
    cfg: RecurrencyConfig | None = None,
    *,
    chunk_size: int | None = None,
) -> RecurrencyModel:
    """Select ``lambda`` then ``alpha`` (per relation, or per dataset) on the validation split.

    Validation queries: every valid fact in both directions; history: train + valid before each
    query's time; metric: time-aware filtered MRR (filter: train + valid facts at the query time;
    the test split holds no fact at a validation time). See the module docstring for the source.
    """
    cfg = RecurrencyConfig() if cfg is None else cfg
    E, R = int(num_entities), int(num_relations)
    if E <= 0 or R <= 0:
        raise ValueError(f"num_entities and num_relations must be positive, got {num_entities}, {num_relations}")
    train = _check_quads(train_quads, "train_quads", num_entities=E, max_relation=R, what="forward relations")
    valid = _check_quads(valid_quads, "valid_quads", num_entities=E, max_relation=R, what="forward relations")
    n_rel = 2 * R
    h = build_history([train, valid], E, R)
    fi = build_filter([train, valid], R)
    q = np.concatenate([valid, np.stack([valid[:, 2], valid[:, 1] + R, valid[:, 0], valid[:, 3]], axis=1)])
    lam_grid = np.asarray(cfg.lambda_grid, np.float64)
    alpha_grid = np.asarray(cfg.alpha_grid, np.float64)
    rel = q[:, 1]
    lambdas = np.full(n_rel, cfg.default_lambda)
    alphas = np.full(n_rel, cfg.default_alpha)
    mrr_lam = np.full((n_rel, lam_grid.size), np.nan)
    mrr_alpha = np.full((n_rel, alpha_grid.size), np.nan)
    if q.shape[0]:
        chunks = list(_chunks(q.shape[0], E, chunk_size))
        prepared = []
        rr = np.empty((lam_grid.size, q.shape[0]))
        for sl in chunks:
            qc = q[sl]
            other = ~_filter_mask(fi, qc, E)
            other[np.arange(qc.shape[0]), qc[:, 2]] = False
            parts = _parts(h, qc, cfg.window)
            rr[:, sl] = 1.0 / _grid_ranks(parts, qc, other, E, lam_grid, None, None, cfg.min_denominator)
            prepared.append((sl, qc, parts))
        best, mrr_lam = _select(rr, rel, n_rel, cfg.per_relation)
        lambdas = np.where(best >= 0, lam_grid[np.maximum(best, 0)], lambdas)
        rr = np.empty((alpha_grid.size, q.shape[0]))
        for sl, qc, parts in prepared:
            other = ~_filter_mask(fi, qc, E)
            other[np.arange(qc.shape[0]), qc[:, 2]] = False
            rr[:, sl] = 1.0 / _grid_ranks(parts, qc, other, E, None, lambdas[qc[:, 1]], alpha_grid, cfg.min_denominator)
        best, mrr_alpha = _select(rr, rel, n_rel, cfg.per_relation)
        alphas = np.where(best >= 0, alpha_grid[np.maximum(best, 0)], alphas)
    alphas = np.where(alphas == 1.0, cfg.alpha_one_as, alphas)
    return RecurrencyModel(
        lambdas=lambdas,
        alphas=alphas,
        num_entities=E,
        num_relations=R,
        window=int(cfg.window),
        min_denominator=float(cfg.min_denominator),
        lambda_grid=lam_grid,
        alpha_grid=alpha_grid,
        valid_mrr_lambda=mrr_lam,
        valid_mrr_alpha=mrr_alpha,
        valid_queries=np.bincount(rel, minlength=n_rel).astype(np.int64),
    )


__all__ = [
    "MODEL_FORMAT",
    "RecurrencyConfig",
    "RecurrencyHistory",
    "RecurrencyModel",
    "build_history",
    "fit",
    "load_model",
    "rank_queries",
    "save_model",
    "score",
    "score_dense",
]
