"""Multi-objective RL metrics as plain functions (docs/method.md §9). Every objective is **maximised**.

Inputs are numpy arrays, torch tensors or nested sequences; scalar results are Python floats.

Notation: a set of N return vectors ``v_j ∈ R^L`` (one per policy), a reference point ``r ∈ R^L``.

- Pareto front: the ``v_j`` not weakly dominated by another point (``u`` dominates ``v`` when ``u ≥ v``
  everywhere and ``u > v`` somewhere); duplicates are kept once.
- Hypervolume: ``HV = λ(⋃_j [r, v_j])``, the Lebesgue measure of the region dominated by the points and
  bounded below by ``r``; a point not strictly better than ``r`` on every objective adds nothing.
  Computed by :func:`moocore.hypervolume` (exact).
- Expected utility (EUM, Zintgraf et al. 2015): ``EUM = (1/|Ω|) Σ_{ω∈Ω} max_j ω·v_j``.
- Variance objective (VO): with M preferences ``p ∈ Δ^{2L-1}`` (first L entries weight the means,
  last L the standard deviations), ``u(p, j) = Σ_l p_l μ_jl − Σ_l p_{L+l} σ_jl`` and
  ``VO = (1/M) Σ_p max_j u(p, j)``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import moocore
import numpy as np
import torch

__all__ = [
    "cardinality",
    "equally_spaced_weights",
    "expected_utility",
    "hypervolume",
    "pareto_front",
    "random_preferences",
    "variance_objective",
]


def _as_matrix(x: Any, name: str, n_cols: int | None = None) -> np.ndarray:
    """``x`` as a float64 ``[N, D]`` array (a single vector becomes one row)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :] if arr.size else arr.reshape(0, n_cols or 0)
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a [N, D] array, got shape {arr.shape}")
    if n_cols is not None and arr.shape[0] and arr.shape[1] != n_cols:
        raise ValueError(f"{name}: expected {n_cols} columns, got shape {arr.shape}")
    return arr


def pareto_front(points: Any) -> np.ndarray:
    """The non-dominated subset of ``points`` ``[N, L]`` (maximisation), each distinct point once.

    Rows with a non-finite entry (a diverged policy) are dropped. The result keeps the input order of the
    first occurrence of each kept point and has shape ``[F, L]`` (``F = 0`` for an empty input).
    """
    pts = _as_matrix(points, "points")
    pts = pts[np.all(np.isfinite(pts), axis=1)]
    if pts.shape[0] == 0:
        return pts.reshape(0, pts.shape[1] if pts.ndim == 2 else 0)
    # keep_weakly=False: of several equal non-dominated points only the first is kept.
    mask = moocore.is_nondominated(pts, maximise=True, keep_weakly=False)
    return pts[mask]


def cardinality(points: Any) -> int:
    """Number of distinct non-dominated points (the size of :func:`pareto_front`)."""
    return int(pareto_front(points).shape[0])


def hypervolume(points: Any, ref_point: Any) -> float:
    """Hypervolume of ``points`` ``[N, L]`` w.r.t. ``ref_point`` ``[L]``, all objectives maximised.

    ``HV = λ(⋃_j {x : r ≤ x ≤ v_j})``. Points that do not strictly dominate the reference point on every
    objective, and non-finite rows, contribute nothing; an empty set has HV 0. Exact, via moocore.
    """
    ref = np.asarray(
        ref_point.detach().cpu().numpy() if isinstance(ref_point, torch.Tensor) else ref_point,
        dtype=np.float64,
    ).reshape(-1)
    pts = _as_matrix(points, "points", n_cols=ref.shape[0])
    pts = pts[np.all(np.isfinite(pts), axis=1) & np.all(pts > ref, axis=1)]
    if pts.shape[0] == 0:
        return 0.0
    return float(moocore.hypervolume(pts, ref=ref, maximise=True))


def expected_utility(points: Any, weights: Any) -> float:
    """Expected utility ``(1/|Ω|) Σ_ω max_j ω·v_j`` of ``points`` ``[N, L]`` over ``weights`` ``[|Ω|, L]``.

    With non-negative weights the maximum over all points equals the maximum over their Pareto front, so
    the points need not be filtered first.
    """
    pts = _as_matrix(points, "points")
    w = _as_matrix(weights, "weights", n_cols=pts.shape[1] if pts.shape[0] else None)
    if pts.shape[0] == 0 or w.shape[0] == 0:
        raise ValueError("expected_utility: needs at least one point and one weight")
    return float(np.mean(np.max(w @ pts.T, axis=1)))


