"""Tests for raptor.evaluation.stats: seed-level paired t-test, Wilcoxon signed-rank, paired bootstrap."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from raptor.evaluation.stats import (
    bootstrap_mean_differences,
    paired_bootstrap,
    paired_seed_ttest,
    per_query_tests,
    reciprocal_ranks,
    seed_level_tests,
    wilcoxon_signed_rank,
)


def dumps_strict(obj) -> str:
    return json.dumps(obj, allow_nan=False)


# ------------------------------------------------------------------------------------------
# seed level
# ------------------------------------------------------------------------------------------


class TestPairedSeedTTest:
    a = [0.5, 0.6, 0.7]
    b = [0.4, 0.45, 0.65]  # d = [0.10, 0.15, 0.05]: mean 0.1, sd 0.05

    def test_hand_computed(self):
        r = paired_seed_ttest(self.a, self.b, metric="mrr")
        se = 0.05 / math.sqrt(3)
        t = 0.1 / se  # = 2 sqrt(3)
        assert r.n == 3 and r.df == 2 and r.metric == "mrr"
        assert r.mean_diff == pytest.approx(0.1)
        assert r.sd_diff == pytest.approx(0.05)
        assert r.se_diff == pytest.approx(se)
        assert r.t_statistic == pytest.approx(2 * math.sqrt(3))
        # Student t with 2 df has a closed-form tail: P(T > t) = (1 - t / sqrt(t^2 + 2)) / 2
        p_one = (1 - t / math.sqrt(t * t + 2)) / 2
        assert r.p_one_sided == pytest.approx(p_one, rel=1e-9)
        assert r.p_two_sided == pytest.approx(2 * p_one, rel=1e-9)
        assert r.p_two_sided == pytest.approx(0.0741799, abs=1e-7)
        half = 4.302652729911275 * se  # t_{0.975, 2}
        assert r.ci_low == pytest.approx(0.1 - half) and r.ci_high == pytest.approx(0.1 + half)
        assert r.cohens_dz == pytest.approx(2.0)
        assert r.mean_a == pytest.approx(0.6) and r.mean_b == pytest.approx(0.5)
        # p_two = 0.074, p_one = 0.037: significant one-sided only
        assert not r.significant_two_sided and r.significant_one_sided

    def test_matches_scipy_and_direction(self):
        rng = np.random.default_rng(3)
        a = rng.normal(0.40, 0.01, 5)
        b = a - rng.normal(0.01, 0.005, 5)
        r = paired_seed_ttest(a, b)
        ref = sps.ttest_rel(a, b)
        assert r.t_statistic == pytest.approx(ref.statistic)
        assert r.p_two_sided == pytest.approx(ref.pvalue)
        assert r.p_one_sided == pytest.approx(sps.ttest_rel(a, b, alternative="greater").pvalue)
        assert r.p_one_sided == pytest.approx(r.p_two_sided / 2)  # t > 0
        ci = sps.ttest_rel(a, b).confidence_interval(0.95)
        assert (r.ci_low, r.ci_high) == pytest.approx((ci.low, ci.high))
        swapped = paired_seed_ttest(b, a)
        assert swapped.t_statistic == pytest.approx(-r.t_statistic)
        assert swapped.p_one_sided == pytest.approx(1 - r.p_one_sided)
        assert swapped.cohens_dz == pytest.approx(-r.cohens_dz)

    def test_pairs_by_seed(self):
        a = {0: 0.5, 1: 0.6, 2: 0.7}
        b = {2: 0.65, 0: 0.4, 1: 0.45}  # other insertion order, same pairing
        r = paired_seed_ttest(a, b)
        assert r.seeds == [0, 1, 2]
        assert r.t_statistic == pytest.approx(2 * math.sqrt(3))
        assert r.values_b == [0.4, 0.45, 0.65]

    def test_significant_flags(self):
        r = paired_seed_ttest([0.50, 0.52, 0.51, 0.53, 0.50], [0.40, 0.41, 0.42, 0.40, 0.41], alpha=0.05)
        assert r.significant_one_sided and r.significant_two_sided and r.p_one_sided < 1e-4

    @pytest.mark.parametrize(
        "a, b, err, msg",
        [
            ([0.1, 0.2], [0.1], ValueError, "mismatched lengths"),
            ([0.1], [0.2], ValueError, "at least 2 seeds"),
            ({0: 0.1, 1: 0.2}, {0: 0.1, 2: 0.2}, ValueError, "seeds differ"),
            ({0: 0.1, 1: 0.2}, [0.1, 0.2], TypeError, "mappings"),
            ([0.1, np.nan], [0.1, 0.2], ValueError, "finite"),
            ([[0.1, 0.2]], [[0.1, 0.2]], ValueError, "1-D"),
        ],
    )
    def test_bad_inputs(self, a, b, err, msg):
        with pytest.raises(err, match=msg):
            paired_seed_ttest(a, b)

    def test_all_differences_zero(self):
        r = paired_seed_ttest([0.3, 0.4, 0.5], [0.3, 0.4, 0.5])
        assert r.t_statistic == 0.0 and r.p_two_sided == 1.0 and r.p_one_sided == 1.0
        assert r.cohens_dz == 0.0 and (r.ci_low, r.ci_high) == (0.0, 0.0)
        assert "zero" in r.note and not r.significant_two_sided
        dumps_strict(r.to_dict())

    def test_constant_nonzero_difference(self):
        r = paired_seed_ttest([0.5, 0.75, 1.0], [0.25, 0.5, 0.75])  # exactly representable: d == 0.25
        assert r.t_statistic == math.inf and r.p_two_sided == 0.0 and r.p_one_sided == 0.0
        assert (r.ci_low, r.ci_high) == (0.25, 0.25)
        d = r.to_dict()
        assert d["t_statistic"] is None and d["cohens_dz"] is None and d["note"]
        dumps_strict(d)
        neg = paired_seed_ttest([0.25, 0.5, 0.75], [0.5, 0.75, 1.0])
        assert neg.t_statistic == -math.inf and neg.p_one_sided == 1.0

    def test_differences_equal_to_rounding_are_constant_and_warn_nothing(self):
        """0.1 + 0.2 - 0.2 and 0.3 - 0.2 differ in their last bits: no variation between seeds, so the
        constant cases' answers (scipy would warn of precision loss and give a t of rounding noise)."""
        import warnings

        a, b = [0.1 + 0.2, 0.3, 0.7], [0.2, 0.2, 0.6]
        d = np.subtract(a, b)
        assert d.max() != d.min()  # the premise: not exactly constant
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            r = paired_seed_ttest(a, b)
            z = paired_seed_ttest([0.1 + 0.2, 0.5], [0.3, 0.5])  # 5.6e-17 and 0: zero to rounding
        assert r.t_statistic == math.inf and r.p_one_sided == 0.0 and r.sd_diff == 0.0
        assert r.ci_low == r.ci_high == pytest.approx(0.1, abs=1e-15) and "rounding" in r.note
        assert z.t_statistic == 0.0 and z.p_two_sided == 1.0 and z.mean_diff == 0.0
        # a real spread, however small against the values, is still tested
        small = paired_seed_ttest([0.5 + 1e-9, 0.5 + 3e-9, 0.5 + 2e-9], [0.5, 0.5, 0.5])
        assert math.isfinite(small.t_statistic) and 0 < small.p_two_sided < 1

    def test_seed_level_tests_over_metrics(self):
        runs_a = {s: {"mrr": 0.5 + 0.01 * s, "hits@1": 0.4 + 0.02 * s, "hits@3": 0.6, "hits@10": 0.7 + 0.01 * (s % 2)} for s in range(5)}
        runs_b = {s: {"mrr": 0.45 + 0.012 * s, "hits@1": 0.38 + 0.01 * s, "hits@3": 0.6, "hits@10": 0.69} for s in range(5)}
        out = seed_level_tests(runs_a, runs_b)
        assert list(out) == ["mrr", "hits@1", "hits@3", "hits@10"]
        assert out["mrr"].metric == "mrr" and out["mrr"].n == 5
        assert out["hits@3"].p_two_sided == 1.0  # identical values
        dumps_strict({k: v.to_dict() for k, v in out.items()})
        with pytest.raises(KeyError, match="hits@5"):
            seed_level_tests(runs_a, runs_b, metrics=["hits@5"])


