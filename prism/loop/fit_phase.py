"""The loop's fit phase (paper Algorithm 1, the reward model's (re)fit): every member's model fitted, one after
the other or in one stacked fit (``reward.stacked_fit``), each resumable from a snapshot inside it.

A fit of hours (the paper's E = 1000 expert episodes, ≤ 1000 epochs) keeps its progress in the run's checkpoint
every ``loop.fit_checkpoint_every_s`` seconds (:class:`prism.reward.module.FitSnapshots`), in the loop's
``fit_progress`` (one entry per member):

- ``{"snapshot": bytes, "tb_version": int | None}``: member m's own fit, stopped at an epoch's end;
- ``{"model": dict}``: member m's fit is finished (a later member's snapshot must not lose it);
- ``{"snapshot": bytes, "stacked": True, "tb_versions": [int | None, ...]}`` in member 0's entry: the
  population's stacked fit, every member's (and the TensorBoard run each member's curves go to).

A run resumed inside the phase goes on from there and fits the same models as if never stopped.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

from prism.data.segments import SegmentStore
from prism.loop.fit_logging import fit_tensorboard_logger
from prism.loop.fit_records import add_fit_record, fit_record, fit_scalars
from prism.loop.loop_state import LoopSettings, LoopState
from prism.loop.progress import Progress, RewardFitProgress
from prism.registry import REWARD_MODELS

FitProgress = list[dict[str, Any] | None]
"""Per member, the fit phase so far (the module docstring); the run's checkpoint saves it."""


def fit_members(
    settings: LoopSettings,
    state: LoopState,
    stores: Sequence[SegmentStore | None],
    fit_progress: FitProgress,
    *,
    agent: Any,
    loggers: Sequence[Any],
    fit_curves: bool,
    progress: Progress | None = None,
    on_fit_progress: Callable[[], None] | None = None,
    previous: Sequence[torch.nn.Module | None] = (),
) -> list[torch.nn.Module]:
    """Fit every member's reward model on its segment store (cycle ``state.cycle``), record each fit's
    diagnostics (summary.json's ``reward_fits``, the member's ``reward/`` scalars in ``loggers[m]``) and return
    the models.

    ``fit_progress`` is read (a resumed run goes on from it) and updated in place as fits take snapshots, each
    followed by ``on_fit_progress()`` (the run saves its checkpoint). ``fit_curves``: per-epoch curves go to
    each member's ``tb/reward_fit/cycle<c>`` (a run with a trainer); ``progress``: the epochs' progress bar.
    ``previous``: each member's model of the last cycle, the start of its refit under ``reward.warm_start``."""
    s = settings
    entry = REWARD_MODELS.entry("reward.name", s.reward_model)
    fit_model, fit_together = entry.fit_fn(), entry.fit_population_fn()
    device = getattr(agent, "device", "cpu")
    snapshots = _Snapshots(fit_progress, s.fit_checkpoint_every_s, on_fit_progress)
    stacked = None
    if getattr(s.reward, "stacked_fit", False) and len(s.member_seeds) > 1 and fit_together is not None:
        # Every member's model in one stacked fit (each equal to its own fit, its curves its own fit's).
        seeds = [seed * 1_000 + state.fits for seed in s.member_seeds]
        accepts = inspect.signature(fit_together).parameters
        fit_loggers = (
            _stacked_fit_loggers(s, state, fit_progress[0]) if fit_curves and "loggers" in accepts else None
        )
        versions = None if fit_loggers is None else [logger.version for logger in fit_loggers]
        extra = snapshots.arguments(fit_together, member=0, stacked=True, tb_versions=versions)
        if fit_loggers is not None:
            extra["loggers"] = fit_loggers
        if progress is not None and "callbacks" in accepts:
            who = f"seeds {', '.join(str(seed) for seed in s.member_seeds)}, stacked"
            desc = f"reward fit ({who}) (cycle {state.cycle + 1}/{s.cycles})"
            extra["callbacks"] = [RewardFitProgress(progress, desc, s.reward.max_epochs)]
        stacked = fit_together(stores, s.reward, seeds=seeds, device=device, **extra)
    models = []
    for m, (seed, logger) in enumerate(zip(s.member_seeds, loggers)):
        member_progress = fit_progress[m] or {}
        if "model" in member_progress:
            # Fitted before the run was stopped, its record already kept: not fitted again.
            models.append(entry.load_fn()(member_progress["model"]))
            continue
        extra: dict[str, Any] = {}
        if stacked is None:
            member_dir = s.member_dir(m)
            fit_logger = None
            if fit_curves and member_dir is not None:
                # Per-epoch curves (reward_fit/*, x-axis = epoch) go to a TensorBoard run of this fit's own
                # (prism.loop.fit_logging); the summaries (reward/*) to the member's main run, below.
                fit_logger = fit_tensorboard_logger(member_dir, state.cycle, member_progress)
            # The fit runs on the run's device (the agent's); its CPU threads come from reward.threads. A fit
            # function that takes Lightning callbacks gets the progress bar of its epochs.
            if progress is not None and "callbacks" in inspect.signature(fit_model).parameters:
                desc = f"reward fit{s.member_tag(m)} (cycle {state.cycle + 1}/{s.cycles})"
                extra["callbacks"] = [RewardFitProgress(progress, desc, s.reward.max_epochs)]
            version = fit_logger.version if fit_logger is not None else None
            extra |= snapshots.arguments(fit_model, member=m, tb_version=version)
            seed_of_fit = seed * 1_000 + state.fits
            start = previous[m] if s.reward.warm_start and m < len(previous) else None
            if start is not None:
                # A refit that goes on from the last cycle's members (their best weights), not from scratch.
                if "init" not in inspect.signature(fit_model).parameters:
                    raise ValueError(
                        f"reward.warm_start: the {s.reward_model} model's fit takes no init model"
                    )
                extra["init"] = start
            model = fit_model(
                stores[m], s.reward, logger=fit_logger, seed=seed_of_fit, device=device, **extra
            )
        else:
            model = stacked[m]
        models.append(model)
        record = fit_record(stores[m], model, cycle=state.cycle, env_steps=agent.env_step_count)
        add_fit_record(state.member_fits(m), record)
        if logger is not None:
            logger.log_metrics(fit_scalars(model, record), step=agent.env_step_count)
        if "on_snapshot" in extra and m + 1 < len(s.member_seeds) and hasattr(model, "to_dict"):
            # A later member's snapshot must not lose this member's finished fit.
            fit_progress[m] = {"model": model.to_dict()}
    return models


