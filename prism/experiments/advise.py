"""``prism advise --env ID``: uniform R/T, ReSymNet with eq. 1, or ReSymNet's fast fit, for a new env?

The answer rests on three numbers measured on uniform random episodes (the store a run's first reward fit
learns from), each set beside the studies in docs/results that measured what it predicts:

1. **Uniform's per-step credit η** (:mod:`prism.experiments.uniform_credit`, the same episodes and function as
   ``prism uniform-credit``): the Pearson of R/T with the hidden per-step reward r_t over all steps. Near 0, R/T
   is nearly one number at every step of every episode and ReSymNet has per-step credit to add; large, R/T
   already carries some (survival, where episodes end at a fall).

2. **The randomized fit's variance ratio.** The randomized loss (``reward.loss: randomized``, the fast fit's,
   ``conf/fit/fast.yaml``) regresses a segment's released sum R on ``Ŝ = (T/K)·Σ_{t∈I} r̂_t`` over K of its T
   steps drawn uniformly without replacement (``prism.data.datamodule.sample_segment_steps``; K =
   ``reward.sampled_steps``; a segment of ``T ≤ K`` steps is used whole). For the true reward that estimate has
   the finite-population variance of a sample sum,

       ``Var_I(Ŝ) = T² (1 − K/T) σ² / K``,   σ² = r_t's variance within the segment (denominator T − 1),

   which is 0 where ``T ≤ K``. The ratio is its mean over segments against ``Var(R)``, the spread of the released
   sums across segments that the fit learns from: ≪ 1, a sampled batch is nearly as informative as the whole
   segments; ≫ 1, it is mostly sampling noise (docs/benchmarks.md: 21 on swimmer, 1.0 on halfcheetah).

3. **Whether episodes end at a fall**: the share of episodes the env terminates before the time limit, and
   their mean length against the limit.

The recommendation is :func:`recommend`, a pure function of these numbers with named thresholds; the evidence
it names is read from the committed ``docs/results/<preset>/ratios.csv`` rows, verdicts included, so its words
are the reports' own ("beats" only for a Holm-significant primary row, "ties" only at a TOST rejection).

    prism advise --env mo-swimmer-v5
    prism advise --env mo-hopper-v5 --episodes 300 --seed 1 env.p_rel=0.1
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prism.core._text import significant
from prism.experiments.uniform_credit import RandomEpisode, uniform_pearson

DEFAULT_EPISODES = 300
"""Random episodes per advice: ~7 000 steps on hopper, 300 000 on swimmer (about a minute on one core)."""

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
"""The committed studies whose ratio rows the advice cites (present in a clone, not in an installed wheel)."""

FAST_FIT = Path(__file__).resolve().parents[2] / "conf" / "fit" / "fast.yaml"
"""The fast fit's overlay: its K and sampling are the ones the variance ratio is computed for."""

# ---- thresholds (each from the studies' own measurements; nothing was measured between the anchors) ------------

ETA_CARRIES_CREDIT = 0.25
"""η at or above which R/T already carries per-step credit. The random-episode η of the studied envs fall in
two groups (``prism uniform-credit``): 0.02 (swimmer) and 0.09 (halfcheetah), where ReSymNet was ahead of
uniform, and 0.44 (walker2d) and 0.67 (hopper), where the two were not distinguishable. 0.25 lies between."""
ETA_STUDIED = (0.15, 0.35)
"""η strictly between these is like no studied env's, and the advice says so. The studied values move with the
episodes drawn (halfcheetah 0.09 on 60 episodes, 0.11 on 200; walker2d 0.44 and 0.47), so the band keeps clear
of both groups rather than starting at their nearest measured values."""

FALL_SHARE = 0.5
"""Episodes "end at a fall" when at least this share of the random ones terminate before the time limit (all of
them on hopper and walker2d, none on halfcheetah and swimmer)."""

LONG_SHARE_MIN = 0.1
"""Below this share of segments longer than K, the randomized loss is eq. 1 on almost every segment (it uses a
segment of T ≤ K steps whole), so the fast fit saves little: random hopper episodes, 1.8 % longer than 64."""

RATIO_CHEAP = 2.0
"""Variance ratio up to which the fast fit is advised without more episodes: at 1.0 (halfcheetah) the
randomized loss lost 0.04 of per-step validation Pearson for a 16× cheaper fit; at 21 (swimmer) it lost 0.12
(docs/benchmarks.md). 2 stays near the cheap measured point."""

