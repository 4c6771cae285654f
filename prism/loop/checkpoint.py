"""Whole-run checkpoints: save everything a run needs to continue bit for bit, and resume from them.

A checkpoint (``<run_dir>/checkpoints/last.pt``) holds the agent's weights and optimiser states, its replay
buffer and runtime state (current observation, env state mid-episode, preference sampler), the loop's
phase / cycle / segment store / reward ensemble, the shaper's pending segment, the evaluation schedule and
the global RNGs. It contains only tensors and plain Python containers, so it loads with
``torch.load(weights_only=True)``. The one before it is kept as ``checkpoints/previous.pt``: a save writes
``last.tmp``, renames ``last.pt`` to ``previous.pt``, then ``last.tmp`` to ``last.pt``, so a kill at any
point leaves at least one complete checkpoint (between the two renames only ``previous.pt``, which is then
the newest). A state with a NaN/inf loss term or parameter is never saved (the agent's ``check_finite``
raises :class:`~prism.errors.NonFiniteError` first), so the checkpoints on disk are always good ones.

Checkpoints are taken every ``loop.checkpoint_every`` env steps, at every phase change, and at the end.
On ``--resume`` the run folder's ``config.yaml`` is used, rows of ``eval.csv`` newer than the checkpoint
are dropped (they are recomputed identically), and TensorBoard events after the checkpoint are purged.
A checkpoint that does not load (truncated, garbage, wrong format, missing keys, non-finite weights) is
reported in one warning line and the previous one is used; ``--resume`` renames the damaged file to
``*.damaged`` (nothing is deleted, and the next save cannot rotate it over the good one). With no loadable
checkpoint left, a :class:`~prism.config.ConfigError` names the file. A finished run (``summary.json``
present) is left alone.
The final-evaluation row (``final = 1``) is kept only if the checkpoint was taken after it was recorded: a
run killed during (or just after) its final evaluation redoes it and writes the row once.
"""

from __future__ import annotations

import csv
import os
import random
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from prism.config import ConfigError, load_config
from prism.errors import NonFiniteError
from prism.loop.evaluation import agent_env_steps

CHECKPOINT_DIR = "checkpoints"
LAST = "last.pt"
PREVIOUS = "previous.pt"
DAMAGED_SUFFIX = ".damaged"
SUMMARY_FILE = "summary.json"
POPULATION_SUMMARY = "summary.csv"
FORMAT_VERSION = 2  # 2: per-member lists (populations); 1 had one shaper / store / model / evaluation
REQUIRED_KEYS = (
    "format",
    "env_steps",
    "agent",
    "optimizers",
    "agent_runtime",
    "shapers",
    "loop",
    "evaluations",
    "rng",
)


def checkpoint_path(run_dir: Path) -> Path:
    """The newest checkpoint of a run."""
    return Path(run_dir) / CHECKPOINT_DIR / LAST


def previous_checkpoint_path(run_dir: Path) -> Path:
    """The checkpoint saved before the newest one (the fallback when the newest is damaged)."""
    return Path(run_dir) / CHECKPOINT_DIR / PREVIOUS


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


