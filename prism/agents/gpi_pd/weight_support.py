"""GPI Linear Support (GPI-LS; Alegre et al., AAMAS 2023, §4): which preference weight to train on next.

A *convex coverage set* (CCS) of value vectors ``V = {v_1..v_n} ⊂ R^L`` defines the upper envelope
``u(w) = max_i v_i·w`` over the weight simplex Δ. Its **corner weights** are the w-coordinates of the vertices
of the polyhedron ``{(w, u) : w ∈ Δ, v_i·w ≤ u ∀i}`` — where the maximising value vector changes, plus Δ's
extreme points (Roijers' thesis, Def. 19). GPI-LS scores each corner weight ``w_c`` by the improvement the GPI
policy promises there, ``max_{v ∈ G} w_c·v − max_{v ∈ V} w_c·v``, where G holds the GPI policy's value vectors
evaluated at every corner weight, and trains next on the highest-scoring corner (ties at 0: random order).

Corner weights are computed with scipy's half-space intersection (Qhull) in the coordinates
``x = (w_1, …, w_{L−1}, u)`` (``w_L = 1 − Σ w_i``), the epigraph capped by ``u ≤ max v + 1`` so it is bounded;
vertices on the cap are dropped. morl-baselines uses pycddlib for the same vertex enumeration.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from scipy.spatial import HalfspaceIntersection

ValueFn = Callable[[np.ndarray], np.ndarray]
"""``evaluate(w [L]) -> value vector [L]`` (e.g. the GPI policy's mean discounted return at w)."""


def unique_rows(x: np.ndarray, decimals: int = 6) -> np.ndarray:
    """The rows of ``x`` without repeats (equal after rounding to ``decimals``), in first-occurrence order."""
    _, first = np.unique(np.round(x, decimals), axis=0, return_index=True)
    return x[np.sort(first)]


def corner_weights(ccs: np.ndarray, decimals: int = 4) -> np.ndarray:
    """Corner weights ``[m, L]`` of the upper envelope of ``ccs [n, L]`` over the simplex (rows sum to 1).

    The CCS is rounded to ``decimals`` first (as morl-baselines does, against numerical noise)."""
    ccs = unique_rows(np.round(np.asarray(ccs, dtype=np.float64), decimals))
    n_obj = ccs.shape[1]
    if n_obj < 2:
        raise ValueError(f"corner_weights: need at least 2 objectives, got {n_obj}")
    cap = float(ccs.max()) + 1.0
    d = n_obj  # dimension of x = (w_1..w_{L-1}, u)
    rows = []
    for v in ccs:  # v·w − u ≤ 0  ->  Σ_{i<L} (v_i − v_L) w_i − u + v_L ≤ 0
        rows.append(np.concatenate([v[:-1] - v[-1], [-1.0], [v[-1]]]))
    for i in range(n_obj - 1):  # −w_i ≤ 0
        row = np.zeros(d + 1)
        row[i] = -1.0
        rows.append(row)
    rows.append(np.concatenate([np.ones(n_obj - 1), [0.0], [-1.0]]))  # w_L ≥ 0: Σ w_i − 1 ≤ 0
    rows.append(np.concatenate([np.zeros(n_obj - 1), [1.0], [-cap]]))  # u − cap ≤ 0
    halfspaces = np.asarray(rows)
    centre_w = np.full(n_obj, 1.0 / n_obj)
    interior = np.concatenate([centre_w[:-1], [0.5 * (float((ccs @ centre_w).max()) + cap)]])
    vertices = HalfspaceIntersection(halfspaces, interior).intersections
    vertices = vertices[vertices[:, -1] < cap - 1e-7]
    w = np.concatenate([vertices[:, :-1], 1.0 - vertices[:, :-1].sum(axis=1, keepdims=True)], axis=1)
    w = np.clip(w, 0.0, None)
    w = w / w.sum(axis=1, keepdims=True)
    return unique_rows(w)


def gpi_ls_priorities(corners: np.ndarray, ccs: np.ndarray, gpi_values: np.ndarray) -> np.ndarray:
    """GPI-LS priority of every corner ``[m]``: ``max_{g ∈ G} w_c·g − max_{v ∈ CCS} w_c·v``.

    ``corners [m, L]``; ``ccs [n, L]``; ``gpi_values [k, L]`` the set G (the GPI policy's value vectors at
    every corner weight, in morl-baselines)."""
    return (corners @ np.asarray(gpi_values).T).max(axis=1) - (corners @ np.asarray(ccs).T).max(axis=1)


class GPILinearSupport:
    """The GPI-LS state: the CCS with its weight support, the visited weights and the corner-weight queue.

    Usage per iteration: ``w = ls.next_weight(evaluate)``; train on ``ls.iteration_weights(w)``; then
    ``ls.add_solution(evaluate(m), m)`` for each weight m of the iteration. The queue starts with the extreme
    weights ``e_1..e_L`` (priority ∞), as in morl-baselines.
    """

    def __init__(self, n_objectives: int, rng: np.random.Generator | None = None):
        self.n_objectives = n_objectives
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.ccs: list[np.ndarray] = []
        self.support: list[np.ndarray] = []
        self.visited: list[np.ndarray] = []
        self.queue: list[tuple[float, np.ndarray]] = [(np.inf, e) for e in np.eye(n_objectives)]

    def max_scalarised(self, w: np.ndarray) -> float:
        """``max_{v ∈ CCS} v·w`` (−∞ for an empty CCS)."""
        return max((float(v @ w) for v in self.ccs), default=-np.inf)

    def next_weight(self, evaluate: ValueFn) -> np.ndarray | None:
        """Recompute the corner weights and their GPI-LS priorities, return the best (None: queue empty)."""
        if self.ccs:
            corners = corner_weights(np.stack(self.ccs))
            gpi_values = np.stack([np.asarray(evaluate(c), dtype=np.float64) for c in corners])
            priorities = gpi_ls_priorities(corners, np.stack(self.ccs), gpi_values)
            order = np.argsort(-priorities, kind="stable")
            self.queue = [(float(priorities[i]), corners[i]) for i in order]
            if self.queue and self.queue[0][0] == 0.0:
                # No corner promises an improvement: shuffle so the same weight is not retrained every time.
                self.queue = [self.queue[i] for i in self.rng.permutation(len(self.queue))]
        if not self.queue:
            return None
        return self.queue.pop(0)[1]

    def top_corners(self, k: int) -> list[np.ndarray]:
        """The ``k`` highest-priority corner weights still queued."""
        return [w.copy() for _, w in self.queue[:k]]

    def iteration_weights(self, w: np.ndarray, top_k: int = 4) -> list[np.ndarray]:
        """The weight set M of an iteration: the CCS's weight support, the top-k corners and w itself."""
        return [s.copy() for s in self.support] + self.top_corners(top_k) + [np.asarray(w).copy()]

    def is_dominated(self, value: np.ndarray) -> bool:
        """True if ``value`` is not optimal (ties allowed) at any visited weight."""
        if not self.ccs:
            return False
        return all(float(value @ w) < self.max_scalarised(w) for w in self.visited)

    def add_solution(self, value: np.ndarray, w: np.ndarray) -> list[int]:
        """Add the value vector found for ``w``; drop CCS entries it makes obsolete. Returns removed indices
        (``[len(ccs)]`` when ``value`` itself is dominated and discarded)."""
        value, w = np.asarray(value, dtype=np.float64), np.asarray(w, dtype=np.float64)
        self.visited.append(w)
        if self.is_dominated(value):
            return [len(self.ccs)]
        removed = []
        for i in reversed(range(len(self.ccs))):
            # Keep v_i only if some visited weight has it optimal and the newcomer strictly worse there.
            keeps = any(
                np.isclose(self.ccs[i] @ u, self.max_scalarised(u)) and value @ u < self.ccs[i] @ u
                for u in self.visited
            )
            if not keeps:
                removed.append(i)
                self.ccs.pop(i)
                self.support.pop(i)
        self.ccs.append(value)
        self.support.append(w)
        return removed

    # ---- checkpointing ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The CCS, support, visited weights, queue and shuffle stream as tensors and plain values (loads with
        ``torch.load(weights_only=True)``); every array keeps its dtype, so a restored CCS is bit-identical."""
        return {
            "ccs": _rows(self.ccs, self.n_objectives),
            "support": _rows(self.support, self.n_objectives),
            "visited": _rows(self.visited, self.n_objectives),
            "queue_priorities": torch.tensor([p for p, _ in self.queue], dtype=torch.float64),
            "queue_weights": _rows([w for _, w in self.queue], self.n_objectives),
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        self.ccs = _arrays(state["ccs"])
        self.support = _arrays(state["support"])
        self.visited = _arrays(state["visited"])
        priorities = state["queue_priorities"].tolist()
        self.queue = list(zip(priorities, _arrays(state["queue_weights"])))
        self.rng.bit_generator.state = state["rng"]


def _rows(arrays: list[np.ndarray], n_objectives: int) -> torch.Tensor:
    """Equal-length vectors as one ``[n, L]`` tensor (``[0, L]`` float64 when there are none)."""
    if not arrays:
        return torch.zeros(0, n_objectives, dtype=torch.float64)
    return torch.from_numpy(np.stack(arrays).copy())


def _arrays(rows: torch.Tensor) -> list[np.ndarray]:
    """The inverse of :func:`_rows`: one independent numpy vector per row."""
    return [row.copy() for row in rows.numpy()]
