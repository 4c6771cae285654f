"""The record of one reward fit (issue R item 1): what a member's ``summary.json`` lists under ``reward_fits``
and its main TensorBoard run logs under ``reward/`` (against env steps).

:class:`~prism.loop.phases.PrismLoopCallback` builds the record with :func:`fit_record` after every fit, from the
fit's :class:`~prism.reward.fitter.FittedReward` and the ``new_episodes`` score its collection kept
(:func:`score_new_episodes`: the episodes an expert collection just brought in, by the previous cycle's model).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from prism.data.segments import SegmentStore
from prism.reward.fitter import FittedReward, RewardModel
from prism.reward.quality import RewardQuality, score_model, split_sizes


def quality_scalars(prefix: str, quality: RewardQuality) -> dict[str, float]:
    """A :class:`RewardQuality` as TensorBoard scalars ``<prefix><field>`` (fields without a value left out)."""
    return {f"{prefix}{k}": float(v) for k, v in quality.to_dict().items() if v is not None}


def fit_record(
    store: SegmentStore,
    fitted: FittedReward,
    *,
    cycle: int,
    env_steps: int,
    new_episodes: dict[str, Any] | None,
) -> dict[str, Any]:
    """What one reward fit did and how good its model is (a ``summary.json`` ``reward_fits`` entry), built
    here whole, once the fit is done.

    Keys: ``cycle`` (the RL cycle the model shapes: 0-based here and in the checkpoint, 1-based in
    ``summary.json``, :func:`prism.loop.outputs.user_fit_records`), ``env_steps``, ``store`` (episodes / steps / segments
    in all, and of the ``train`` and ``validation`` splits), ``epochs_run`` and ``best_epoch`` per ensemble
    member, ``wall_time_s``, then :class:`~prism.reward.quality.RewardQuality` dicts: ``validation`` (the
    fit's held-out segments, as the fit scored them) and ``validation_expert`` (those of them collected by a
    trained policy; None before the first expert collection), and ``new_episodes``: the episodes the
    collection before the fit brought in, scored by the previous cycle's model (:func:`score_new_episodes`;
    None for the first fit). A fit without a summary (a plug-in's plain fit) has no split: its split keys are
    None."""
    summary = fitted.summary
    sizes: dict[str, Any] = {
        "episodes": store.num_episodes,
        "steps": len(store),
        "segments": store.num_segments,
    }
    record: dict[str, Any] = {"cycle": cycle, "env_steps": int(env_steps), "store": sizes}
    if summary is None:
        return {
            **record,
            "epochs_run": None,
            "best_epoch": None,
            "wall_time_s": None,
            "validation": None,
            "validation_expert": None,
            "new_episodes": new_episodes,
        }
    val_segments = summary.val_segments
    is_val = torch.zeros(store.num_segments, dtype=torch.bool)
    is_val[val_segments.long()] = True
    sizes["train"] = split_sizes(store, torch.nonzero(~is_val).reshape(-1))
    sizes["validation"] = split_sizes(store, val_segments)
    expert = summary.validation_expert
    return {
        **record,
        "epochs_run": [int(e) for e in summary.epochs_run],
        "best_epoch": [int(e) for e in summary.best_epoch],
        "wall_time_s": float(summary.wall_time_s),
        "validation": summary.validation.to_dict(),
        "validation_expert": expert.to_dict() if expert is not None else None,
        "new_episodes": new_episodes,
    }


def score_new_episodes(
    model: RewardModel, store: SegmentStore, segments: torch.Tensor, logger: Any, step: int
) -> dict[str, Any]:
    """Score the ``segments`` an expert collection just added with ``model`` (the one that shaped the RL
    phase whose policy collected them), log it as ``reward/new_*`` and return it: the ``new_episodes`` of the
    record of the fit that follows."""
    quality = score_model(model, store, segments)
    if logger is not None:
        logger.log_metrics(quality_scalars("reward/new_", quality), step=step)
    return quality.to_dict()


def fit_scalars(fitted: FittedReward, record: dict[str, Any]) -> dict[str, float]:
    """A fit as ``reward/`` scalars (against env steps in the member's main run): its summary's (when it has
    one) and its :func:`fit_record`'s."""
    out: dict[str, float] = {}
    summary = fitted.summary
    if summary is not None:
        out = {
            "reward/val_correlation": summary.val_correlation,
            "reward/fit_time_s": summary.wall_time_s,
            "reward/epochs_run_mean": float(np.mean(summary.epochs_run)),
            "reward/best_val_loss_mean": float(np.mean(summary.best_val_loss)),
            "reward/train_segments": float(summary.n_train_segments),
        }
    return {**out, **fit_record_scalars(record)}


def fit_record_scalars(record: dict[str, Any]) -> dict[str, float]:
    """A :func:`fit_record` as ``reward/`` scalars."""
    out = {f"reward/store_{k}": float(v) for k, v in record["store"].items() if not isinstance(v, dict)}
    for split in ("train", "validation"):
        for k, v in (record["store"].get(split) or {}).items():
            out[f"reward/{split}_{k}"] = float(v)
    if record["best_epoch"] is not None:
        out["reward/best_epoch_mean"] = float(np.mean(record["best_epoch"]))
    for key, prefix in (("validation", "reward/val_"), ("validation_expert", "reward/val_expert_")):
        for k, v in (record[key] or {}).items():
            if v is not None:
                out[f"{prefix}{k}"] = float(v)
    return out
