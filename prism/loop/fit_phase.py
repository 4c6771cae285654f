"""The loop's fit phase (paper Algorithm 1, the reward model's (re)fit): every member's model fitted, one after
the other or in one stacked fit (``reward.stacked_fit``), each resumable from a snapshot inside it.

A fit of hours (the paper's E = 1000 expert episodes, ≤ 1000 epochs) keeps its progress in the run's checkpoint
every ``loop.fit_checkpoint_every_s`` seconds (:class:`prism.reward.fitting.fit.FitSnapshots`), in the loop's
``fit_progress`` (one :class:`MemberFitProgress` or None per member):

- ``snapshot`` (and ``tb_version``): member m's own fit, stopped at an epoch's end;
- ``model``: member m's fit is finished (a later member's snapshot must not lose it);
- ``snapshot`` with ``stacked`` (and ``tb_versions``) in member 0's entry: the population's stacked fit, every
  member's (and the TensorBoard run each member's curves go to).

A run resumed inside the phase goes on from there and fits the same models as if never stopped.

Each fit is recorded here, whole, once it is done (:func:`fit_record`: what a member's ``summary.json`` lists
under ``reward_fits`` and its main TensorBoard run logs under ``reward/``, against env steps), from the fit's
:class:`~prism.reward.fitting.fitter.FittedReward` and the ``new_episodes`` score its collection kept
(:func:`score_new_episodes`: the episodes an expert collection just brought in, by the previous cycle's
model). Its per-epoch curves go to ``tb/reward_fit/cycle<c>/version_<n>`` of the member's folder
(:func:`fit_tensorboard_logger`), ``c`` counted from 1 as everywhere a user reads a cycle; a fit resumed from
a snapshot logs on into the run it was in, with ``purge_step`` at the first epoch after the snapshot, so the
curves of a fit stopped and resumed read as one run (TensorBoard hides what the stopped process logged after
the snapshot, and the resumed process logs those epochs again: the same numbers, the fit goes on bit for bit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prism.agents.contract import PopulationAgent
from prism.data.segments import SegmentStore
from prism.display.progress import Progress, RewardFitProgress
from prism.loop.loop_state import LoopSettings, LoopState
from prism.plugins.registry import REWARD_MODELS
from prism.reward.fitting.fit import snapshot_epoch
from prism.reward.fitting.fitter import FittedReward, RewardModel, population_fitter, reward_fitter
from prism.reward.quality import (
    RewardQuality,
    latest_collection_segments,
    score_model,
    score_uniform,
    split_sizes,
)


@dataclass(frozen=True)
class MemberFitProgress:
    """One member's fit phase so far (the module docstring): a fit stopped at an epoch's end (``snapshot``) or
    a finished one (``model``). The run's checkpoint keeps it as a plain dict (:meth:`to_state`)."""

    snapshot: bytes | None = None
    """The fit's state at an epoch's end (:class:`prism.reward.fitting.fit.FitSnapshots`), to resume it from."""
    tb_version: int | None = None
    """The TensorBoard version the member's own fit logs its curves to (None: it logs none)."""
    stacked: bool = False
    """The snapshot is the population's stacked fit's (member 0's entry; every other member's is None)."""
    tb_versions: list[int | None] | None = None
    """The stacked fit's TensorBoard version of each member."""
    model: dict[str, Any] | None = None
    """The member's finished fit's model (``to_dict``), its record already kept."""

    def to_state(self) -> dict[str, Any]:
        """The checkpoint's form: the snapshot's bytes as a uint8 tensor (what its safe unpickler reads), and
        only the keys that apply (``{"model": ...}``, ``{"snapshot", "tb_version"}`` or ``{"snapshot",
        "stacked", "tb_versions"}``)."""
        if self.model is not None:
            return {"model": self.model}
        assert self.snapshot is not None
        state: dict[str, Any] = {"snapshot": torch.frombuffer(bytearray(self.snapshot), dtype=torch.uint8)}
        if self.stacked:
            return {**state, "stacked": True, "tb_versions": self.tb_versions}
        return {**state, "tb_version": self.tb_version}

    @classmethod
    def from_state(cls, state: dict[str, Any] | None) -> MemberFitProgress | None:
        """:meth:`to_state` read back (None stays None)."""
        if state is None:
            return None
        if "model" in state:
            return cls(model=state["model"])
        return cls(
            snapshot=state["snapshot"].numpy().tobytes(),
            tb_version=state.get("tb_version"),
            stacked=bool(state.get("stacked", False)),
            tb_versions=state.get("tb_versions"),
        )


