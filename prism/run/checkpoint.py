"""Whole-run checkpoints: collect everything a run needs to continue bit for bit, save it, and put it back.

A checkpoint (``<run_dir>/checkpoints/last.pt``; files, atomic writes and the damaged-file fallback are
:mod:`prism.run.checkpoint_files`) holds the agent's weights and optimiser states, its replay buffer and
runtime state (current observation, env state mid-episode, preference sampler), the loop's phase / cycle /
segment store / reward ensemble, the shaper's pending segment, the evaluation schedule and the global RNGs.
A state with a NaN/inf loss term or parameter is never saved (the agent's ``check_finite`` raises
:class:`~prism.core.errors.NonFiniteError` first), so the checkpoints on disk are always good ones.

Checkpoints are taken every ``loop.checkpoint_every`` env steps, at every phase change, and at the end.
Resuming (:func:`prism.run.fit.resume_run`) builds the run, hands the loaded state to
:class:`RunCheckpointer`, which restores it in ``on_fit_start``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from prism.agents.contract import PopulationAgent
from prism.config import ConfigError
from prism.core.errors import NonFiniteError
from prism.loop.loop_state import LoopState
from prism.run.checkpoint_files import FORMAT_VERSION, checkpoint_path, previous_checkpoint_path, save_atomic
from prism.run.tensorboard_resume import event_file_position


def _global_rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]),
        "python": random.getstate(),
    }


def _set_global_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), *rest))
    random.setstate(state["python"])


_LOG = logging.getLogger("prism.checkpoint")
_STATELESS_SHAPERS: set[type] = set()


def _shaper_state(shaper) -> dict:
    """A shaper's ``state_dict()``; a shaper without one (a plug-in that skipped that part of the
    ``RewardShaper`` protocol) is saved as ``{}`` with a one-line warning, once per class."""
    if hasattr(shaper, "state_dict"):
        return shaper.state_dict()
    if type(shaper) not in _STATELESS_SHAPERS:
        _STATELESS_SHAPERS.add(type(shaper))
        _LOG.warning(
            f"reward.name: warning: shaper {type(shaper).__qualname__} has no state_dict()/load_state_dict(); "
            "anything it holds between env steps is not checkpointed, so --resume may not continue bit for bit"
        )
    return {}


def collect_state(run) -> dict[str, Any]:
    """The whole run state as tensors and plain containers."""
    agent, loop = run.agent, run.loop
    return {
        "format": FORMAT_VERSION,
        "env_steps": agent.env_step_count,
        "agent": agent.state_dict(),
        "optimizers": [opt.state_dict() for opt in run.trainer.optimizers],
        "agent_runtime": agent.runtime_state(),
        "shapers": [_shaper_state(shaper) for shaper in agent.shapers],
        "loop": loop.state_dict(),
        "evaluations": [member.evaluation.state_dict() for member in run.members],
        "rng": _global_rng_state(),
        # The run's time so far, across its processes (None once an older checkpoint made it unknown).
        "time": run.clock.state_dict(),
        # Its time per phase so far, an open phase's included (a fit snapshot is saved inside the fit phase).
        "phase_time": run.phases.state_dict(),
        # Where each member's event file stood: a resume shows the points logged up to here once
        # (prism.run.tensorboard_resume).
        "tensorboard": [event_file_position(member.logger) for member in run.members],
    }


def restore_state(run, state: dict[str, Any]) -> None:
    """Put a run (built, with its trainer's optimisers and the agent's env set up) back into ``state``."""
    if state.get("format") != FORMAT_VERSION:
        raise ConfigError(f"--resume: checkpoint format {state.get('format')} is not {FORMAT_VERSION}")
    agent, loop = run.agent, run.loop
    agent.load_state_dict(state["agent"])
    for optimizer, opt_state in zip(run.trainer.optimizers, state["optimizers"]):
        optimizer.load_state_dict(opt_state)
    agent.load_runtime_state(state["agent_runtime"])
    for shaper, shaper_state in zip(agent.shapers, state["shapers"]):
        if hasattr(shaper, "load_state_dict"):
            shaper.load_state_dict(shaper_state)
    loop.load_state_dict(state["loop"])
    loop.install_models(agent)
    for member, evaluation_state in zip(run.members, state["evaluations"]):
        member.evaluation.load_state_dict(evaluation_state)
    _set_global_rng_state(state["rng"])
    run.clock.carry(state.get("time"))  # absent in checkpoints written before runs carried their time
    run.phases.load_state_dict(state.get("phase_time"))  # absent before phase times: counted from zero


class RunCheckpointer(Callback):
    """Saves the whole run state periodically, at phase changes and at the end; restores it on resume.

    Must come *after* the evaluation and loop callbacks (so a checkpoint taken at step t includes the
    evaluation and phase work done at t); restoring happens in ``on_fit_start``, before the agent's own
    ``on_fit_start`` and before any ``on_train_start``. ``last_good`` is the newest checkpoint on disk
    (the one resumed from, then each one saved); a :class:`~prism.core.errors.NonFiniteError` leaving
    ``trainer.fit`` is given it, for the error message.
    """

    def __init__(
        self,
        run,
        every: int,
        resume_state: dict[str, Any] | None = None,
        resumed_from: Path | None = None,
        on_first_save: Callable[[], None] | None = None,
    ):
        self.run = run
        self.every = every
        self._on_first_save = on_first_save
        self.resume_state = resume_state
        self.last_good = resumed_from
        self._next = every
        self.last_save_seconds = float("nan")
        self.last_save_bytes = 0
        self._rng_at_fit: dict[str, Any] | None = None

    def phase_changed(self, state: LoopState) -> None:
        """Checkpoint at a phase's start. Entering the fit phase, also keep the global RNG state: a reward fit
        draws from its own forked stream (prism.reward.fitting.fit), so a checkpoint taken during the fit must
        carry the run's stream as it was before the fit, which is what continues after it."""
        self._rng_at_fit = _global_rng_state() if state.phase == "fit" else None
        self.save()

    def save(self) -> Path:
        self.run.agent.check_finite()  # never replace a good checkpoint by a state with NaN/inf losses or weights
        start = time.perf_counter()
        path = checkpoint_path(self.run.run_dir)
        state = collect_state(self.run)
        if self._rng_at_fit is not None and self.run.loop.state.phase == "fit":
            state["rng"] = self._rng_at_fit
        save_atomic(state, path, previous=previous_checkpoint_path(self.run.run_dir))
        self.last_good = path
        if self._on_first_save is not None:
            first, self._on_first_save = self._on_first_save, None
            first()
        self.last_save_seconds = time.perf_counter() - start
        self.last_save_bytes = path.stat().st_size
        logger = self.run.trainer.logger
        if logger is not None:
            logger.log_metrics(
                {
                    "time/checkpoint_s": self.last_save_seconds,
                    "time/checkpoint_mb": self.last_save_bytes / 2**20,
                },
                step=self.run.agent.env_step_count,
            )
        return path

    def on_fit_start(self, trainer: L.Trainer, pl_module: PopulationAgent) -> None:
        if self.resume_state is not None:
            restore_state(self.run, self.resume_state)
            # Resumed at or inside a fit: the checkpoint's RNG state is the pre-fit one.
            if self.run.loop.state.phase == "fit":
                self._rng_at_fit = self.resume_state["rng"]
            steps = pl_module.env_step_count
            self._next = (steps // self.every + 1) * self.every
            self.resume_state = None

    def on_train_start(self, trainer, pl_module: PopulationAgent) -> None:
        self._schedule(pl_module)

    def _schedule(self, agent: PopulationAgent) -> None:
        agent.pause_at(self._next)  # the agent ends a batch exactly at the next checkpoint step

    def on_train_batch_end(self, trainer, pl_module: PopulationAgent, outputs, batch, batch_idx) -> None:
        if pl_module.env_step_count >= self._next:
            self.save()
            self._next = (pl_module.env_step_count // self.every + 1) * self.every
            self._schedule(pl_module)

    def on_train_end(self, trainer, pl_module: PopulationAgent) -> None:
        self.save()

    def on_exception(self, trainer, pl_module: PopulationAgent, exception: BaseException) -> None:
        # Lightning calls this, then re-raises the same exception object out of trainer.fit.
        if isinstance(exception, NonFiniteError) and exception.checkpoint is None:
            exception.checkpoint = self.last_good


def attach_checkpointing(
    run,
    resume_state: dict[str, Any] | None = None,
    resumed_from: Path | None = None,
    on_first_save: Callable[[], None] | None = None,
) -> RunCheckpointer:
    """Add a :class:`RunCheckpointer` to the run's trainer and checkpoint at every phase change;
    ``on_first_save`` is called once the first checkpoint is on disk (the run can be resumed from then on)."""
    checkpointer = RunCheckpointer(
        run, run.config.loop.checkpoint_every, resume_state, resumed_from, on_first_save
    )
    run.trainer.callbacks.append(checkpointer)
    run.loop.on_phase = checkpointer.phase_changed
    run.loop.on_fit_progress = checkpointer.save
    return checkpointer