def save_atomic(payload: dict[str, Any], path: Path, previous: Path | None = None) -> None:
    """Write ``payload`` to ``path`` through a temporary file; with ``previous``, keep the old ``path`` there.

    Each rename is atomic on POSIX: a kill while writing keeps ``path`` (and ``previous``) as they were, a
    kill between the two renames leaves the old checkpoint as ``previous`` and no ``path`` (the loader then
    takes ``previous``), so there is always a complete checkpoint on disk.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    if previous is not None and path.is_file():
        os.replace(path, previous)
    os.replace(tmp, path)


def collect_state(run) -> dict[str, Any]:
    """The whole run state as tensors and plain containers."""
    agent, loop = run.agent, run.loop
    return {
        "format": FORMAT_VERSION,
        "env_steps": agent_env_steps(agent),
        "agent": agent.state_dict(),
        "optimizers": [opt.state_dict() for opt in run.trainer.optimizers],
        "agent_runtime": agent.runtime_state(),
        "shapers": [shaper.state_dict() if hasattr(shaper, "state_dict") else {} for shaper in agent.shapers],
        "loop": {
            "state": loop.state.to_dict(),
            "stores": [store.state_dict() if store is not None else None for store in loop.stores],
            "models": [model.to_dict() if model is not None else None for model in loop.models],
        },
        "evaluations": [member.evaluation.state_dict() for member in run.members],
        "rng": _global_rng_state(),
    }


def restore_state(run, state: dict[str, Any]) -> None:
    """Put a run (built, with its trainer's optimisers and the agent's env set up) back into ``state``."""
    if state.get("format") != FORMAT_VERSION:
        raise ConfigError(f"--resume: checkpoint format {state.get('format')} is not {FORMAT_VERSION}")
    from prism.data.segments import SegmentStore
    from prism.loop.phases import LoopState
    from prism.reward.resymnet import RewardEnsemble

    agent, loop = run.agent, run.loop
    agent.load_state_dict(state["agent"])
    for optimizer, opt_state in zip(run.trainer.optimizers, state["optimizers"]):
        optimizer.load_state_dict(opt_state)
    agent.load_runtime_state(state["agent_runtime"])
    for shaper, shaper_state in zip(agent.shapers, state["shapers"]):
        if hasattr(shaper, "load_state_dict"):
            shaper.load_state_dict(shaper_state)
    loop.state = LoopState.from_dict(state["loop"]["state"])
    loop.stores = [
        SegmentStore.from_state_dict(store) if store is not None else None
        for store in state["loop"]["stores"]
    ]
    if any(model is not None for model in state["loop"]["models"]):
        loop.set_model(agent, [RewardEnsemble.from_dict(model) for model in state["loop"]["models"]])
    for member, evaluation_state in zip(run.members, state["evaluations"]):
        member.evaluation.load_state_dict(evaluation_state)
    _set_global_rng_state(state["rng"])


class RunCheckpointer(Callback):
    """Saves the whole run state periodically, at phase changes and at the end; restores it on resume.

    Must come *after* the evaluation and loop callbacks (so a checkpoint taken at step t includes the
    evaluation and phase work done at t); restoring happens in ``on_fit_start``, before the agent's own
    ``on_fit_start`` and before any ``on_train_start``. ``last_good`` is the newest checkpoint on disk
    (the one resumed from, then each one saved); a :class:`~prism.errors.NonFiniteError` leaving
    ``trainer.fit`` is given it, for the error message.
    """

    def __init__(
        self,
        run,
        every: int,
        resume_state: dict[str, Any] | None = None,
        resumed_from: Path | None = None,
    ):
        self.run = run
        self.every = every
        self.resume_state = resume_state
        self.last_good = resumed_from
        self._next = every
        self.last_save_seconds = float("nan")
        self.last_save_bytes = 0

    def save(self) -> Path:
        check_finite = getattr(self.run.agent, "check_finite", None)
        if check_finite is not None:
            check_finite()  # never replace a good checkpoint by a state with NaN/inf losses or weights
        start = time.perf_counter()
        path = checkpoint_path(self.run.run_dir)
        save_atomic(collect_state(self.run), path, previous=previous_checkpoint_path(self.run.run_dir))
        self.last_good = path
        self.last_save_seconds = time.perf_counter() - start
        self.last_save_bytes = path.stat().st_size
        logger = self.run.trainer.logger
        if logger is not None:
            logger.log_metrics(
                {
                    "time/checkpoint_s": self.last_save_seconds,
                    "time/checkpoint_mb": self.last_save_bytes / 2**20,
                },
                step=agent_env_steps(self.run.agent),
            )
        return path

    def on_fit_start(self, trainer: L.Trainer, pl_module) -> None:
        if self.resume_state is not None:
            restore_state(self.run, self.resume_state)
            steps = agent_env_steps(pl_module)
            self._next = (steps // self.every + 1) * self.every
            self.resume_state = None

    def on_train_start(self, trainer, pl_module) -> None:
        self._schedule(pl_module)

    def _schedule(self, pl_module) -> None:
        pause_at = getattr(pl_module, "pause_at", None)
        if pause_at is not None:  # the agent ends a batch exactly at the next checkpoint step
            pause_at(self._next)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if agent_env_steps(pl_module) >= self._next:
            self.save()
            self._next = (agent_env_steps(pl_module) // self.every + 1) * self.every
            self._schedule(pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self.save()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        # Lightning calls this, then re-raises the same exception object out of trainer.fit.
        if isinstance(exception, NonFiniteError) and exception.checkpoint is None:
            exception.checkpoint = self.last_good


def attach_checkpointing(
    run, resume_state: dict[str, Any] | None = None, resumed_from: Path | None = None
) -> RunCheckpointer:
    """Add a :class:`RunCheckpointer` to the run's trainer and checkpoint at every phase change."""
    checkpointer = RunCheckpointer(run, run.config.loop.checkpoint_every, resume_state, resumed_from)
    run.trainer.callbacks.append(checkpointer)
    run.loop.on_phase = lambda state: checkpointer.save()
    return checkpointer


