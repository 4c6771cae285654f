"""The seam between the loop and a learned reward model's fit: what a fit is given and what it hands back.

A fit returns :class:`FittedReward`, the model and its :class:`FitSummary` together (``None`` for a plug-in
that reports nothing); the loop builds a fit's record from that pair alone. Two kinds of fit are registered
(:func:`prism.plugins.registry.register_reward_model`):

- a :class:`RewardFitter` (``fitter=``, the built-ins): every keyword the loop hands a fit — its logger,
  callbacks (the run's progress bar), snapshots inside the fit and their resume, the previous cycle's model
  for ``reward.warm_start``;
- a plain fit (``fit=``, the documented plug-in form) ``fit(store, config, *, logger, seed, device) -> model``,
  which :func:`reward_fitter` wraps into a :class:`RewardFitter` (no snapshots, no progress bar, no warm
  start: asked for one, it refuses in one line).

A population fits every member's model in one go through a :class:`PopulationFitter` (``reward.stacked_fit``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch
from torch import Tensor

from prism.data.segments import SegmentStore
from prism.reward.config import RewardConfig
from prism.reward.model import RewardModel
from prism.reward.quality import RewardQuality

if TYPE_CHECKING:
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.loggers import Logger

    from prism.plugins.registry import RewardModelEntry


class NetworkRewardModel(RewardModel, Protocol):
    """A model fitted by the shared driver (:func:`prism.reward.fitting.fit.fit_trajectory_sums`): its stacked
    networks are ``net`` (what a warm start, ``reward.warm_start``, begins from)."""

    net: torch.nn.Module


@dataclass
class FitSummary:
    """What a reward fit did and how good its model is on the fit's own validation split (scored once, by the
    fit: :func:`prism.reward.quality.score_validation`)."""

    epochs_run: list[int]
    """Per network, the epochs it trained (early stopping is per network)."""
    best_epoch: list[int]
    """Per network, the 0-based epoch whose weights it returns (its best validation loss)."""
    best_val_loss: list[float]
    wall_time_s: float
    seconds_per_epoch: float
    """Median wall time of one epoch (training + validation), set-up and final evaluation excluded."""
    n_train_segments: int
    n_val_segments: int
    validation: RewardQuality
    """The fitted model on the validation split."""
    validation_expert: RewardQuality | None
    """The same on the split's segments collected by a trained policy (None before the first expert collection)."""
    val_segments: Tensor = field(repr=False)
    """The store's segment indices in the validation split."""
    cpu_time_s: float | None = None
    """The fit's CPU seconds in all (a stacked fit's, shared by its stores), its final scoring included."""
    train_cpu_s: float | None = None
    """Of which in training epochs."""
    validation_cpu_s: float | None = None
    """Of which in the per-epoch validation passes (early stopping's loss on whole validation segments)."""

    @property
    def val_correlation(self) -> float:
        """Pearson correlation of the per-step prediction with the true sparse reward on the validation steps
        (0 when a side is constant)."""
        pearson = self.validation.pearson
        return 0.0 if pearson is None else pearson

    @property
    def val_segment_rel_error(self) -> float:
        """Mean over validation segments of ``|Σ r̂ − R| / max(|R|, 1e-8)``."""
        error = self.validation.segment_rel_error
        return 0.0 if error is None else error


class FittedReward(NamedTuple):
    """A fit's result: the model and its summary (``model, summary = fit(...)``)."""

    model: RewardModel
    """The fitted model (on the CPU, eval mode)."""
    summary: FitSummary | None
    """What the fit did (None: a plug-in's fit that reports nothing)."""


class RewardFitter(Protocol):
    """A reward model's fit as the loop calls it (the built-ins: :func:`prism.reward.models.resymnet_fit.fit_resymnet_model`,
    :func:`prism.reward.models.rrd.fit_rrd_model`)."""

    def __call__(
        self,
        store: SegmentStore,
        config: RewardConfig,
        *,
        logger: Logger | None,
        seed: int,
        device: str | torch.device,
        callbacks: Sequence[Callback] = (),
        on_snapshot: Callable[[bytes], None] | None = None,
        snapshot_every_s: float = 600.0,
        resume: bytes | None = None,
        init: RewardModel | None = None,
    ) -> FittedReward: ...


class PopulationFitter(Protocol):
    """Every member's model of a population in one fit (``reward.stacked_fit``), each equal to its own fit
    (:func:`prism.reward.fitting.stacked.fit_reward_models_stacked`); ``loggers``: one per store, or None."""

    def __call__(
        self,
        stores: Sequence[SegmentStore],
        config: RewardConfig,
        seeds: Sequence[int],
        *,
        device: str | torch.device,
        loggers: Sequence[Logger] | None = None,
        callbacks: Sequence[Callback] = (),
        on_snapshot: Callable[[bytes], None] | None = None,
        snapshot_every_s: float = 600.0,
        resume: bytes | None = None,
    ) -> list[FittedReward]: ...


@dataclass(frozen=True)
class PlainFitter:
    """A plain plug-in fit ``fit(store, config, *, logger, seed, device) -> model`` as a :class:`RewardFitter`:
    it takes no callbacks and no snapshots (a run's checkpoint keeps none inside its fit), and no warm start."""

    fit: Callable[..., RewardModel]
    name: str

    def __call__(
        self,
        store: SegmentStore,
        config: RewardConfig,
        *,
        logger: Logger | None,
        seed: int,
        device: str | torch.device,
        init: RewardModel | None = None,
        **ignored: object,  # callbacks, on_snapshot, snapshot_every_s, resume: a plain fit takes none of them
    ) -> FittedReward:
        if init is not None:
            raise ValueError(f"reward.warm_start: the {self.name} model's fit takes no init model")
        return FittedReward(self.fit(store, config, logger=logger, seed=seed, device=device), None)


def reward_fitter(entry: RewardModelEntry, key: str = "reward.name") -> RewardFitter:
    """The registered model's fit as a :class:`RewardFitter` (a plain ``fit=`` wrapped in :class:`PlainFitter`)."""
    if entry.fitter is not None:
        fitter: RewardFitter = entry.fitter_fn(key)
        return fitter
    return PlainFitter(entry.fit_fn(key), entry.name)


def population_fitter(entry: RewardModelEntry, key: str = "reward.name") -> PopulationFitter | None:
    """The registered model's :class:`PopulationFitter`, or None when it fits one member at a time."""
    fitter: PopulationFitter | None = entry.population_fitter_fn(key)
    return fitter


__all__ = [
    "FitSummary",
    "NetworkRewardModel",
    "FittedReward",
    "PlainFitter",
    "PopulationFitter",
    "RewardFitter",
    "RewardModel",
    "population_fitter",
    "reward_fitter",
]
