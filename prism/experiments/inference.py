"""What a report may claim about a ratio of two arms' final means, and on what evidence.

Three parts, each checked against scipy or statsmodels in ``tests/test_inference.py``:

- **Primary comparisons and Holm's correction.** A preset declares a few *primary* ratios
  (:attr:`prism.experiments.grid.Ratio.primary`); their HV rows over the envs form one family, and only a
  primary row whose Holm-adjusted p is below 0.05 may say "beats". Every other row is *exploratory*: its Welch
  p is printed as uncorrected and never carries "beats".
- **Equivalence (TOST).** "Ties" only where the two one-sided tests reject, at 5 %, that the ratio of means
  lies outside the preset's margin ``[1 − m, 1 + m]``; otherwise "not distinguishable".
- **The interval.** With 5 seeds per arm the percentile bootstrap is anti-conservative (it resamples with the
  1/n plug-in variance and no t quantile: CIs excluded 1 where Welch's p was 0.06–0.11). The interval that
  decides is the **Welch–Fieller** interval below, the inversion of the same Welch-type test the TOST uses,
  so the interval, the p and the TOST never disagree; the bootstrap is still shown, for reference.

**The test of a ratio** (Fieller 1954 with Welch's degrees of freedom). For arms x (n_x seeds) and y (n_y)
with sample means x̄, ȳ and variances s_x², s_y², the hypothesis μ_x / μ_y = r (μ_y > 0) is μ_x − r·μ_y = 0,
a difference of two independent means. Its Welch statistic and Welch–Satterthwaite degrees of freedom are

    t(r) = (x̄ − r·ȳ) / √(v_x + r²·v_y),   v_x = s_x²/n_x,  v_y = s_y²/n_y,
    ν(r) = (v_x + r²·v_y)² / (v_x²/(n_x − 1) + r⁴·v_y²/(n_y − 1)),

i.e. exactly Welch's t-test of the samples x and r·y. At r = 1 it *is* the table's Welch test. For r ≥ 0,
t(r) decreases in r, so {r : two-sided p(r) ≥ α} is an interval: the 1 − α Welch–Fieller interval. It is
unbounded above when ȳ itself is not significantly above 0 (then the printed end is ``inf``).

**TOST on the ratio.** With margin m, H0: μ_x/μ_y ≤ 1 − m or μ_x/μ_y ≥ 1 + m. The lower test rejects
μ_x − (1 − m)·μ_y ≤ 0 (p = P(T_ν > t(1 − m))), the upper rejects μ_x − (1 + m)·μ_y ≥ 0
(p = P(T_ν < t(1 + m))); the TOST p is the larger. Each one-sided test is statsmodels'
``ttost_ind(x, r·y, 0, 0, usevar="unequal")`` half at r = 1 ∓ m. TOST rejects at α exactly where the
1 − 2α interval lies inside the margin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
"""The level of every test a report's words rest on."""
DEFAULT_MARGIN = 0.05
"""The equivalence margin m of a preset that declares none: a ratio within [0.95, 1.05] is a tie."""

BEATS, LOSES, TIES = "beats", "loses to", "ties"
AHEAD, BEHIND = "ahead (exploratory)", "behind (exploratory)"
NOT_DISTINGUISHABLE = "not distinguishable"
NOT_MEASURED = "—"
VERDICTS = (BEATS, LOSES, TIES, AHEAD, BEHIND, NOT_DISTINGUISHABLE, NOT_MEASURED)
"""The verdict column's words: "beats"/"loses to" only for a primary row at Holm p < 0.05, "ties" only for
a TOST rejection, "ahead/behind (exploratory)" for an exploratory row at uncorrected p < 0.05, "—" for a
row with no ratio (an arm with fewer than 2 finished seeds: nothing was tested), else "not distinguishable"."""


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values of one family (NaNs are left out of the family and stay NaN).

    Sorted ascending, p_(i) (i = 1..k) becomes max_{j ≤ i} min(1, (k − j + 1)·p_(j)): it controls the
    family-wise error rate at α under any dependence between the tests (Holm 1979)."""
    kept = [(p, i) for i, p in enumerate(pvalues) if not math.isnan(p)]
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(kept)):
        running = max(running, min(1.0, (len(kept) - rank) * p))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class _Moments:
    mean_x: float
    mean_y: float
    var_x: float
    """s_x² / n_x"""
    var_y: float
    dof_x: int
    dof_y: int

    @classmethod
    def of(cls, x: Sequence[float], y: Sequence[float]) -> _Moments:
        a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        return cls(
            float(a.mean()),
            float(b.mean()),
            float(a.var(ddof=1)) / len(a),
            float(b.var(ddof=1)) / len(b),
            len(a) - 1,
            len(b) - 1,
        )

    def t_and_dof(self, r: float) -> tuple[float, float]:
        """Welch's t of μ_x − r·μ_y = 0 and its Welch–Satterthwaite degrees of freedom."""
        vy = r * r * self.var_y
        se2 = self.var_x + vy
        if se2 == 0:
            diff = self.mean_x - r * self.mean_y
            return (math.copysign(math.inf, diff) if diff else 0.0), math.inf
        dof = se2**2 / (self.var_x**2 / self.dof_x + vy**2 / self.dof_y)
        return (self.mean_x - r * self.mean_y) / math.sqrt(se2), dof


