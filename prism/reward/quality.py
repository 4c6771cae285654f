"""How well a fitted reward model prices a set of stored segments (docs/method.md §4–§5).

:func:`score_segments` compares a model's per-step prediction of the sparse channel with the *true* per-step
sparse reward the store keeps for diagnostics (never a training target). Besides the segment-sum error the
fit minimises (paper eq. 1), it separates the step on which an episode **terminates** from every other step:
a model that has learnt "alive ⇒ reward" pays the falling hopper as much as the running one, which the
per-step correlation over all steps hides and the terminal-step means expose.

Used by the PRISM loop after every fit (validation split of the store) and before every refit (the episodes
just collected, scored by the model that shaped the RL phase that produced them); the records land in each
member's ``summary.json`` under ``reward_fits`` and in TensorBoard under ``reward/``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from prism.data.features import FeatureLayout
from prism.data.segments import EPISODE_FINAL, TERMINATED, SegmentStore

if TYPE_CHECKING:
    from prism.reward.model import RewardModel

PREDICT_CHUNK_ROWS = 65_536
"""Rows predicted per call: bounds the ensemble's activations (K × rows × hidden floats) on a 10⁶-step store."""


@dataclass(frozen=True)
class RewardQuality:
    """A reward model's prediction against the hidden true channel on a set of segments.

    Quantities with nothing to average over (no terminal step, a constant side of a correlation) are ``None``.
    """

    segments: int
    episodes: int
    """Episodes whose last step lies in the set (= ``segments`` when ``p_rel = 0``)."""
    steps: int
    segment_sum_mse: float | None
    """``mean_i (Σ_{t∈seg_i} r̂_t − R_i)²`` of the ensemble prediction (the episode-sum MSE when ``p_rel = 0``)."""
    segment_rel_error: float | None
    """``mean_i |Σ_{t∈seg_i} r̂_t − R_i| / max(|R_i|, 1e-8)``: the segment sums' relative error."""
    pearson: float | None
    """Per-step Pearson correlation of the prediction with the true sparse reward, every step."""
    pearson_non_final: float | None
    """The same on the steps that are not the last step of an episode."""
    terminal_steps: int
    """Steps that end a *terminated* episode."""
    mean_predicted_terminal: float | None
    mean_true_terminal: float | None
    mean_predicted_other: float | None
    """Mean prediction on every step that does not end a terminated episode."""
    mean_true_other: float | None

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 2:
        return None
    xc, yc = x - x.mean(), y - y.mean()
    denom = math.sqrt(float(xc @ xc) * float(yc @ yc))
    return float(xc @ yc) / denom if denom > 0 else None


def _mean(x: np.ndarray) -> float | None:
    return float(x.mean()) if x.size else None


