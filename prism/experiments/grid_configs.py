"""Whether a grid folder's runs were made with the config this command would give them.

``prism reproduce`` skips finished runs and resumes started ones with the config they were started with, so a
second command into the same ``--out`` with other ``--set`` values would make one report of two budgets. Before
anything runs, each run folder that already holds a ``config.yaml`` is compared, key by key, with the config a
fresh start of the same job would load, at every key the command sets (in its config files or overrides);
the runs that differ are named and the command refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from prism.core.errors import ConfigError
from prism.experiments.grid import Cell, Preset
from prism.experiments.runner import Job, fresh_arguments

PER_RUN_KEYS = frozenset({"run_dir", "seed", "seeds"})
"""Keys that differ between the runs of one grid by design."""


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_leaves(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


def flat_config(config: Any) -> dict[str, Any]:
    """``config`` (a :class:`~prism.config.schema.RunConfig`) as ``{dotted key: value}``, without the keys that
    differ between the runs of one grid by design (:data:`PER_RUN_KEYS`)."""
    data = OmegaConf.to_container(OmegaConf.structured(config), enum_to_str=True)
    return {k: v for k, v in _leaves(data).items() if k not in PER_RUN_KEYS}


def config_differences(saved: Path, files: list[str], items: list[str]) -> list[str]:
    """``key: <saved> there, <fresh> now`` for each key where the run folder's ``saved`` config.yaml and the
    config of ``files`` + ``items`` differ. Raises :class:`ConfigError` when the fresh config does not load
    (a bad ``--set``)."""
    from prism.config.loader import load_config, load_run_config

    fresh = flat_config(load_config(files, items))
    try:
        there = flat_config(load_run_config(saved))
    except ConfigError as err:
        return [f"its config.yaml does not load ({err})"]
    named = _named(files, items)
    keys = sorted(k for k in fresh if k in named or any(k.startswith(f"{n}.") for n in named))
    return [
        f"{k}: {there.get(k)!r} there, {fresh.get(k)!r} now" for k in keys if fresh.get(k) != there.get(k)
    ]


def differing_runs(
    cells: list[Cell], preset: Preset, out: Path, sets: tuple[str, ...]
) -> list[tuple[Cell, list[str]]]:
    """The grid's own cells whose run folder in ``out`` (finished or started; a population's member folders
    alike) holds a config that differs from what this command would start that seed with, each with its
    differences."""
    found = []
    for cell in cells:
        saved = cell.run_dir(out) / "config.yaml"
        if cell.source is None and saved.is_file():
            job = Job(cell.env, cell.method, (cell.seed,), False)
            differences = config_differences(saved, *fresh_arguments(job, preset, out, sets))
            if differences:
                found.append((cell, differences))
    return found


def _named(files: list[str], items: list[str]) -> set[str]:
    """The keys the command itself sets, in its files or its overrides. Keys left to the code's defaults are
    not compared: a default that changed between prism versions (say ``False`` to an ``auto`` that resolves
    to it) must not refuse a grid that none of this command's own choices changes."""
    keys = {item.split("=", 1)[0].strip() for item in items}
    for file in files:
        keys |= set(_leaves(OmegaConf.to_container(OmegaConf.load(file))))
    return keys