FitProgress = list[MemberFitProgress | None]
"""Per member, the fit phase so far (the module docstring); the run's checkpoint saves it."""


def fit_members(
    settings: LoopSettings,
    state: LoopState,
    stores: Sequence[SegmentStore | None],
    fit_progress: FitProgress,
    *,
    agent: PopulationAgent,
    loggers: Sequence[Any],
    fit_curves: bool,
    progress: Progress | None = None,
    on_fit_progress: Callable[[], None] | None = None,
    previous: Sequence[RewardModel | None] = (),
) -> list[RewardModel]:
    """Fit every member's reward model on its segment store (cycle ``state.cycle``), record each fit
    (summary.json's ``reward_fits``: :func:`fit_record`, with the score its collection
    kept; the member's ``reward/`` scalars in ``loggers[m]``) and return the models.

    ``fit_progress`` is read (a resumed run goes on from it) and updated in place as fits take snapshots, each
    followed by ``on_fit_progress()`` (the run saves its checkpoint). ``fit_curves``: per-epoch curves go to
    each member's ``tb/reward_fit/cycle<c>`` (a run with a trainer); ``progress``: the epochs' progress bar.
    ``previous``: each member's model of the last cycle, the start of its refit under ``reward.warm_start``."""
    s = settings
    entry = REWARD_MODELS.entry("reward.name", s.reward_model)
    fit, fit_together = reward_fitter(entry), population_fitter(entry)
    device = agent.device
    snapshots = _Snapshots(fit_progress, s.fit_checkpoint_every_s, on_fit_progress)
    stacked: list[FittedReward] | None = None
    if s.reward.stacked_fit and len(s.member_seeds) > 1 and fit_together is not None:
        # Every member's model in one stacked fit (each equal to its own fit, its curves its own fit's).
        seeds = [seed * 1_000 + state.fits for seed in s.member_seeds]
        fit_loggers = _stacked_fit_loggers(s, state, fit_progress[0]) if fit_curves else None
        versions = None if fit_loggers is None else [logger.version for logger in fit_loggers]
        who = f"seeds {', '.join(str(seed) for seed in s.member_seeds)}, stacked"
        bars = _progress_bar(progress, s, state, who)
        stacked = fit_together(
            stores, s.reward, seeds, device=device, loggers=fit_loggers, callbacks=bars,
            **snapshots.arguments(member=0, stacked=True, tb_versions=versions),
        )  # fmt: skip
        _report(bars, stacked)
    models: list[RewardModel] = []
    for m, (seed, logger) in enumerate(zip(s.member_seeds, loggers)):
        member_progress = fit_progress[m]
        if member_progress is not None and member_progress.model is not None:
            # Fitted before the run was stopped, its record already kept: not fitted again.
            models.append(entry.load_fn()(member_progress.model))
            continue
        if stacked is None:
            member_dir = s.member_dir(m)
            fit_logger = None
            if fit_curves and member_dir is not None:
                # Per-epoch curves (reward_fit/*, x-axis = epoch) go to a TensorBoard run of this fit's own
                # (fit_tensorboard_logger); the summaries (reward/*) to the member's main run, below.
                fit_logger = fit_tensorboard_logger(member_dir, state.cycle, member_progress)
            version = fit_logger.version if fit_logger is not None else None
            # A refit under reward.warm_start goes on from the last cycle's members (their best weights).
            start = previous[m] if s.reward.warm_start and m < len(previous) else None
            # The fit runs on the run's device (the agent's); its CPU threads come from reward.threads.
            bars = _progress_bar(progress, s, state, f"seed {seed}" if len(s.member_seeds) > 1 else None)
            fitted = fit(
                stores[m], s.reward, logger=fit_logger, seed=seed * 1_000 + state.fits, device=device,
                callbacks=bars, init=start, **snapshots.arguments(member=m, tb_version=version),
            )  # fmt: skip
            _report(bars, [fitted])
        else:
            fitted = stacked[m]
        models.append(fitted.model)
        store = stores[m]
        assert store is not None  # a fit phase follows a collection into every member's store
        record = fit_record(
            store, fitted, cycle=state.cycle, env_steps=agent.env_step_count,
            new_episodes=state.pending_new_episodes(m),
        )  # fmt: skip
        state.member_fits(m).append(record)
        if logger is not None:
            logger.log_metrics(fit_scalars(fitted, record), step=agent.env_step_count)
        if snapshots.enabled and m + 1 < len(s.member_seeds):
            # A later member's snapshot must not lose this member's finished fit.
            fit_progress[m] = MemberFitProgress(model=fitted.model.to_dict())
    return models


