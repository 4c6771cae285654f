"""Whole-run checkpoints: save everything a run needs to continue bit for bit, and resume from them.

A checkpoint (``<run_dir>/checkpoints/last.pt``) holds the agent's weights and optimiser states, its replay
buffer and runtime state (current observation, env state mid-episode, preference sampler), the loop's
phase / cycle / segment store / reward ensemble, the shaper's pending segment, the evaluation schedule and
the global RNGs. It contains only tensors and plain Python containers, so it loads with
``torch.load(weights_only=True)``; it is written to a temporary file and renamed, so a kill while saving
leaves the previous checkpoint intact.

Checkpoints are taken every ``loop.checkpoint_every`` env steps, at every phase change, and at the end.
On ``--resume`` the run folder's ``config.yaml`` is used, rows of ``eval.csv`` newer than the checkpoint
are dropped (they are recomputed identically), and TensorBoard events after the checkpoint are purged.
The final-evaluation row (``final = 1``) is kept only if the checkpoint was taken after it was recorded: a
run killed during (or just after) its final evaluation redoes it and writes the row once.
"""

from __future__ import annotations

import csv
import os
import random
import time
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from prism.config import ConfigError, load_config
from prism.loop.evaluation import agent_env_steps

CHECKPOINT_DIR = "checkpoints"
LAST = "last.pt"
FORMAT_VERSION = 1


def checkpoint_path(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / LAST


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


def save_atomic(payload: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)  # atomic on POSIX: a kill mid-save keeps the previous checkpoint


def collect_state(run) -> dict[str, Any]:
    """The whole run state as tensors and plain containers."""
    agent, loop = run.agent, run.loop
    return {
        "format": FORMAT_VERSION,
        "env_steps": agent_env_steps(agent),
        "agent": agent.state_dict(),
        "optimizers": [opt.state_dict() for opt in run.trainer.optimizers],
        "agent_runtime": agent.runtime_state(),
        "shaper": agent.shaper.state_dict() if hasattr(agent.shaper, "state_dict") else {},
        "loop": {
            "state": loop.state.to_dict(),
            "store": loop.store.state_dict() if loop.store is not None else None,
            "model": loop.model.to_dict() if loop.model is not None else None,
        },
        "evaluation": run.evaluation.state_dict(),
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
    if hasattr(agent.shaper, "load_state_dict"):
        agent.shaper.load_state_dict(state["shaper"])
    loop.state = LoopState.from_dict(state["loop"]["state"])
    if state["loop"]["store"] is not None:
        loop.store = SegmentStore.from_state_dict(state["loop"]["store"])
    if state["loop"]["model"] is not None:
        loop.set_model(agent, RewardEnsemble.from_dict(state["loop"]["model"]))
    run.evaluation.load_state_dict(state["evaluation"])
    _set_global_rng_state(state["rng"])


class RunCheckpointer(Callback):
    """Saves the whole run state periodically, at phase changes and at the end; restores it on resume.

    Must come *after* the evaluation and loop callbacks (so a checkpoint taken at step t includes the
    evaluation and phase work done at t); restoring happens in ``on_fit_start``, before the agent's own
    ``on_fit_start`` and before any ``on_train_start``.
    """

    def __init__(self, run, every: int, resume_state: dict[str, Any] | None = None):
        self.run = run
        self.every = every
        self.resume_state = resume_state
        self._next = every
        self.last_save_seconds = float("nan")
        self.last_save_bytes = 0

    def save(self) -> Path:
        start = time.perf_counter()
        path = checkpoint_path(self.run.run_dir)
        save_atomic(collect_state(self.run), path)
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

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if agent_env_steps(pl_module) >= self._next:
            self.save()
            self._next = (agent_env_steps(pl_module) // self.every + 1) * self.every

    def on_train_end(self, trainer, pl_module) -> None:
        self.save()


def attach_checkpointing(run, resume_state: dict[str, Any] | None = None) -> RunCheckpointer:
    """Add a :class:`RunCheckpointer` to the run's trainer and checkpoint at every phase change."""
    checkpointer = RunCheckpointer(run, run.config.loop.checkpoint_every, resume_state)
    run.trainer.callbacks.append(checkpointer)
    run.loop.on_phase = lambda state: checkpointer.save()
    return checkpointer


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
    """``prism fit --resume RUN_DIR``: continue a run from its last checkpoint (or from scratch if none)."""
    from prism.loop.run import CONFIG_FILE, build_run, torch_load

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
    if Path(config.run_dir).resolve() != run_dir.resolve():
        # The folder was moved or renamed: keep writing where the run now lives.
        config.run_dir = str(run_dir)
    state = None
    path = checkpoint_path(run_dir)
    if path.is_file():
        state = torch_load(path)
    last_eval = int(state["evaluation"]["last_eval_step"]) if state is not None else -1
    final_done = bool(state["evaluation"].get("final_done", False)) if state is not None else False
    _truncate_eval_csv(run_dir / "eval.csv", last_eval, keep_final=final_done)
    run = build_run(config, purge_step=int(state["env_steps"]) if state is not None else 0)
    attach_checkpointing(run, resume_state=state)
    start = time.perf_counter()
    run.trainer.fit(run.agent)
    from prism.loop.run import closing_summary, write_final_outputs

    wall_time_s = time.perf_counter() - start
    write_final_outputs(run, wall_time_s)
    print(closing_summary(run, wall_time_s, resumed=True))
    return run


def load_agent_weights(run) -> int:
    """Load the agent's weights from the run's last checkpoint (for ``prism evaluate``); returns env steps."""
    from prism.loop.run import torch_load

    path = checkpoint_path(run.run_dir)
    if not path.is_file():
        raise ConfigError(f"RUN_DIR: no checkpoint at {path}")
    state = torch_load(path)
    run.agent.load_state_dict(state["agent"])
    return int(state["env_steps"])
