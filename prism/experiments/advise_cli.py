"""``prism advise``'s command line: the overrides it reads, the config the fast fit would have on the env, the
printed report and :func:`main` (the measurements and the recommendation are :mod:`prism.experiments.advise`)."""

from __future__ import annotations

import argparse
import sys
import time
import warnings

from prism.core._text import significant
from prism.experiments.advise import (
    CHOICES,
    DEFAULT_EPISODES,
    FAST_FIT,
    Advice,
    evidence_line,
    measure,
    recommend,
)
from prism.experiments.uniform_credit import collect_random_episodes

ALLOWED_KEYS = ("env.", "reward.sampled_steps")
"""The ``key=value`` overrides advise reads: the env's (``env.p_rel``, ``env.spec.*``, …) and K."""


class AdviceError(ValueError):
    """Bad input: one line, exit 2."""


def _config(env_id: str, sparse_channel: int | None, overrides: list[str]):
    """The run config the fast fit would have on this env: its K and sampling, the env and its hidden channel."""
    from prism.config import load_config
    from prism.core.errors import ConfigError

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
        f"randomized fit's variance ratio: {significant(sampling.ratio)} = mean T²(1-K/T)σ²/K {sampling.estimate_variance:.4g}"
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