# ---- the evidence: ratio rows of the committed studies (preset, env id, A, B) -----------------------------------

Row = tuple[str, str, str, str]

UNIFORM_WHERE_FALLS: tuple[Row, ...] = (
    ("table1-study", "mo-walker2d-v5", "e-prism", "e-uniform"),
    ("table1-study", "mo-hopper-v5", "e-prism", "e-uniform"),
)
"""PRISM against uniform where random episodes end at a fall."""
RESYMNET_WHERE_FIXED: tuple[Row, ...] = (
    ("table1-study", "mo-swimmer-v5", "e-prism", "e-uniform"),
    ("table1-study", "mo-halfcheetah-v5", "e-prism", "e-uniform"),
    ("halfcheetah-paper", "mo-halfcheetah-v5", "e-prism-paper", "e-uniform"),
)
"""PRISM against uniform where every episode lasts the time limit."""
FAST_FIT_ROWS: tuple[Row, ...] = (
    ("table1-study", "mo-swimmer-v5", "e-prism-fast", "e-prism"),
    ("fit-cost", "mo-swimmer-v5", "e-prism-fastfit", "e-prism-fast"),
)
"""The randomized loss at N = 1000 against eq. 1 at N = 250 (two changes at once), and the fast fit against the
randomized loss alone."""


@dataclass(frozen=True)
class EpisodeEnds:
    """How the random episodes ended."""

    episodes: int
    terminated: int
    """Episodes the env ended before the time limit (a fall)."""
    mean_length: float
    min_length: int
    max_length: int
    time_limit: int

    @property
    def terminated_share(self) -> float:
        return self.terminated / self.episodes

    @property
    def fall(self) -> bool:
        """At least :data:`FALL_SHARE` of the episodes end at a fall."""
        return self.terminated_share >= FALL_SHARE


@dataclass(frozen=True)
class SamplingVariance:
    """The randomized loss's sampling noise against the signal it fits (module docstring, item 2)."""

    sampled_steps: int
    """K."""
    estimate_variance: float
    """Mean over segments of ``T² (1 − K/T) σ² / K`` (0 for a segment of ``T ≤ K`` steps)."""
    return_variance: float
    """``Var(R)`` of the segments' sums across segments (denominator n − 1)."""
    long_share: float
    """The share of segments longer than K (the only ones the randomized loss samples)."""
    mean_length: float
    """The segments' mean length T (an episode's, where the hidden channel is released only at its end)."""
    k_for_ratio_one: int
    """The smallest K whose ratio is ≤ 1 (at most the longest segment's T, where the variance is 0)."""

    @property
    def ratio(self) -> float:
        if self.return_variance > 0:
            return self.estimate_variance / self.return_variance
        return 0.0 if self.estimate_variance == 0 else math.inf


@dataclass(frozen=True)
class Advice:
    """The three measurements :func:`recommend` decides from."""

    eta: float
    sampling: SamplingVariance
    ends: EpisodeEnds
    constant: bool = False
    """The hidden channel is one number at every step of every episode (η is 0/0 there; R/T is r_t exactly)."""


@dataclass(frozen=True)
class Recommendation:
    """What to run, why, and which ratio rows back it."""

    choice: str
    """``uniform``, ``eq1`` (ReSymNet with the paper's eq. 1, the default) or ``fast`` (``conf/fit/fast.yaml``)."""
    reasons: tuple[str, ...]
    evidence: tuple[Row, ...]


CHOICES = {
    "uniform": "uniform R/T (conf/ablation/uniform.yaml): no reward model to fit",
    "eq1": "ReSymNet fitted with eq. 1 (the default of every conf/<env>.yaml)",
    "fast": "ReSymNet with the fast fit (conf/fit/fast.yaml: the randomized loss, K sampled steps per segment)",
}
"""Each choice in words."""


def sampled_sum_variance(rewards: np.ndarray, sampled_steps: int) -> float:
    """``Var_I((T/K)·Σ_{t∈I} r_t) = T² (1 − K/T) σ² / K`` over the draws I of K of the T steps without
    replacement (σ² with denominator T − 1); 0 where ``T ≤ K`` (the whole segment is used)."""
    t = len(rewards)
    if t <= sampled_steps:
        return 0.0
    return t * t * (1.0 - sampled_steps / t) * float(np.var(rewards, ddof=1)) / sampled_steps


