"""How ReSymNet is fitted (docs/method.md §4): its :class:`~prism.reward.fitting.recipe.FitRecipe` for the shared
driver (:func:`~prism.reward.fitting.fit.fit_trajectory_sums`) and :func:`fit_resymnet_model`, the fit the loop
calls, and :func:`fit_resymnet_population`, a population's fits in one go by :mod:`prism.reward.fitting.stacked`
with the same recipe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.loggers import Logger

from prism.data.datamodule import TrajectorySumDataModule
from prism.data.features import FeatureLayout
from prism.data.segments import SegmentStore
from prism.reward.config import ReSymNetConfig
from prism.reward.fitting.fit import FitOptions, fit_trajectory_sums
from prism.reward.fitting.fitter import FittedReward
from prism.reward.fitting.member_adamw import MemberAdamW
from prism.reward.fitting.recipe import FitRecipe, Optimisers
from prism.reward.fitting.stacked import fit_reward_models_stacked
from prism.reward.models.resymnet import DropoutNoiseStream, ReSymNetEnsemble, ReSymNetRewardModel

if TYPE_CHECKING:
    from typing_extensions import Unpack


def resymnet_optimiser(
    config: ReSymNetConfig, stacked_networks: int | None = None
) -> Callable[[Iterable[torch.nn.Parameter]], Optimisers]:
    """ReSymNet's optimiser: AdamW at ``reward.lr`` with ``reward.weight_decay``, the learning rate decayed by
    ``reward.lr_decay`` every epoch. ``stacked_networks``: a population's stacked fit over that many networks
    takes :class:`~prism.reward.fitting.member_adamw.MemberAdamW` instead, the same AdamW per network, so that a
    store without a batch left in an epoch takes no step (each network then steps as its lone fit does)."""

    def adamw(parameters: Iterable[torch.nn.Parameter]) -> Optimisers:
        if stacked_networks is None:
            opt = torch.optim.AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay)
        else:
            opt = MemberAdamW(parameters, stacked_networks, lr=config.lr, weight_decay=config.weight_decay)
        return opt, torch.optim.lr_scheduler.ExponentialLR(opt, gamma=config.lr_decay)

    return adamw


def resymnet_recipe(config: ReSymNetConfig) -> FitRecipe:
    """ReSymNet's fit (docs/method.md §4): K residual networks with dropout, AdamW, the per-member gradient
    clip, standardised ``[s, a, r_dense]`` (``[..., d_t]`` with ``reward.terminal_feature``), the loss
    ``reward.loss`` chooses; the fitted model conserves returns with ``reward.conserve_return`` (§4c)."""

    def ensemble(net: torch.nn.Module, dm: TrajectorySumDataModule) -> ReSymNetRewardModel:
        assert isinstance(net, ReSymNetEnsemble)  # (the networks this recipe builds)
        model = ReSymNetRewardModel(
            net,
            use_dense_features=dm.use_dense_features,
            terminal_feature=dm.terminal,
            conserve_return=config.conserve_return,
        )
        model.set_scaler(dm.feature_mean, dm.feature_scale)
        return model

    def network(in_features: int, seeds: list[int]) -> ReSymNetEnsemble:
        return ReSymNetEnsemble(
            len(seeds), in_features, config.hidden, config.dropout, config.residual, seeds
        )

    return FitRecipe(
        n_members=config.ensemble_size,
        batch_size=config.batch_size,
        inputs=FeatureLayout(dense=config.use_dense_features, terminal=config.terminal_feature),
        standardise=True,
        loss=config.fit_loss(),
        network=network,
        optimiser=resymnet_optimiser(config),
        grad_clip=config.grad_clip,
        model=ensemble,
        stacked_optimiser=lambda n_networks: resymnet_optimiser(config, stacked_networks=n_networks),
        dropout_stream=DropoutNoiseStream,
    )


def fit_resymnet_model(
    store: SegmentStore,
    config: ReSymNetConfig,
    logger: Logger | None = None,
    seed: int = 0,
    **options: Unpack[FitOptions],
) -> FittedReward:
    """Fit a fresh ReSymNet ensemble on every segment in ``store`` and return it (on CPU, eval mode):
    :func:`~prism.reward.fitting.fit.fit_trajectory_sums` with :func:`resymnet_recipe`; the arguments are that
    function's (``init``: a :class:`~prism.reward.models.resymnet.ReSymNetRewardModel`)."""
    return fit_trajectory_sums(store, config, resymnet_recipe(config), logger, seed, **options)


def fit_resymnet_population(
    stores: Sequence[SegmentStore], config: ReSymNetConfig, seeds: Sequence[int], **options: Any
) -> list[FittedReward]:
    """A population's ReSymNet fits, one ensemble per store, in one stacked fit:
    :func:`~prism.reward.fitting.stacked.fit_reward_models_stacked` with :func:`resymnet_recipe` (the keyword
    arguments are that function's)."""
    return fit_reward_models_stacked(stores, config, seeds, resymnet_recipe(config), **options)


__all__ = ["fit_resymnet_model", "fit_resymnet_population", "resymnet_optimiser", "resymnet_recipe"]
