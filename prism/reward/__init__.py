"""Reward redistribution for the sparse channel: ReSymNet ensemble, RRD, their Lightning training, and shapers
(docs/method.md §4–5).

The names below are imported on first access (PEP 562), so importing this package (as the config loader
does) pulls in neither torch nor Lightning.
"""

from __future__ import annotations

from prism.core._lazy import lazy_exports

_LAZY = {
    "build_features": "prism.data.features",
    "dense_channels": "prism.data.features",
    "feature_dim": "prism.data.features",
    "RewardConfig": "prism.reward.config",
    "pearson_correlation": "prism.reward.losses",
    "segment_sums": "prism.reward.losses",
    "trajectory_sum_loss": "prism.reward.losses",
    "ReSymNetEnsemble": "prism.reward.models.resymnet",
    "ReSymNetRewardModel": "prism.reward.models.resymnet",
    "PassThroughShaper": "prism.reward.shapers",
    "RandomShaper": "prism.reward.shapers",
    "PredictedRewardShaper": "prism.reward.shapers",
    "RewardShaper": "prism.reward.shapers",
    "Transition": "prism.reward.shapers",
    "UniformShaper": "prism.reward.shapers",
    "make_shaper": "prism.reward.shapers",
    "relabel_rewards": "prism.reward.shapers",
    "TrajectorySumModule": "prism.reward.fitting.trajectory_sum_module",
    "fit_resymnet_model": "prism.reward.models.resymnet_fit",
    "fit_trajectory_sums": "prism.reward.fitting.fit",
    "FitSummary": "prism.reward.fitting.fitter",
    "FittedReward": "prism.reward.fitting.fitter",
    "RewardFitter": "prism.reward.fitting.fitter",
    "RewardModel": "prism.reward.fitting.fitter",
    "RRDConfig": "prism.reward.config",
    "RRDNetwork": "prism.reward.models.rrd",
    "RRDRewardModel": "prism.reward.models.rrd",
    "fit_rrd_model": "prism.reward.models.rrd",
}
"""Public name -> the module defining it (imported on first access)."""


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__all__ = sorted(_LAZY)
