"""Metrics against independent computations written here (docs/method.md §9)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from prism.metrics import (
    cardinality,
    equally_spaced_weights,
    expected_utility,
    hypervolume,
    pareto_front,
    random_preferences,
    variance_objective,
)


# ---- independent references ------------------------------------------------------------------------------
def grid_hypervolume(points: np.ndarray, ref: np.ndarray) -> float:
    """Exact HV by box decomposition: the grid spanned by every coordinate value (and the reference point)
    splits space into cells that are either wholly dominated or not; sum the dominated cells' volumes."""
    pts = points[np.all(points > ref, axis=1)]
    if len(pts) == 0:
        return 0.0
    axes = [np.unique(np.concatenate([[ref[d]], pts[:, d]])) for d in range(len(ref))]
    uppers = np.stack(np.meshgrid(*[a[1:] for a in axes], indexing="ij"), axis=-1).reshape(-1, len(ref))
    widths = np.stack(np.meshgrid(*[np.diff(a) for a in axes], indexing="ij"), axis=-1).reshape(-1, len(ref))
    # a cell is dominated iff some point is >= its upper corner on every objective
    covered = np.any(np.all(pts[None, :, :] >= uppers[:, None, :], axis=2), axis=1)
    return float(np.sum(np.prod(widths[covered], axis=1)))


def inclusion_exclusion_hypervolume(points: np.ndarray, ref: np.ndarray) -> float:
    """HV = Σ over non-empty subsets S of (−1)^{|S|+1} vol(box(ref, min_S))."""
    pts = [p for p in points if np.all(p > ref)]
    total = 0.0
    for k in range(1, len(pts) + 1):
        for subset in itertools.combinations(pts, k):
            corner = np.min(np.stack(subset), axis=0)
            total += (-1) ** (k + 1) * float(np.prod(corner - ref))
    return total


def brute_force_front(points: np.ndarray) -> set[tuple[float, ...]]:
    keep = set()
    for i, p in enumerate(points):
        dominated = any(np.all(q >= p) and np.any(q > p) for j, q in enumerate(points) if j != i)
        if not dominated:
            keep.add(tuple(p))
    return keep


# ---- hypervolume ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_objectives, n_points", [(2, 40), (3, 25)])
@pytest.mark.parametrize("seed", range(4))
def test_hypervolume_matches_box_decomposition(n_objectives, n_points, seed):
    rng = np.random.default_rng(seed)
    ref = rng.uniform(-100, -50, size=n_objectives)
    # returns scattered around the reference point: some dominate it, some do not
    points = rng.uniform(-150, 200, size=(n_points, n_objectives))
    expected = grid_hypervolume(points, ref)
    assert expected > 0
    assert hypervolume(points, ref) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n_objectives", [2, 3])
def test_hypervolume_matches_inclusion_exclusion(n_objectives):
    rng = np.random.default_rng(7)
    points = rng.uniform(0, 10, size=(9, n_objectives))
    ref = np.zeros(n_objectives)
    expected = inclusion_exclusion_hypervolume(points, ref)
    assert hypervolume(points, ref) == pytest.approx(expected, rel=1e-9)


def test_hypervolume_hand_examples():
    assert hypervolume([[3.0, 2.0]], [1.0, 1.0]) == pytest.approx(2.0)
    # L-shape: 2*1 + 1*2 - overlap 1*1
    assert hypervolume([[2.0, 1.0], [1.0, 2.0]], [0.0, 0.0]) == pytest.approx(3.0)
    assert hypervolume(np.zeros((0, 2)), [0.0, 0.0]) == 0.0


def test_points_not_dominating_the_reference_contribute_nothing():
    rng = np.random.default_rng(3)
    ref = np.array([-100.0, -100.0, -100.0])
    good = rng.uniform(-90, 50, size=(12, 3))
    # each bad point is at or below the reference on at least one objective (equality included),
    # yet far above it on the others
    bad = rng.uniform(0, 500, size=(9, 3))
    for i in range(len(bad)):
        bad[i, i % 3] = ref[i % 3] - (0.0 if i < 3 else rng.uniform(0, 50))
    assert hypervolume(np.concatenate([good, bad]), ref) == pytest.approx(hypervolume(good, ref), rel=1e-12)
    assert hypervolume(bad, ref) == 0.0


