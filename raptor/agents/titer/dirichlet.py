"""TITer's time prior: one Dirichlet distribution per query relation, fitted to the training queries
(TITer's ``model/dirichlet.py`` and ``mle_dirichlet.py``, github.com/JHL-HUST/TITer at 2f79a63), and
the reward shaping that draws from it (``utils/trainer.py``).

:func:`dirichlet_statistics` (or :func:`statistics_of`) gathers the sufficient statistics,
:func:`fit_dirichlet` fits them (compiled numba kernels ``_digamma``, ``_trigamma``, ``_fit_s``,
``_fit_m``, ``_fit_one``, ...), :func:`fit_time_prior` does both with a :class:`TITerConfig`'s
settings, and :func:`time_shaping` / :func:`shaped_reward` shape TITer's terminal reward with a
:class:`DirichletFit` (:func:`raptor.agents.titer.training.train_titer` uses them). See docs/titer.md.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numba
import numpy as np

from raptor.config import TITerConfig

log = logging.getLogger("raptor")


@dataclass(frozen=True)
class DirichletStatistics:
    """Sufficient statistics of TITer's per-relation Dirichlet data (``MLE_Dirchlet``).

    TITer's observation for a training query ``(e_q, r_q, a, t_q)`` is the vector ``D[j]``,
    ``j = 0..k-1``, of how many training facts the answer ``a`` took part in at time ``t_q - j`` (as
    subject or object; ``D[0] = 0``: only times before ``t_q`` count). Note that these are counts,
    not proportions: TITer fits "Dirichlet" parameters to them as they are. Its estimator reads the
    ``[N_r, k]`` matrix of a relation only through ``N_r``, ``mean(log(D + eps))``, ``mean(D + eps)``
    and column 0's ``mean((D + eps)^2)`` (``eps = 1e-9`` added before the fit), so only these are
    kept: ``[2R, k]`` arrays instead of ``[N, k]``.
    """

    count: np.ndarray  # int64 [2R]: N_r, observations (training queries) of each query relation
    mean_log: np.ndarray  # float64 [2R, k]: mean_n log(D[n, j] + eps)
    mean: np.ndarray  # float64 [2R, k]: mean_n (D[n, j] + eps)
    mean_sq0: np.ndarray  # float64 [2R]: mean_n (D[n, 0] + eps)^2 (TITer's initial guess reads column 0)


def statistics_of(observations: list[np.ndarray], eps: float = 1.0e-9) -> DirichletStatistics:
    """:class:`DirichletStatistics` of explicit ``[N_r, k]`` observation matrices, one per relation
    (relation ``i`` = ``observations[i]``; an empty matrix = no data). For data that is not a graph,
    e.g. samples of a known Dirichlet."""
    k = max(o.shape[1] for o in observations)
    n_rel = len(observations)
    count = np.array([len(o) for o in observations], dtype=np.int64)
    mean_log, mean, mean_sq0 = np.zeros((n_rel, k)), np.zeros((n_rel, k)), np.zeros(n_rel)
    for i, o in enumerate(observations):  # per relation, not per observation
        if len(o):
            d = np.asarray(o, dtype=np.float64) + eps
            mean_log[i], mean[i], mean_sq0[i] = np.log(d).mean(0), d.mean(0), (d[:, 0] ** 2).mean()
    return DirichletStatistics(count, mean_log, mean, mean_sq0)


def dirichlet_statistics(queries: np.ndarray, num_entities: int, num_relations: int, k: int,
                         eps: float = 1.0e-9, chunk: int = 1 << 14) -> DirichletStatistics:
    """:class:`DirichletStatistics` of the training queries, vectorised (TITer's ``MLE_Dirchlet``
    data: ``get_entity_occ_times`` and ``get_relations_observed_data``).

    Args:
        queries: int ``[n, 4]`` training queries ``(e_q, r_q, answer, t_q)`` in both directions
            (:func:`raptor.data.dataset.with_inverse_queries`); the inverse direction of a fact is TITer's
            ``reversed_r`` observation. An entity's occurrence count at time ``t`` is the number of
            queries whose query entity it is at ``t``: its facts as subject plus as object, as in
            TITer's ``entity_occ_times`` (a fact ``(s, r, s, t)`` counts twice there and here).
        k: time bins (TITer's ``--k``). Bin ``j`` is ``t_q - t`` in our time steps, which is TITer's
            ``(t_q - t) // time_span`` on its hour-stamped ICEWS files. Occurrences ``k`` or more
            steps back are dropped (TITer's code raises an IndexError there; its own ICEWS14 split
            spans 262 days < 300, ours 304).
        eps: TITer's ``D + 1e-9`` before taking logs.
        chunk: queries gathered at a time (bounds the ``[chunk, k]`` temporaries).

    The occurrence table ``occ[e, t]`` is dense ``[E, T]``; the ``k`` bins of every query are one
    gather from a sliding-window view of ``log(occ + eps)``, and the per-relation sums are
    ``np.add.reduceat`` over the queries sorted by relation.
    """
    q = np.asarray(queries, dtype=np.int64)
    n_rel = 2 * num_relations
    T = int(q[:, 3].max()) + 1 if len(q) else 1
    occ_pad = np.zeros((num_entities, k + T), dtype=np.float64)
    # column k + t holds time t; the k columns in front stand for times before 0 (never occupied)
    np.add.at(occ_pad, (q[:, 0], k + q[:, 3]), 1.0)
    log_pad = np.log(occ_pad + eps)
    # window at column p covers columns p .. p+k-1; for query time t, p = t + 1 covers times
    # t+1-k .. t, i.e. bins k-1 .. 0 (reversed below)
    win_log = np.lib.stride_tricks.sliding_window_view(log_pad, k, axis=1)
    win_val = np.lib.stride_tricks.sliding_window_view(occ_pad, k, axis=1)
    order = np.argsort(q[:, 1], kind="stable")
    rel, ans, tq = q[order, 1], q[order, 2], q[order, 3]
    count = np.bincount(rel, minlength=n_rel).astype(np.int64)
    sum_log, sum_val = np.zeros((n_rel, k)), np.zeros((n_rel, k))
    log_eps = math.log(eps)
    for lo in range(0, len(q), chunk):
        hi = min(len(q), lo + chunk)
        r_c = rel[lo:hi]
        starts = np.flatnonzero(np.r_[True, r_c[1:] != r_c[:-1]])
        g_log = win_log[ans[lo:hi], tq[lo:hi] + 1][:, ::-1].copy()
        g_val = win_val[ans[lo:hi], tq[lo:hi] + 1][:, ::-1] + eps
        g_log[:, 0] = log_eps  # bin 0 is the query's own time: TITer counts times < t_q only
        g_val[:, 0] = eps
        sum_log[r_c[starts]] += np.add.reduceat(g_log, starts, axis=0)
        sum_val[r_c[starts]] += np.add.reduceat(g_val, starts, axis=0)
    n = np.maximum(count, 1)[:, None]
    # column 0 is always eps (see above), so its mean square is eps^2 wherever there is data
    return DirichletStatistics(count=count, mean_log=sum_log / n, mean=sum_val / n,
                               mean_sq0=np.where(count > 0, eps * eps, 0.0))


# Special functions for the compiled fit (scipy's ufuncs cannot be called from numba): the recurrence
# psi(x) = psi(x + 1) - 1/x (psi'(x) = psi'(x + 1) + 1/x^2) up to x >= 8, then the asymptotic series
# with the Bernoulli numbers to B18 (truncation error < 1e-16 from x = 8); the tests check them
# against scipy to 1e-13.

_EULER = 0.57721566490153286061
_ASYMPTOTIC_FROM = 8.0


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _digamma(x):  # pragma: no cover - compiled
    if x <= 0.0 and x == math.floor(x):
        return math.nan
    if x < 0.0:  # reflection: psi(x) = psi(1 - x) - pi / tan(pi x)
        return _digamma(1.0 - x) - math.pi / math.tan(math.pi * x)
    r = 0.0
    while x < _ASYMPTOTIC_FROM:
        r -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    t = f * (-1.0 / 12 + f * (1.0 / 120 + f * (-1.0 / 252 + f * (1.0 / 240 + f * (-1.0 / 132 + f * (
        691.0 / 32760 + f * (-1.0 / 12 + f * (3617.0 / 8160 + f * (-43867.0 / 14364)))))))))
    return r + math.log(x) - 0.5 / x + t


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _trigamma(x):  # pragma: no cover - compiled
    if x <= 0.0 and x == math.floor(x):
        return math.inf
    if x < 0.0:  # reflection: psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x)
        s = math.sin(math.pi * x)
        return math.pi * math.pi / (s * s) - _trigamma(1.0 - x)
    r = 0.0
    while x < _ASYMPTOTIC_FROM:
        r += 1.0 / (x * x)
        x += 1.0
    f = 1.0 / (x * x)
    t = 1.0 / x + f / 2.0 + f / x * (1.0 / 6 + f * (-1.0 / 30 + f * (1.0 / 42 + f * (-1.0 / 30 + f * (
        5.0 / 66 + f * (-691.0 / 2730 + f * (7.0 / 6 + f * (-3617.0 / 510 + f * 43867.0 / 798))))))))
    return r + t


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _loglik(n, logp, a):  # pragma: no cover - compiled
    """TITer's ``loglikelihood``: ``N (lnG(sum a) - sum lnG(a) + sum (a - 1) mean log D)``."""
    s = 0.0
    acc = 0.0
    for j in range(a.shape[0]):
        s += a[j]
        acc += -math.lgamma(a[j]) + (a[j] - 1.0) * logp[j]
    return n * (math.lgamma(s) + acc)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _psi_psi1(x):  # pragma: no cover - compiled
    """``(psi(x), psi'(x))`` from one shared recurrence (the inverse digamma's Newton step needs both
    at the same point); non-positive ``x`` go through the separate functions' reflections."""
    if x <= 0.0:
        return _digamma(x), _trigamma(x)
    d = 0.0
    t = 0.0
    while x < _ASYMPTOTIC_FROM:
        inv = 1.0 / x
        d -= inv
        t += inv * inv
        x += 1.0
    inv = 1.0 / x
    f = inv * inv
    d += math.log(x) - 0.5 * inv + f * (-1.0 / 12 + f * (1.0 / 120 + f * (-1.0 / 252 + f * (1.0 / 240 + f * (
        -1.0 / 132 + f * (691.0 / 32760 + f * (-1.0 / 12 + f * (3617.0 / 8160 + f * (-43867.0 / 14364)))))))))
    t += inv + f / 2.0 + f * inv * (1.0 / 6 + f * (-1.0 / 30 + f * (1.0 / 42 + f * (-1.0 / 30 + f * (
        5.0 / 66 + f * (-691.0 / 2730 + f * (7.0 / 6 + f * (-3617.0 / 510 + f * 43867.0 / 798))))))))
    return d, t


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _ipsi(y, tol, maxiter, x0, x1):  # pragma: no cover - compiled
    """TITer's ``_ipsi`` (inverse digamma: Minka's initial guess, then Newton until the step's
    Euclidean norm is below ``tol``); the result is left in ``x1``."""
    K = y.shape[0]
    for j in range(K):
        x0[j] = math.exp(y[j]) + 0.5 if y[j] >= -2.22 else -1.0 / (y[j] + _EULER)
    for _ in range(maxiter):
        d = 0.0
        for j in range(K):
            p0, p1 = _psi_psi1(x0[j])
            x1[j] = x0[j] - (p0 - y[j]) / p1
            d += (x1[j] - x0[j]) ** 2
        if math.sqrt(d) < tol:
            return
        x0[:] = x1


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _fit_s(a0, logp, tol, maxiter, out):  # pragma: no cover - compiled
    """TITer's ``_fit_s``: precision ``s`` with the mean fixed; returns False where TITer raises."""
    K = a0.shape[0]
    s1 = 0.0
    for j in range(K):
        s1 += a0[j]
    m = a0 / s1
    mlogp = 0.0
    for j in range(K):
        mlogp += m[j] * logp[j]
    for _ in range(maxiter):
        s0 = s1
        g = _digamma(s1) + mlogp
        h = _trigamma(s1)
        for j in range(K):
            g -= m[j] * _digamma(s1 * m[j])
            h -= m[j] ** 2 * _trigamma(s1 * m[j])
        if g + s1 * h < 0:
            s1 = 1 / (1 / s0 + g / h / (s0 ** 2))
        if s1 <= 0:
            s1 = s0 * math.exp(-g / (s0 * h + g))  # Newton on log s
        if s1 <= 0:
            s1 = 1 / (1 / s0 + g / ((s0 ** 2) * h + 2 * s0 * g))  # Newton on 1/s
        if s1 <= 0:
            s1 = s0 - g / h  # Newton
        if not s1 > 0:
            return False
        for j in range(K):
            out[j] = s1 * m[j]
        if abs(s1 - s0) < tol:
            return True
    return True


@numba.njit(cache=True, nogil=True)
def _cycle_start(hist, n, cur):  # pragma: no cover - compiled
    """Period ``p >= 2`` with ``cur`` (iterate ``n``) bitwise equal to iterate ``n - p`` (``hist[i % P]``
    holds iterate ``i``, the last ``P`` of them), or 0."""
    P, K = hist.shape
    for p in range(2, min(P, n) + 1):
        row = hist[(n - p) % P]
        same = True
        for j in range(K):
            if row[j] != cur[j]:
                same = False
                break
        if same:
            return p
    return 0


@numba.njit(cache=True, nogil=True)
def _iterate_at(hist, n, p, target, cur, out):  # pragma: no cover - compiled
    """Iterate ``target >= n`` of a sequence that repeats with period ``p`` from iterate ``n - p`` on."""
    back = (p - (target - n) % p) % p
    if back == 0:
        out[:] = cur
    else:
        out[:] = hist[(n - back) % hist.shape[0]]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _fit_m(a, logp, tol, maxiter, ipsi_tol, ipsi_maxiter, hist, out):  # pragma: no cover - compiled
    """TITer's ``_fit_m``: Minka's fixed point for the mean with the precision fixed.

    On many relations (those without a maximum) the iteration does not converge but falls into a
    cycle (period 2-8) until ``maxiter``. Once an iterate equals an earlier one bitwise, every later
    iterate is known (the map is deterministic) and every step of the cycle has already failed the
    ``tol`` test, so the iterate TITer returns after ``maxiter`` steps is read off the cycle: the
    same result, without running out the remaining steps."""
    K = a.shape[0]
    s = 0.0
    for j in range(K):
        s += a[j]
    a0 = a.copy()
    y = np.empty(K)
    x0 = np.empty(K)
    a1 = np.empty(K)
    P = hist.shape[0]
    hist[0] = a0
    for n in range(1, maxiter + 1):
        c = 0.0
        for j in range(K):
            c += (a0[j] / s) * (_digamma(a0[j]) - logp[j])
        for j in range(K):
            y[j] = logp[j] + c
        _ipsi(y, ipsi_tol, ipsi_maxiter, x0, a1)
        t = 0.0
        for j in range(K):
            t += a1[j]
        d = 0.0
        for j in range(K):
            a1[j] = a1[j] / t * s
            d += (a1[j] - a0[j]) ** 2
        a0[:] = a1
        if math.sqrt(d) < tol:
            break
        p = _cycle_start(hist, n, a0)
        if p:
            _iterate_at(hist, n, p, maxiter, a0, out)
            return
        hist[n % P] = a0
    out[:] = a0


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _fit_one(n, logp, mean, mean_sq0, tol, maxiter, inner_maxiter, ipsi_tol, ipsi_maxiter, window):  # pragma: no cover
    """TITer's ``_meanprecision`` for one relation: ``(alpha, rounds)``, rounds ``-1`` on failure.
    Rounds that cycle are cut short as in :func:`_fit_m` (same result)."""
    K = logp.shape[0]
    a0 = (mean[0] - mean_sq0) / ((mean_sq0 - mean[0] ** 2) + 1e-9) * mean  # _init_a (its 1e-9)
    s0 = 0.0
    for j in range(K):
        s0 += a0[j]
    if s0 < 0:
        a0 = a0 / s0
    elif s0 == 0:
        a0[:] = 1.0 / K
    a_s = np.empty(K)
    a1 = np.empty(K)
    out = np.empty(K)
    hist_m = np.empty((window, K))
    hist = np.empty((window, K))
    hist[0] = a0
    for it in range(1, maxiter + 1):
        if not _fit_s(a0, logp, tol, inner_maxiter, a_s):
            return out, -1
        _fit_m(a_s, logp, tol, inner_maxiter, ipsi_tol, ipsi_maxiter, hist_m, a1)
        out[:] = a1
        if abs(_loglik(n, logp, a1) - _loglik(n, logp, a0)) < tol:
            return out, it
        a0[:] = a1
        p = _cycle_start(hist, it, a1)
        if p:
            _iterate_at(hist, it, p, maxiter, a1, out)
            return out, maxiter
        hist[it % window] = a1
    return out, maxiter


@dataclass(frozen=True)
class DirichletFit:
    """Fitted Dirichlet parameters of every query relation."""

    alpha: np.ndarray  # float64 [2R, k]; NaN rows: relation without training queries or failed fit
    fitted: np.ndarray  # bool [2R]
    rounds: np.ndarray  # int64 [2R]: mean-precision rounds each relation ran (0: not fitted)
    seconds: float  # wall time of the fit

    def save(self, path: str | Path) -> None:
        """Written whole or not at all (renamed into place)."""
        from raptor.common.io import atomic_path

        with atomic_path(path) as tmp, open(tmp, "wb") as fh:  # a file object: savez adds no ".npz" to it
            np.savez(fh, alpha=self.alpha, fitted=self.fitted, rounds=self.rounds, seconds=self.seconds)


def fit_dirichlet(stats: DirichletStatistics, cfg: TITerConfig = TITerConfig(), workers: Optional[int] = None,
                  cycle_window: int = 32) -> DirichletFit:
    """TITer's maximum-likelihood Dirichlet fit (``dirichlet.mle(D, method="meanprecision")``, a port
    of Minka's fastfit) of every relation, compiled and in parallel over relations.

    Per relation, the same algorithm step for step: the initial guess ``_init_a`` (``(E[0] -
    E2[0]) / (E2[0] - E[0]^2 + 1e-9) * E``, with its fixes for a sum ``<= 0``), then up to
    ``maxiter`` rounds of ``_fit_s`` (precision by Newton steps, up to ``inner_maxiter``) and
    ``_fit_m`` (mean by Minka's fixed point with the inverse digamma ``_ipsi``, up to
    ``inner_maxiter``), stopping when the log-likelihood moves by less than ``tol``. The tolerances
    and caps are ``cfg``'s (``dirichlet_tol``, ``dirichlet_maxiter``, ``dirichlet_inner_maxiter``,
    ``ipsi_tol``, ``ipsi_maxiter``); the defaults are TITer's (``mle_dirichlet.py --tol 1e-7
    --maxiter 100``). Only the digamma and trigamma are ours (scipy's ufuncs cannot run in numba):
    same values to ~1e-15.

    Why this is not TITer's minutes: TITer fits count vectors, not proportions, and for some of
    ICEWS14's 452 relations ``sum_j exp(mean log D_j) > 1``, where the likelihood has no maximum (it
    grows without bound along ``s``). Those relations never meet ``tol``: their mean fixed point
    falls into a cycle and runs to ``inner_maxiter`` in every one of the ``maxiter`` rounds, and
    their parameters are wherever the caps leave them (TITer: up to 65 s for one relation). Here
    (a) the kernel is compiled (numba) and run on ``workers`` threads (it releases the GIL; default:
    the cores this process may use), the unbounded relations first; (b) once an iterate of
    ``_fit_m`` (or of the rounds) equals one of the ``cycle_window`` before it bitwise, the iterate
    after the cap is read off the cycle instead of running the remaining steps. (b) is exact: the
    iteration is a deterministic map, and every step of the cycle has already failed the ``tol``
    test. The tests check the result against a literal per-relation port of TITer's code.
    """
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.perf_counter()
    tol, maxiter, inner_maxiter = cfg.dirichlet_tol, cfg.dirichlet_maxiter, cfg.dirichlet_inner_maxiter
    ipsi_tol, ipsi_maxiter = cfg.ipsi_tol, cfg.ipsi_maxiter
    n_rel, k = stats.mean_log.shape
    alpha = np.full((n_rel, k), np.nan)
    rounds = np.zeros(n_rel, dtype=np.int64)
    rows = np.flatnonzero(stats.count > 0)
    # the relations without a finite maximum are the slow ones: start them first
    unbounded = np.exp(stats.mean_log[rows]).sum(1) > 1
    rows = rows[np.argsort(~unbounded, kind="stable")]
    mean_log = np.ascontiguousarray(stats.mean_log)
    mean = np.ascontiguousarray(stats.mean)

    def fit(r: int) -> None:
        alpha[r], rounds[r] = _fit_one(float(stats.count[r]), mean_log[r], mean[r], float(stats.mean_sq0[r]),
                                       tol, maxiter, inner_maxiter, ipsi_tol, ipsi_maxiter, cycle_window)

    n_workers = workers or len(os.sched_getaffinity(0))
    if n_workers > 1 and len(rows) > 1:
        with ThreadPoolExecutor(max_workers=n_workers) as pool:
            list(pool.map(fit, rows))
    else:
        for r in rows:
            fit(int(r))
    fitted = (rounds > 0) & np.all(np.isfinite(alpha) & (alpha > 0), axis=1)
    alpha[~fitted] = np.nan
    rounds[~fitted] = 0
    return DirichletFit(alpha=alpha, fitted=fitted, rounds=rounds, seconds=time.perf_counter() - t0)


def fit_time_prior(train_queries: np.ndarray, num_entities: int, num_relations: int,
                   cfg: "TITerConfig") -> DirichletFit:
    """Statistics and fit with ``cfg``'s settings (what ``mle_dirichlet.py`` computes offline)."""
    t0 = time.perf_counter()
    stats = dirichlet_statistics(train_queries, num_entities, num_relations, cfg.dirichlet_k, cfg.dirichlet_eps)
    fit = fit_dirichlet(stats, cfg)
    fit = DirichletFit(fit.alpha, fit.fitted, fit.rounds, time.perf_counter() - t0)
    log.info("TITer Dirichlet time prior: %d relations fitted in %.2f s", int(fit.fitted.sum()), fit.seconds)
    return fit


def time_shaping(fit: DirichletFit, relation: np.ndarray, dt: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """TITer's ``Dirichlet.__call__(rel, dt)`` for a batch: ``p = x[dt]`` with ``x ~ Dir(alpha_rel)``,
    ``0`` where ``dt >= k`` (and for relations without a fit, which TITer never meets: every training
    relation has one). float64 ``[B]``.

    The ``dt``-th component of a Dirichlet draw is ``Beta(alpha_dt, sum(alpha) - alpha_dt)``-
    distributed: that marginal is drawn directly (one number per row, the same distribution as
    TITer's full ``k``-dimensional ``rvs``). ``dt`` is in our time steps (TITer's ``dt //
    time_span``).
    """
    relation = np.asarray(relation, dtype=np.int64)
    dt = np.asarray(dt, dtype=np.int64)
    k = fit.alpha.shape[1]
    p = np.zeros(len(relation))
    ok = (dt >= 0) & (dt < k) & fit.fitted[relation]
    if ok.any():
        a = fit.alpha[relation[ok], dt[ok]]
        b = fit.alpha[relation[ok]].sum(1) - a
        p[ok] = rng.beta(a, np.maximum(b, np.finfo(np.float64).tiny))
    return p


def shaped_reward(reward: np.ndarray, fit: DirichletFit, relation: np.ndarray, dt: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """TITer's trainer: ``(1 + p_dt) * reward`` (draws only for rows with a reward: the others stay 0).

    Args:
        reward: ``[B]`` terminal rewards ``1[e_K = o_q]``; relation: query relations ``r_q``;
        dt: ``t_q - t_K`` (time of the agent's last state).
    """
    reward = np.asarray(reward, dtype=np.float64)
    out = reward.copy()
    hit = reward != 0
    if hit.any():
        out[hit] = (1.0 + time_shaping(fit, np.asarray(relation)[hit], np.asarray(dt)[hit], rng)) * reward[hit]
    return out
