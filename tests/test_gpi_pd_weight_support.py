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


def test_next_weight_and_top_corners_follow_morl_baselines_gpi_ls_order(monkeypatch):
    """On a CCS whose corners all have distinct, positive GPI-LS priorities, the weight trained next and the
    top-k corners of the iteration's weight set M are morl-baselines' (its LinearSupport.next_weight with
    algo="gpi-ls", then ``get_weight_support() + get_corner_weights(top_k) + [w]`` as its GPI-PD builds M):
    the highest priorities, in descending order."""
    ls_mod = pytest.importorskip("morl_baselines.multi_policy.linear_support.linear_support")
    # The GPI policy: GPI over a richer hidden policy set (the best of it at each weight), chosen so that every
    # corner of the current CCS promises an improvement, a different one at each corner (0.08 … 0.6).
    ccs = np.array([[1.0, 0.0, 0.1], [0.0, 1.0, 0.2], [0.1, 0.1, 1.0], [0.6, 0.5, 0.3]])
    better = [
        [1.13, 0.61, 1.17],
        [0.1, 0.73, 0.45],
        [0.96, 0.21, 1.05],
        [0.65, 1.08, 0.57],
        [0.52, 0.95, 1.18],
    ]
    hidden = np.concatenate([ccs, better])

    def evaluate(w):
        return hidden[np.argmax(hidden @ np.asarray(w))]

    support = [np.eye(3)[0], np.eye(3)[1], np.eye(3)[2], np.array([0.4, 0.4, 0.2])]
    ours = GPILinearSupport(3, rng=np.random.default_rng(0))
    ours.ccs, ours.support, ours.visited = [v.copy() for v in ccs], [w.copy() for w in support], list(support)
    corners = corner_weights(ccs)
    priorities = gpi_ls_priorities(corners, ccs, np.stack([evaluate(c) for c in corners]))
    assert len(corners) >= 6 and (priorities > 0).all()  # no ties at 0, so no shuffle on either side
    assert np.diff(np.sort(priorities)).min() > 1e-3  # one order only

    monkeypatch.setattr(ls_mod, "policy_evaluation_mo", lambda agent, env, w, rep=1: (0, 0, 0, evaluate(w)))
    ref = ls_mod.LinearSupport(num_objectives=3, verbose=False)
    ref.ccs, ref.weight_support, ref.visited_weights = [v.copy() for v in ccs], list(support), list(support)
    want_w = ref.next_weight(algo="gpi-ls", gpi_agent=object(), env=None)
    want_m = ref.get_weight_support() + ref.get_corner_weights(top_k=4) + [want_w]

    got_w = ours.next_weight(evaluate)
    np.testing.assert_allclose(got_w, want_w, atol=1e-4)
    np.testing.assert_allclose(got_w, corners[np.argmax(priorities)], atol=1e-9)  # the highest priority
    np.testing.assert_allclose(np.stack(ours.iteration_weights(got_w, 4)), np.stack(want_m), atol=1e-4)