def test_hypervolume_accepts_tensors_and_ignores_dominated_points():
    rng = np.random.default_rng(5)
    points = rng.uniform(0, 1, size=(30, 2))
    ref = np.array([-0.5, -0.5])
    value = hypervolume(torch.as_tensor(points, dtype=torch.float64), torch.as_tensor(ref))
    assert isinstance(value, float)
    assert value == pytest.approx(hypervolume(pareto_front(points), ref), rel=1e-12)


# ---- Pareto front ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_objectives", [2, 3, 4])
def test_pareto_front_removes_dominated_points_and_duplicates(n_objectives):
    rng = np.random.default_rng(n_objectives)
    # integer grid values make ties and exact duplicates likely
    points = rng.integers(0, 6, size=(60, n_objectives)).astype(float)
    points = np.concatenate([points, points[:10]])
    front = pareto_front(points)
    rows = [tuple(r) for r in front]
    assert len(rows) == len(set(rows)), "duplicates survived"
    assert set(rows) == brute_force_front(points)
    assert cardinality(points) == len(set(rows))


def test_pareto_front_hand_example_and_non_finite_rows():
    pts = np.array([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0], [2.0, 0.5], [1.0, 0.5], [np.nan, 9.0]])
    front = pareto_front(torch.as_tensor(pts))
    assert sorted(map(tuple, front)) == [(1.0, 1.0), (2.0, 0.5)]
    assert pareto_front(np.zeros((0, 2))).shape == (0, 2)


# ---- EUM and VO -----------------------------------------------------------------------------------------
def test_expected_utility_matches_direct_numpy():
    rng = np.random.default_rng(11)
    points = rng.normal(size=(17, 3)) * 100
    weights = equally_spaced_weights(3, 50)
    expected = np.mean([max(float(np.dot(w, v)) for v in points) for w in weights])
    assert expected_utility(points, weights) == pytest.approx(expected, rel=1e-12)
    # filtering first does not change EUM for non-negative weights
    assert expected_utility(pareto_front(points), weights) == pytest.approx(expected, rel=1e-12)


def test_variance_objective_matches_direct_numpy():
    rng = np.random.default_rng(12)
    n_obj = 2
    means = rng.normal(size=(100, n_obj)) * 50
    stds = rng.uniform(0, 30, size=(100, n_obj))
    prefs = random_preferences(n_obj, 50, seed=3)
    per_pref = []
    for p in prefs:
        utilities = [
            sum(p[k] * means[j, k] for k in range(n_obj))
            - sum(p[n_obj + k] * stds[j, k] for k in range(n_obj))
            for j in range(len(means))
        ]
        per_pref.append(max(utilities))
    assert variance_objective(means, stds, prefs) == pytest.approx(float(np.mean(per_pref)), rel=1e-12)


def test_random_preferences_are_seeded_and_normalised():
    p = random_preferences(3, 50, seed=1)
    assert p.shape == (50, 6)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.all(p > 0)
    np.testing.assert_array_equal(p, random_preferences(3, 50, seed=1))
    assert not np.allclose(p, random_preferences(3, 50, seed=2))
    # the draw is U(0,1)^{2L} normalised: reproduce it
    raw = np.random.default_rng(1).uniform(0, 1, size=(50, 6))
    np.testing.assert_allclose(p, raw / raw.sum(axis=1, keepdims=True), rtol=1e-12)


def test_equally_spaced_weights_are_pymoo_energy_directions():
    from pymoo.util.ref_dirs import get_reference_directions

    w = equally_spaced_weights(2, 100)
    assert w.shape == (100, 2)
    np.testing.assert_allclose(w, get_reference_directions("energy", 2, 100, seed=42), rtol=0, atol=0)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-9)
    assert np.all(w >= -1e-12)
    # L = 2: both corners are included
    assert np.any(np.all(np.isclose(w, [1.0, 0.0], atol=1e-6), axis=1))
    assert np.any(np.all(np.isclose(w, [0.0, 1.0], atol=1e-6), axis=1))
    # the cache hands out copies
    w[0] = 7.0
    assert not np.any(equally_spaced_weights(2, 100) == 7.0)
