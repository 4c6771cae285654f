"""The SPEC §9 metrics as torchmetrics :class:`~torchmetrics.Metric` classes.

Each metric accumulates per-policy mean return vectors (and, for VO, their standard deviations) with
``update`` over any number of calls, and ``compute`` evaluates the functional metric from
:mod:`prism.metrics.functional` on everything seen since the last ``reset``. States are list states
reduced by concatenation, so they also gather correctly across processes. ``compute`` returns a float64
scalar tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from prism.metrics import functional as F

__all__ = ["Cardinality", "ExpectedUtility", "Hypervolume", "VarianceObjective"]


def _rows(x: Any, n_objectives: int, name: str) -> Tensor:
    t = torch.as_tensor(x, dtype=torch.float64)
    if t.ndim == 1:
        t = t.unsqueeze(0)
    if t.ndim != 2 or t.shape[1] != n_objectives:
        raise ValueError(f"{name}: expected [N, {n_objectives}] return vectors, got shape {tuple(t.shape)}")
    return t


class _PointsMetric(Metric):
    """Shared state: the mean return vectors ``[N, L]`` of the policies seen so far."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, n_objectives: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n_objectives = int(n_objectives)
        self.add_state("points", default=[], dist_reduce_fx="cat")

    def update(self, points: Tensor | np.ndarray) -> None:
        """Add return vectors ``[N, L]`` (or one ``[L]``)."""
        self.points.append(_rows(points, self.n_objectives, "points").to(self.device))

    def _all_points(self) -> np.ndarray:
        if isinstance(self.points, list) and not self.points:
            return np.zeros((0, self.n_objectives))
        return dim_zero_cat(self.points).cpu().numpy()


class Hypervolume(_PointsMetric):
    """Hypervolume (maximisation) of the Pareto front of all updated points w.r.t. ``ref_point``."""

    def __init__(self, ref_point: Any, **kwargs: Any) -> None:
        ref = np.asarray(ref_point, dtype=np.float64).reshape(-1)
        super().__init__(n_objectives=ref.shape[0], **kwargs)
        self.ref_point = ref

    def compute(self) -> Tensor:
        return torch.tensor(F.hypervolume(self._all_points(), self.ref_point), dtype=torch.float64)


class Cardinality(_PointsMetric):
    """Number of distinct non-dominated points among all updated points."""

    def compute(self) -> Tensor:
        return torch.tensor(float(F.cardinality(self._all_points())), dtype=torch.float64)


class ExpectedUtility(_PointsMetric):
    """EUM over ``weights`` ``[|Ω|, L]``; by default ``n_weights`` equally spaced (energy, seed 42) weights."""

    def __init__(
        self, n_objectives: int, n_weights: int = 50, weights: Any | None = None, **kwargs: Any
    ) -> None:
        super().__init__(n_objectives=n_objectives, **kwargs)
        self.weights = (
            F.equally_spaced_weights(n_objectives, n_weights)
            if weights is None
            else np.asarray(weights, dtype=np.float64)
        )

    def compute(self) -> Tensor:
        return torch.tensor(F.expected_utility(self._all_points(), self.weights), dtype=torch.float64)


class VarianceObjective(Metric):
    """VO (SPEC §9) over all updated policies; ``update(means, stds)`` with ``[N, L]`` each.

    Preferences: ``preferences`` ``[M, 2L]`` or, by default, ``n_preferences`` seeded random ones
    (:func:`prism.metrics.functional.random_preferences`).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(
        self,
        n_objectives: int,
        n_preferences: int = 50,
        seed: int = 42,
        preferences: Any | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.n_objectives = int(n_objectives)
        self.preferences = (
            F.random_preferences(n_objectives, n_preferences, seed)
            if preferences is None
            else np.asarray(preferences, dtype=np.float64)
        )
        self.add_state("means", default=[], dist_reduce_fx="cat")
        self.add_state("stds", default=[], dist_reduce_fx="cat")

    def update(self, means: Tensor | np.ndarray, stds: Tensor | np.ndarray) -> None:
        """Add per-policy mean returns and their population standard deviations, ``[N, L]`` each."""
        m = _rows(means, self.n_objectives, "means")
        s = _rows(stds, self.n_objectives, "stds")
        if m.shape != s.shape:
            raise ValueError(f"means {tuple(m.shape)} and stds {tuple(s.shape)} differ in shape")
        self.means.append(m.to(self.device))
        self.stds.append(s.to(self.device))

    def compute(self) -> Tensor:
        means = dim_zero_cat(self.means).cpu().numpy()
        stds = dim_zero_cat(self.stds).cpu().numpy()
        return torch.tensor(F.variance_objective(means, stds, self.preferences), dtype=torch.float64)
