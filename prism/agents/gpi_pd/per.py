"""Proportional prioritised replay (Schaul et al. 2016) as GPI-PD uses it (morl-baselines' LAP-style buffer).

:class:`PrioritySampler` keeps one priority per replay slot and member (``[S, capacity]``, aligned with the
rows of :class:`prism.data.replay.ReplayBuffer`) and samples slot indices; storage stays in the replay buffer.

- Sampling: ``P(i) = p_i / Σ_j p_j`` over a member's stored slots, with replacement. Implemented as one
  inverse-CDF lookup: ``u ~ U[0, Σp)``, ``i = searchsorted(cumsum(p), u, right)`` — O(stored) per batch
  (a float64 cumsum over the filled slots) instead of a sum-tree's O(B log N); simple, vectorised over
  members, exact.
- New transitions get the largest priority seen so far (``max_priority``), so each is likely replayed soon.
  As in morl-baselines the running maximum starts at ``initial_priority`` (1e-5 there) and only grows.
- Priorities passed to :meth:`update` are final (the caller applies ``max(·, min_priority)^α``;
  see :func:`prism.agents.gpi_pd.losses.td_priority`).
- Importance weights ``ω_i = (N·P(i))^{−β} / max_j (N·P(j))^{−β}`` with N the member's stored count and the
  max over all stored slots (i.e. at ``min_j P(j)``), so ``ω ≤ 1``. β = 0 gives ones, which is what
  morl-baselines effectively uses (it applies no correction).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from prism.data.replay import zeros_per_transition


class PrioritySampler:
    """Priorities of ``members`` replay rings of ``capacity`` slots each, on ``device``."""

    def __init__(
        self,
        capacity: int,
        members: int = 1,
        device: torch.device | str = "cpu",
        initial_priority: float = 1e-5,
    ):
        if capacity <= 0:
            raise ValueError(f"agent.buffer_size: must be positive, got {capacity}")
        self.capacity = capacity
        self.members = members
        self.device = torch.device(device)
        self.priorities = zeros_per_transition(
            members, capacity, 0, torch.float64, self.device, what="replay priorities"
        )
        self.max_priority = torch.full(
            (members,), float(initial_priority), dtype=torch.float64, device=self.device
        )
        self.sizes = np.zeros(members, dtype=np.int64)

    def on_add(self, member: int, slots: np.ndarray | Sequence[int]) -> None:
        """Slots just (over)written for ``member`` get the running maximum priority."""
        slots = np.asarray(slots, dtype=np.int64)
        if slots.size == 0:
            return
        self.priorities[member, torch.as_tensor(slots, device=self.device)] = self.max_priority[member]
        self.sizes[member] = min(self.capacity, max(int(self.sizes[member]), int(slots.max()) + 1))

    def probabilities(self, member: int = 0) -> torch.Tensor:
        """``P(i)`` over all ``capacity`` slots of ``member`` (0 for empty slots)."""
        p = self.priorities[member]
        return p / p.sum()

    def sample(
        self, batch_size: int, generators: Sequence[torch.Generator | None] | None = None
    ) -> torch.Tensor:
        """Slot indices ``[S, B]`` (long), member s's drawn from ``generators[s]`` with probability ``P(i)``."""
        if self.sizes.min() == 0:
            raise RuntimeError("PrioritySampler.sample: nothing stored")
        # Only the filled prefix: slots past every member's size hold priority 0 and cannot be drawn, and the
        # prefix's cumulative sums (and so the total) are exactly those of the whole row. O(stored), not
        # O(capacity), per batch.
        filled = int(self.sizes.max())
        cdf = self.priorities[:, :filled].cumsum(dim=1)  # [S, n] float64
        u = torch.stack(
            [
                torch.rand(
                    batch_size,
                    generator=None if generators is None else generators[s],
                    device=self.device,
                    dtype=torch.float64,
                )
                for s in range(self.members)
            ]
        )
        u = u * cdf[:, -1:]
        # right=True: the first slot whose cumulative sum exceeds u, so zero-priority (empty) slots never win.
        index = torch.searchsorted(cdf, u, right=True)
        # u·Σp may round up to Σp itself: then no slot exceeds it; take the member's last stored slot.
        last = torch.as_tensor(self.sizes - 1, device=self.device).unsqueeze(1)
        return torch.minimum(index, last)

    def importance_weights(self, index: torch.Tensor, beta: float) -> torch.Tensor:
        """``ω = (N·P(i))^{−β} / max_j (N·P(j))^{−β}`` for slot indices ``[S, B]`` -> float32 ``[S, B]``."""
        if beta == 0.0:
            return torch.ones(index.shape, device=self.device)
        p = self.priorities
        total = p.sum(dim=1, keepdim=True)
        n = torch.as_tensor(self.sizes, device=self.device, dtype=torch.float64).unsqueeze(1)
        prob = p.gather(1, index) / total
        min_prob = torch.where(p > 0, p, torch.inf).min(dim=1, keepdim=True).values / total
        return ((n * prob).pow(-beta) / (n * min_prob).pow(-beta)).float()

    def update(self, index: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set the priorities of slots ``index [S, B]`` to ``priorities [S, B]`` (> 0) and raise the running
        maximum. A slot sampled twice gets the value of its first occurrence (as morl-baselines' sum tree)."""
        priorities = priorities.detach().to(self.device, torch.float64)
        for s in range(self.members):
            order = torch.sort(index[s], stable=True).indices
            ordered = index[s][order]
            first = torch.ones_like(ordered, dtype=torch.bool)
            first[1:] = ordered[1:] != ordered[:-1]
            keep = order[first]
            self.priorities[s, index[s][keep]] = priorities[s][keep]
        self.max_priority = torch.maximum(self.max_priority, priorities.amax(dim=1))

    # ---- checkpointing ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "priorities": self.priorities.cpu().clone(),
            "max_priority": self.max_priority.cpu().clone(),
            "sizes": torch.from_numpy(self.sizes.copy()),
        }

    def load_state_dict(self, state: dict) -> None:
        self.priorities.copy_(state["priorities"].to(self.device))
        self.max_priority = state["max_priority"].to(self.device, torch.float64).clone()
        self.sizes = state["sizes"].numpy().astype(np.int64).copy()
