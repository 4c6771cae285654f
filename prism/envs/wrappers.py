"""The sparse-reward wrapper (docs/method.md §3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from prism.core.seeding import derive_seed

RELEASE_STREAM = "sparse_wrapper/release"
"""The stream name under which ``reset(seed=s)`` derives the release draws' seed from ``s``."""


class SparseRewardWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Hide reward channels and release them only as cumulative sums.

    Per channel i an accumulator ``acc_i += r_i`` runs every step. The step emits ``acc_i`` (and resets it)
    when channel i is dense (``release_prob[i] == 1``), when a uniform draw is ``< release_prob[i]``, or when
    the step terminates **or** truncates; otherwise it emits 0. Observations are unchanged.

    ``info["true_reward"]`` carries the dense reward vector (for features and the oracle) and
    ``info["released"]`` a boolean vector marking the channels released this step, i.e. the steps that
    close a segment.

    The release draws come from the wrapper's own generator — never from the env's RNG, so changing the
    release probability does not change the env's dynamics noise. It is seeded from ``seed`` when built, and
    ``reset(seed=s)`` reseeds it from ``s`` (a named stream of ``s``, not ``s`` itself, which is what the
    wrapped env's own generator gets), so a seeded reset fixes every random draw of the wrapped env, as
    gymnasium's contract (and its ``check_env``) asks; ``reset()`` without a seed continues the stream.

    The constructor's arguments are recorded (``gymnasium.utils.RecordConstructorArgs``), so the wrapped
    env's ``spec`` rebuilds it: ``gymnasium.make(env.spec)``.
    """

    def __init__(self, env: gym.Env, release_prob: Sequence[float], seed: int | None = None):
        # Recorded as plain floats: the spec's kwargs are compared and may be serialised.
        gym.utils.RecordConstructorArgs.__init__(
            self, release_prob=[float(p) for p in release_prob], seed=seed
        )
        gym.Wrapper.__init__(self, env)
        probs = np.asarray(release_prob, dtype=np.float64)
        reward_space = getattr(env.unwrapped, "reward_space", None)
        n_objectives = reward_space.shape[0] if reward_space is not None else probs.shape[0]
        if probs.ndim != 1 or probs.shape[0] != n_objectives:
            raise ValueError(
                f"release_prob: expected {n_objectives} probabilities (one per reward channel), got {list(probs)}"
            )
        if np.any((probs < 0) | (probs > 1)) or not np.all(np.isfinite(probs)):
            raise ValueError(f"release_prob: every probability must lie in [0, 1], got {list(probs)}")
        self.release_prob = probs
        self._dense = probs >= 1.0
        self._rng = np.random.default_rng(seed)
        self._accumulated = np.zeros(n_objectives, dtype=np.float64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        # A new episode never inherits an unreleased sum (the last step of the previous one released it,
        # but a user may reset mid-episode).
        self._accumulated[:] = 0.0
        if seed is not None:
            # Only a seeded reset reseeds: an unseeded one (a run's next episode) continues the stream, so a
            # run's release draws stay one stream from its first, seeded, reset (and resume bit for bit
            # from the generator state prism.envs.state checkpoints).
            self._rng = np.random.default_rng(derive_seed(int(seed), RELEASE_STREAM))
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        true_reward = np.asarray(reward, dtype=np.float32)
        self._accumulated += true_reward
        # Draw for every channel every step so that the release pattern of one channel does not depend
        # on whether another is dense (same seed -> same release steps).
        draws = self._rng.random(self._accumulated.shape[0])
        released = self._dense | (draws < self.release_prob) | bool(terminated) | bool(truncated)
        emitted = np.where(released, self._accumulated, 0.0).astype(np.float32)
        self._accumulated[released] = 0.0
        info = dict(info)
        info["true_reward"] = true_reward
        info["released"] = released
        return obs, emitted, terminated, truncated, info


def release_probabilities(n_objectives: int, sparse_channel: int | None, p_rel: float) -> list[float]:
    """``[1, …, p_rel, …, 1]``: every channel dense except ``sparse_channel`` (None -> all dense)."""
    probs = [1.0] * n_objectives
    if sparse_channel is not None:
        if not 0 <= sparse_channel < n_objectives:
            raise ValueError(
                f"env.sparse_channel: {sparse_channel} is out of range for {n_objectives} objectives"
            )
        if not 0.0 <= p_rel <= 1.0:
            raise ValueError(f"env.p_rel: must lie in [0, 1], got {p_rel}")
        probs[sparse_channel] = float(p_rel)
    return probs