def _usable(x: Sequence[float], y: Sequence[float]) -> bool:
    return len(x) >= 2 and len(y) >= 2 and float(np.mean(y)) > 0


def ratio_p(x: Sequence[float], y: Sequence[float], r: float = 1.0) -> float:
    """Two-sided p of H0: μ_x / μ_y = r (Welch's test of x against r·y); NaN unless both arms have ≥ 2
    values and ȳ > 0."""
    from scipy import stats

    if not _usable(x, y):
        return math.nan
    t, dof = _Moments.of(x, y).t_and_dof(r)
    return float(2 * stats.t.sf(abs(t), dof))


def tost_ratio(x: Sequence[float], y: Sequence[float], margin: float) -> float:
    """TOST p that μ_x / μ_y lies inside [1 − margin, 1 + margin] (the larger of the two one-sided p's,
    see the module docstring); NaN where :func:`ratio_p` is."""
    from scipy import stats

    if not _usable(x, y):
        return math.nan
    moments = _Moments.of(x, y)
    t_low, dof_low = moments.t_and_dof(1.0 - margin)
    t_high, dof_high = moments.t_and_dof(1.0 + margin)
    return float(max(stats.t.sf(t_low, dof_low), stats.t.cdf(t_high, dof_high)))


def ratio_interval(x: Sequence[float], y: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The Welch–Fieller ``level`` interval of μ_x / μ_y: the ratios r ≥ 0 that Welch's two-sided test of x
    against r·y does not reject at 1 − level (module docstring). The upper end is ``inf`` when no r does;
    the lower end is 0 when every r down to 0 is kept. NaNs where :func:`ratio_p` is."""
    from scipy.optimize import brentq

    if not _usable(x, y):
        return math.nan, math.nan
    alpha = 1.0 - level
    estimate = float(np.mean(x)) / float(np.mean(y))

    def excess(r: float) -> float:  # > 0 inside the interval
        return ratio_p(x, y, r) - alpha

    if estimate <= 0 or excess(0.0) > 0:
        low = 0.0
    else:
        low = brentq(excess, 0.0, estimate, xtol=1e-12)
    high, step = estimate, max(estimate, 1e-12)
    while excess(high) > 0:  # t(r) tends to −ȳ/√v_y as r grows: it may never reach the critical value
        if high > 1e6 * max(estimate, 1.0):
            return low, math.inf
        high, step = high + step, 2 * step
    high = brentq(excess, max(estimate, high - step / 2), high, xtol=1e-12) if high > estimate else estimate
    return float(low), float(high)


def verdict(ahead: bool, p_welch: float, p_holm: float | None, p_tost: float) -> str:
    """The one verdict a report may print for a ratio row (:data:`VERDICTS`); ``ahead`` is whether A's mean is
    above B's (the difference, not the ratio, gives the direction: a ratio of a negative mean is not one),
    ``p_holm`` is None for an exploratory row. A difference that passes its test is named before a tie (a
    primary row can be both when the margin is wide and the seeds agree closely)."""
    if p_holm is not None and p_holm < ALPHA:
        return BEATS if ahead else LOSES
    if not math.isnan(p_tost) and p_tost < ALPHA:
        return TIES
    if p_holm is None and not math.isnan(p_welch) and p_welch < ALPHA:
        return AHEAD if ahead else BEHIND
    return NOT_DISTINGUISHABLE
