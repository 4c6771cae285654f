"""prism.experiments.inference against statsmodels and scipy: Holm's adjustment, the two one-sided tests of a
ratio of means, the Welch–Fieller interval, and the verdict words they allow."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from prism.experiments import inference

multitest = pytest.importorskip("statsmodels.stats.multitest")
weightstats = pytest.importorskip("statsmodels.stats.weightstats")


def _arms(rng, n_x=5, n_y=5, ratio=1.1):
    y = rng.normal(100.0, 8.0, n_y)
    return rng.normal(100.0 * ratio, 10.0, n_x), y


def test_holm_is_statsmodels_holm_and_leaves_nans_out_of_the_family():
    rng = np.random.default_rng(0)
    for k in (1, 2, 4, 9):
        p = rng.uniform(0, 0.2, k)
        expected = multitest.multipletests(p, method="holm")[1]
        assert inference.holm(list(p)) == pytest.approx(list(expected))
    # table1-study's family (PRISM vs baseline per env, the HV Welch p's): two survive
    assert inference.holm([0.0026, 0.1135, 0.00073, 0.70]) == pytest.approx([0.0078, 0.227, 0.00292, 0.70])
    assert math.isnan(inference.holm([0.01, math.nan, 0.04])[1])
    assert inference.holm([0.01, math.nan, 0.04])[::2] == pytest.approx([0.02, 0.04])


def test_ratio_p_at_one_is_welchs_test_and_at_r_the_test_of_x_against_r_y():
    rng = np.random.default_rng(1)
    for n_x, n_y in ((5, 5), (5, 10), (3, 7)):  # arms may have different seed counts
        x, y = _arms(rng, n_x, n_y)
        assert inference.ratio_p(x, y) == pytest.approx(stats.ttest_ind(x, y, equal_var=False).pvalue)
        assert inference.ratio_p(x, y, 1.2) == pytest.approx(
            stats.ttest_ind(x, 1.2 * y, equal_var=False).pvalue
        )


@pytest.mark.parametrize("margin", [0.05, 0.1, 0.25])
def test_tost_ratio_is_statsmodels_ttost_ind_at_each_margin_bound(margin):
    rng = np.random.default_rng(2)
    for n_x, n_y in ((5, 5), (5, 10), (4, 6)):
        x, y = _arms(rng, n_x, n_y, ratio=1.0 + rng.uniform(-0.1, 0.1))
        # each one-sided half is Welch's test of x − r·y with r the bound: statsmodels' ttost_ind of x and r·y
        lower = weightstats.ttost_ind(x, (1 - margin) * y, 0.0, 0.0, usevar="unequal")[1][1]
        upper = weightstats.ttost_ind(x, (1 + margin) * y, 0.0, 0.0, usevar="unequal")[2][1]
        assert inference.tost_ratio(x, y, margin) == pytest.approx(max(lower, upper))


def test_the_interval_ends_are_where_welchs_p_is_alpha_and_tost_agrees_with_the_90_interval():
    rng = np.random.default_rng(3)
    for _ in range(10):
        x, y = _arms(rng, 5, int(rng.integers(3, 11)), ratio=rng.uniform(0.9, 1.3))
        low, high = inference.ratio_interval(x, y)
        assert low < x.mean() / y.mean() < high
        for end in (low, high):
            assert stats.ttest_ind(x, end * y, equal_var=False).pvalue == pytest.approx(0.05, abs=1e-6)
        low90, high90 = inference.ratio_interval(x, y, level=0.90)
        for margin in (0.05, 0.1, 0.2):
            inside = 1 - margin < low90 and high90 < 1 + margin
            assert (inference.tost_ratio(x, y, margin) < 0.05) == inside


def test_the_interval_is_not_the_anti_conservative_percentile_bootstrap():
    # 5 seeds a side: the percentile bootstrap's 95 % CI is narrower and can exclude 1 where Welch's p > 0.05;
    # the Welch–Fieller interval excludes 1 exactly when Welch's p < 0.05.
    from prism.experiments.stats import compare

    rng = np.random.default_rng(4)
    narrower = 0
    for _ in range(20):
        x, y = _arms(rng, ratio=1.12)
        low, high = inference.ratio_interval(x, y)
        boot = compare(list(x), list(y), resamples=2000)
        narrower += (boot["ci_high"] - boot["ci_low"]) < (high - low)
        assert (low > 1 or high < 1) == (boot["p_welch"] < 0.05)
    assert narrower == 20


def test_an_unbounded_interval_and_unusable_arms():
    x, y = [10.0, 11.0, 9.0], [0.1, 5.0, -4.0]  # ȳ barely above 0: every large ratio is kept
    assert inference.ratio_interval(x, y)[1] == math.inf
    assert all(math.isnan(v) for v in inference.ratio_interval([1.0], [1.0, 2.0]))
    assert math.isnan(inference.tost_ratio([1.0, 2.0], [-1.0, -2.0], 0.05))


def test_verdict_words():
    v = inference.verdict
    assert v(True, 0.003, 0.008, 0.9) == "beats"
    assert v(False, 0.003, 0.008, 0.9) == "loses to"
    assert v(True, 0.02, 0.06, 0.9) == "not distinguishable"  # primary, but not after Holm
    assert v(True, 0.02, None, 0.9) == "ahead (exploratory)"
    assert v(False, 0.02, None, 0.9) == "behind (exploratory)"
    assert v(True, 0.8, None, 0.01) == "ties"
    assert v(True, 0.8, None, 0.2) == "not distinguishable"
    assert v(True, 0.8, 0.9, math.nan) == "not distinguishable"


def test_a_row_over_a_negative_mean_takes_its_direction_from_the_difference():
    # EUM on halfcheetah: B's mean is negative, so A / B < 0 although A is far ahead
    from prism.experiments.grid import Preset, Ratio
    from prism.experiments.ratios import ratio_rows, ratio_table, undefined_note

    preset = Preset(
        ("hopper",), ("prism", "baseline"), (0, 1, 2), (), "", ratios=(Ratio("prism", "baseline"),)
    )
    finals = {"prism": [40.0, 45.0, 50.0], "baseline": [-1.0, -2.0, -1.5]}
    table = {
        ("hopper", arm): {f"final_{m}": values for m in ("hv", "eum", "vo")} for arm, values in finals.items()
    }
    (row, *_) = ratio_rows(preset, table, {})
    # B's mean is negative: A / B is no ratio of means, so no ratio, interval, TOST p or verdict, only the
    # difference's Welch p; and one rule whichever side is negative (A's mean below 0 over B's above it)
    assert math.isnan(row.boot["ratio"]) and row.boot["p_welch"] < 0.05
    assert all(math.isnan(v) for v in (*row.interval, row.p_tost, row.boot["ci_low"]))
    assert row.verdict == "—"
    swapped = {
        k: {m: values for m in ("final_hv", "final_eum", "final_vo")}
        for k, values in (
            (("hopper", "prism"), finals["baseline"]),
            (("hopper", "baseline"), finals["prism"]),
        )
    }
    (row, *_) = ratio_rows(preset, swapped, {})
    assert math.isnan(row.boot["ratio"]) and math.isnan(row.interval[0]) and math.isnan(row.p_tost)
    assert row.verdict == "—"
    lines, _ = ratio_table(preset, [row])
    assert lines[-1].split(" | ")[5:8] == ["—", "—", "—"] and lines[-1].endswith("| — | — |")
    assert "a ratio of such means is not defined" in undefined_note([row])[-1]


def test_the_interval_holds_its_level_at_five_seeds_where_the_percentile_bootstrap_does_not():
    # Coverage of the true ratio 1.2 over 200 simulated 5-vs-5 studies (normal seeds, CV 10–20 %): the
    # Welch–Fieller interval keeps about its 95 %, the percentile bootstrap falls well short of it.
    from prism.experiments.stats import compare

    rng = np.random.default_rng(5)
    fieller = boot = 0
    studies = 200
    for _ in range(studies):
        x, y = rng.normal(120.0, 24.0, 5), rng.normal(100.0, 10.0, 5)
        low, high = inference.ratio_interval(x, y)
        fieller += low <= 1.2 <= high
        b = compare(list(x), list(y), resamples=1000, seed=int(rng.integers(1 << 30)))
        boot += b["ci_low"] <= 1.2 <= b["ci_high"]
    assert fieller / studies >= 0.92
    assert boot / studies <= fieller / studies - 0.04


def test_a_rows_direction_compares_means_not_sums_when_the_arms_have_unequal_seed_counts():
    # A: 3 seeds around 10 (sum 30); B: 6 seeds around 6 (sum 36). A is ahead; a sum would call it behind.
    from prism.experiments.grid import Preset, Ratio
    from prism.experiments.ratios import ratio_rows

    preset = Preset(
        ("hopper",), ("prism", "baseline"), tuple(range(6)), (), "", ratios=(Ratio("prism", "baseline"),)
    )
    finals = {"prism": [9.9, 10.0, 10.1], "baseline": [5.9, 6.0, 6.1, 5.9, 6.0, 6.1]}
    table = {
        ("hopper", arm): {f"final_{m}": values for m in ("hv", "eum", "vo")} for arm, values in finals.items()
    }
    (row, *_) = ratio_rows(preset, table, {})
    assert row.ahead and row.boot["p_welch"] < 0.05
    assert row.verdict == "ahead (exploratory)"
