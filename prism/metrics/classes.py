"""HV, EUM and VO as ``torchmetrics.Metric`` classes: they accumulate an evaluation's per-episode returns and
compute the docs/method.md §9 metric from them with :mod:`prism.metrics.functional`.

Each metric keeps the returns ``[W, E, L]`` (W policies — one per evaluation weight —, E episodes, L
objectives) it is given in a list state reduced with ``dist_reduce_fx="cat"``: ``update`` may be called
once per chunk of weights (and, in a multi-process evaluation, once per process: ``compute`` then gathers
every process's rows before reducing). ``compute`` takes each policy's mean and population std over its
episodes exactly as :meth:`prism.evaluation.result.EvalResult.from_returns` does, so the values equal the
functional ones bit for bit::

    hv = Hypervolume(ref_point=spec.ref_point)
    hv.update(torch.from_numpy(returns))   # [W, E, L]
    hv.compute()                           # == functional.hypervolume(pareto_front(returns.mean(1)), ref)

:class:`~prism.evaluation.callback.EvaluationCallback` computes the ``eval/hv``, ``eval/eum`` and ``eval/vo``
it records and logs with them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from prism.metrics import functional as F

__all__ = ["ExpectedUtility", "Hypervolume", "VarianceObjective", "evaluation_metrics"]


class _EpisodeReturns(Metric):
    """Accumulates per-episode returns ``[W, E, L]`` (rows: policies); see the module docstring."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("returns", default=[], dist_reduce_fx="cat")

    def update(self, returns: Tensor | np.ndarray) -> None:
        """Add the returns ``[W, E, L]`` of W more policies (float64 kept as given: no rounding)."""
        returns = torch.as_tensor(returns)
        if returns.ndim != 3:
            raise ValueError(
                f"{type(self).__name__}.update: returns must be [W, E, L], got {tuple(returns.shape)}"
            )
        self.returns.append(returns.detach())

    def _mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        """Per policy, the mean and population std (``ddof = 0``) of its returns over episodes."""
        returns = dim_zero_cat(self.returns).cpu().numpy()
        return returns.mean(axis=1), returns.std(axis=1)

    def _front(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mean, std = self._mean_std()
        return mean, std, F.pareto_front(mean)


class Hypervolume(_EpisodeReturns):
    """HV of the Pareto front of the policies' mean returns w.r.t. ``ref_point`` (:func:`F.hypervolume`)."""

    def __init__(self, ref_point: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ref_point = np.asarray(ref_point, dtype=np.float64)

    def compute(self) -> Tensor:
        _, _, front = self._front()
        return torch.tensor(F.hypervolume(front, self.ref_point), dtype=torch.float64)


class ExpectedUtility(_EpisodeReturns):
    """EUM of the front over ``weights`` ``[|Ω|, L]`` (:func:`F.expected_utility`); NaN for an empty front."""

    def __init__(self, weights: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.weights = np.asarray(weights, dtype=np.float64)

    def compute(self) -> Tensor:
        _, _, front = self._front()
        value = F.expected_utility(front, self.weights) if len(front) else float("nan")
        return torch.tensor(value, dtype=torch.float64)


class VarianceObjective(_EpisodeReturns):
    """VO over ``preferences`` ``[M, 2L]`` of **all** policies (not only the front; :func:`F.variance_objective`)."""

    def __init__(self, preferences: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.preferences = np.asarray(preferences, dtype=np.float64)

    def compute(self) -> Tensor:
        mean, std = self._mean_std()
        return torch.tensor(F.variance_objective(mean, std, self.preferences), dtype=torch.float64)


def evaluation_metrics(
    ref_point: Any, n_objectives: int, eum_weights: int, vo_preferences: int, preference_seed: int
):
    """A ``MetricCollection`` of ``hv``, ``eum`` and ``vo`` with the weight and preference sets of the
    evaluation protocol (docs/method.md §9; the same sets :func:`~prism.evaluation.rollout.evaluate_policy`
    draws from these counts)."""
    from torchmetrics import MetricCollection

    return MetricCollection(
        {
            "hv": Hypervolume(ref_point),
            "eum": ExpectedUtility(F.equally_spaced_weights(n_objectives, eum_weights)),
            "vo": VarianceObjective(F.random_preferences(n_objectives, vo_preferences, preference_seed)),
        },
        compute_groups=False,
    )