def variance_objective(means: Any, stds: Any, preferences: Any) -> float:
    """Variance objective (docs/method.md §9) of N policies with mean returns ``means`` ``[N, L]`` and population
    standard deviations ``stds`` ``[N, L]`` over ``preferences`` ``[M, 2L]``.

    ``u(p, j) = Σ_l p_l μ_jl − Σ_l p_{L+l} σ_jl``; returns ``(1/M) Σ_p max_j u(p, j)``. Use all policies,
    not only the Pareto-filtered ones (a dominated mean can have a smaller spread).
    """
    mu = _as_matrix(means, "means")
    sigma = _as_matrix(stds, "stds", n_cols=mu.shape[1])
    if sigma.shape != mu.shape:
        raise ValueError(f"variance_objective: means {mu.shape} and stds {sigma.shape} differ in shape")
    n_obj = mu.shape[1]
    p = _as_matrix(preferences, "preferences", n_cols=2 * n_obj)
    if mu.shape[0] == 0 or p.shape[0] == 0:
        raise ValueError("variance_objective: needs at least one policy and one preference")
    utility = p[:, :n_obj] @ mu.T - p[:, n_obj:] @ sigma.T  # [M, N]
    return float(np.mean(np.max(utility, axis=1)))


@lru_cache(maxsize=32)
def _energy_directions(n_objectives: int, n: int, seed: int) -> np.ndarray:
    from importlib.metadata import version

    from prism.core.disk_cache import cached_array

    def compute() -> np.ndarray:
        from pymoo.util.ref_dirs import get_reference_directions

        return np.asarray(get_reference_directions("energy", n_objectives, n, seed=seed), dtype=np.float64)

    def valid(dirs: np.ndarray) -> bool:
        return (
            dirs.dtype == np.float64
            and dirs.shape == (n, n_objectives)
            and bool(np.all(np.isfinite(dirs)) and np.all(dirs >= 0))
            and bool(np.allclose(dirs.sum(axis=1), 1.0, rtol=0, atol=1e-9))
        )

    # pymoo's version is in the name: another version may place the directions differently
    name = f"energy-weights-L{n_objectives}-n{n}-seed{seed}-pymoo{version('pymoo')}"
    dirs = cached_array(name, compute, valid)
    dirs.setflags(write=False)
    return dirs


def equally_spaced_weights(n_objectives: int, n: int, seed: int = 42) -> np.ndarray:
    """``n`` weight vectors on the simplex spread by pymoo's Riesz-energy method (``[n, L]``, rows sum to 1).

    The same call morl-baselines' ``equally_spaced_weights`` makes (seed 42). For ``L = 2`` this is close to
    ``linspace`` and includes the corners. Results are cached in the process and on disk (the energy
    optimisation takes seconds; :mod:`prism.core.disk_cache` says where, and ``PRISM_CACHE_DIR=off`` stops it).
    """
    if n_objectives < 1 or n < 1:
        raise ValueError(
            f"equally_spaced_weights: need n_objectives >= 1 and n >= 1, got {n_objectives}, {n}"
        )
    return _energy_directions(int(n_objectives), int(n), int(seed)).copy()


def random_preferences(n_objectives: int, n: int = 50, seed: int = 42) -> np.ndarray:
    """docs/method.md §9's VO preferences: ``p ~ U(0,1)^{2L}`` normalised to sum to 1 over all 2L entries.

    Returns ``[n, 2L]`` (first L entries weight the means, last L the standard deviations). Drawn from
    ``numpy.random.default_rng(seed)``, so the same seed gives the same preferences everywhere.
    """
    if n_objectives < 1 or n < 1:
        raise ValueError(f"random_preferences: need n_objectives >= 1 and n >= 1, got {n_objectives}, {n}")
    p = np.random.default_rng(seed).uniform(0.0, 1.0, size=(n, 2 * n_objectives))
    return p / p.sum(axis=1, keepdims=True)
