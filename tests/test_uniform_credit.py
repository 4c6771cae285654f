"""``prism uniform-credit`` (prism/experiments/uniform_credit.py): the per-step Pearson of uniform R/T
redistribution with the true reward."""

import re

import numpy as np
import pytest

from prism.cli import main
from prism.experiments import uniform_credit


def test_the_pearson_of_r_over_t_equals_the_correlation_ratio_for_episodes_of_mixed_lengths():
    rng = np.random.default_rng(3)
    episodes = [rng.normal(loc=rng.normal(), size=rng.integers(2, 40)) for _ in range(25)]
    pearson, eta = uniform_credit.uniform_pearson(episodes)
    # brute force: every step paired with its own episode's mean, the Pearson formula written out
    pairs = np.array([(x, r.mean()) for r in episodes for x in r])
    centred = pairs - pairs.mean(axis=0)
    by_hand = (centred[:, 0] @ centred[:, 1]) / np.sqrt((centred**2).sum(axis=0).prod())
    assert pearson == pytest.approx(by_hand, abs=1e-12)
    assert eta == pytest.approx(pearson, abs=1e-12)
    assert 0.0 < eta < 1.0


def test_constant_episodes_carry_everything_and_zero_mean_episodes_carry_nothing():
    constant = [np.full(5, 1.0), np.full(8, -2.0), np.full(3, 0.5)]
    assert uniform_credit.uniform_pearson(constant)[1] == pytest.approx(1.0)
    # every episode has mean 0 (so R/T = 0 everywhere): no between-episode variance
    centred = [np.array([1.0, -1.0, 2.0, -2.0]), np.array([3.0, -3.0])]
    with np.errstate(invalid="ignore"):  # R/T is 0 everywhere: its Pearson is undefined (nan), eta is 0
        assert uniform_credit.uniform_pearson(centred)[1] == pytest.approx(0.0, abs=1e-12)


def test_random_hopper_episodes_end_at_a_fall_and_carry_survival_in_r_over_t():
    episodes = uniform_credit.random_episode_rewards("mo-hopper-v5", episodes=20, seed=0)
    lengths = [len(r) for r in episodes]
    assert len(episodes) == 20 and max(lengths) < 1000  # random hoppers fall long before truncation
    pearson, eta = uniform_credit.uniform_pearson(episodes)
    assert pearson == pytest.approx(eta, abs=1e-9) and pearson > 0.2


def test_prism_uniform_credit_prints_each_envs_pearson_and_eta(capsys):
    """The subcommand prints, per env, the numbers uniform_pearson gives on the same random episodes."""
    assert main(["uniform-credit", "--envs", "mo-hopper-v5", "--episodes", "6", "--seed", "1"]) == 0
    line = capsys.readouterr().out.strip()
    match = re.fullmatch(
        r"mo-hopper-v5: 6 random episodes \(length \d+, \d+-\d+\): Pearson\(R/T, r_t\) = (\S+), "
        r"eta = (\S+)  \[\d+ s\]",
        line,
    )
    assert match, line
    pearson, eta = uniform_credit.uniform_pearson(uniform_credit.random_episode_rewards("mo-hopper-v5", 6, 1))
    assert (float(match[1]), float(match[2])) == (round(pearson, 3), round(eta, 3))


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--envs", "mo-hopper-v5", "mo-foo-v5", "--episodes", "3"], "mo-foo-v5"),
        (["--envs", "mo-hopper-v5", "--episodes", "0"], "--episodes"),
        (["--envs", "mo-hopper-v5", "--episodes", "1"], "--episodes"),
    ],
)
def test_uniform_credit_refuses_bad_input_in_one_line_before_running_an_episode(argv, named, capsys):
    assert main(["uniform-credit", *argv]) == 2
    out = capsys.readouterr()
    assert out.out == ""  # not even the valid env ahead of the bad one ran
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and lines[0].startswith("prism uniform-credit: ")