def _progress_bar(
    progress: Progress | None, s: LoopSettings, state: LoopState, who: str | None
) -> list[RewardFitProgress]:
    """The fit's Lightning callbacks: the progress bar of its epochs (none without a display)."""
    if progress is None:
        return []
    tag = f" ({who})" if who else ""
    desc = f"reward fit{tag} (cycle {state.cycle + 1}/{s.cycles}, {s.reward.fit_loss_label()})"
    return [RewardFitProgress(progress, desc, s.reward.max_epochs)]


def _report(bars: list[RewardFitProgress], fitted: Sequence[FittedReward]) -> None:
    """End the fit's progress line with the kept models' validation scores (those of ``summary.json``)."""
    summaries = [f.summary for f in fitted]
    scores: tuple[list[float] | None, list[float] | None] = (None, None)
    if all(summary is not None for summary in summaries):
        scores = (
            [float(np.mean(summary.best_val_loss)) for summary in summaries if summary is not None],
            [summary.val_correlation for summary in summaries if summary is not None],
        )
    for bar in bars:
        bar.report(*scores)


def _stacked_fit_loggers(
    s: LoopSettings, state: LoopState, progress: MemberFitProgress | None
) -> list[Any] | None:
    """Each member's TensorBoard logger for the stacked fit's curves (``tb/reward_fit/cycle<c>`` of its own
    folder, as its own fit would log them); a fit resumed from a snapshot logs on into the runs it was in."""
    dirs = [s.member_dir(m) for m in range(len(s.member_seeds))]
    if any(folder is None for folder in dirs):
        return None
    stacked = progress if progress is not None and progress.stacked else None
    versions = (stacked.tb_versions if stacked is not None else None) or [None] * len(dirs)
    return [
        fit_tensorboard_logger(
            folder,
            state.cycle,
            None if stacked is None else MemberFitProgress(snapshot=stacked.snapshot, tb_version=version),
        )
        for folder, version in zip(dirs, versions, strict=True)
    ]


class _Snapshots:
    """The ``resume=`` / ``on_snapshot=`` arguments of the phase's fits, kept in ``fit_progress``."""

    def __init__(
        self, fit_progress: FitProgress, every_s: float | None, on_fit_progress: Callable[[], None] | None
    ):
        self.fit_progress, self.every_s, self.on_fit_progress = fit_progress, every_s, on_fit_progress

    @property
    def enabled(self) -> bool:
        """Whether the run keeps fit progress in its checkpoint (``loop.fit_checkpoint_every_s``)."""
        return self.on_fit_progress is not None and self.every_s is not None

    def arguments(self, *, member: int, stacked: bool = False, **kept: Any) -> dict[str, Any]:
        """A long fit keeps its progress in the run's checkpoint (``loop.fit_checkpoint_every_s``), and a
        resumed run's fit goes on from there (a plain plug-in fit ignores both)."""
        extra: dict[str, Any] = {}
        progress = self.fit_progress[member]
        if progress is not None and progress.snapshot is not None and progress.stacked == stacked:
            extra["resume"] = progress.snapshot
        if self.enabled:
            assert self.every_s is not None
            extra["on_snapshot"] = lambda snapshot: self.keep(
                member, MemberFitProgress(snapshot=snapshot, stacked=stacked, **kept)
            )
            extra["snapshot_every_s"] = self.every_s
        return extra

    def keep(self, member: int, progress: MemberFitProgress) -> None:
        """Keep a fit's progress as member ``member``'s entry and have the run save its checkpoint."""
        self.fit_progress[member] = progress
        assert self.on_fit_progress is not None
        self.on_fit_progress()


