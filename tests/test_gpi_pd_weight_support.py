"""GPI-LS weight support: corner weights vs hand/brute-force/peer computations, priorities, the CCS loop."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from prism.agents.gpi_pd.weight_support import GPILinearSupport, corner_weights, gpi_ls_priorities


def _as_set(rows: np.ndarray, decimals: int = 5) -> set[tuple[float, ...]]:
    return {tuple(np.round(r, decimals) + 0.0) for r in rows}


def _brute_force_corners(ccs: np.ndarray) -> np.ndarray:
    """Every vertex of {(w, u): Σw = 1, w ≥ 0, v·w ≤ u} by trying each set of L active constraints."""
    n_obj = ccs.shape[1]
    planes = [np.concatenate([v, [-1.0]]) for v in ccs] + [np.eye(n_obj + 1)[i] for i in range(n_obj)]
    simplex = np.concatenate([np.ones(n_obj), [0.0]])
    found = []
    for rows in itertools.combinations(range(len(planes)), n_obj):
        a = np.stack([planes[r] for r in rows] + [simplex])
        b = np.zeros(n_obj + 1)
        b[-1] = 1.0
        if abs(np.linalg.det(a)) < 1e-10:
            continue
        x = np.linalg.solve(a, b)
        w, u = x[:-1], x[-1]
        if (w >= -1e-9).all() and u >= (ccs @ w).max() - 1e-9:
            found.append(np.clip(w, 0, None) / np.clip(w, 0, None).sum())
    return np.array(found)


def test_two_objectives_by_hand_and_on_a_dense_grid():
    ccs = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.6], [0.2, 0.2]])  # the last is dominated everywhere
    got = corner_weights(ccs)
    assert _as_set(got) == _as_set(np.array([[0, 1], [0.4, 0.6], [0.6, 0.4], [1, 0]]))
    # grid: the maximiser changes exactly next to the interior corners
    w1 = np.linspace(0, 1, 100_001)
    best = np.argmax(np.stack([w1, 1 - w1], 1) @ ccs.T, axis=1)
    changes = w1[1:][np.diff(best) != 0]
    interior = np.sort(got[(got[:, 0] > 0) & (got[:, 0] < 1), 0])
    np.testing.assert_allclose(interior, changes, atol=2e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_three_objectives_vs_brute_force_vertex_enumeration(seed):
    rng = np.random.default_rng(seed)
    ccs = np.round(rng.uniform(0, 1, size=(6, 3)), 4)
    got = corner_weights(ccs)
    assert _as_set(got, 4) == _as_set(_brute_force_corners(ccs), 4)
    assert np.allclose(got.sum(1), 1) and (got >= 0).all()


def test_three_objectives_hand_made():
    ccs = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]])
    want = [
        [1, 0, 0],
        [0, 1, 0],
        [0, 0, 1],
        [0.5, 0.5, 0],
        [0.5, 0, 0.5],
        [0, 0.5, 0.5],
        [1 / 3, 1 / 3, 1 / 3],
    ]
    assert _as_set(corner_weights(ccs)) == _as_set(np.array(want))


def test_matches_morl_baselines_linear_support():
    ls_mod = pytest.importorskip("morl_baselines.multi_policy.linear_support.linear_support")
    rng = np.random.default_rng(7)
    for n_obj in (2, 3):
        ccs = np.round(rng.uniform(-1, 2, size=(5, n_obj)), 4)
        ref = ls_mod.LinearSupport(num_objectives=n_obj, verbose=False)
        ref.ccs = list(ccs)
        assert _as_set(corner_weights(ccs), 4) == _as_set(np.array(ref.compute_corner_weights()), 4)


def test_gpi_ls_priorities_by_hand():
    corners = np.array([[1.0, 0.0], [0.5, 0.5]])
    ccs = np.array([[1.0, 0.0], [0.0, 1.0]])
    gpi = np.array([[1.0, 0.2], [0.7, 0.7]])
    # corner [1,0]: max(1, 0.7) − max(1, 0) = 0; corner [.5,.5]: max(0.6, 0.7) − max(0.5, 0.5) = 0.2
    np.testing.assert_allclose(gpi_ls_priorities(corners, ccs, gpi), [0.0, 0.2])


def test_linear_support_loop_recovers_the_hidden_ccs():
    # A perfect solver over a hidden finite policy set: GPI-LS must end with that set's CCS.
    hidden = np.array([[1.0, 0.0], [0.0, 1.0], [0.7, 0.6], [0.45, 0.45], [0.9, 0.3]])

    def evaluate(w):
        return hidden[np.argmax(hidden @ w)]

    ls = GPILinearSupport(2, rng=np.random.default_rng(0))
    for _ in range(12):
        w = ls.next_weight(evaluate)
        if w is None:
            break
        for m in ls.iteration_weights(w, top_k=0):
            ls.add_solution(evaluate(m), m)
    # CCS of `hidden`: the vectors optimal for some w ([0.45, 0.45] never is)
    grid = np.stack([np.linspace(0, 1, 1001), 1 - np.linspace(0, 1, 1001)], 1)
    want = hidden[np.unique(np.argmax(grid @ hidden.T, axis=1))]
    assert _as_set(np.array(ls.ccs)) == _as_set(want)
    assert ls.is_dominated(np.array([0.45, 0.45]))
