"""Statistics of a report: mean ± standard error over seeds, ratios of two arms (Welch's t-test and a bootstrap
CI over seeds), and the cross-env aggregate of Agarwal et al. (2021, "Deep RL at the edge of the statistical
precipice") computed with **rliable**: the interquartile mean (IQM) of oracle-normalised final HV per arm
and the probability of improvement P(X > Y), each with a stratified-bootstrap 95 % CI.

rliable is an optional dependency (``pip install -e ".[report]"``), imported only when an aggregate is asked
for.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from prism.core.errors import ConfigError
from prism.experiments.grid import Aggregate

AGGREGATE_RESAMPLES = 2_000
"""Bootstrap replications of the rliable intervals (rliable's own examples use 2 000 to 50 000)."""


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (sample std / √n) of ``values``; NaN where undefined."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def compare(a: list[float], b: list[float], *, resamples: int = 10_000, seed: int = 0) -> dict[str, float]:
    """Arm-A-vs-B statistics over seeds: ratio of means, Welch's t-test (two-sided p) and a percentile
    bootstrap 95% CI of the ratio of means (seeds resampled with replacement within each group)."""
    from scipy import stats

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2 or len(y) < 2 or y.mean() == 0:
        return {"ratio": math.nan, "p_welch": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    p = float(stats.ttest_ind(x, y, equal_var=False).pvalue)
    rng = np.random.default_rng(seed)
    xs = x[rng.integers(0, len(x), (resamples, len(x)))].mean(1)
    ys = y[rng.integers(0, len(y), (resamples, len(y)))].mean(1)
    ok = ys != 0
    low, high = np.percentile(xs[ok] / ys[ok], [2.5, 97.5])
    return {"ratio": float(x.mean() / y.mean()), "p_welch": p, "ci_low": float(low), "ci_high": float(high)}


def rate_interval(successes: int, trials: int) -> tuple[float, float]:
    """The exact (Clopper–Pearson) 95 % CI of a success rate ``successes / trials``: the rates p at which
    seeing ``successes`` or more (for the lower end), or as few (for the upper end), has probability 2.5 %.
    NaNs without trials."""
    from scipy import stats

    if trials == 0:
        return math.nan, math.nan
    interval = stats.binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="exact")
    return float(interval.low), float(interval.high)


def fisher_exact_p(successes_x: int, trials_x: int, successes_y: int, trials_y: int) -> float:
    """Two-sided p of Fisher's exact test that two arms share one success rate (e.g. the seeds that took off):
    with the margins fixed, the hypergeometric probability of every 2 × 2 table no more likely than the one
    seen. NaN when an arm has no trials."""
    from scipy import stats

    if trials_x == 0 or trials_y == 0:
        return math.nan
    table = [[successes_x, trials_x - successes_x], [successes_y, trials_y - successes_y]]
    return float(stats.fisher_exact(table, alternative="two-sided").pvalue)


def _rliable():
    """rliable's ``library`` and ``metrics`` modules, or a one-line error naming the extra that installs it."""
    try:
        from rliable import library, metrics
    except ImportError:
        raise ConfigError(
            'the rliable aggregate needs rliable; install the report extra: pip install -e ".[report]"'
        ) from None
    return library, metrics


def probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """P(X > Y) of two runs × tasks score matrices: per task, the fraction of (x, y) run pairs with x > y, ties
    counting ½ (the Mann–Whitney U statistic over ``n_x · n_y``), averaged over tasks.

    The same number as ``rliable.metrics.probability_of_improvement``, which calls scipy's Mann–Whitney test
    once per task; this all-pairs form is one broadcast, so the bootstrap's thousands of calls take seconds,
    not minutes."""
    diff = scores_x[:, None, :] - scores_y[None, :, :]  # [n_x, n_y, tasks]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean(axis=(0, 1)).mean())


@dataclass(frozen=True)
class Interval:
    """A point estimate with its stratified-bootstrap 95 % CI."""

    value: float
    low: float
    high: float


@dataclass(frozen=True)
class AggregateResult:
    """The rliable aggregate of a report over the envs (tasks) where every arm has finished runs."""

    envs: tuple[str, ...]
    runs: dict[str, int]
    """Runs per env of each arm (its score matrix is runs × envs)."""
    iqm: dict[str, Interval]
    """IQM of normalised final HV per arm."""
    improvement: dict[tuple[str, str], Interval]
    """P(X > Y) per (X, Y) pair."""


def normalised_scores(
    finals: dict[tuple[str, str], list[float]], envs: tuple[str, ...], spec: Aggregate
) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
    """Per arm of ``spec``, the runs × envs matrix of final values divided by the mean final value of arm
    ``spec.normaliser`` in the same env, over the envs where every arm (and the normaliser) has ≥ 2 runs.

    ``finals`` maps (env, arm) to one final value per seed (in seed order). rliable's score matrices need as
    many runs in every env: an arm with more runs in one env than another keeps its first ``n`` there."""
    arms = tuple(dict.fromkeys((*spec.arms, spec.normaliser)))
    used = tuple(
        env
        for env in envs
        if all(len(finals.get((env, arm), ())) >= 2 for arm in arms)
        and np.mean(finals[(env, spec.normaliser)]) > 0
    )
    scores = {}
    for arm in spec.arms:
        if not used:
            break
        n = min(len(finals[(env, arm)]) for env in used)
        columns = [
            np.asarray(finals[(env, arm)][:n]) / np.mean(finals[(env, spec.normaliser)]) for env in used
        ]
        scores[arm] = np.stack(columns, axis=1)
    return used, scores


def aggregate(
    finals: dict[tuple[str, str], list[float]],
    envs: tuple[str, ...],
    spec: Aggregate,
    *,
    resamples: int = AGGREGATE_RESAMPLES,
    seed: int = 0,
) -> AggregateResult | None:
    """The rliable aggregate of ``spec`` (None when no env has every arm with ≥ 2 runs): IQM per arm and
    P(X > Y) per pair, with stratified-bootstrap 95 % CIs (runs resampled within each env)."""
    library, metrics = _rliable()
    used, scores = normalised_scores(finals, envs, spec)
    if not used:
        return None

    def intervals(score_dict: dict, func) -> tuple[dict, dict]:
        # A report recomputed from the same runs must print the same intervals. rliable 1.2's stratified
        # bootstraps draw their resampled indices from NumPy's *global* generator (`np.random.choice` in
        # `update_indices`), not from the `random_state` they are given, so that one is seeded too, and the
        # caller's global state is put back afterwards.
        saved = np.random.get_state()
        np.random.seed(seed)
        try:
            with warnings.catch_warnings():  # arch deprecates the RandomState rliable hands it (rliable 1.2)
                warnings.simplefilter("ignore", FutureWarning)
                return library.get_interval_estimates(
                    score_dict, func, reps=resamples, random_state=np.random.RandomState(seed)
                )
        finally:
            np.random.set_state(saved)

    points, bounds = intervals(scores, lambda matrix: np.array([metrics.aggregate_iqm(matrix)]))
    iqm = {arm: Interval(float(points[arm][0]), *map(float, bounds[arm][:, 0])) for arm in scores}
    pairs = {f"{x}\t{y}": [scores[x], scores[y]] for x, y in spec.improvements if x in scores and y in scores}
    improvement = {}
    if pairs:
        # Stratified per env and independent between X and Y (rliable's StratifiedIndependentBootstrap).
        points, bounds = intervals(pairs, lambda x, y: np.array([probability_of_improvement(x, y)]))
        for key in pairs:
            x, y = key.split("\t")
            improvement[(x, y)] = Interval(float(points[key][0]), *map(float, bounds[key][:, 0]))
    return AggregateResult(used, {arm: m.shape[0] for arm, m in scores.items()}, iqm, improvement)
