"""Replay buffer of preallocated tensors on the agent's device (SPEC §6: capacity 1e6, uniform sampling)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class ReplayBatch(NamedTuple):
    """A replay sample; every field is a float32 tensor with leading dimension B."""

    obs: torch.Tensor  # [B, obs_dim]
    action: torch.Tensor  # [B, act_dim]
    reward: torch.Tensor  # [B, L]
    next_obs: torch.Tensor  # [B, obs_dim]
    # 1.0 only where the episode *terminated* at this step; a truncated step stores 0 and bootstraps.
    done: torch.Tensor  # [B]
    weight: torch.Tensor  # [B, L] the preference the transition was collected with


class ReplayBuffer:
    """Ring buffer of transitions ``(s, a, r, s', done, w)`` in one preallocated ``[capacity, D]`` tensor.

    All fields of a transition share a row, so adding is one host-to-device copy and sampling is one gather;
    the fields of a sampled batch are column views of the gathered rows. When full, new transitions
    overwrite the oldest (wrap-around). Memory: ``capacity × (2·obs + act + 2·L + 1) × 4`` bytes.
    """

    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        act_dim: int,
        n_objectives: int,
        device: torch.device | str = "cpu",
    ):
        if capacity <= 0:
            raise ValueError(f"agent.buffer_size: must be positive, got {capacity}")
        self.capacity = capacity
        self.device = torch.device(device)
        self._sizes = (obs_dim, act_dim, n_objectives, obs_dim, 1, n_objectives)
        self._offsets = np.concatenate([[0], np.cumsum(self._sizes)]).tolist()
        self.width = int(self._offsets[-1])
        self.storage = torch.zeros(capacity, self.width, dtype=torch.float32, device=self.device)
        self._row = np.empty(self.width, dtype=np.float32)
        self.position = 0  # next row to write
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        done: bool,
        weight: np.ndarray,
    ) -> None:
        """Store one transition (numpy / python values); ``done`` is the termination flag only."""
        row, o = self._row, self._offsets
        row[o[0] : o[1]] = obs
        row[o[1] : o[2]] = action
        row[o[2] : o[3]] = reward
        row[o[3] : o[4]] = next_obs
        row[o[4]] = float(done)
        row[o[5] : o[6]] = weight
        self.storage[self.position].copy_(torch.from_numpy(row), non_blocking=False)
        self.position = (self.position + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def add_batch(self, batch: ReplayBatch) -> None:
        """Store a batch of transitions given as tensors (any device); wraps around like :meth:`add`."""
        rows = torch.cat(
            [
                batch.obs,
                batch.action,
                batch.reward,
                batch.next_obs,
                batch.done.reshape(-1, 1),
                batch.weight,
            ],
            dim=1,
        ).to(self.storage)
        n = rows.shape[0]
        if n >= self.capacity:  # only the newest `capacity` rows survive
            rows, n = rows[-self.capacity :], self.capacity
        first = min(n, self.capacity - self.position)
        self.storage[self.position : self.position + first] = rows[:first]
        if first < n:
            self.storage[: n - first] = rows[first:]
        self.position = (self.position + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def _split(self, rows: torch.Tensor) -> ReplayBatch:
        o = self._offsets
        return ReplayBatch(
            rows[:, o[0] : o[1]],
            rows[:, o[1] : o[2]],
            rows[:, o[2] : o[3]],
            rows[:, o[3] : o[4]],
            rows[:, o[4]],
            rows[:, o[5] : o[6]],
        )

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> ReplayBatch:
        """``batch_size`` transitions drawn uniformly with replacement from the stored ones."""
        if self.size == 0:
            raise RuntimeError("ReplayBuffer.sample: the buffer is empty")
        index = torch.randint(self.size, (batch_size,), device=self.device, generator=generator)
        return self._split(self.storage[index])

    def all(self) -> ReplayBatch:
        """Every stored transition, oldest first (views after one copy)."""
        if self.size < self.capacity:
            return self._split(self.storage[: self.size])
        return self._split(torch.roll(self.storage, -self.position, dims=0))
