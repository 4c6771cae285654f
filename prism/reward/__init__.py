"""Reward redistribution for the sparse channel: ReSymNet ensemble, RRD, their Lightning training, and shapers
(docs/method.md §4–5).

The names below are imported on first access (PEP 562), so importing this package (as the config loader
does) pulls in neither torch nor Lightning.
"""

from __future__ import annotations

from prism._lazy import lazy_exports

_LAZY = {
    "build_features": "prism.data.features",
    "dense_channels": "prism.data.features",
    "feature_dim": "prism.data.features",
    "RewardConfig": "prism.reward.config",
    "pearson_correlation": "prism.reward.losses",
    "segment_sums": "prism.reward.losses",
    "trajectory_sum_loss": "prism.reward.losses",
    "ReSymNetEnsemble": "prism.reward.resymnet",
    "ReSymNetRewardModel": "prism.reward.resymnet",
    "PassThroughShaper": "prism.reward.shaping",
    "RandomShaper": "prism.reward.shaping",
    "PredictedRewardShaper": "prism.reward.shaping",
    "RewardShaper": "prism.reward.shaping",
    "Transition": "prism.reward.shaping",
    "UniformShaper": "prism.reward.shaping",
    "make_shaper": "prism.reward.shaping",
    "relabel_rewards": "prism.reward.shaping",
    "TrajectorySumModule": "prism.reward.trajectory_sum_module",
    "fit_resymnet_model": "prism.reward.fit",
    "fit_trajectory_sums": "prism.reward.fit",
    "FitSummary": "prism.reward.fitter",
    "FittedReward": "prism.reward.fitter",
    "RewardFitter": "prism.reward.fitter",
    "RewardModel": "prism.reward.fitter",
    "RRDConfig": "prism.reward.config",
    "RRDNetwork": "prism.reward.rrd",
    "RRDRewardModel": "prism.reward.rrd",
    "fit_rrd_model": "prism.reward.rrd",
}
"""Public name -> the module defining it (imported on first access)."""


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__all__ = sorted(_LAZY)
