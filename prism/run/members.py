"""The shapes of a built run, shared by the run builder (:mod:`prism.run.fit`) and the output writers
(:mod:`prism.run.outputs`): a run's members, the :class:`Run` itself and where each member writes.

Both modules import this one and neither imports the other, so the loop package has no import circle, not
even one hidden under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger

from prism.config import RunConfig
from prism.core.phase_clock import PhaseClock
from prism.envs import EnvSpec
from prism.evaluation.callback import EvaluationCallback
from prism.loop.phases import PrismLoopCallback
from prism.run.clock import RunClock

__all__ = ["Member", "Run", "member_config", "member_run_dirs"]


@dataclass
class Member:
    """One member of a run: its seed, its output folder, its single-run config, evaluation and logger."""

    index: int
    seed: int
    run_dir: Path
    config: RunConfig
    """The member's own config (``seed`` = its seed, no ``seeds``, ``run_dir`` = its folder)."""
    evaluation: EvaluationCallback
    logger: TensorBoardLogger


@dataclass
class Run:
    """Everything ``trainer.fit`` needs, built from a config (and nothing run yet)."""

    config: RunConfig
    spec: EnvSpec
    run_dir: Path
    agent: L.LightningModule
    loop: PrismLoopCallback
    members: list[Member]
    trainer: L.Trainer
    clock: RunClock = field(default_factory=RunClock)
    """The run's training time, this process's and across its processes (:mod:`prism.run.clock`)."""
    phases: PhaseClock = field(default_factory=PhaseClock)
    """The run's time per phase (:mod:`prism.core.phase_clock`), shared with the loop and the evaluations."""

    @property
    def population(self) -> bool:
        """Whether the config asked for ``seeds`` (then every member has a ``seed<N>/`` folder)."""
        return self.config.seeds is not None

    @property
    def evaluation(self) -> EvaluationCallback:
        """The evaluation callback of a single run (member 0)."""
        return self.members[0].evaluation


def member_run_dirs(config: RunConfig) -> list[Path]:
    """Each member's output folder: ``run_dir`` for a single run, ``run_dir/seed<N>`` in a population."""
    run_dir = Path(config.run_dir)
    if config.seeds is None:
        return [run_dir]
    return [run_dir / f"seed{seed}" for seed in config.seeds]


def member_config(config: RunConfig, seed: int, run_dir: Path) -> RunConfig:
    """The single-run config of one member (what its folder's config.yaml holds)."""
    return dataclasses.replace(config, seed=seed, seeds=None, run_dir=str(run_dir))
