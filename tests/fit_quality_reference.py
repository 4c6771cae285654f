"""Brute-force references for the reward-fit quality records (issue 27 item 1): plain Python loops over episodes.

Used by test_fit_records.py (the quality function and the store) and test_loop.py (the records of a whole run).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from prism.data.segments import TERMINATED, SegmentStore


def _pearson(x: list[float], y: list[float]) -> float | None:
    n = len(x)
    if n < 2:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def brute_force(episodes: list[dict], predict) -> dict:
    """The :class:`RewardQuality` fields by loops over episodes (p_rel = 0: one segment per episode).

    ``episodes``: dicts with ``features [T, F]``, ``true [T]``, ``released_sum`` and ``terminated``."""
    preds_all, true_all, pred_nf, true_nf = [], [], [], []
    pred_term, true_term, pred_other, true_other = [], [], [], []
    sq_errors, rel_errors = [], []
    for ep in episodes:
        preds = [
            float(predict(torch.as_tensor(ep["features"][t : t + 1]))[0]) for t in range(len(ep["true"]))
        ]
        sq_errors.append((sum(preds) - ep["released_sum"]) ** 2)
        rel_errors.append(abs(sum(preds) - ep["released_sum"]) / max(abs(ep["released_sum"]), 1e-8))
        last = len(preds) - 1
        for t, (p, y) in enumerate(zip(preds, ep["true"])):
            preds_all.append(p)
            true_all.append(y)
            if t != last:
                pred_nf.append(p)
                true_nf.append(y)
            if t == last and ep["terminated"]:
                pred_term.append(p)
                true_term.append(y)
            else:
                pred_other.append(p)
                true_other.append(y)

    def mean(v):
        return sum(v) / len(v) if v else None

    return {
        "segments": len(episodes),
        "episodes": len(episodes),
        "steps": len(preds_all),
        "segment_sum_mse": mean(sq_errors),
        "segment_rel_error": mean(rel_errors),
        "pearson": _pearson(preds_all, true_all),
        "pearson_non_final": _pearson(pred_nf, true_nf),
        "terminal_steps": len(pred_term),
        "mean_predicted_terminal": mean(pred_term),
        "mean_true_terminal": mean(true_term),
        "mean_predicted_other": mean(pred_other),
        "mean_true_other": mean(true_other),
    }


def brute_force_uniform(episodes: list[dict]) -> dict:
    """:func:`brute_force` of uniform R/T: every step of an episode "predicted" as its released sum over its
    length (features replaced by that constant, read back by the predictor)."""
    spread = [
        {**ep, "features": torch.full((len(ep["true"]), 1), ep["released_sum"] / len(ep["true"]))}
        for ep in episodes
    ]
    return brute_force(spread, lambda features: features[:, 0])


def assert_quality_equal(ours: dict, expected: dict) -> None:
    assert set(ours) == set(expected)
    for key, value in expected.items():
        if value is None or isinstance(value, int):
            assert ours[key] == value, key
        else:
            assert ours[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def toy_radius_progress(features: np.ndarray, next_obs_radius: float) -> np.ndarray:
    """The toy env's channel 0 recomputed from its observations: ``10 (|p_{t+1}| − |p_t|)``; obs index 1 is
    ``|p|`` before each step and ``next_obs_radius`` the radius after the last step."""
    radius = np.append(features[:, 1].astype(np.float64), next_obs_radius)
    return 10.0 * np.diff(radius)


def store_episodes(store: SegmentStore, segments) -> list[dict]:
    """The selected episodes as brute_force wants them (each segment is one episode at p_rel = 0)."""
    out = []
    offsets = store.segment_offsets
    for s in segments:
        lo, hi = int(offsets[s]), int(offsets[s + 1])
        flags = store.step_flags[lo:hi]
        out.append(
            {
                "features": store.features[lo:hi].clone(),
                "true": store.true_sparse[lo:hi].double().tolist(),
                "released_sum": float(store.targets[s]),
                "terminated": bool(flags[-1] & TERMINATED),
            }
        )
    return out