# ---- where a fit's curves go --------------------------------------------------------------------------
def fit_tensorboard_logger(member_dir: Path, cycle: int, progress: MemberFitProgress | None):
    """The TensorBoard logger of the fit of (0-based, the loop's own count) cycle ``cycle``, in the folder
    ``cycle<cycle + 1>``; ``progress``: the member's fit progress from the run's checkpoint (a ``snapshot`` and
    the ``tb_version`` it was logging to) or ``None`` for a fresh fit, which gets the next free version."""
    from lightning.pytorch.loggers import TensorBoardLogger

    resumed: dict[str, Any] = {}
    if progress is not None and progress.snapshot is not None and progress.tb_version is not None:
        epoch = snapshot_epoch(progress.snapshot)  # the epoch whose end it was taken at
        resumed = {"version": int(progress.tb_version), "purge_step": epoch + 1}
    return TensorBoardLogger(
        str(Path(member_dir) / "tb" / "reward_fit"),
        name=f"cycle{cycle + 1}",
        default_hp_metric=False,
        **resumed,
    )


# ---- the record of a fit ------------------------------------------------------------------------------
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
    ``summary.json``, :func:`prism.run.outputs.user_fit_records`), ``env_steps``, ``store`` (episodes / steps / segments
    in all, and of the ``train`` and ``validation`` splits), ``epochs_run`` and ``best_epoch`` per ensemble
    member, ``wall_time_s``, then :class:`~prism.reward.quality.RewardQuality` dicts: ``validation`` (the
    fit's held-out segments, as the fit scored them) and ``validation_expert`` (those of them collected by a
    trained policy; None before the first expert collection), and ``new_episodes``: the episodes the
    collection before the fit brought in, scored by the previous cycle's model (:func:`score_new_episodes`;
    None for the first fit); ``validation_uniform`` and ``new_episodes_uniform`` score uniform R/T on the same
    segments (:func:`~prism.reward.quality.score_uniform`: the per-step baseline). A fit without a summary (a plug-in's plain fit) has no split: its split keys are
    None."""
    summary = fitted.summary
    sizes: dict[str, Any] = {
        "episodes": store.num_episodes,
        "steps": len(store),
        "segments": store.num_segments,
    }
    record: dict[str, Any] = {"cycle": cycle, "env_steps": int(env_steps), "store": sizes}
    # Uniform R/T scored on the same new episodes: the per-step baseline the model's ``new_episodes`` beats or
    # not. The collection before this fit is the store's latest, the set score_new_episodes scored.
    new_uniform = score_uniform(store, latest_collection_segments(store)).to_dict() if new_episodes else None
    if summary is None:
        return {
            **record,
            "epochs_run": None,
            "best_epoch": None,
            "wall_time_s": None,
            "cpu_time_s": None,
            "train_cpu_s": None,
            "validation_cpu_s": None,
            "validation": None,
            "validation_expert": None,
            "new_episodes": new_episodes,
            "validation_uniform": None,
            "new_episodes_uniform": new_uniform,
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
        # Where its CPU time went (prism.core.phase_clock.fit_split): training epochs, validation passes, the rest.
        "cpu_time_s": summary.cpu_time_s,
        "train_cpu_s": summary.train_cpu_s,
        "validation_cpu_s": summary.validation_cpu_s,
        "validation": summary.validation.to_dict(),
        "validation_expert": expert.to_dict() if expert is not None else None,
        "new_episodes": new_episodes,
        "validation_uniform": score_uniform(store, val_segments).to_dict(),
        "new_episodes_uniform": new_uniform,
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
    for key, prefix in (
        ("validation", "reward/val_"),
        ("validation_expert", "reward/val_expert_"),
        ("validation_uniform", "reward/val_uniform_"),
        ("new_episodes_uniform", "reward/new_uniform_"),
    ):
        for k, v in (record.get(key) or {}).items():
            if v is not None:
                out[f"{prefix}{k}"] = float(v)
    return out


__all__ = [
    "FitProgress",
    "fit_members",
    "fit_record",
    "fit_record_scalars",
    "fit_scalars",
    "fit_tensorboard_logger",
    "quality_scalars",
    "score_new_episodes",
]
