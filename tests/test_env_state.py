"""Env-state capture and restore mid-episode (prism/envs/state.py), on MuJoCo and on the toy env."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from prism.envs import TOY_SPEC, get_env_spec, make_env
from prism.envs.state import get_env_state, set_env_state


def _roll(env, actions: np.ndarray) -> dict[str, np.ndarray]:
    """Step ``env`` with ``actions`` until the episode ends; everything the learner would see, stacked."""
    out: dict[str, list] = {"obs": [], "emitted": [], "true": [], "released": [], "done": [], "sampled": []}
    for action in actions:
        obs, emitted, terminated, truncated, info = env.step(action)
        out["obs"].append(obs)
        out["emitted"].append(emitted)
        out["true"].append(info["true_reward"])
        out["released"].append(info["released"])
        out["done"].append((terminated, truncated))
        out["sampled"].append(env.action_space.sample())  # the action sampler's stream is part of the state
        if terminated or truncated:
            break
    return {k: np.asarray(v) for k, v in out.items()}


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)  # exactly, not approximately


def _through_disk(state: dict) -> dict:
    """What a checkpoint does to the state: torch.save, then load with weights_only=True."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("env_id", ["mo-hopper-v5", TOY_SPEC.id])
def test_restore_mid_episode_then_same_actions_reproduce_the_rollout_exactly(env_id):
    spec = get_env_spec(env_id)
    rng = np.random.default_rng(0)
    # Small actions keep the hopper up for the whole continuation (termination is checked separately below).
    actions = (0.3 * rng.uniform(-1, 1, size=(80, spec.act_dim))).astype(np.float32)
    env = make_env(spec, sparse_channel=0, p_rel=0.3, seed=5)
    env.reset(seed=11)
    _roll(env, actions[:25])  # mid-episode: velocities, a partial sparse sum and a time-limit count are live
    state = _through_disk(get_env_state(env))

    first = _roll(env, actions[25:])
    assert len(first["obs"]) == 55  # no episode end inside the continuation
    assert first["released"][:, 0].any() and not first["released"][:, 0].all()  # p_rel draws matter

    # Restore into the same env (after it moved on) and into a fresh one reset with another seed.
    set_env_state(env, state)
    _assert_same(_roll(env, actions[25:]), first)
    fresh = make_env(spec, sparse_channel=0, p_rel=0.3, seed=99)
    fresh.reset(seed=123)
    unrestored = _roll(fresh, actions[25:])
    assert not np.array_equal(unrestored["obs"][0], first["obs"][0])  # so the check below can fail
    fresh = make_env(spec, sparse_channel=0, p_rel=0.3, seed=99)
    fresh.reset(seed=123)
    set_env_state(fresh, state)
    _assert_same(_roll(fresh, actions[25:]), first)


def test_restore_keeps_the_time_limit_and_the_unreleased_sum():
    spec = get_env_spec("mo-hopper-v5")
    env = make_env(spec, sparse_channel=0, p_rel=0.0, seed=0)
    env.reset(seed=3)
    zeros = np.zeros(spec.act_dim, dtype=np.float32)
    true_sum = np.zeros(spec.n_objectives)
    for _ in range(30):
        _, _, terminated, truncated, info = env.step(zeros)
        assert not (terminated or truncated)
        true_sum += info["true_reward"]
    state = get_env_state(env)
    assert state["elapsed_steps"] == 30
    np.testing.assert_allclose(state["sparse_accumulated"].numpy()[0], true_sum[0], rtol=1e-6)

    other = make_env(spec, sparse_channel=0, p_rel=0.0, seed=0)
    other.reset(seed=4)
    set_env_state(other, state)
    # Truncate soon after restoring: the sparse channel releases the whole episode's sum, counted from step 0.
    time_limit = next(layer for layer in _layers(other) if type(layer).__name__ == "TimeLimit")
    time_limit._max_episode_steps = 32
    released_sum = true_sum[0]
    for step in (31, 32):
        _, emitted, terminated, truncated, info = other.step(zeros)
        released_sum += info["true_reward"][0]
        assert truncated == (step == 32) and not terminated
    assert emitted[0] == pytest.approx(released_sum, rel=1e-5)


def _layers(env):
    layers = [env]
    while hasattr(layers[-1], "env"):
        layers.append(layers[-1].env)
    return layers
