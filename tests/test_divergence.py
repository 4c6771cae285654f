"""Critic divergence is flagged as it happens (issue 60, prism.agents.divergence): once per member, at the first
log window whose mean critic loss exceeds 100× the running median of the windows before it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from prism.agents.divergence import DIVERGENCE_FACTOR, DivergenceWatch
from prism.agents.log_window import LogWindowMixin


def _flags(series: list[float], watch: DivergenceWatch | None = None, member: int = 0) -> list[int]:
    watch = watch or DivergenceWatch(1)
    return [1000 * (i + 1) for i, v in enumerate(series) if watch.observe(member, v, 1000 * (i + 1))]


def test_a_healthy_drifting_noisy_critic_loss_is_never_flagged():
    rng = np.random.default_rng(0)
    # 200 windows: the loss grows 20× as returns grow, with ±50 % noise and a single 30× spike.
    series = list(np.geomspace(0.5, 10.0, 200) * rng.uniform(0.5, 1.5, 200))
    series[120] *= 30
    assert _flags(series) == []


def test_the_halfcheetah_divergence_is_flagged_once_at_its_first_window():
    # The shape of halfcheetah-paper e-prism-paper seed 4's critic loss: ~0.9, then 146 at 29k, 1.6e4 at 43k.
    series = [0.9, 0.8, 1.0, 0.95, 0.9, 0.85, 1.1, 0.9, 146.0, 900.0, 16000.0, 12000.0]
    watch = DivergenceWatch(1)
    assert _flags(series, watch) == [9000]
    assert watch.diverged_at == [9000]
    # Just under the factor is not a divergence.
    assert _flags([1.0] * 6 + [DIVERGENCE_FACTOR * 0.99]) == []


def test_the_first_windows_set_the_scale_and_nan_or_zero_medians_flag_nothing():
    assert _flags([0.01, 5.0, 500.0, 5e4, 5e6]) == []  # fewer than 5 windows before each
    assert _flags([0.0] * 6 + [1.0]) == []  # a zero median (no learning yet) has no scale
    assert _flags([1.0] * 6 + [math.nan, 1.0]) == []


def test_members_are_watched_apart_and_the_state_survives_a_checkpoint():
    watch = DivergenceWatch(2)
    for step, (a, b) in enumerate([(1.0, 1.0)] * 6, start=1):
        watch.observe(0, a, step)
        watch.observe(1, b, step)
    assert watch.observe(1, 500.0, 7) and not watch.observe(0, 1.1, 7)
    resumed = DivergenceWatch(2)
    resumed.load_state_dict(watch.state_dict())
    assert resumed.diverged_at == [None, 7]
    assert resumed.observe(0, 500.0, 8)  # member 0's history came back with it
    fresh = DivergenceWatch(2)
    fresh.load_state_dict(None)  # a checkpoint from before the watch
    assert fresh.diverged_at == [None, None]


def test_the_agent_warns_once_on_the_terminal_and_logs_the_flag(capsys):
    agent = SimpleNamespace(divergence=DivergenceWatch(1), seeds=(4,), _steps=0)
    logged = []
    for i, loss in enumerate([1.0] * 6 + [300.0, 400.0], start=1):
        agent._steps = 1000 * i
        logged.append(LogWindowMixin._watch_divergence(agent, 0, {"train/critic": loss, "train/actor": -1.0}))
    assert logged[6] == {"train/critic_diverged": 1.0}
    assert [entry for i, entry in enumerate(logged) if i != 6] == [{}] * 7
    err = capsys.readouterr().err
    assert err.count("warning") == 1
    assert "seed 4: the critic is diverging at 7000 env steps (train/critic 300" in err
    assert LogWindowMixin.divergence_steps(agent) == [7000]
    # A backbone that logs no critic loss is not watched.
    assert LogWindowMixin._watch_divergence(agent, 0, {"train/actor": 1e9}) == {}


@pytest.mark.parametrize("factor", [10.0, 1000.0])
def test_the_factor_is_the_threshold(factor):
    assert _flags([1.0] * 6 + [factor * 1.01], DivergenceWatch(1, factor=factor)) == [7000]


def test_a_sub_threshold_spike_in_the_history_does_not_hide_a_later_hundredfold_window():
    # The running median ignores the 90× spike (it is under the factor, so not flagged itself); a running mean
    # would be lifted to ~14 by it and let the 150× window through.
    assert _flags([1.0] * 5 + [90.0, 1.0, 150.0]) == [8000]


def test_a_jump_right_after_exactly_min_history_windows_is_flagged():
    watch = DivergenceWatch(1, min_history=5)
    assert _flags([1.0] * 5 + [1000.0], watch) == [6000]
    assert _flags([1.0] * 4 + [1000.0]) == []  # one window short of the scale: not judged
