"""Return conservation of a learned per-step reward (docs/method.md §4c; not the paper's).

A learned model's per-step predictions ``f(h_t)`` need not sum to the return ``R`` its segment released.
Shifting every step of the segment by the same amount makes them do so exactly,

    ``r̂_t = f(h_t) + (R − Σ_{s ∈ seg} f(h_s)) / T``,

a learned shape on top of uniform ``R/T``: with ``f ≡ 0`` it *is* the uniform redistribution, and whatever
``f`` is, ``Σ_t r̂_t = R``. It needs ``R`` and ``T``, so it applies where a segment has been released (the
shaper holds the segment's transitions until then, as the uniform one does).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def conserve_segment_returns(values: Tensor, segment_ids: Tensor, targets: Tensor) -> Tensor:
    """``values`` shifted per segment so that each segment sums to its target.

    Args:
        values: ``[N]`` per-step predictions ``f(h_t)``.
        segment_ids: ``[N]`` long, the segment of each step in ``[0, B)``.
        targets: ``[B]`` each segment's released sum ``R``.

    Returns:
        ``[N]`` ``f(h_t) + (R_i − Σ_{s ∈ i} f(h_s)) / T_i`` (computed in float64, returned in ``values``' dtype).
    """
    v = values.to(torch.float64)
    n_seg = targets.shape[-1]
    # (index sums, not prism.reward.losses.segment_sums: the env-step shaper imports this module, the loss's
    # data-layer imports stay out of that path)
    sums = v.new_zeros(n_seg).index_add_(0, segment_ids, v)
    lengths = v.new_zeros(n_seg).index_add_(0, segment_ids, torch.ones_like(v))
    shift = (targets.to(torch.float64) - sums) / lengths.clamp_min(1)
    return (v + shift[segment_ids]).to(values.dtype)


def conserve_one_segment(values: np.ndarray, released_sum: float) -> np.ndarray:
    """:func:`conserve_segment_returns` of one segment (numpy ``[T]``; float64 maths, float32 out)."""
    v = np.asarray(values, dtype=np.float64)
    return (v + (float(released_sum) - v.sum()) / len(v)).astype(np.float32)


__all__ = ["conserve_one_segment", "conserve_segment_returns"]
