"""Replay buffer of preallocated tensors on the agent's device (docs/method.md §6: capacity 1e6, uniform sampling)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from prism.core.errors import ConfigError


class ReplayBatch(NamedTuple):
    """A replay sample; every field is a float32 tensor with leading dimension B."""

    obs: torch.Tensor  # [B, obs_dim]
    action: torch.Tensor  # [B, act_dim]
    reward: torch.Tensor  # [B, L]
    next_obs: torch.Tensor  # [B, obs_dim]
    # 1.0 only where the episode *terminated* at this step; a truncated step stores 0 and bootstraps.
    done: torch.Tensor  # [B]
    weight: torch.Tensor  # [B, L] the preference the transition was collected with


def _allocation_failed(err: BaseException) -> bool:
    """Whether ``err`` is an allocator's refusal (out of memory, or over a process memory limit)."""
    if isinstance(err, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(err).lower()
    return "allocate" in text or "out of memory" in text


def _too_large(
    key: str, capacity: int, members: int, row_bytes: int, device: torch.device, what: str = "a replay buffer"
) -> str:
    """The one line for a buffer the machine cannot hold: the key, the bytes asked, what to lower."""
    needed = members * capacity * row_bytes
    rows = f"{members} members x {capacity}" if members > 1 else f"{capacity}"
    verb = "needs" if what.startswith("a ") else "need"
    return (
        f"{key}: {what} of {rows} transitions {verb} {needed} bytes ({needed / 2**30:.1f} GiB, "
        f"{row_bytes} per transition) on {device}, more than could be allocated; lower {key}"
        + (" or run fewer seeds" if members > 1 else "")
    )


def zeros_per_transition(
    members: int,
    capacity: int,
    width: int,
    dtype: torch.dtype,
    device: torch.device,
    key: str = "agent.buffer_size",
    what: str = "a replay buffer",
) -> torch.Tensor:
    """``torch.zeros(members, capacity[, width])`` (no ``width`` axis when it is 0) for storage kept per
    transition; where the allocator refuses, the one-line :class:`ConfigError` naming ``key``, the bytes asked
    and ``what`` they were for."""
    shape = (members, capacity, width) if width else (members, capacity)
    # torch's CPU allocator refuses with a RuntimeError ("can't allocate memory"), CUDA's with a subclass.
    try:
        return torch.zeros(*shape, dtype=dtype, device=device)
    except (MemoryError, RuntimeError) as err:
        if not _allocation_failed(err):
            raise
        row_bytes = max(width, 1) * torch.empty((), dtype=dtype).element_size()
        raise ConfigError(_too_large(key, capacity, members, row_bytes, device, what)) from None


class ReplayBuffer:
    """Ring buffers of transitions ``(s, a, r, s', done, w)`` for S members in one ``[S, capacity, D]`` tensor.

    All fields of a transition share a row, so adding is one host-to-device copy and sampling is one gather;
    the fields of a sampled batch are column views of the gathered rows. Each member has its own ring
    (``position[s]``, ``size[s]``): members may add different numbers of transitions per env step (a
    redistribution shaper releases a whole segment at once). When a ring is full, new transitions overwrite
    its oldest. Memory: ``S × capacity × (2·obs + act + 2·L + 1) × 4`` bytes.
    """

    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        act_dim: int,
        n_objectives: int,
        device: torch.device | str = "cpu",
        members: int = 1,
        key: str = "agent.buffer_size",
    ):
        """``key``: the config key that sets ``capacity``, named by the one-line error when the buffer cannot
        be allocated."""
        if capacity <= 0:
            raise ValueError(f"{key}: must be positive, got {capacity}")
        self.capacity = capacity
        self.members = members
        self.device = torch.device(device)
        self._sizes = (obs_dim, act_dim, n_objectives, obs_dim, 1, n_objectives)
        self._offsets = np.concatenate([[0], np.cumsum(self._sizes)]).tolist()
        self.width = int(self._offsets[-1])
        self.storage = zeros_per_transition(members, capacity, self.width, torch.float32, self.device, key)
        self.positions = np.zeros(members, dtype=np.int64)  # next row to write, per member
        self.sizes = np.zeros(members, dtype=np.int64)

    # single-member views (S = 1 call sites and tests)
    @property
    def position(self) -> int:
        return int(self.positions[0])

    @property
    def size(self) -> int:
        return int(self.sizes[0])

    def __len__(self) -> int:
        """Transitions stored by the member with the fewest (all members for S = 1)."""
        return int(self.sizes.min())

    def row(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        done: bool,
        weight: np.ndarray,
    ) -> np.ndarray:
        """One transition as a storage row (float32 ``[D]``); ``done`` is the termination flag only."""
        return np.concatenate(
            [obs, action, reward, next_obs, [float(done)], weight], dtype=np.float32, casting="unsafe"
        )

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        done: bool,
        weight: np.ndarray,
        member: int = 0,
    ) -> None:
        """Store one transition (numpy / python values) for ``member``."""
        self.add_rows(np.array([member]), self.row(obs, action, reward, next_obs, done, weight)[None])

    def add_rows(self, members: np.ndarray, rows: np.ndarray) -> None:
        """Store ``rows [n, D]`` (float32), row j for member ``members[j]``, in order: one host-to-device copy
        of the rows (and one of their slots; an agent's env step sends both with its observations in one,
        :mod:`prism.agents.transfer`).

        A member's rings wrap around like a single buffer's; if one call brings more than ``capacity`` rows for
        a member only its newest ``capacity`` survive."""
        if len(rows) == 0:
            return
        index, rows = self.plan_rows(members, rows)
        self.write_rows(torch.from_numpy(index).to(self.device), torch.from_numpy(rows).to(self.device))

    def plan_rows(self, members: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The host half of :meth:`add_rows`: moves the rings on (positions, sizes) and returns the flat
        storage slots (int64 ``[n']``) and the rows (float32 ``[n', D]``) to write there."""
        members = np.asarray(members, dtype=np.int64)
        if len(rows) == 1 or len(np.unique(members)) == len(members):
            # The common case (each member stored at most one transition this step): no ring can wrap onto
            # itself within the call, so the slots are the members' write positions.
            slots = self.positions[members]
            self.positions[members] = (slots + 1) % self.capacity
            self.sizes[members] = np.minimum(self.sizes[members] + 1, self.capacity)
            return members * self.capacity + slots, np.ascontiguousarray(rows, dtype=np.float32)
        slots = np.empty(len(rows), dtype=np.int64)
        for m in np.unique(members):
            mine = np.flatnonzero(members == m)
            slots[mine] = (self.positions[m] + np.arange(len(mine))) % self.capacity
            self.positions[m] = (self.positions[m] + len(mine)) % self.capacity
            self.sizes[m] = min(self.sizes[m] + len(mine), self.capacity)
        keep = _last_write_wins(members * self.capacity + slots)
        return (members * self.capacity + slots)[keep], np.ascontiguousarray(rows[keep], dtype=np.float32)

    def write_rows(self, index: torch.Tensor, rows: torch.Tensor) -> None:
        """The device half of :meth:`add_rows`: ``rows`` into the flat storage slots ``index`` (on the device)."""
        self.storage.view(self.members * self.capacity, self.width)[index] = rows

    def add_batch(self, batch: ReplayBatch, member: int = 0) -> None:
        """Store a batch of transitions given as tensors ``[n, ...]`` (any device) for ``member``."""
        rows = torch.cat(
            [batch.obs, batch.action, batch.reward, batch.next_obs, batch.done.reshape(-1, 1), batch.weight],
            dim=1,
        )
        self.add_rows(np.full(rows.shape[0], member), rows.detach().cpu().numpy())

    def _split(self, rows: torch.Tensor) -> ReplayBatch:
        o = self._offsets
        return ReplayBatch(
            rows[..., o[0] : o[1]],
            rows[..., o[1] : o[2]],
            rows[..., o[2] : o[3]],
            rows[..., o[3] : o[4]],
            rows[..., o[4]],
            rows[..., o[5] : o[6]],
        )

    def sample_members(
        self, batch_size: int, generators: list[torch.Generator | None] | None = None
    ) -> ReplayBatch:
        """``batch_size`` transitions per member, uniform with replacement over that member's stored ones,
        member s's indices drawn from ``generators[s]`` (its own stream): fields ``[S, B, ...]``."""
        if self.sizes.min() == 0:
            raise RuntimeError("ReplayBuffer.sample: the buffer is empty")
        index = torch.stack(
            [
                torch.randint(
                    int(self.sizes[s]),
                    (batch_size,),
                    device=self.device,
                    generator=None if generators is None else generators[s],
                )
                + s * self.capacity
                for s in range(self.members)
            ]
        )
        flat = self.storage.view(self.members * self.capacity, self.width)
        return self._split(flat[index])

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> ReplayBatch:
        """``batch_size`` transitions of a one-member buffer, fields ``[B, ...]``."""
        if self.members != 1:
            raise ValueError("ReplayBuffer.sample: use sample_members for a population buffer")
        batch = self.sample_members(batch_size, [generator])
        return ReplayBatch(*(field[0] for field in batch))

    def all(self, member: int = 0) -> ReplayBatch:
        """Every transition stored for ``member``, oldest first (views after one copy)."""
        size, position = int(self.sizes[member]), int(self.positions[member])
        rows = self.storage[member]
        if size < self.capacity:
            return self._split(rows[:size])
        return self._split(torch.roll(rows, -position, dims=0))

    # ---- checkpointing ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The stored rows of every member (only the filled part) and the ring positions."""
        filled = int(self.sizes.max())
        return {
            "rows": self.storage[:, :filled].detach().cpu().clone(),
            "positions": torch.from_numpy(self.positions.copy()),
            "sizes": torch.from_numpy(self.sizes.copy()),
        }

    def load_state_dict(self, state: dict) -> None:
        rows = state["rows"]
        self.storage[:, : rows.shape[1]] = rows.to(self.device)
        self.positions = state["positions"].numpy().astype(np.int64).copy()
        self.sizes = state["sizes"].numpy().astype(np.int64).copy()


def _last_write_wins(flat_slots: np.ndarray) -> np.ndarray:
    """Indices of the rows to write when several rows of one call land in the same slot (a ring wrapped
    within the call): only the last of them is kept, as sequential writes would leave it."""
    _, first_from_end = np.unique(flat_slots[::-1], return_index=True)
    return np.sort(len(flat_slots) - 1 - first_from_end)