# ------------------------------------------------------------------------------------------
# Wilcoxon
# ------------------------------------------------------------------------------------------


class TestWilcoxon:
    def test_textbook_exact(self):
        # d = [1, -2, 3, 4, -5, 6]: |d| ranks 1..6, W+ = 1+3+4+6 = 14, W- = 2+5 = 7
        y = np.zeros(6)
        x = np.array([1.0, -2, 3, 4, -5, 6])
        r = wilcoxon_signed_rank(x, y)
        assert (r.w_plus, r.w_minus) == (14.0, 7.0)
        assert r.statistic == 7.0 and r.method == "exact"
        # exact null: W+ is the sum of a uniformly random subset of {1..6}
        sums = [sum(c) for k in range(7) for c in itertools.combinations(range(1, 7), k)]
        p_le7 = sum(s <= 7 for s in sums) / 64
        assert p_le7 == 18 / 64  # sums 0..7 occur 1,1,1,2,2,3,4,4 times
        assert r.p_two_sided == pytest.approx(2 * p_le7)
        assert r.p_one_sided == pytest.approx(sum(s >= 14 for s in sums) / 64)
        assert r.rank_biserial == pytest.approx((14 - 7) / 21)
        assert (r.n, r.n_zero, r.n_positive, r.n_negative) == (6, 0, 4, 2)

    @pytest.mark.parametrize(
        "zero_method, w_plus, w_minus, rbc",
        [
            ("wilcox", 13.0, 2.0, 11 / 15),  # zeros dropped: ranks of |1,-2,3,3,4| = 1,2,3.5,3.5,5
            ("pratt", 21.0, 4.0, 17 / 28),  # zeros ranked (1.5, 1.5) then dropped
            ("zsplit", 22.5, 5.5, 17 / 28),  # zero ranks split evenly
        ],
    )
    def test_zero_handling(self, zero_method, w_plus, w_minus, rbc):
        d = np.array([0.0, 0, 1, -2, 3, 3, 4])
        r = wilcoxon_signed_rank(d, np.zeros(7), zero_method=zero_method)
        assert (r.w_plus, r.w_minus) == (w_plus, w_minus)
        assert r.rank_biserial == pytest.approx(rbc)
        assert r.n_zero == 2
        ref_greater = sps.wilcoxon(d, zero_method=zero_method, alternative="greater")
        assert r.w_plus == pytest.approx(float(ref_greater.statistic))  # scipy's one-sided stat is W+
        assert r.p_one_sided == pytest.approx(float(ref_greater.pvalue))

    def test_large_matches_scipy_asymptotic(self):
        rng = np.random.default_rng(0)
        b = 1.0 / rng.integers(1, 30, 2000)
        a = np.where(rng.random(2000) < 0.3, 1.0 / rng.integers(1, 20, 2000), b)  # many zeros, ties
        r = wilcoxon_signed_rank(a, b)
        ref = sps.wilcoxon(a, b)
        assert r.method == "asymptotic" and r.z_statistic is not None
        assert r.p_two_sided == pytest.approx(ref.pvalue)
        assert r.statistic == pytest.approx(ref.statistic)
        assert r.n_zero == int((a == b).sum()) and r.n_zero > 1000
        assert -1 <= r.rank_biserial <= 1
        dumps_strict(r.to_dict())

    def test_all_zero(self):
        r = wilcoxon_signed_rank([0.5, 1.0, 0.25], [0.5, 1.0, 0.25])
        assert r.p_two_sided == 1.0 and r.p_one_sided == 1.0 and r.rank_biserial == 0.0 and r.note
        dumps_strict(r.to_dict())

    def test_one_sided_direction(self):
        rng = np.random.default_rng(1)
        b = rng.random(200)
        a = b + 0.05 + 0.01 * rng.standard_normal(200)
        assert wilcoxon_signed_rank(a, b).p_one_sided < 1e-10
        assert wilcoxon_signed_rank(b, a).p_one_sided > 0.99
        assert wilcoxon_signed_rank(a, b).rank_biserial == pytest.approx(1.0)

    @pytest.mark.parametrize("x, y, msg", [([1.0, 2.0], [1.0], "mismatched"), ([1.0], [1.0], "at least 2"), ([1.0, np.inf], [1.0, 1.0], "finite")])
    def test_bad(self, x, y, msg):
        with pytest.raises(ValueError, match=msg):
            wilcoxon_signed_rank(x, y)
        with pytest.raises(ValueError, match=msg):
            paired_bootstrap(x, y, n_resamples=10)

    def test_bad_zero_method(self):
        with pytest.raises(ValueError, match="zero_method"):
            wilcoxon_signed_rank([1.0, 2.0], [0.0, 0.0], zero_method="drop")


