"""The config a study's grid would start one of its runs with, for tests that compare it with committed runs."""

from __future__ import annotations

from pathlib import Path

from prism.config import load_config
from prism.experiments.runner import Job, fit_command


def planned_config(preset, env: str, arm: str, seed: int, tmp_path: Path):
    """The config the grid's `prism fit` command for (env, arm, seed) would run (labels and run_dir aside)."""
    command = fit_command(Job(env, arm, (seed,), False), preset, tmp_path)
    at = command.index("--config") + 1
    files = [c for c in command[at:] if c.endswith(".yaml")]
    keys = [c for c in command[at:] if "=" in c and not c.startswith(("run_dir=", "method_label="))]
    return load_config(files, keys)