def predict_rows(predict: Callable[[Tensor], Tensor], features: Tensor) -> np.ndarray:
    """``predict`` (raw features ``[n, F]`` → per-step reward ``[n]``) over every row, in chunks, as float64."""
    out = []
    with torch.no_grad():
        for start in range(0, features.shape[0], PREDICT_CHUNK_ROWS):
            out.append(predict(features[start : start + PREDICT_CHUNK_ROWS]).detach().cpu().double().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def _selection(store: SegmentStore, segments: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(selected [S] bool, rows [N] bool)``: the chosen segments (all when None) and their steps."""
    selected = torch.ones(store.num_segments, dtype=torch.bool)
    if segments is not None:
        selected = torch.zeros(store.num_segments, dtype=torch.bool)
        selected[segments.long()] = True
    return selected, selected[store.segment_index]


def score_segments(
    predict: Callable[[Tensor], Tensor],
    store: SegmentStore,
    segments: Tensor | None = None,
    *,
    inputs: FeatureLayout = FeatureLayout(),  # noqa: B008 (frozen, immutable)
) -> RewardQuality:
    """Score ``predict`` (e.g. a fitted model's ``predict``) on the ``segments`` of ``store`` (all when None).

    ``predict`` is given the store's per-step inputs with the column groups the model reads (``inputs``; by
    default ``[s, a, r_dense]``). Every number is over the selected segments' steps; see :class:`RewardQuality`
    for each."""
    selected, rows = _selection(store, segments)
    pred = predict_rows(predict, inputs.of_store(store)[rows])
    return _quality(store, selected, rows, pred)


def _quality(store: SegmentStore, selected: Tensor, rows: Tensor, pred: np.ndarray) -> RewardQuality:
    """:class:`RewardQuality` of the per-step predictions ``pred`` of the ``rows`` of the ``selected`` segments."""
    true = store.true_sparse[rows].double().numpy()
    flags = store.step_flags[rows]
    final = (flags & EPISODE_FINAL).bool().numpy()
    terminal = ((flags & TERMINATED).bool() & (flags & EPISODE_FINAL).bool()).numpy()
    # Segment sums of the prediction vs the released targets: bincount over the segment id of each step.
    seg_ids = store.segment_index[rows].numpy()
    chosen = torch.nonzero(selected).reshape(-1).numpy()
    position = np.full(store.num_segments, -1)
    position[chosen] = np.arange(chosen.size)
    sums = np.bincount(position[seg_ids], weights=pred, minlength=chosen.size)
    targets = store.targets[selected].double().numpy()
    errors = sums - targets
    return RewardQuality(
        segments=int(chosen.size),
        episodes=int(final.sum()),
        steps=int(rows.sum()),
        segment_sum_mse=float(np.mean(errors**2)) if chosen.size else None,
        segment_rel_error=(
            float(np.mean(np.abs(errors) / np.maximum(np.abs(targets), 1e-8))) if chosen.size else None
        ),
        pearson=_pearson(pred, true),
        pearson_non_final=_pearson(pred[~final], true[~final]),
        terminal_steps=int(terminal.sum()),
        mean_predicted_terminal=_mean(pred[terminal]),
        mean_true_terminal=_mean(true[terminal]),
        mean_predicted_other=_mean(pred[~terminal]),
        mean_true_other=_mean(true[~terminal]),
    )


def score_validation(
    model: RewardModel, store: SegmentStore, val_segments: Tensor
) -> tuple[RewardQuality, RewardQuality | None]:
    """A fit's validation split scored once: ``(the split, its segments collected by a trained policy)``,
    the second from the same per-step predictions (None before the first expert collection)."""
    selected, rows = _selection(store, val_segments)
    pred = predict_rows(model.predict, model.inputs.of_store(store)[rows])
    validation = _quality(store, selected, rows, pred)
    expert = selected & (store.segment_collections() >= 1)
    if not bool(expert.any()):
        return validation, None
    expert_rows = expert[store.segment_index]
    return validation, _quality(store, expert, expert_rows, pred[expert_rows[rows].numpy()])


def uniform_predictions(store: SegmentStore, rows: Tensor) -> np.ndarray:
    """Uniform R/T's per-step "prediction" of the sparse channel on the ``rows`` of ``store``: every step of a
    released segment gets the segment's released sum over its length (what :class:`~prism.reward.shapers.
    UniformShaper` pays), as float64."""
    per_step = store.targets.double() / store.segment_lengths.double()
    return per_step[store.segment_index[rows]].numpy()


def score_uniform(store: SegmentStore, segments: Tensor | None = None) -> RewardQuality:
    """:func:`score_segments` of uniform R/T instead of a model: the baseline a learned decomposition must beat
    per step. Its segment sums equal the targets by construction (MSE 0); its per-step Pearson with the true
    channel is what spreading the sum evenly recovers (e.g. of a control cost, which varies inside an episode)."""
    selected, rows = _selection(store, segments)
    return _quality(store, selected, rows, uniform_predictions(store, rows))


def latest_collection_segments(store: SegmentStore) -> Tensor:
    """The segments of the store's most recent collection (all of them before any collection was marked)."""
    collections = store.segment_collections()
    return torch.nonzero(collections == collections.max()).reshape(-1) if collections.numel() else collections


def split_sizes(store: SegmentStore, segments: Tensor) -> dict[str, int]:
    """Segments, episodes (counted by their last step) and steps of a subset of ``store``'s segments."""
    selected = torch.zeros(store.num_segments, dtype=torch.bool)
    selected[segments.long()] = True
    rows = selected[store.segment_index]
    final = (store.step_flags[rows] & EPISODE_FINAL).bool()
    return {"segments": int(selected.sum()), "episodes": int(final.sum()), "steps": int(rows.sum())}


def score_model(model: RewardModel, store: SegmentStore, segments: Tensor | None = None) -> RewardQuality:
    """:func:`score_segments` of a fitted reward model, given the input columns it reads (its ``inputs``)."""
    return score_segments(model.predict, store, segments, inputs=model.inputs)
