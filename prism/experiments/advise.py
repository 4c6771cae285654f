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

import argparse
import csv
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prism.experiments.uniform_credit import RandomEpisode, collect_random_episodes, uniform_pearson

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
            f"the sampled sum's variance is {sampling.ratio:.1f}x the returns' (<= {RATIO_CHEAP}): at 1.0 "
            "(halfcheetah) the randomized loss lost 0.04 of per-step Pearson for a 16x cheaper fit "
            "(docs/benchmarks.md)"
        )
        return Recommendation("fast", tuple(reasons), RESYMNET_WHERE_FIXED + FAST_FIT_ROWS)
    needed = f"; K = {sampling.k_for_ratio_one} would bring it to 1"
    reasons.append(
        f"the sampled sum's variance is {sampling.ratio:.1f}x the returns' (> {RATIO_CHEAP}): a randomized batch "
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

ALLOWED_KEYS = ("env.", "reward.sampled_steps")
"""The ``key=value`` overrides advise reads: the env's (``env.p_rel``, ``env.spec.*``, …) and K."""


class AdviceError(ValueError):
    """Bad input: one line, exit 2."""


def _config(env_id: str, sparse_channel: int | None, overrides: list[str]):
    """The run config the fast fit would have on this env: its K and sampling, the env and its hidden channel."""
    from prism.config import load_config
    from prism.errors import ConfigError

    for item in overrides:
        key = item.split("=", 1)[0]
        if "=" not in item:
            raise AdviceError(f"{item}: overrides take the form key=value")
        if not key.startswith(ALLOWED_KEYS):
            raise AdviceError(f"{key}: prism advise reads only env.* keys and reward.sampled_steps")
    given = [f"env.id={env_id}"]
    if sparse_channel is not None:
        given.append(f"env.sparse_channel={sparse_channel}")
    # agent.symreg_lambda=0: advise trains no policy, and on an env without a symmetry table the default λ only
    # draws SymReg's "no table" warning. reward.loss=randomized: the fast fit's loss where conf/ is absent.
    fixed = ["agent.symreg_lambda=0", "reward.loss=randomized"]
    files = [FAST_FIT] if FAST_FIT.is_file() else []
    try:
        config = load_config(files, [*fixed, *given, *overrides])
    except ConfigError as err:
        raise AdviceError(str(err)) from None
    if config.env.dense:
        raise AdviceError("env.dense: prism advise needs a hidden channel; leave env.dense false")
    if config.reward.sampling != "uniform":
        raise AdviceError(
            f"reward.sampling: prism advise computes uniform sampling's variance only, got {config.reward.sampling}"
        )
    return config


class _Parser(argparse.ArgumentParser):
    """argparse's errors in one line (its usage line left out), exit 2, as every other bad input here."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="prism advise",
        description="Uniform R/T, ReSymNet with eq. 1, or ReSymNet's fast fit for an env? Measured on uniform "
        "random episodes: uniform's per-step credit (eta), the randomized fit's sampling variance against the "
        "returns' (the fast fit's K), and whether episodes end at a fall; then a recommendation naming the "
        "studies (docs/results) behind it.",
    )
    parser.add_argument("--env", required=True, metavar="ID", help="a prism or mo-gymnasium env id")
    parser.add_argument(
        "--episodes", type=int, default=DEFAULT_EPISODES, help=f"random episodes (default {DEFAULT_EPISODES})"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the episodes' resets and actions")
    parser.add_argument(
        "--sparse-channel",
        type=int,
        default=None,
        metavar="C",
        help="the hidden channel (default: the env spec's)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="env.* keys (env.p_rel=0.1, env.spec.…) and reward.sampled_steps",
    )
    return parser


def report_lines(env_id: str, channel_name: str, seed: int, advice: Advice, wall_s: float) -> list[str]:
    """The printed lines: one per number, then the recommendation, its reasons and its evidence."""
    ends, sampling = advice.ends, advice.sampling
    k = sampling.sampled_steps
    one = f"; K = {sampling.k_for_ratio_one} for a ratio of 1"
    recommendation = recommend(advice)
    lines = [
        f"prism advise: {env_id}, hidden channel {channel_name}, {ends.episodes} uniform random episodes "
        f"(seed {seed}) [{wall_s:.0f} s]",
        f"episodes end at a fall: {'yes' if ends.fall else 'no'}, {ends.terminated} of {ends.episodes} terminated "
        f"before the time limit ({ends.terminated_share:.0%}); length {ends.mean_length:.1f} on average "
        f"({ends.min_length}-{ends.max_length}) of a {ends.time_limit}-step limit",
        f"uniform's per-step credit: eta = {advice.eta:.3f} "
        + (
            "(the hidden r_t is one number at every step: R/T is r_t exactly)"
            if advice.constant
            else "(Pearson of R/T with the hidden r_t over all steps; prism uniform-credit)"
        ),
        f"randomized fit's variance ratio: {sampling.ratio:.2f} = mean T²(1-K/T)σ²/K {sampling.estimate_variance:.4g}"
        f" / Var(R) {sampling.return_variance:.4g}, K = {k} steps drawn uniformly without replacement (the fast "
        f"fit's), {sampling.long_share:.0%} of segments longer than K (mean T {sampling.mean_length:.1f}){one}",
        f"recommendation: {CHOICES[recommendation.choice]}",
        *(f"  why: {reason}" for reason in recommendation.reasons),
        *(f"  evidence: {evidence_line(row)}" for row in recommendation.evidence),
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    """``prism advise --env ID [--episodes N] [--seed S] [--sparse-channel C] [key=value ...]``; exit 0, or 2 with
    one line on stderr for bad input."""
    args = _parser().parse_args(argv)
    try:
        if args.episodes <= 0:
            raise AdviceError(f"--episodes: must be positive, got {args.episodes}")
        config = _config(args.env, args.sparse_channel, list(args.overrides))
        from prism.config.validation import resolve_env_spec, sparse_channel

        spec = resolve_env_spec(config)
        channel = sparse_channel(config, spec)
        start = time.perf_counter()
        with warnings.catch_warnings():
            # gymnasium's notes on building an env (a float64 Box cast to float32, in colour) are not advice
            warnings.simplefilter("ignore", UserWarning)
            episodes = collect_random_episodes(spec, args.episodes, args.seed, channel, config.env.p_rel)
        segments = sum(len(e.segments()) for e in episodes)
        if segments < 2:
            raise AdviceError(
                f"--episodes: {segments} segment is too few for a variance; give at least 2 episodes"
            )
        advice = measure(episodes, config.reward.sampled_steps, spec.max_episode_steps)
    except AdviceError as err:
        print(f"prism advise: error: {err}", file=sys.stderr)
        return 2
    name = spec.objective_names[channel] if channel < len(spec.objective_names) else str(channel)
    for line in report_lines(spec.id, f"{channel} ({name})", args.seed, advice, time.perf_counter() - start):
        print(line, flush=True)
    return 0
