"""The names of a run folder's files, and where a trained run's checkpoints are, in a module that imports
nothing at import time: the commands check a run folder (``prism fit --resume``, ``prism evaluate``) before
they import torch or Lightning."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prism.config import RunConfig

CONFIG_FILE = "config.yaml"
"""The run folder's config (written by ``prism fit``, read by ``--resume`` and ``prism evaluate``)."""
CHECKPOINT_DIR = "checkpoints"
"""The folder of a run's whole-run checkpoints (:mod:`prism.run.checkpoint_files`)."""
SUMMARY_JSON = "summary.json"
"""A finished single run's (or population member's) summary."""
SUMMARY_CSV = "summary.csv"
"""A finished population's summary, written after every member's ``summary.json``."""


def run_config_file(run_dir: Path, *, key: str) -> Path:
    """``run_dir``'s ``config.yaml``; a :class:`~prism.core.errors.ConfigError` naming ``key`` when there is none."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        from prism.core.errors import ConfigError

        raise ConfigError(f"{key}: {str(run_dir)!r} has no {CONFIG_FILE} (is it a prism run folder?)")
    return path


def trained_run_folder(
    run_dir: Path, *, key: str, overrides: list[str] | tuple[str, ...] = ()
) -> tuple[RunConfig, int | None, Path]:
    """Where a trained run's weights are: ``(config, member, folder)``. ``run_dir`` is a single run's folder, a
    population's folder (``member`` None) or one member's ``seed<N>/`` folder, which holds its own
    ``config.yaml`` but no checkpoints: its weights are in the population's checkpoint one level up, so the
    population's config, the member's index in its seeds and the population's folder are returned. ``overrides``
    apply to the config returned. Raises :class:`~prism.core.errors.ConfigError` naming ``key`` when ``run_dir`` has
    no ``config.yaml``."""
    from prism.config import load_run_config

    config = load_run_config(run_config_file(run_dir, key=key), list(overrides))
    parent_config = run_dir.parent / CONFIG_FILE
    if config.seeds is None and not (run_dir / CHECKPOINT_DIR).is_dir() and parent_config.is_file():
        parent = load_run_config(parent_config, list(overrides))
        if parent.seeds is not None and config.seed in parent.seeds:  # a population member's folder
            return parent, parent.seeds.index(config.seed), run_dir.parent
    return config, None, run_dir
