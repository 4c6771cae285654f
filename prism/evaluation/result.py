"""The result of one evaluation: per-episode returns, per-weight statistics and the docs/method.md §9 metrics.

Metrics (all maximised, :mod:`prism.metrics.functional`):

- **HV** of the Pareto-filtered per-weight mean (discounted) returns w.r.t. ``spec.ref_point``;
- **EUM**: mean over ``eum_weights`` equally spaced weights ω of ``max_{v ∈ front} ω·v``;
- **VO**: over ``vo_preferences`` seeded preferences p ∈ Δ^{2L−1},
  ``mean_p max_j (Σ_l p_l μ_jl − Σ_l p_{L+l} σ_jl)`` over **all** policies (before filtering);
- **cardinality**: the number of distinct points on the front.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prism.metrics import functional as F

__all__ = ["EvalResult"]


@dataclass
class EvalResult:
    """One evaluation. Shapes: W weights, E episodes, L objectives, F front points.

    ``returns`` are discounted (``Σ_t γ^t r_t``) and drive every metric; ``undiscounted_returns`` are
    ``Σ_t r_t``. ``mean``/``std`` are over episodes (population std, ``ddof = 0``).
    """

    weights: np.ndarray
    """[W, L] evaluation weights."""
    returns: np.ndarray
    """[W, E, L] discounted returns."""
    undiscounted_returns: np.ndarray
    """[W, E, L] undiscounted returns."""
    lengths: np.ndarray
    """[W, E] episode lengths."""
    gamma: float
    mean: np.ndarray
    """[W, L] mean discounted return per weight."""
    std: np.ndarray
    """[W, L] population std of the discounted return per weight."""
    undiscounted_mean: np.ndarray
    undiscounted_std: np.ndarray
    front: np.ndarray
    """[F, L] Pareto front of ``mean`` (distinct points)."""
    hv: float
    eum: float
    vo: float
    cardinality: int
    equivariance_error: float | None = None
    """Mean ‖μ(L_g s) − K_g μ(s)‖₁ over visited states, when a mean function was given."""
    wall_time: float = 0.0
    """Seconds the evaluation took (rollout + metrics)."""
    upright: np.ndarray | None = None
    """[W, E] mean cos(pitch) over each episode's steps (``EnvSpec.pitch_obs``; None: not measured): below 0,
    the body spent most of the episode on its back."""

    @property
    def flipped_fraction(self) -> float | None:
        """The fraction of episodes spent mostly on the back (None: not measured)."""
        return None if self.upright is None else float((self.upright < 0).mean())

    @property
    def total_steps(self) -> int:
        """Env steps simulated by this evaluation."""
        return int(self.lengths.sum())

    @classmethod
    def from_returns(
        cls,
        weights: np.ndarray,
        returns: np.ndarray,
        undiscounted_returns: np.ndarray,
        lengths: np.ndarray,
        *,
        gamma: float,
        ref_point: Sequence[float],
        eum_weights: np.ndarray,
        vo_preferences: np.ndarray,
        equivariance_error: float | None = None,
        wall_time: float = 0.0,
        upright: np.ndarray | None = None,
    ) -> EvalResult:
        """Per-weight statistics and docs/method.md §9 metrics from per-episode returns ``[W, E, L]``."""
        mean = returns.mean(axis=1)
        std = returns.std(axis=1)  # population std (ddof = 0), as docs/method.md §9
        front = F.pareto_front(mean)
        return cls(
            weights=weights,
            returns=returns,
            undiscounted_returns=undiscounted_returns,
            lengths=lengths,
            gamma=gamma,
            mean=mean,
            std=std,
            undiscounted_mean=undiscounted_returns.mean(axis=1),
            undiscounted_std=undiscounted_returns.std(axis=1),
            front=front,
            hv=F.hypervolume(front, ref_point),
            eum=F.expected_utility(front, eum_weights) if len(front) else float("nan"),
            vo=F.variance_objective(mean, std, vo_preferences),
            cardinality=int(front.shape[0]),
            equivariance_error=equivariance_error,
            wall_time=wall_time,
            upright=upright,
        )
