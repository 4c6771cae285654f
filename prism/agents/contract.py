"""The agent contract: what the loop, evaluation and checkpointing may rely on, and nothing else.

A backbone (CAPQL today) is a LightningModule implementing :class:`PopulationAgent` for a population of S
members (S = 1 for a single run — the same code path). :class:`prism.agents.off_policy.OffPolicyAgent`
implements everything here except the backbone's maths (networks, optimisers, ``update``, acting), so a new
off-policy backbone subclasses it and brings only those; see docs/ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from prism.reward.shapers import RewardShaper

NumpyPolicy = Callable[[np.ndarray], np.ndarray]
"""``policy(obs [obs_dim]) -> action [act_dim]`` (numpy, one env)."""


@runtime_checkable
class PopulationAgent(Protocol):
    """The interface between a backbone and the rest of prism.

    Shapes: ``S`` members, ``B`` rows per member. Every tensor lives on the agent's device.
    """

    seeds: tuple[int, ...]
    """The members' seeds (``len(seeds) == S``)."""
    shapers: list[RewardShaper]
    """Per member: turns env steps into replay transitions (the loop installs reward models in them)."""
    target_env_steps: int | None
    """Training stops once the env-step clock reaches it (the loop moves it on between phases)."""
    relabel_fn: Callable[[Any], Any] | None
    """Applied to every sampled replay batch ``[S, B, ...]`` before an update (``reward.relabel``)."""

    @property
    def device(self) -> torch.device:
        """Where its networks live (the run's device; reward fits run there too)."""
        ...

    @property
    def members(self) -> int:
        """S, the population size."""
        ...

    @property
    def env_step_count(self) -> int:
        """The one env-step clock (per member: all members step together), a host-side int."""
        ...

    def act(self, obs: torch.Tensor, weight: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Actions in [−1, 1]: ``obs [S, B, obs_dim]``, ``weight [S, B, L]`` -> ``[S, B, act_dim]``."""
        ...

    def act_member(self, member: int, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Deterministic actions of one member: ``obs [B, obs_dim]``, ``weight [B, L]`` -> ``[B, act_dim]``."""
        ...

    def policy_mean_member(self, member: int, obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """One member's pre-tanh action mean ``[B, act_dim]`` (for the equivariance error)."""
        ...

    def expert_policy(self, seed: int, member: int = 0) -> NumpyPolicy:
        """A deterministic numpy policy of one member for data collection; each call draws a fresh training
        preference from a generator seeded with ``seed`` (the caller's own stream: collection never perturbs
        training)."""
        ...

    def pause_at(self, env_step: int) -> None:
        """Make sure the agent ends a training batch exactly at ``env_step`` (several env steps may run per
        batch), so a callback sees that step in ``on_train_batch_end``."""
        ...

    def drop_captured_graphs(self) -> None:
        """Forget any captured CUDA graph of the update (the loop calls it after every reward fit, whose own
        Trainer may free memory a graph points at); the next update builds it again."""
        ...

    def check_finite(self) -> None:
        """Raise :class:`~prism.core.errors.NonFiniteError` if a logged loss or a weight is NaN/inf (the run calls it
        before every checkpoint, so a good checkpoint is never replaced by a broken state)."""
        ...

    def divergence_steps(self) -> list[int | None]:
        """Per member, the env step at which its critic loss was flagged as diverging (None: never;
        :mod:`prism.agents.divergence`): ``summary.json``'s ``critic_divergence_step``."""
        ...

    def runtime_state(self) -> dict[str, Any]:
        """Everything needed to continue bit for bit that is not a parameter or buffer (replay, envs
        mid-episode, samplers), as tensors and plain containers (loads with ``weights_only=True``)."""
        ...

    def load_runtime_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`runtime_state` (after ``setup``, before ``on_fit_start``)."""
        ...
