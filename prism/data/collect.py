"""Filling a :class:`SegmentStore` by running a policy through the sparse-reward wrapper (docs/method.md §5 steps 1, 4)."""

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


class Episode(NamedTuple):
    """One episode through the sparse-reward wrapper, one row per step."""

    obs: np.ndarray  # [T, obs_dim] float32 observation before the step
    action: np.ndarray  # [T, act_dim] float32 action sent
    true_reward: np.ndarray  # [T, L] float32 ``info["true_reward"]`` (every channel dense)
    emitted: np.ndarray  # [T, L] reward vector the wrapper emitted
    released: np.ndarray  # [T, L] bool ``info["released"]``
    terminated: bool = False
    """The episode ended by termination (an MDP end, no bootstrap), not by truncation (the time limit)."""
    next_obs: np.ndarray | None = None
    """[T, obs_dim] float32 observation each step led to; on the last step the final observation ``env.step``
    returned (terminal or truncated: the episode is not reset before it is kept)."""


def run_episode(env: gym.Env, policy: Policy, seed: int | None = None) -> Episode:
    """Reset ``env`` (with ``seed``) and step ``policy`` until the episode terminates or is truncated.

    ``env`` must be a :class:`~prism.envs.SparseRewardWrapper` (or expose the same ``info`` keys)."""
    obs, _ = env.reset(seed=seed)
    obs_l, act_l, true_l, emit_l, rel_l, next_l = [], [], [], [], [], []
    done = terminated = False
    while not done:
        action = np.asarray(policy(obs), dtype=np.float32)
        next_obs, emitted, terminated, truncated, info = env.step(action)
        obs_l.append(np.asarray(obs, dtype=np.float32))
        act_l.append(action)
        true_l.append(np.asarray(info["true_reward"], dtype=np.float32))
        emit_l.append(np.asarray(emitted))
        rel_l.append(np.asarray(info["released"], dtype=bool))
        next_l.append(np.asarray(next_obs, dtype=np.float32))
        obs = next_obs
        done = bool(terminated or truncated)
    return Episode(
        np.stack(obs_l),
        np.stack(act_l),
        np.stack(true_l),
        np.stack(emit_l),
        np.stack(rel_l),
        bool(terminated),
        np.stack(next_l),
    )


def collect_episodes(
    env: gym.Env,
    policy: Policy,
    n_episodes: int,
    store: SegmentStore,
    sparse_channel: int,
    use_dense_features: bool = True,
    seed: int | None = None,
    on_episode: Callable[[], None] | None = None,
) -> CollectStats:
    """Run ``n_episodes`` full episodes of ``policy`` on ``env`` and append their segments to ``store``.

    ``env`` must be a :class:`~prism.envs.SparseRewardWrapper` (or expose the same ``info`` keys): features use
    ``info["true_reward"]``'s dense channels, the target is the emitted sparse value on steps where
    ``info["released"][sparse_channel]`` is true, and the true per-step sparse reward is kept for diagnostics.
    ``seed`` seeds the first reset (later resets continue the env's RNG). ``on_episode()`` (optional) is
    called after each episode (a progress bar's update). A store that keeps next observations
    (:attr:`SegmentStore.has_next_obs`, for a reward model reading ``s_{t+1}``) gets each step's.
    """
    if use_dense_features != (store.n_dense > 0):
        raise ValueError(
            f"collect_episodes: use_dense_features={use_dense_features} but the store has n_dense={store.n_dense}"
        )
    returns = []
    steps = segments = 0
    for episode in range(n_episodes):
        ep = run_episode(env, policy, seed=seed if episode == 0 else None)
        parts = [ep.obs, ep.action]
        if use_dense_features:
            parts.append(ep.true_reward[:, dense_channels(ep.true_reward.shape[1], sparse_channel)])
        segments += store.add_episode(
            np.concatenate(parts, axis=1),
            ep.released[:, sparse_channel],
            ep.emitted[:, sparse_channel].astype(np.float64),
            ep.true_reward[:, sparse_channel].astype(np.float64),
            terminated=ep.terminated,
            next_obs=ep.next_obs if store.has_next_obs else None,
        )
        steps += ep.obs.shape[0]
        # A running float64 sum, step by step (cumsum is sequential, so the value does not depend on T's size).
        returns.append(np.cumsum(ep.true_reward.astype(np.float64), axis=0)[-1])
        if on_episode is not None:
            on_episode()
    mean_ret = np.mean(np.stack(returns), axis=0) if returns else np.zeros(0)
    return CollectStats(
        episodes=n_episodes,
        steps=steps,
        segments=segments,
        mean_true_return=mean_ret,
        mean_episode_length=steps / max(n_episodes, 1),
    )