def _mean_variance(lengths: np.ndarray, variances: np.ndarray, sampled_steps: int) -> float:
    """Mean of :func:`sampled_sum_variance` over segments of ``lengths`` T and within-segment ``variances`` σ²:
    ``T σ² (T/K − 1)`` where ``T > K``, else 0."""
    long = lengths > sampled_steps
    terms = np.where(long, lengths * variances * (lengths / sampled_steps - 1.0), 0.0)
    return float(terms.mean())


def sampling_variance(segments: list[np.ndarray], sampled_steps: int) -> SamplingVariance:
    """:class:`SamplingVariance` of ``segments`` (each the true per-step rewards of one segment) at K."""
    if len(segments) < 2:
        raise ValueError(f"sampling_variance: needs at least 2 segments, got {len(segments)}")
    lengths = np.array([len(r) for r in segments], dtype=np.float64)
    variances = np.array([np.var(r, ddof=1) if len(r) > 1 else 0.0 for r in segments])
    return_variance = float(np.var([r.sum() for r in segments], ddof=1))
    # The mean variance falls as K grows (each term T·σ²·(T/K − 1) does) and is 0 at K = the longest T, so
    # bisect for the smallest K whose ratio is at most 1.
    low, high = 1, int(lengths.max())
    while low < high:
        middle = (low + high) // 2
        if _mean_variance(lengths, variances, middle) > return_variance:
            low = middle + 1
        else:
            high = middle
    return SamplingVariance(
        sampled_steps=int(sampled_steps),
        estimate_variance=_mean_variance(lengths, variances, sampled_steps),
        return_variance=return_variance,
        long_share=float(np.mean(lengths > sampled_steps)),
        mean_length=float(lengths.mean()),
        k_for_ratio_one=low,
    )


def episode_ends(episodes: list[RandomEpisode], time_limit: int) -> EpisodeEnds:
    """How many ``episodes`` the env terminated (a fall) and how long they were."""
    lengths = np.array([len(e.rewards) for e in episodes])
    return EpisodeEnds(
        episodes=len(episodes),
        terminated=sum(e.terminated for e in episodes),
        mean_length=float(lengths.mean()),
        min_length=int(lengths.min()),
        max_length=int(lengths.max()),
        time_limit=int(time_limit),
    )


def measure(episodes: list[RandomEpisode], sampled_steps: int, time_limit: int) -> Advice:
    """η, the variance ratio and the episode ends of ``episodes`` (segments cut at the wrapper's releases)."""
    segments = [segment for episode in episodes for segment in episode.segments()]
    constant = float(np.ptp(np.concatenate(segments))) == 0.0
    eta = 1.0 if constant else uniform_pearson(segments)[1]
    sampling = sampling_variance(segments, sampled_steps)
    return Advice(eta, sampling, episode_ends(episodes, time_limit), constant)


def _segment_note(advice: Advice) -> list[str]:
    """Where releases inside episodes (``env.p_rel`` > 0) cut them into shorter segments, that no study has."""
    if advice.sampling.mean_length >= advice.ends.mean_length:
        return []
    return [
        f"the releases cut episodes into segments of {advice.sampling.mean_length:.1f} steps on average; every "
        "study here ran at p_rel = 0, where a segment is a whole episode"
    ]


