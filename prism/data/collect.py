"""Filling a :class:`SegmentStore` by running a policy through the sparse-reward wrapper (SPEC §5 steps 1, 4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from prism.data.features import dense_channels
from prism.data.segments import SegmentStore

Policy = Callable[[np.ndarray], np.ndarray]


class CollectStats(NamedTuple):
    """What one collection added."""

    episodes: int
    steps: int
    segments: int
    mean_true_return: np.ndarray  # (L,) undiscounted true return per channel, mean over episodes
    mean_episode_length: float


def uniform_random_policy(action_space: gym.spaces.Box, seed: int | None = None) -> Policy:
    """A policy drawing actions uniformly from the (bounded) box, from its own seeded generator."""
    rng = np.random.default_rng(seed)
    low = np.asarray(action_space.low, dtype=np.float64)
    high = np.asarray(action_space.high, dtype=np.float64)

    def act(obs: np.ndarray) -> np.ndarray:
        return rng.uniform(low, high).astype(np.float32)

    return act


def collect_episodes(
    env: gym.Env,
    policy: Policy,
    n_episodes: int,
    store: SegmentStore,
    sparse_channel: int,
    use_dense_features: bool = True,
    seed: int | None = None,
) -> CollectStats:
    """Run ``n_episodes`` full episodes of ``policy`` on ``env`` and append their segments to ``store``.

    ``env`` must be a :class:`~prism.envs.SparseRewardWrapper` (or expose the same ``info`` keys): features use
    ``info["true_reward"]``'s dense channels, the target is the emitted sparse value on steps where
    ``info["released"][sparse_channel]`` is true, and the true per-step sparse reward is kept for diagnostics.
    ``seed`` seeds the first reset (later resets continue the env's RNG).
    """
    if use_dense_features != (store.n_dense > 0):
        raise ValueError(
            f"collect_episodes: use_dense_features={use_dense_features} but the store has n_dense={store.n_dense}"
        )
    returns = []
    steps = segments = 0
    dense_idx: list[int] | None = None
    for episode in range(n_episodes):
        obs, _ = env.reset(seed=seed if episode == 0 else None)
        obs_l, act_l, dense_l, rel_l, emit_l, true_l = [], [], [], [], [], []
        ret = None
        done = False
        while not done:
            action = np.asarray(policy(obs), dtype=np.float32)
            next_obs, emitted, terminated, truncated, info = env.step(action)
            true_reward = np.asarray(info["true_reward"], dtype=np.float32)
            if dense_idx is None:
                dense_idx = dense_channels(true_reward.shape[0], sparse_channel)
            obs_l.append(np.asarray(obs, dtype=np.float32))
            act_l.append(action)
            dense_l.append(true_reward[dense_idx])
            rel_l.append(bool(info["released"][sparse_channel]))
            emit_l.append(float(emitted[sparse_channel]))
            true_l.append(float(true_reward[sparse_channel]))
            ret = true_reward.astype(np.float64) if ret is None else ret + true_reward
            obs = next_obs
            done = bool(terminated or truncated)
        parts = [np.stack(obs_l), np.stack(act_l)]
        if use_dense_features:
            parts.append(np.stack(dense_l))
        segments += store.add_episode(
            np.concatenate(parts, axis=1), np.array(rel_l), np.array(emit_l), np.array(true_l)
        )
        steps += len(obs_l)
        returns.append(ret)
    mean_ret = np.mean(np.stack(returns), axis=0) if returns else np.zeros(0)
    return CollectStats(
        episodes=n_episodes,
        steps=steps,
        segments=segments,
        mean_true_return=mean_ret,
        mean_episode_length=steps / max(n_episodes, 1),
    )
