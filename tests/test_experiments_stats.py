"""prism.experiments.stats: the rliable aggregate against brute force on small synthetic scores (IQM = mean of
the middle 50 % of the pooled scores; P(X > Y) = mean over envs of the Mann–Whitney fraction, ties ½)."""

from __future__ import annotations

import numpy as np
import pytest
from rliable import metrics

from prism.experiments.grid import Aggregate
from prism.experiments.stats import aggregate, normalised_scores, probability_of_improvement


def _brute_improvement(x: np.ndarray, y: np.ndarray) -> float:
    per_env = []
    for env in range(x.shape[1]):
        wins = [1.0 if a > b else 0.5 if a == b else 0.0 for a in x[:, env] for b in y[:, env]]
        per_env.append(sum(wins) / len(wins))
    return sum(per_env) / len(per_env)


def test_probability_of_improvement_is_the_mann_whitney_fraction_and_rliables_number():
    rng = np.random.default_rng(3)
    for _ in range(20):
        # integers: many ties, within and across arms; different run counts per arm
        x, y = rng.integers(0, 4, (5, 3)).astype(float), rng.integers(0, 4, (4, 3)).astype(float)
        expected = _brute_improvement(x, y)
        assert probability_of_improvement(x, y) == pytest.approx(expected)
        assert metrics.probability_of_improvement(x, y) == pytest.approx(expected)


def test_aggregate_iqm_and_improvement_match_brute_force_and_their_cis_bracket_them():
    envs = ("a", "b")
    finals = {  # 4 runs × 2 envs = 8 scores per arm: the IQM is the mean of the middle 4
        ("a", "oracle"): [10.0, 10.0, 10.0, 10.0],
        ("b", "oracle"): [4.0, 6.0, 5.0, 5.0],
        ("a", "prism"): [12.0, 3.0, 9.0, 30.0],
        ("b", "prism"): [5.0, 1.0, 7.5, 2.5],
        ("a", "uniform"): [9.0, 12.0, 12.0, 8.0],
        ("b", "uniform"): [5.0, 5.0, 4.0, 6.5],
    }
    spec = Aggregate("oracle", ("oracle", "prism", "uniform"), (("prism", "uniform"),))
    result = aggregate(finals, envs, spec, resamples=300)
    assert result.envs == envs and result.runs == {"oracle": 4, "prism": 4, "uniform": 4}
    for arm in spec.arms:
        pooled = sorted([v / 10.0 for v in finals[("a", arm)]] + [v / 5.0 for v in finals[("b", arm)]])
        assert result.iqm[arm].value == pytest.approx(sum(pooled[2:6]) / 4)
        assert result.iqm[arm].low <= result.iqm[arm].value <= result.iqm[arm].high
    x = np.array([finals[("a", "prism")], finals[("b", "prism")]]).T / [10.0, 5.0]
    y = np.array([finals[("a", "uniform")], finals[("b", "uniform")]]).T / [10.0, 5.0]
    improvement = result.improvement[("prism", "uniform")]
    assert improvement.value == pytest.approx(_brute_improvement(x, y))
    assert 0.0 <= improvement.low <= improvement.value <= improvement.high <= 1.0


def test_normalised_scores_keep_envs_where_every_arm_has_two_runs_and_trim_to_common_counts():
    finals = {
        ("a", "oracle"): [2.0, 2.0, 2.0],
        ("a", "prism"): [1.0, 2.0, 3.0],
        ("b", "oracle"): [4.0, 4.0],
        ("b", "prism"): [8.0, 4.0],
        ("c", "oracle"): [1.0, 1.0],
        ("c", "prism"): [1.0],  # one run: env c is left out
    }
    used, scores = normalised_scores(finals, ("a", "b", "c"), Aggregate("oracle", ("prism",), ()))
    assert used == ("a", "b")
    np.testing.assert_allclose(scores["prism"], [[0.5, 2.0], [1.0, 1.0]])  # a's first two runs / 2, b's / 4
    assert aggregate(finals, ("c",), Aggregate("oracle", ("prism",), ())) is None


def test_aggregate_intervals_are_the_same_when_recomputed_and_leave_numpys_global_state_alone():
    """rliable 1.2 resamples with NumPy's global generator whatever ``random_state`` it is handed: without
    seeding that one, a report recomputed from the same runs printed different CIs."""
    rng = np.random.default_rng(0)
    envs = ("a", "b", "c")
    finals = {
        (env, arm): list(rng.uniform(1, 10, 5)) for env in envs for arm in ("oracle", "prism", "uniform")
    }
    spec = Aggregate("oracle", ("oracle", "prism", "uniform"), (("prism", "uniform"),))
    np.random.seed(1)
    first = aggregate(finals, envs, spec, resamples=200)
    after_first = np.random.random()
    np.random.seed(2)  # a different global state before the second call
    second = aggregate(finals, envs, spec, resamples=200)
    assert first.iqm == second.iqm and first.improvement == second.improvement
    np.random.seed(1)
    assert np.random.random() == after_first  # the caller's global stream went on as if untouched
    assert aggregate(finals, envs, spec, resamples=200, seed=1).iqm != first.iqm  # the seed does matter


def test_compare_of_unequal_groups_is_a_brute_force_percentile_bootstrap():
    """8 seeds against 3: each group resampled with its own size (a resample of y with x's size would narrow
    the interval), the ratio of means, Welch's p; against a loop written out with another generator."""
    from scipy import stats as scipy_stats

    from prism.experiments.stats import compare

    x = np.array([10.0, 12.0, 9.0, 11.5, 10.5, 13.0, 8.5, 12.5])
    y = np.array([9.0, 14.0, 6.0])
    got = compare(list(x), list(y), resamples=40_000)
    rng = np.random.default_rng(123)
    ratios = []
    for _ in range(40_000):
        xs = x[rng.integers(0, len(x), len(x))].mean()
        ys = y[rng.integers(0, len(y), len(y))].mean()
        ratios.append(xs / ys)
    low, high = np.percentile(ratios, [2.5, 97.5])
    assert got["ratio"] == pytest.approx(x.mean() / y.mean())
    assert got["p_welch"] == pytest.approx(scipy_stats.ttest_ind(x, y, equal_var=False).pvalue)
    # (y has 3 seeds: its bootstrap means sit on a lattice, so a percentile may step to a neighbouring atom;
    # the tolerance is far below what resampling y with 8 draws gives: [0.88, 1.48] here)
    assert got["ci_low"] == pytest.approx(low, abs=0.03) and got["ci_high"] == pytest.approx(high, abs=0.05)
    assert high - low > 0.5  # (y's own 3-seed spread: wide; with 8 draws of y it would be about half)


def test_compare_against_zeros_is_nan_without_raising_and_zeros_against_b_a_ratio_of_zero():
    from prism.experiments.stats import compare

    nan = compare([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert all(np.isnan(v) for v in nan.values())
    zero = compare([0.0, 0.0, 0.0], [1.0, 2.0, 3.0])
    assert zero["ratio"] == 0.0 and zero["ci_low"] == 0.0 and zero["ci_high"] == 0.0
    assert 0.0 < zero["p_welch"] < 0.1
