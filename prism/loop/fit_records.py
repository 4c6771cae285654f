"""The record of one reward fit (issue R item 1): what a member's ``summary.json`` lists under ``reward_fits``
and its main TensorBoard run logs under ``reward/`` (against env steps).

:class:`~prism.loop.phases.PrismLoopCallback` calls :func:`fit_record` after every fit and adds the
``new_episodes`` score (:func:`prism.reward.quality.score_segments` on the episodes an expert collection just
brought in, by the previous cycle's model) from the collection before it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from prism.reward.quality import RewardQuality, score_model, split_sizes


def quality_scalars(prefix: str, quality: RewardQuality) -> dict[str, float]:
    """A :class:`RewardQuality` as TensorBoard scalars ``<prefix><field>`` (fields without a value left out)."""
    return {f"{prefix}{k}": float(v) for k, v in quality.to_dict().items() if v is not None}


def fit_record(store, model, *, cycle: int, env_steps: int) -> dict[str, Any]:
    """What one reward fit did and how good its model is (a ``summary.json`` ``reward_fits`` entry).

    Keys: ``cycle`` (the RL cycle the model shapes: 0-based here and in the checkpoint, 1-based in
    ``summary.json``, :func:`prism.loop.outputs.user_fit_records`), ``env_steps``, ``store`` (episodes / steps / segments
    in all, and of the ``train`` and ``validation`` splits), ``epochs_run`` and ``best_epoch`` per ensemble
    member, ``wall_time_s``, then :class:`~prism.reward.quality.RewardQuality` dicts: ``validation`` (the
    fit's held-out segments) and ``validation_expert`` (those of them collected by a trained policy; None
    before the first expert collection). A model without a ``fit_summary`` (a plug-in's) has no split: its
    split keys are None. ``new_episodes`` is added by the collection before the fit (None for the first fit)."""
    summary = getattr(model, "fit_summary", None)
    sizes = {"episodes": store.num_episodes, "steps": len(store), "segments": store.num_segments}
    record: dict[str, Any] = {"cycle": cycle, "env_steps": int(env_steps), "store": sizes}
    val_segments = getattr(summary, "val_segments", None)
    if summary is None or val_segments is None:
        return {
            **record,
            "epochs_run": None,
            "best_epoch": None,
            "wall_time_s": None,
            "validation": None,
            "validation_expert": None,
        }
    is_val = torch.zeros(store.num_segments, dtype=torch.bool)
    is_val[val_segments.long()] = True
    sizes["train"] = split_sizes(store, torch.nonzero(~is_val).reshape(-1))
    sizes["validation"] = split_sizes(store, val_segments)
    expert_val = val_segments[store.segment_collections()[val_segments.long()] >= 1]
    return {
        **record,
        "epochs_run": [int(e) for e in summary.epochs_run],
        "best_epoch": [int(e) for e in summary.best_epoch],
        "wall_time_s": float(summary.wall_time_s),
        "validation": score_model(model, store, val_segments).to_dict(),
        "validation_expert": (
            score_model(model, store, expert_val).to_dict() if expert_val.numel() else None
        ),
    }


def add_fit_record(records: list[dict[str, Any]], record: dict[str, Any]) -> None:
    """Append a fit's record to a member's list, completing the entry its collection started (which holds
    only ``cycle`` and ``new_episodes``); a fit without one (the first) gets ``new_episodes: None``."""
    if records and records[-1]["cycle"] == record["cycle"] and "validation" not in records[-1]:
        records[-1].update(record)
    else:
        records.append({**record, "new_episodes": None})


def record_new_episodes(
    records: list[dict[str, Any]], cycle: int, model, store, segments: torch.Tensor, logger, step: int
) -> None:
    """Score the ``segments`` an expert collection just added with ``model`` (the one that shaped the RL
    phase whose policy collected them) and start the record of the ``cycle`` that refits on them."""
    quality = score_model(model, store, segments)
    records.append({"cycle": cycle, "new_episodes": quality.to_dict()})
    if logger is not None:
        logger.log_metrics(quality_scalars("reward/new_", quality), step=step)


def fit_scalars(model, record: dict[str, Any]) -> dict[str, float]:
    """A fit as ``reward/`` scalars (against env steps in the member's main run): the model's own
    ``fit_summary`` (when it has one) and its :func:`fit_record`."""
    out: dict[str, float] = {}
    summary = getattr(model, "fit_summary", None)  # a plug-in's reward model may not report one
    if summary is not None:
        out = {
            "reward/val_correlation": summary.val_correlation,
            "reward/val_segment_rel_error": summary.val_segment_rel_error,
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
