"""Significance tests for comparing two systems (RL-RAPTOR = ``a`` vs Pure-RL = ``b``).

Two levels, see ``docs/evaluation.md``:

* **Seed level** (:func:`paired_seed_ttest`, :func:`seed_level_tests`): one metric value per
  training seed for each system, paired by seed; paired t-test (``scipy.stats.ttest_rel``) with
  the mean difference, a t-based confidence interval and Cohen's ``d_z``. This is the test behind
  the paper's "p < 0.05 over 5 seeds": the unit of replication is the training run.
* **Query level** (:func:`wilcoxon_signed_rank`, :func:`paired_bootstrap`,
  :func:`per_query_tests`): reciprocal ranks of the same test queries under both systems; the
  Wilcoxon signed-rank test (with the matched-pairs rank-biserial correlation) and a seeded,
  vectorised paired bootstrap of the MRR difference. These measure whether the gap holds across
  queries of one test set (for one seed, or per-query reciprocal ranks averaged over seeds).

Every function returns a frozen dataclass with ``to_dict()`` giving JSON-safe plain Python values
(non-finite floats become ``None``; the ``note`` field says why). One-sided p-values always test
``H1: a > b`` (the improvement direction); differences are ``a - b``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats as sps

from raptor.constants import METRIC_KEYS

#: Metrics compared at seed level by default.
DEFAULT_METRICS: tuple[str, ...] = METRIC_KEYS

#: Default number of bootstrap resamples.
BOOTSTRAP_RESAMPLES = 10_000


def json_safe(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


class _Serializable:
    def to_dict(self) -> dict:
        """Plain JSON-safe dict (``json.dumps(..., allow_nan=False)`` works)."""
        return json_safe(asdict(self))  # type: ignore[call-overload]


# --------------------------------------------------------------------------------------------
# Seed level
# --------------------------------------------------------------------------------------------



def format_probability(p: float) -> str:
    """A probability or p-value for people: 3 decimals from 0.01 up, 3 significant digits in
    scientific notation below (``2.41e-05``, never ``0.000``), ``0`` only when it is exactly 0."""
    if p is None or not math.isfinite(p):
        return "n/a"
    if p == 0:
        return "0"
    return f"{p:.3f}" if p >= 0.01 else f"{p:.2e}"


def rounded(obj: Any, digits: int = 4) -> Any:
    """``obj`` with every float rounded to ``digits`` significant digits (for tables people read:
    ``d_z = 0.7071067811865476`` -> ``0.7071``); other values as they are, containers walked."""
    if isinstance(obj, float):
        return obj if not math.isfinite(obj) or obj == 0 else float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [rounded(v, digits) for v in obj]
    return obj

@dataclass(frozen=True)
class SeedTTestResult(_Serializable):
    """Paired t-test over seeds; ``diff = a - b`` per seed.

    ``p_one_sided`` tests ``H1: mean(a - b) > 0``. ``ci_low``/``ci_high``: t-based
    ``confidence`` interval of the mean difference. ``cohens_dz = mean(diff) / sd(diff)``
    (``ddof=1``). With zero variance of the differences: all-zero differences give
    ``t = 0``, ``p = 1`` (both), ``d_z = 0``, CI ``[0, 0]``; a constant non-zero difference gives
    ``t = d_z = ±inf`` (``None`` in ``to_dict``), ``p_two = 0``, ``p_one = 0`` if positive else 1,
    CI ``[d, d]``; ``note`` says so.
    """

    metric: str | None
    seeds: list
    n: int
    values_a: list[float]
    values_b: list[float]
    mean_a: float
    mean_b: float
    mean_diff: float
    sd_diff: float
    se_diff: float
    t_statistic: float
    df: int
    p_two_sided: float
    p_one_sided: float
    confidence: float
    ci_low: float
    ci_high: float
    cohens_dz: float
    alpha: float
    significant_two_sided: bool
    significant_one_sided: bool
    note: str | None = None


def _pair_by_seed(a, b) -> tuple[list, np.ndarray, np.ndarray]:
    if isinstance(a, Mapping) != isinstance(b, Mapping):
        raise TypeError("pass both a and b as {seed: value} mappings or both as sequences")
    if isinstance(a, Mapping):
        if set(a) != set(b):
            raise ValueError(
                f"seeds differ: only in a {sorted(set(a) - set(b), key=str)}, only in b {sorted(set(b) - set(a), key=str)}"
            )
        seeds = sorted(a, key=lambda s: (str(type(s)), s))
        va = np.array([a[s] for s in seeds], dtype=np.float64)
        vb = np.array([b[s] for s in seeds], dtype=np.float64)
    else:
        va = np.asarray(a, dtype=np.float64)
        vb = np.asarray(b, dtype=np.float64)
        if va.ndim != 1 or vb.ndim != 1:
            raise ValueError("seed values must be 1-D")
        if va.shape != vb.shape:
            raise ValueError(f"mismatched lengths: {va.shape[0]} values for a, {vb.shape[0]} for b (paired by seed)")
        seeds = list(range(va.shape[0]))
    return seeds, va, vb


#: Differences of seed metrics whose spread is within this many float64 ulps of the values' magnitude are constant
#: (:func:`paired_seed_ttest`): rounding, not variation between seeds.
ROUNDING_ULPS = 16


def paired_seed_ttest(
    a,
    b,
    *,
    metric: str | None = None,
    confidence: float = 0.95,
    alpha: float = 0.05,
) -> SeedTTestResult:
    """Paired t-test of per-seed metric values of system ``a`` vs ``b``.

    Args:
        a, b: ``{seed: value}`` mappings with the same seeds (paired by seed), or equal-length
            sequences (paired by position).
        metric: label stored in the result.
        confidence: level of the CI of the mean difference.
        alpha: level for the ``significant_*`` flags.
    """
    if not 0 < confidence < 1 or not 0 < alpha < 1:
        raise ValueError("confidence and alpha must lie in (0, 1)")
    seeds, va, vb = _pair_by_seed(a, b)
    n = va.shape[0]
    if n < 2:
        raise ValueError(f"a paired t-test needs at least 2 seeds, got {n}")
    if not (np.isfinite(va).all() and np.isfinite(vb).all()):
        raise ValueError("seed metric values must be finite")
    d = va - vb
    mean_d = float(d.mean())
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    df = n - 1
    note = None
    # a constant difference: scipy gives nan (all zero) or inf, or for differences that agree to the last bits of
    # the values (0.1 + 0.2 - 0.2 against 0.3 - 0.2) a "precision loss" warning and a t of rounding noise. Spread
    # within a few ulps of the values is no evidence either way: such differences count as constant.
    tol = ROUNDING_ULPS * np.finfo(np.float64).eps * float(max(np.abs(va).max(), np.abs(vb).max()))
    if float(d.max() - d.min()) <= tol:
        sd, se = 0.0, 0.0
        if abs(mean_d) <= tol:
            mean_d = 0.0
            t, p_two, p_one, dz = 0.0, 1.0, 1.0, 0.0
            note = "all seed differences are zero (to rounding): no evidence of a difference (t=0, p=1 by definition)"
        else:
            sign = 1.0 if mean_d > 0 else -1.0
            t, dz = sign * math.inf, sign * math.inf
            p_two, p_one = 0.0, (0.0 if mean_d > 0 else 1.0)
            note = "constant non-zero seed difference (to rounding): zero variance, t and d_z are infinite"
        lo = hi = mean_d
    else:
        two = sps.ttest_rel(va, vb, alternative="two-sided")
        one = sps.ttest_rel(va, vb, alternative="greater")
        t, p_two, p_one = float(two.statistic), float(two.pvalue), float(one.pvalue)
        half = float(sps.t.ppf(0.5 + confidence / 2, df)) * se
        lo, hi = mean_d - half, mean_d + half
        dz = mean_d / sd
    return SeedTTestResult(
        metric=metric,
        seeds=list(seeds),
        n=n,
        values_a=va.tolist(),
        values_b=vb.tolist(),
        mean_a=float(va.mean()),
        mean_b=float(vb.mean()),
        mean_diff=mean_d,
        sd_diff=sd,
        se_diff=se,
        t_statistic=t,
        df=df,
        p_two_sided=p_two,
        p_one_sided=p_one,
        confidence=confidence,
        ci_low=float(lo),
        ci_high=float(hi),
        cohens_dz=dz,
        alpha=alpha,
        significant_two_sided=bool(p_two < alpha),
        significant_one_sided=bool(p_one < alpha),
        note=note,
    )


def seed_level_tests(
    runs_a: Mapping[Any, Mapping[str, float]],
    runs_b: Mapping[Any, Mapping[str, float]],
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    confidence: float = 0.95,
    alpha: float = 0.05,
) -> dict[str, SeedTTestResult]:
    """:func:`paired_seed_ttest` for each metric; ``runs_x`` maps seed -> metrics dict (e.g. the
    contents of each seed's ``metrics.json``)."""
    out = {}
    for m in metrics:
        try:
            a = {s: v[m] for s, v in runs_a.items()}
            b = {s: v[m] for s, v in runs_b.items()}
        except KeyError as e:
            raise KeyError(f"metric {m!r} missing from a run's metrics") from e
        out[m] = paired_seed_ttest(a, b, metric=m, confidence=confidence, alpha=alpha)
    return out


# --------------------------------------------------------------------------------------------
# Query level
# --------------------------------------------------------------------------------------------


def reciprocal_ranks(ranks) -> np.ndarray:
    """``1 / rank`` (ranks must be finite and >= 1)."""
    r = np.asarray(ranks, dtype=np.float64)
    if r.size and (not np.isfinite(r).all() or r.min() < 1):
        raise ValueError("ranks must be finite and >= 1")
    return 1.0 / r


def _paired_queries(x, y) -> tuple[np.ndarray, np.ndarray]:
    """Validate per-query values; a 2-D ``[seeds, Q]`` input is averaged over seeds first."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim == 2:
        x = x.mean(axis=0)
    if y.ndim == 2:
        y = y.mean(axis=0)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError("per-query values must be 1-D [Q] (or 2-D [seeds, Q])")
    if x.shape != y.shape:
        raise ValueError(f"mismatched lengths: {x.shape[0]} queries for a, {y.shape[0]} for b (paired by query)")
    if x.shape[0] < 2:
        raise ValueError(f"need at least 2 paired queries, got {x.shape[0]}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("per-query values must be finite")
    return x, y


@dataclass(frozen=True)
class WilcoxonResult(_Serializable):
    """Wilcoxon signed-rank test of ``d = a - b``.

    ``w_plus``/``w_minus``: rank sums of positive/negative differences (ranks of ``|d|`` with
    average ties; zero handling per ``zero_method``: ``wilcox`` drops zero differences before
    ranking, ``pratt`` ranks them and then drops them, ``zsplit`` splits their ranks evenly).
    ``statistic``/``p_*`` are scipy's. ``rank_biserial = (w_plus - w_minus) / S`` with ``S`` the
    sum of all ranks assigned (``n_nonzero(n_nonzero+1)/2`` for ``wilcox``, ``n(n+1)/2`` otherwise);
    positive when ``a`` tends to be larger. With no non-zero difference: ``statistic = 0``,
    ``p = 1``, ``rank_biserial = 0`` by definition (``note`` says so).
    """

    n: int
    n_zero: int
    n_positive: int
    n_negative: int
    zero_method: str
    method: str
    w_plus: float
    w_minus: float
    statistic: float
    z_statistic: float | None
    p_two_sided: float
    p_one_sided: float
    rank_biserial: float
    note: str | None = None


def _scipy_method_used(d: np.ndarray, method: str) -> str:
    """The method scipy's ``wilcoxon(method='auto')`` picks (mirrors scipy 1.17's rule)."""
    if method != "auto":
        return method
    n = d.shape[0]
    if n > 50:
        return "asymptotic"
    nz = d[d != 0]
    has_ties = np.unique(np.abs(nz)).shape[0] < nz.shape[0]
    if not has_ties and nz.shape[0] == n:
        return "exact"
    return "permutation" if n <= 13 else "asymptotic"


def wilcoxon_signed_rank(x, y, *, zero_method: str = "wilcox", method: str = "auto") -> WilcoxonResult:
    """Paired Wilcoxon signed-rank test of per-query values ``x`` (system a) vs ``y`` (system b).

    Zero differences (queries on which both systems have the same reciprocal rank, which is
    common: both rank the gold first) are by default dropped (``zero_method='wilcox'``, the
    classical test and scipy's default); ``'pratt'`` keeps them in the ranking (more
    conservative when zeros abound) and ``'zsplit'`` splits them. ``method`` is passed to scipy
    (``'auto'``: exact for n <= 50 without ties/zeros, a full permutation test for n <= 13 with
    ties, else the normal approximation with tie correction; no continuity correction).
    """
    if zero_method not in ("wilcox", "pratt", "zsplit"):
        raise ValueError(f"zero_method must be 'wilcox', 'pratt' or 'zsplit', got {zero_method!r}")
    x, y = _paired_queries(x, y)
    d = x - y
    n = d.shape[0]
    zero = d == 0
    n_zero = int(zero.sum())
    n_pos, n_neg = int((d > 0).sum()), int((d < 0).sum())
    if n_zero == n:
        return WilcoxonResult(
            n=n, n_zero=n_zero, n_positive=0, n_negative=0, zero_method=zero_method, method="none",
            w_plus=0.0, w_minus=0.0, statistic=0.0, z_statistic=None, p_two_sided=1.0, p_one_sided=1.0,
            rank_biserial=0.0, note="all differences are zero: no evidence of a difference (p=1 by definition)",
        )
    if zero_method == "wilcox":
        ranks = sps.rankdata(np.abs(d[~zero]))
        dd = d[~zero]
        w_plus, w_minus = float(ranks[dd > 0].sum()), float(ranks[dd < 0].sum())
        total = float(ranks.sum())
    else:
        ranks = sps.rankdata(np.abs(d))
        w_plus, w_minus = float(ranks[d > 0].sum()), float(ranks[d < 0].sum())
        if zero_method == "zsplit":
            half = float(ranks[zero].sum()) / 2
            w_plus, w_minus = w_plus + half, w_minus + half
        total = float(ranks.sum())
    used = _scipy_method_used(d, method)
    # scipy attaches the z statistic only when 'asymptotic' is asked for by name; the p-values
    # are the same as with 'auto' resolving to it.
    call_method = "asymptotic" if used == "asymptotic" else method
    two = sps.wilcoxon(x, y, zero_method=zero_method, alternative="two-sided", method=call_method)
    one = sps.wilcoxon(x, y, zero_method=zero_method, alternative="greater", method=call_method)
    z = getattr(two, "zstatistic", None)
    return WilcoxonResult(
        n=n,
        n_zero=n_zero,
        n_positive=n_pos,
        n_negative=n_neg,
        zero_method=zero_method,
        method=used,
        w_plus=w_plus,
        w_minus=w_minus,
        statistic=float(two.statistic),
        z_statistic=None if z is None else float(z),
        p_two_sided=float(two.pvalue),
        p_one_sided=float(one.pvalue),
        rank_biserial=(w_plus - w_minus) / total,
    )


@dataclass(frozen=True)
class BootstrapResult(_Serializable):
    """Paired bootstrap of the mean difference ``mean(a) - mean(b)`` (the MRR difference when the
    inputs are reciprocal ranks).

    Queries are resampled with replacement (the same resampled queries for both systems).
    ``ci_low``/``ci_high``: percentile interval. ``p_two_sided = (1 + #{|θ*−θ̂| >= |θ̂|}) / (B + 1)``
    and ``p_one_sided = (1 + #{θ*−θ̂ >= θ̂}) / (B + 1)`` (H1: a > b): the bootstrap distribution
    shifted to the null (Efron & Tibshirani 1993, §16.4). ``se``: SD of the bootstrap
    differences. All-zero differences give ``θ̂ = 0``, a degenerate CI ``[0, 0]`` and ``p = 1``.
    """

    n: int
    n_resamples: int
    seed: int
    confidence: float
    mean_a: float
    mean_b: float
    mean_diff: float
    se: float
    ci_low: float
    ci_high: float
    p_two_sided: float
    p_one_sided: float


def bootstrap_mean_differences(d, n_resamples: int, rng: np.random.Generator, *, max_elements: int = 1 << 23) -> np.ndarray:
    """``n_resamples`` bootstrap replicates of ``mean(d)`` (float64 ``[B]``), vectorised in chunks.

    Exact shortcut: zero differences contribute nothing to a resample's sum, so per resample only
    the number of draws that land on non-zero entries matters (``Binomial(n, m/n)``), and those
    draws are uniform over the ``m`` non-zero entries. This equals the plain bootstrap in
    distribution but draws only ~``m/n`` of the indices.
    """
    d = np.asarray(d, dtype=np.float64)
    n = d.shape[0]
    nz = d[d != 0]
    m = nz.shape[0]
    out = np.zeros(n_resamples, dtype=np.float64)
    if m == 0:
        return out
    per = max(1, int(max_elements // max(m, 1)))
    for lo in range(0, n_resamples, per):
        b = min(per, n_resamples - lo)
        if m == n:
            counts = np.full(b, n, dtype=np.int64)
        else:
            counts = rng.binomial(n, m / n, size=b)
        total = int(counts.sum())
        vals = nz[rng.integers(0, m, size=total)]
        starts = np.zeros(b, dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        nonempty = counts > 0  # reduceat needs in-range starts and gives vals[start] for empty runs
        sums = np.zeros(b, dtype=np.float64)
        if nonempty.any():
            sums[nonempty] = np.add.reduceat(vals, starts[nonempty]) if total else 0.0
        out[lo : lo + b] = sums / n
    return out


def paired_bootstrap(
    x,
    y,
    *,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapResult:
    """Seeded paired bootstrap CI and p-value of ``mean(x) - mean(y)`` over queries."""
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    if not 0 < confidence < 1:
        raise ValueError("confidence must lie in (0, 1)")
    x, y = _paired_queries(x, y)
    d = x - y
    theta = float(d.mean())
    rng = np.random.default_rng(seed)
    boot = bootstrap_mean_differences(d, n_resamples, rng)
    lo, hi = np.quantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2])
    shifted = boot - theta
    # tolerance: resamples that reproduce θ̂ exactly should count as "as extreme" despite rounding
    eps = 1e-12 * max(1.0, abs(theta))
    p_two = (1 + int(np.count_nonzero(np.abs(shifted) >= abs(theta) - eps))) / (n_resamples + 1)
    p_one = (1 + int(np.count_nonzero(shifted >= theta - eps))) / (n_resamples + 1)
    return BootstrapResult(
        n=int(d.shape[0]),
        n_resamples=int(n_resamples),
        seed=int(seed),
        confidence=confidence,
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
        mean_diff=theta,
        se=float(boot.std(ddof=1)) if n_resamples > 1 else 0.0,
        ci_low=float(lo),
        ci_high=float(hi),
        p_two_sided=min(1.0, p_two),
        p_one_sided=min(1.0, p_one),
    )


@dataclass(frozen=True)
class PerQueryTests(_Serializable):
    """Query-level comparison of reciprocal ranks: MRRs, difference, ``d_z`` of the per-query
    differences (0 when they have no variance), the Wilcoxon test and the paired bootstrap."""

    n: int
    mrr_a: float
    mrr_b: float
    mrr_diff: float
    cohens_dz: float
    wilcoxon: WilcoxonResult
    bootstrap: BootstrapResult
    notes: list[str] = field(default_factory=list)


def per_query_tests(
    rr_a,
    rr_b,
    *,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
    zero_method: str = "wilcox",
    from_ranks: bool = False,
) -> PerQueryTests:
    """Wilcoxon + paired bootstrap on per-query reciprocal ranks of ``a`` vs ``b``.

    ``rr_a``/``rr_b``: ``[Q]`` reciprocal ranks of the same queries in the same order (or
    ``[seeds, Q]``, averaged over seeds per query). ``from_ranks=True``: the inputs are ranks.
    """
    if from_ranks:
        rr_a, rr_b = reciprocal_ranks(rr_a), reciprocal_ranks(rr_b)
    x, y = _paired_queries(rr_a, rr_b)
    d = x - y
    sd = float(d.std(ddof=1))
    notes = []
    if sd == 0.0:
        dz = 0.0 if d[0] == 0 else math.copysign(math.inf, d[0])
        notes.append("per-query differences have zero variance")
    else:
        dz = float(d.mean()) / sd
    return PerQueryTests(
        n=int(d.shape[0]),
        mrr_a=float(x.mean()),
        mrr_b=float(y.mean()),
        mrr_diff=float(d.mean()),
        cohens_dz=dz,
        wilcoxon=wilcoxon_signed_rank(x, y, zero_method=zero_method),
        bootstrap=paired_bootstrap(x, y, n_resamples=n_resamples, seed=seed, confidence=confidence),
        notes=notes,
    )


__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "DEFAULT_METRICS",
    "BootstrapResult",
    "PerQueryTests",
    "SeedTTestResult",
    "WilcoxonResult",
    "bootstrap_mean_differences",
    "paired_bootstrap",
    "paired_seed_ttest",
    "per_query_tests",
    "reciprocal_ranks",
    "seed_level_tests",
    "wilcoxon_signed_rank",
]
