"""Reward shapers: what sits between the (sparse) env and the replay buffer.

A shaper receives each env step with the *emitted* reward vector and returns the transitions that are ready
to be stored, with the sparse channel replaced by the redistribution it implements (SPEC §5):

- ``none``: the sparse channel exactly as emitted (the baseline; also the oracle on a dense env).
- ``resymnet``: the reward ensemble's per-step prediction from ``h_t`` (added by the reward package).
- ``uniform`` / ``random``: need the released sum and the segment length, so the transitions of a segment are
  held until the segment is released (added by the reward package).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np


class Transition(NamedTuple):
    """One env step as stored in the replay buffer (numpy, unbatched)."""

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    # Termination only: a truncated step still bootstraps from next_obs (SPEC §6).
    terminated: bool
    weight: np.ndarray


class RewardShaper(Protocol):
    """Turns env steps into buffer-ready transitions; see the module docstring."""

    def push(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: bool,
        truncated: bool,
        weight: np.ndarray,
        released: bool,
    ) -> list[Transition]: ...

    def reset(self) -> None: ...


class PassThroughShaper:
    """``none``: store the emitted reward unchanged."""

    def push(self, obs, action, reward, next_obs, terminated, truncated, weight, released) -> list[Transition]:
        return [Transition(obs, action, np.asarray(reward, dtype=np.float32), next_obs, bool(terminated), weight)]

    def reset(self) -> None:
        pass