def recommend(advice: Advice) -> Recommendation:
    """The advice from the three numbers (thresholds: the module's constants, each with its source)."""
    eta, sampling, ends = advice.eta, advice.sampling, advice.ends
    if advice.constant:
        reason = "the hidden channel is one number at every step of the random episodes: R/T is r_t exactly"
        return Recommendation("uniform", (reason,), ())
    reasons: list[str] = []
    if ETA_STUDIED[0] < eta < ETA_STUDIED[1]:
        reasons.append(
            f"eta {eta:.2f} lies between the studied envs' (0.02-0.11 where episodes have a fixed length, "
            "0.44-0.67 where they end at a fall): no study has an env like this one, so run both arms on a few "
            "seeds before choosing"
        )
    if eta >= ETA_CARRIES_CREDIT:
        reasons.append(
            f"R/T already carries per-step credit (eta {eta:.2f} >= {ETA_CARRIES_CREDIT}); where that came from "
            "episodes ending at a fall (walker2d, hopper), PRISM and uniform were not distinguishable in "
            "table1-study, and uniform fits no model"
        )
        if not ends.fall:
            reasons.append(
                "these episodes do not end at a fall, unlike the studied envs with such an eta: the studies "
                "say nothing about where this credit comes from"
            )
        return Recommendation("uniform", tuple(reasons + _segment_note(advice)), UNIFORM_WHERE_FALLS)
    reasons.append(
        f"R/T carries little per-step credit (eta {eta:.2f} < {ETA_CARRIES_CREDIT}); where every episode lasts "
        "the time limit (swimmer, halfcheetah), ReSymNet's mean HV was above uniform's"
    )
    if ends.fall:
        reasons.append(
            "these episodes end at a fall, unlike the studied envs with such an eta: the studies say nothing "
            "about this case"
        )
    reasons += _segment_note(advice)
    k = sampling.sampled_steps
    if sampling.long_share < LONG_SHARE_MIN:
        reasons.append(
            f"only {sampling.long_share:.0%} of segments are longer than K = {k}, and the randomized loss uses "
            "a shorter one whole (it is eq. 1 there): the fast fit saves little here"
        )
        return Recommendation("eq1", tuple(reasons), RESYMNET_WHERE_FIXED)
    if sampling.ratio <= RATIO_CHEAP:
        reasons.append(
            f"the sampled sum's variance is {significant(sampling.ratio)}x the returns' (<= {RATIO_CHEAP}): at 1.0 "
            "(halfcheetah) the randomized loss lost 0.04 of per-step Pearson for a 16x cheaper fit "
            "(docs/benchmarks.md)"
        )
        return Recommendation("fast", tuple(reasons), RESYMNET_WHERE_FIXED + FAST_FIT_ROWS)
    needed = f"; K = {sampling.k_for_ratio_one} would bring it to 1"
    reasons.append(
        f"the sampled sum's variance is {significant(sampling.ratio)}x the returns' (> {RATIO_CHEAP}): a randomized batch "
        f"is mostly sampling noise{needed}. At 21x (swimmer) its per-step Pearson was 0.83 against eq. 1's 0.95 "
        "at equal N (docs/benchmarks.md); use the fast fit only where eq. 1's fit time is not affordable, and "
        "then with more random episodes: on swimmer, the randomized loss at N = 1000 against eq. 1 at N = 250 "
        "is the row below"
    )
    return Recommendation("eq1", tuple(reasons), RESYMNET_WHERE_FIXED + FAST_FIT_ROWS)


# ---- the evidence lines --------------------------------------------------------------------------------------


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def evidence_line(row: Row, results: Path = RESULTS) -> str:
    """``[preset env: A / B]`` with its HV ratio, interval, p and verdict as the committed ratios.csv has them;
    the citation and the file alone where the file or the row is not there (an installed wheel)."""
    preset, env_id, a, b = row
    where = results / preset / "ratios.csv"
    cite = f"[{preset} {env_id[3:-3] if env_id.startswith('mo-') else env_id}: {a} / {b}]"
    found = None
    if where.is_file():
        with where.open() as fh:
            for item in csv.DictReader(fh):
                key = (item["metric"], item["env"], item["numerator"], item["denominator"])
                if key == ("hv", env_id, a, b):
                    found = item
    if found is None:
        return f"{cite} (docs/results/{preset}/ratios.csv and report.md, in the repository)"
    ratio, low, high = (_float(found[key]) for key in ("ratio", "ci_fieller_low", "ci_fieller_high"))
    high_text = f"{high:.2f}" if math.isfinite(high) else "inf"
    if found["family"] == "primary":
        test = f"Holm p = {_float(found['p_holm']):.3f} (primary)"
    else:
        test = f"Welch p = {_float(found['p_welch']):.3f} (uncorrected, exploratory)"
    margin, p_tost = _float(found.get("margin", "nan")), _float(found["p_tost"])
    tost_p = "< 0.001" if p_tost < 0.001 else f"= {p_tost:.3f}"
    tost = f", TOST p {tost_p} at ±{margin:.0%}" if found["verdict"] == "ties" else ""
    label = f" ({found['label']})" if found.get("label") else ""
    return f"{cite}{label} HV {ratio:.2f} [{low:.2f}, {high_text}], {test}{tost}: {found['verdict']}"


# ---- the command ---------------------------------------------------------------------------------------------
