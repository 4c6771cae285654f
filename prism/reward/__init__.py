"""Reward redistribution for the sparse channel: ReSymNet ensemble, its Lightning training, and shapers (docs/method.md §4–5)."""

from prism.data.features import build_features, dense_channels, feature_dim
from prism.reward.config import RewardConfig
from prism.reward.losses import pearson_correlation, segment_sums, trajectory_sum_loss
from prism.reward.resymnet import ReSymNetEnsemble, RewardEnsemble
from prism.reward.shaping import (
    PassThroughShaper,
    RandomShaper,
    ResymnetShaper,
    RewardShaper,
    Transition,
    UniformShaper,
    make_shaper,
    relabel_rewards,
)


def __getattr__(name: str):
    # The Lightning side is imported lazily so `import prism.reward` (e.g. by the config loader) stays light.
    if name in ("RewardModelModule", "fit_reward_model", "FitSummary", "evaluate_segments"):
        from prism.reward import module

        return getattr(module, name)
    raise AttributeError(name)


__all__ = [
    "FitSummary",
    "PassThroughShaper",
    "RandomShaper",
    "ReSymNetEnsemble",
    "ResymnetShaper",
    "RewardConfig",
    "RewardEnsemble",
    "RewardModelModule",
    "RewardShaper",
    "Transition",
    "UniformShaper",
    "build_features",
    "dense_channels",
    "evaluate_segments",
    "feature_dim",
    "fit_reward_model",
    "make_shaper",
    "pearson_correlation",
    "relabel_rewards",
    "segment_sums",
    "trajectory_sum_loss",
]