# ------------------------------------------------------------------------------------------
# bootstrap
# ------------------------------------------------------------------------------------------


class TestBootstrap:
    def test_shortcut_matches_plain_bootstrap_in_distribution(self):
        rng = np.random.default_rng(5)
        n = 300
        d = np.where(rng.random(n) < 0.7, 0.0, rng.normal(0.02, 0.3, n))
        fast = bootstrap_mean_differences(d, 20_000, np.random.default_rng(1), max_elements=50_000)
        plain = d[np.random.default_rng(2).integers(0, n, (20_000, n))].mean(axis=1)
        assert fast.mean() == pytest.approx(plain.mean(), abs=3e-4)
        assert fast.std() == pytest.approx(plain.std(), rel=0.03)
        assert fast.std() == pytest.approx(d.std() / math.sqrt(n), rel=0.03)
        assert sps.ks_2samp(fast, plain).pvalue > 1e-3

    def test_no_zeros_and_all_zeros(self):
        d = np.array([1.0, 2.0, 3.0])
        b = bootstrap_mean_differences(d, 1000, np.random.default_rng(0))
        assert b.min() >= 1.0 and b.max() <= 3.0
        assert np.all(bootstrap_mean_differences(np.zeros(4), 10, np.random.default_rng(0)) == 0)

    def test_ci_covers_true_difference(self):
        rng = np.random.default_rng(11)
        n = 5000
        b = 1.0 / rng.integers(1, 50, n)
        a = b + rng.normal(0.02, 0.15, n)  # population mean difference 0.02
        true = 0.02
        r = paired_bootstrap(a, b, seed=0)
        assert r.n_resamples == 10_000 and r.n == n
        assert r.ci_low < true < r.ci_high
        assert r.ci_low < r.mean_diff < r.ci_high
        assert r.mean_diff == pytest.approx(a.mean() - b.mean())
        assert r.p_one_sided < 0.01 and r.p_two_sided < 0.02
        assert r.se == pytest.approx((a - b).std() / math.sqrt(n), rel=0.05)

    def test_coverage_rate(self):
        rng = np.random.default_rng(12)
        hits, reps = 0, 100
        for i in range(reps):
            d = rng.normal(0.05, 0.3, 200)
            r = paired_bootstrap(d, np.zeros(200), n_resamples=1000, seed=i)
            hits += r.ci_low <= 0.05 <= r.ci_high
        assert hits >= 87  # nominal 95; binomial sd ~2.2

    def test_null_p_value_not_small(self):
        rng = np.random.default_rng(13)
        b = rng.random(1000)
        a = b + rng.normal(0, 0.1, 1000)
        a = a - (a - b).mean()  # exactly zero mean difference
        r = paired_bootstrap(a, b, n_resamples=2000)
        assert r.p_two_sided > 0.9 and 0.3 < r.p_one_sided < 0.7
        assert r.ci_low < 0 < r.ci_high

    def test_strong_effect_minimal_p(self):
        a = np.linspace(0.5, 1.0, 500)
        r = paired_bootstrap(a, a - 0.1, n_resamples=999)
        assert r.p_one_sided == pytest.approx(1 / 1000) and r.p_two_sided == pytest.approx(1 / 1000)

    def test_seeded(self):
        rng = np.random.default_rng(0)
        a, b = rng.random(400), rng.random(400)
        r1, r2 = paired_bootstrap(a, b, seed=3), paired_bootstrap(a, b, seed=3)
        assert r1 == r2
        assert paired_bootstrap(a, b, seed=4).ci_low != r1.ci_low

    def test_all_zero(self):
        r = paired_bootstrap([0.5, 0.25, 1.0], [0.5, 0.25, 1.0], n_resamples=100)
        assert (r.ci_low, r.ci_high, r.mean_diff, r.se) == (0.0, 0.0, 0.0, 0.0)
        assert r.p_two_sided == 1.0 and r.p_one_sided == 1.0
        dumps_strict(r.to_dict())

    def test_bad_params(self):
        with pytest.raises(ValueError, match="n_resamples"):
            paired_bootstrap([1.0, 2.0], [1.0, 1.0], n_resamples=0)
        with pytest.raises(ValueError, match="confidence"):
            paired_bootstrap([1.0, 2.0], [1.0, 1.0], confidence=1.5)


