"""What a reward model brings to the shared fit on segment sums: :class:`FitRecipe`.

The fit itself (:func:`prism.reward.fitting.fit.fit_trajectory_sums` driving a
:class:`~prism.reward.fitting.trajectory_sum_module.TrajectorySumModule`) knows no model: the seeded split, early
stopping on whole validation segments, snapshots and resume, warm start, precision, threads and the
:class:`~prism.reward.fitting.fitter.FitSummary` are the driver's; the network, its optimiser, clip, loss, batch
and input columns are the recipe's (ReSymNet's :func:`prism.reward.models.resymnet_fit.resymnet_recipe`, RRD's
:func:`prism.reward.models.rrd.rrd_recipe`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor, nn

from prism.data.features import FeatureLayout
from prism.reward.losses import FitLoss
from prism.reward.model import RewardModel

if TYPE_CHECKING:
    from prism.data.datamodule import TrajectorySumDataModule

Optimisers = tuple[torch.optim.Optimizer, "torch.optim.lr_scheduler.LRScheduler | None"]
"""An optimiser and its per-epoch learning-rate scheduler (None: no schedule)."""


class DropoutStream(Protocol):
    """The ragged layout's dropout draws, batch after batch: for each member the masks the padded layout's
    forward would draw for its rows (ReSymNet's :class:`~prism.reward.models.resymnet.DropoutNoiseStream`)."""

    generator: torch.Generator
    """Where the draws come from (a fit's snapshot keeps its state)."""

    def take(
        self, steps: Sequence[int], members: Sequence[int], next_steps: Sequence[int] | None = None
    ) -> list[list[Tensor]] | None:
        """Per residual block, per listed member, its ``[N_k, H]`` noise for this batch (None: no dropout)."""
        ...

    def close(self) -> None:
        """Stop drawing (finish any draw in flight)."""
        ...


@dataclass(frozen=True)
class FitRecipe:
    """What a reward model brings to the shared fit (see the module docstring)."""

    n_members: int
    """Networks fitted together (ReSymNet's ensemble K; 1 for a single network)."""
    batch_size: int
    """Segments per training batch."""
    inputs: FeatureLayout
    """The column groups of a step the network reads (dense rewards, ``s_{t+1}``)."""
    standardise: bool
    """Inputs z-scored with the training split's scaler (False: raw)."""
    loss: FitLoss
    """The training loss, chosen once; its sampler decides which steps a training batch holds."""
    network: Callable[[int, list[int]], nn.Module]
    """``network(in_features, member_seeds)``: the stacked networks (member index first in every parameter),
    ``forward(x) -> [K, N]`` and ``forward_members(features, members) -> [N_k]`` per listed member."""
    optimiser: Callable[[Iterable[nn.Parameter]], Optimisers]
    """``optimiser(parameters) -> (optimiser, per-epoch scheduler or None)``."""
    grad_clip: float | None
    """Gradient-norm clip per network (:func:`~prism.reward.fitting.network_fit.clip_per_member_`), or None."""
    model: Callable[[nn.Module, TrajectorySumDataModule], RewardModel]
    """``model(fitted_networks, datamodule)``: the fitted model on the CPU around the fitted networks."""
    stacked_optimiser: Callable[[int], Callable[[Iterable[nn.Parameter]], Optimisers]] | None = None
    """``stacked_optimiser(n_networks)``: the optimiser of a population's stacked fit over that many networks
    (:mod:`prism.reward.fitting.stacked`), :attr:`optimiser` per network but one in which a network without a
    batch left in an epoch takes no step (ReSymNet's :class:`~prism.reward.fitting.member_adamw.MemberAdamW`).
    None: the model has no stacked fit."""
    dropout_stream: Callable[[nn.Module, Tensor], DropoutStream] | None = None
    """``dropout_stream(networks, generator_state)`` for a network with dropout (ReSymNet's): the ragged layout
    hands each member the padded layout's masks (``forward_members(..., noise=)``), drawn from a generator that
    starts at ``generator_state``. None: the network has no dropout."""


__all__ = ["DropoutStream", "FitRecipe", "Optimisers"]