def _stacked_fit_loggers(
    s: LoopSettings, state: LoopState, progress: dict[str, Any] | None
) -> list[Any] | None:
    """Each member's TensorBoard logger for the stacked fit's curves (``tb/reward_fit/cycle<c>`` of its own
    folder, as its own fit would log them); a fit resumed from a snapshot logs on into the runs it was in."""
    dirs = [s.member_dir(m) for m in range(len(s.member_seeds))]
    if any(folder is None for folder in dirs):
        return None
    progress = progress if progress and progress.get("stacked") else {}
    versions = progress.get("tb_versions") or [None] * len(dirs)
    return [
        fit_tensorboard_logger(folder, state.cycle, {**progress, "tb_version": version} if progress else None)
        for folder, version in zip(dirs, versions, strict=True)
    ]


class _Snapshots:
    """The ``resume=`` / ``on_snapshot=`` arguments of the phase's fits, kept in ``fit_progress``."""

    def __init__(
        self, fit_progress: FitProgress, every_s: float | None, on_fit_progress: Callable[[], None] | None
    ):
        self.fit_progress, self.every_s, self.on_fit_progress = fit_progress, every_s, on_fit_progress

    def arguments(self, fit: Callable, *, member: int, stacked: bool = False, **kept: Any) -> dict[str, Any]:
        """For a fit function that takes them: a long fit keeps its progress in the run's checkpoint
        (``loop.fit_checkpoint_every_s``), and a resumed run's fit goes on from there."""
        if not {"on_snapshot", "resume"} <= set(inspect.signature(fit).parameters):
            return {}
        extra: dict[str, Any] = {}
        progress = self.fit_progress[member] or {}
        if "snapshot" in progress and bool(progress.get("stacked")) == stacked:
            extra["resume"] = progress["snapshot"]
        if self.on_fit_progress is not None and self.every_s is not None:
            marks = {"stacked": True} if stacked else {}
            extra["on_snapshot"] = lambda snapshot: self.keep(member, {"snapshot": snapshot, **marks, **kept})
            extra["snapshot_every_s"] = self.every_s
        return extra

    def keep(self, member: int, progress: dict[str, Any]) -> None:
        """Keep a fit's progress as member ``member``'s entry and have the run save its checkpoint."""
        self.fit_progress[member] = progress
        self.on_fit_progress()


__all__ = ["FitProgress", "fit_members"]