# ------------------------------------------------------------------------------------------
# per-query bundle
# ------------------------------------------------------------------------------------------


class TestPerQuery:
    def test_from_ranks_and_json(self):
        rng = np.random.default_rng(21)
        rb = rng.integers(1, 40, 800).astype(float)
        ra = np.maximum(1.0, rb - rng.integers(0, 3, 800))  # a ranks better or equal
        out = per_query_tests(ra, rb, from_ranks=True, n_resamples=2000)
        assert out.mrr_a == pytest.approx(np.mean(1 / ra)) and out.mrr_b == pytest.approx(np.mean(1 / rb))
        assert out.mrr_diff > 0 and out.cohens_dz > 0
        assert out.wilcoxon.n_negative == 0 and out.wilcoxon.rank_biserial == pytest.approx(1.0)
        assert out.bootstrap.mean_diff == pytest.approx(out.mrr_diff)
        s = dumps_strict(out.to_dict())
        assert json.loads(s)["wilcoxon"]["zero_method"] == "wilcox"

    def test_seed_matrix_averaged_per_query(self):
        rng = np.random.default_rng(22)
        a = rng.random((5, 300))
        b = rng.random((5, 300))
        out = per_query_tests(a, b, n_resamples=500)
        assert out.n == 300
        assert out.mrr_a == pytest.approx(a.mean())

    def test_identical_runs(self):
        rr = 1.0 / np.arange(1, 21)
        out = per_query_tests(rr, rr, n_resamples=100)
        assert out.cohens_dz == 0.0 and out.notes
        assert out.wilcoxon.p_two_sided == 1.0 and out.bootstrap.p_two_sided == 1.0
        dumps_strict(out.to_dict())

    def test_reciprocal_ranks(self):
        assert reciprocal_ranks([1, 2, 4.0]).tolist() == [1.0, 0.5, 0.25]
        with pytest.raises(ValueError, match="ranks must be finite and >= 1"):
            reciprocal_ranks([0.5])
        with pytest.raises(ValueError, match="mismatched"):
            per_query_tests([1.0, 2.0, 3.0], [1.0, 2.0], from_ranks=True)


def test_probabilities_are_printed_with_enough_precision():
    from raptor.evaluation.stats import format_probability, rounded

    assert format_probability(0.5) == "0.500" and format_probability(0.0123) == "0.012"
    assert format_probability(0.00004123) == "4.12e-05" and format_probability(0.0) == "0"
    assert rounded({"d_z": 0.7071067811865476, "n": 3, "xs": [1.23456789]}) == {"d_z": 0.7071, "n": 3, "xs": [1.235]}
