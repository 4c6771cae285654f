"""A fast pure-numpy multi-objective env with a known reflection symmetry, for tests of the whole stack.

``prism/Toy-v0``: a point mass in the plane, pushed by a 2-D action in [−1, 1]². Observation
``[t/T, |p|, p_x, p_y, v_x, v_y]``; dynamics ``v' = 0.8 v + 0.2 a``, ``p' = p + 0.25 v'``. Rewards:

0. *outward progress* ``10 (|p'| − |p|)``
1. *energy* ``−Σ a²``

The episode terminates when the mass leaves the unit disc and is truncated after ``max_episode_steps``
(200 by default), so episode lengths vary. Negating position, velocity and action maps trajectories to
trajectories with identical rewards: L_g negates observation indices 2–5, K_g both action dimensions, and
the optimal policy is equivariant — the same structure as the MuJoCo tasks' reflection symmetry.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

TOY_ENV_ID = "prism/Toy-v0"


class ToyReflectionEnv(gym.Env):
    """See the module docstring."""

    metadata = {"render_modes": []}

    def __init__(self, max_episode_steps: int = 200):
        self.max_episode_steps = max_episode_steps
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(6,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.reward_space = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.reward_dim = 2
        self._p = np.zeros(2)
        self._v = np.zeros(2)
        self._t = 0

    def _obs(self) -> np.ndarray:
        radius = float(np.hypot(*self._p))
        return np.array([self._t / self.max_episode_steps, radius, *self._p, *self._v], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._p = self.np_random.uniform(-0.5, 0.5, size=2)
        self._v = np.zeros(2)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        radius_before = np.hypot(*self._p)
        self._v = 0.8 * self._v + 0.2 * a
        self._p = self._p + 0.25 * self._v
        self._t += 1
        radius_after = np.hypot(*self._p)
        reward = np.array([10.0 * (radius_after - radius_before), -float(a @ a)], dtype=np.float32)
        terminated = bool(radius_after > 1.0)
        # The time limit lives here (not in a TimeLimit wrapper) so the env is self-contained;
        # hitting it is a truncation, never a termination.
        truncated = (not terminated) and self._t >= self.max_episode_steps
        return self._obs(), reward, terminated, truncated, {}


if TOY_ENV_ID not in gym.registry:
    gym.register(
        id=TOY_ENV_ID,
        entry_point=ToyReflectionEnv,
        disable_env_checker=True,  # vector rewards are fine for us, not for gymnasium's passive checker
        order_enforce=True,
    )