class DamagedCheckpointError(Exception):
    """A checkpoint file that cannot be used; the message is a short one-line reason."""


def _short_reason(err: BaseException) -> str:
    """The gist of a loading error in one short line (torch's messages run to several paragraphs)."""
    text = str(err)
    marker = "WeightsUnpickler error:"
    if marker in text:  # weights_only=True refused the pickle: the cause follows the marker
        text = "unpickling failed: " + text.split(marker, 1)[1].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    text = lines[0].split(". ")[0].rstrip(".") if lines else type(err).__name__
    return text if len(text) <= 100 else text[:97] + "..."


def read_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint and check that it is complete; :class:`DamagedCheckpointError` if not."""
    from prism.loop.run import torch_load

    if path.stat().st_size == 0:
        raise DamagedCheckpointError("empty file")
    if not zipfile.is_zipfile(path):  # torch.save writes a zip; a truncated one has lost its directory
        raise DamagedCheckpointError("truncated or not a checkpoint: no zip directory")
    try:
        state = torch_load(path)
    except Exception as err:  # truncated zip, garbage bytes, an unsafe pickle, an unreadable file...
        raise DamagedCheckpointError(_short_reason(err)) from err
    if not isinstance(state, dict):
        raise DamagedCheckpointError(f"holds a {type(state).__name__}, not a checkpoint")
    missing = [key for key in REQUIRED_KEYS if key not in state]
    if missing:
        raise DamagedCheckpointError(f"missing {', '.join(missing)}")
    if state["format"] != FORMAT_VERSION:
        raise DamagedCheckpointError(f"format {state['format']!r}, expected {FORMAT_VERSION}")
    try:
        int(state["env_steps"])
        [int(e["last_eval_step"]) for e in state["evaluations"]]
        str(state["loop"]["state"]["phase"])
        tensors = dict(state["agent"])
    except (KeyError, TypeError, ValueError) as err:
        raise DamagedCheckpointError(f"malformed: {_short_reason(err)}") from err
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise DamagedCheckpointError(f"agent.{name} is not a tensor")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise DamagedCheckpointError(f"non-finite values in agent.{name}")
    return state


@dataclass
class LoadedCheckpoint:
    """The newest usable checkpoint of a run, and the newer files that had to be skipped."""

    path: Path
    state: dict[str, Any]
    damaged: list[Path] = field(default_factory=list)


def load_checkpoint(run_dir: Path, *, key: str, check=None) -> LoadedCheckpoint | None:
    """``last.pt``, else (damaged or missing) ``previous.pt``; ``None`` when the run has no checkpoint file.

    ``check(state)`` (optional) may raise to reject a checkpoint that loads but does not fit the run. Using
    an older checkpoint because a newer one is damaged is reported in one warning line on stderr; with every
    checkpoint damaged, a one-line :class:`ConfigError` starting with ``key`` names the newest file.
    """
    candidates = [p for p in (checkpoint_path(run_dir), previous_checkpoint_path(run_dir)) if p.is_file()]
    damaged: list[tuple[Path, str]] = []
    for path in candidates:
        try:
            state = read_checkpoint(path)
            if check is not None:
                try:
                    check(state)
                except Exception as err:
                    raise DamagedCheckpointError(_short_reason(err)) from err
        except DamagedCheckpointError as err:
            damaged.append((path, str(err)))
            continue
        for bad, reason in damaged:
            print(
                f"prism: warning: checkpoint {bad} is damaged ({reason}); "
                f"using {path} (env step {int(state['env_steps'])})",
                file=sys.stderr,
            )
        return LoadedCheckpoint(path, state, [bad for bad, _ in damaged])
    if not damaged:
        return None
    (newest, reason), older = damaged[0], damaged[1:]
    tail = "; ".join(f"{p.name} is damaged too ({r})" for p, r in older) or "no previous checkpoint is left"
    raise ConfigError(f"{key}: checkpoint {newest} is damaged ({reason}); {tail}")


def _set_aside(path: Path) -> Path:
    """Rename a damaged checkpoint to ``<name>.damaged`` (``.damaged.1``, ... if taken): never delete it."""
    target = path.with_name(path.name + DAMAGED_SUFFIX)
    n = 0
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}{DAMAGED_SUFFIX}.{n}")
    os.replace(path, target)
    return target


def _truncate_eval_csv(path: Path, last_step: int, keep_final: bool = False) -> None:
    """Drop rows evaluated after the checkpoint (the resumed run recomputes them identically), and the final
    row unless ``keep_final`` (the checkpoint says the final evaluation was already recorded)."""
    if not path.is_file():
        return
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return
    header, body = rows[0], rows[1:]
    column = header.index("env_steps")
    final = header.index("final") if "final" in header else None
    kept = [
        row
        for row in body
        if int(row[column]) <= last_step and (keep_final or final is None or row[final] != "1")
    ]
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(kept)
    os.replace(tmp, path)


def resume_run(run_dir: Path, files: list[str], overrides: list[str]):
    """``prism fit --resume RUN_DIR``: continue a run from its last good checkpoint (or from scratch if none).

    Returns ``None`` (and does nothing) when the run is already finished.
    """
    from prism.loop.run import CONFIG_FILE, build_run

    config_path = run_dir / CONFIG_FILE
    if not config_path.is_file():
        raise ConfigError(f"--resume: {str(run_dir)!r} has no {CONFIG_FILE} (is it a prism run folder?)")
    config = load_config([config_path])
    if files or overrides:
        requested = load_config(files or [config_path], overrides)
        if requested != config:
            raise ConfigError(
                f"--resume: the given config differs from {config_path} (resume takes the run's saved config; "
                "drop --config/overrides or start a new run_dir)"
            )
    # A population is finished once its summary.csv is written (after every member's summary.json).
    marker = POPULATION_SUMMARY if config.seeds is not None else SUMMARY_FILE
    if (run_dir / marker).is_file():
        # Finished: say so and touch nothing (a resumed finished run would only redo its final outputs).
        print(f"prism: run {run_dir} is finished ({marker} present); nothing to resume")
        return None
    if Path(config.run_dir).resolve() != run_dir.resolve():
        # The folder was moved or renamed: keep writing where the run now lives.
        config.run_dir = str(run_dir)
    loaded = load_checkpoint(run_dir, key="--resume")
    state = loaded.state if loaded is not None else None
    if loaded is not None:
        # Before anything is saved: the next save would otherwise rotate a damaged last.pt over previous.pt.
        for damaged in loaded.damaged:
            _set_aside(damaged)
    from prism.loop.run import member_run_dirs

    for index, member_dir in enumerate(member_run_dirs(config)):
        evaluation = state["evaluations"][index] if state is not None else None
        last_eval = int(evaluation["last_eval_step"]) if evaluation is not None else -1
        final_done = bool(evaluation.get("final_done", False)) if evaluation is not None else False
        _truncate_eval_csv(member_dir / "eval.csv", last_eval, keep_final=final_done)
    run = build_run(config, purge_step=int(state["env_steps"]) if state is not None else 0)
    attach_checkpointing(run, resume_state=state, resumed_from=loaded.path if loaded is not None else None)
    start = time.perf_counter()
    run.trainer.fit(run.agent)
    from prism.loop.outputs import closing_summary, write_final_outputs

    wall_time_s = time.perf_counter() - start
    write_final_outputs(run, wall_time_s)
    print(closing_summary(run, wall_time_s, resumed=True))
    return run


def load_agent_weights(run) -> int:
    """Load the agent's weights from the run's last good checkpoint (for ``prism evaluate``); returns env
    steps. Read-only: a damaged ``last.pt`` is reported and skipped, not renamed."""
    loaded = load_checkpoint(
        run.run_dir, key="RUN_DIR", check=lambda state: run.agent.load_state_dict(state["agent"])
    )
    if loaded is None:
        raise ConfigError(f"RUN_DIR: no checkpoint at {checkpoint_path(run.run_dir)}")
    return int(loaded.state["env_steps"])
