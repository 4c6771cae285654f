"""The report's "what ran" lines, read from the finished runs' own ``config.yaml`` files (never from the command
that asked for the report): each arm's RL steps (cycles × steps per cycle), the seeds found beside the seeds
the study declares, and every setting where the runs differ from the config the study gives that arm today
(a ``--set`` of the grid, or a default that changed since the runs were made), plus a line for an arm whose
runs differ among themselves. The study's ``description`` says what the study is; these lines say what the
numbers below them come from.

Configs are compared key by key (:func:`~prism.experiments.grid_configs.flat_config`), leaving out the keys
that differ between a grid's runs by design (seed, run folder) and the arm's label, and by what a value does
rather than how it is written where a key's effect depends on the rest of the run (:func:`_in_effect`). No
line names a path."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from yaml import YAMLError

from prism.config.files import RESOLVED_KEY
from prism.core.errors import ConfigError
from prism.experiments.grid import Cell, Preset
from prism.experiments.grid_configs import PER_RUN_KEYS, flat_config
from prism.experiments.runner import Job, fresh_arguments

LABEL_KEYS = frozenset({"method_label"})
"""Keys that name an arm rather than set it: a joined arm read from a folder of another name differs there."""

CYCLE_END_KEYS = frozenset({"loop.cycles", "protocol", "eval.final.each_cycle"})
"""What reading a run at an earlier cycle's end implies (a joined arm with ``cycle_end``): the run has more
cycles than it is read at, an equal protocol however the arm's own reads, and the cycle-end evaluation on. The
steps line says which cycle was read, so these are no finding."""


def _in_effect(key: str, value: Any, config: dict[str, Any], device: str | None) -> Any:
    """What ``value`` of ``key`` does in a run with flat ``config`` on ``device`` (the one the run resolved at
    start; None: not recorded), for the keys whose effect depends on the rest of the run; any other key's value
    as written. ``agent.cuda_graph`` (false, true, auto) only captures a graph on CUDA, so on the CPU every value
    runs the same eager update; ``env.sparse_channel`` names no channel on the dense env, where none is hidden."""
    if key == "agent.cuda_graph" and device is not None:
        return ("cuda graph", value is not False and device.split(":")[0] == "cuda")
    if key == "env.sparse_channel" and config.get("env.dense") is True:
        return ("no hidden channel",)
    return value


def _varies(key: str, configs: dict[int, dict[str, Any]], devices: dict[int, str | None]) -> bool:
    """Whether the seeds' values of ``key`` act differently (:func:`_in_effect`)."""
    return len({repr(_in_effect(key, c.get(key), c, devices.get(seed))) for seed, c in configs.items()}) > 1


def _acts_otherwise(
    key: str, configs: dict[int, dict[str, Any]], devices: dict[int, str | None], study: dict[str, Any]
) -> bool:
    """Whether some seed's value of ``key`` acts unlike the study's would on the device that seed ran on."""
    return any(
        _in_effect(key, c.get(key), c, devices.get(seed))
        != _in_effect(key, study.get(key), study, devices.get(seed))
        for seed, c in configs.items()
    )


@dataclass
class _ArmRuns:
    """The finished runs of one (env, arm): each seed's flat config (None: none readable)."""

    env: str
    arm: str
    declared: tuple[int, ...]
    cycle_end: int = 0
    configs: dict[int, dict[str, Any] | None] = field(default_factory=dict)
    devices: dict[int, str | None] = field(default_factory=dict)
    """Each seed's device, as the run resolved it at start (None: not recorded)."""
    study: dict[str, Any] | None = None
    """The config the study gives this arm's runs (None: it does not load)."""

    @property
    def label(self) -> tuple[str, str]:
        return self.env, self.arm


def _number(n: int) -> str:
    return f"{n:,}".replace(",", " ")


def _seeds(seeds: Iterable[int]) -> str:
    """``0–4`` for a run of consecutive seeds, else ``0, 2, 5``."""
    seeds = sorted(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _plural_seeds(seeds: Iterable[int]) -> str:
    seeds = sorted(seeds)
    return f"{'seed' if len(seeds) == 1 else 'seeds'} {_seeds(seeds)}"


def _value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _steps(config: dict[str, Any], cycle_end: int) -> str:
    """A run's RL steps, as ``cycles × steps per cycle = total`` (a joined arm read at an earlier cycle's end:
    the cycles read, of how many)."""
    cycles, per_cycle = config.get("loop.cycles"), config.get("loop.steps_per_cycle")
    if not isinstance(cycles, int) or not isinstance(per_cycle, int):
        return "unknown"
    read = cycle_end or cycles
    text = f"{read} × {_number(per_cycle)} = {_number(read * per_cycle)}"
    return text + (f", read at the end of cycle {read} of {cycles}" if cycle_end else "")


def _where(labels: list[tuple[str, str]], everyone: list[tuple[str, str]]) -> str:
    """``every arm``, or ``hopper: a, b; walker: c`` in the report's order."""
    if labels == everyone:
        return "every arm"
    envs: dict[str, list[str]] = {}
    for env, arm in labels:
        envs.setdefault(env, []).append(arm)
    return "; ".join(f"{env}: {', '.join(arms)}" for env, arms in envs.items())


def _grouped(values: dict[tuple[str, str], str], everyone: list[tuple[str, str]]) -> str:
    """One text per arm, grouped: ``A in every arm``, or ``A (hopper: a, b), B (walker: c)``."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for label in everyone:
        if label in values:
            groups.setdefault(values[label], []).append(label)
    if len(groups) == 1 and next(iter(groups.values())) == everyone:
        return f"{next(iter(groups))} in every arm"
    return ", ".join(f"{text} ({_where(labels, everyone)})" for text, labels in groups.items())


class _Loader:
    """Flat configs, loaded once per distinct content: the seeds of one arm share theirs but for the per-run
    keys, and a study's configs take a noticeable time each to merge onto the schema."""

    def __init__(self, preset: Preset, out: Path) -> None:
        self.preset, self.out = preset, out
        self._saved: dict[str, dict[str, Any] | None] = {}
        self._study: dict[tuple[str, str], dict[str, Any] | None] = {}

    def saved(self, path: Path) -> tuple[dict[str, Any] | None, str | None]:
        """The run's own config (None: missing or not loadable) and the device it resolved at start (None: not
        recorded)."""
        from prism.config.loader import load_run_config

        try:
            raw = OmegaConf.to_container(OmegaConf.load(path))
        except (OSError, YAMLError, OmegaConfBaseException):
            return None, None
        if not isinstance(raw, dict):
            return None, None
        resolved = raw.get(RESOLVED_KEY)
        device = resolved.get("device") if isinstance(resolved, dict) else None
        device = device if isinstance(device, str) else None
        # the loader ignores the `resolved:` record, which differs per seed (eval.seed): not part of the content
        ignored = PER_RUN_KEYS | {RESOLVED_KEY}
        key = json.dumps({k: v for k, v in raw.items() if k not in ignored}, sort_keys=True, default=str)
        if key not in self._saved:
            try:
                self._saved[key] = _settings(flat_config(load_run_config(path)))
            except (ConfigError, OmegaConfBaseException, ValueError, TypeError):
                self._saved[key] = None
        return self._saved[key], device

    def study(self, env: str, arm: str, seed: int) -> dict[str, Any] | None:
        """The config the study gives a fresh run of ``arm`` in ``env`` (None: it does not load)."""
        from prism.config.loader import load_config

        if (env, arm) not in self._study:
            job = Job(env, arm, (seed,), False)
            try:
                self._study[env, arm] = _settings(
                    flat_config(load_config(*fresh_arguments(job, self.preset, self.out)))
                )
            except (ConfigError, OmegaConfBaseException, ValueError, TypeError):
                self._study[env, arm] = None
        return self._study[env, arm]


def _settings(flat: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flat.items() if k not in LABEL_KEYS}


def _read(preset: Preset, cells: list[Cell], out: Path, study_seeds: tuple[int, ...]) -> list[_ArmRuns]:
    loader = _Loader(preset, out)
    arms: dict[tuple[str, str], _ArmRuns] = {}
    for cell in cells:
        run_dir = cell.run_dir(out)
        if not (run_dir / "summary.json").is_file():
            continue
        own = preset.arm(cell.method).seeds
        join = preset.joined_source(cell.env, cell.method)
        if join is not None and join.seeds:
            declared = join.seeds  # read from the other study with seeds of its own
        else:
            declared = tuple(s for s in study_seeds if own is None or s in own)
        entry = arms.setdefault(
            (cell.env, cell.method), _ArmRuns(cell.env, cell.method, declared, cell.cycle_end)
        )
        entry.configs[cell.seed], entry.devices[cell.seed] = loader.saved(run_dir / "config.yaml")
    for entry in arms.values():
        entry.study = loader.study(entry.env, entry.arm, min(entry.configs))
    return list(arms.values())


def what_ran_lines(
    preset: Preset, cells: list[Cell], out: Path, study_seeds: tuple[int, ...] | None = None
) -> list[str]:
    """The report's "what ran" paragraph for the finished runs among ``cells`` (run folders under ``out``), or
    ``[]`` when none has finished. ``study_seeds`` are the seeds the study declares (default: ``preset``'s),
    which ``--seeds`` may have narrowed ``preset`` to fewer of."""
    arms = _read(preset, cells, out, preset.seeds if study_seeds is None else study_seeds)
    if not arms:
        return []
    everyone = [entry.label for entry in arms]
    steps: dict[tuple[str, str], str] = {}
    seeds: dict[tuple[str, str], str] = {}
    differ: dict[str, list[tuple[str, str]]] = {}
    among: list[str] = []
    unread: list[str] = []
    unknown_study: list[tuple[str, str]] = []
    for entry in arms:
        found = sorted(entry.configs)
        seeds[entry.label] = _seeds(found) + (
            "" if tuple(found) == entry.declared else f" of the study's {_seeds(entry.declared)}"
        )
        readable = {seed: config for seed, config in entry.configs.items() if config is not None}
        if len(readable) < len(found):
            missing = sorted(set(found) - set(readable))
            unread.append(f"{entry.env}/{entry.arm} {_plural_seeds(missing)}")
        if not readable:
            steps[entry.label] = "unknown"
            continue
        steps[entry.label] = " or ".join(
            dict.fromkeys(_steps(config, entry.cycle_end) for config in readable.values())
        )
        keys = sorted(set().union(*readable.values()))
        varying = [k for k in keys if _varies(k, readable, entry.devices)]
        study = entry.study
        for key in varying:
            by_value: dict[str, list[int]] = {}
            for seed, config in sorted(readable.items()):
                by_value.setdefault(_value(config.get(key)), []).append(seed)
            values = ", ".join(f"{value} ({_plural_seeds(s)})" for value, s in by_value.items())
            told = f"; the study: {_value(study.get(key))}" if study is not None else ""
            among.append(f"{entry.env}/{entry.arm}: `{key}` {values}{told}")
        if study is None:
            unknown_study.append(entry.label)
            continue
        config = next(iter(readable.values()))
        implied = CYCLE_END_KEYS if entry.cycle_end else frozenset()
        for key in sorted(set(keys) | set(study)):
            if key in varying or key in implied or config.get(key) == study.get(key):
                continue
            if _acts_otherwise(key, readable, entry.devices, study):
                text = f"`{key}={_value(config.get(key))}` (the study: {_value(study.get(key))})"
                differ.setdefault(text, []).append(entry.label)
    exact = not differ and not among and not unread and not unknown_study
    exact = exact and all(tuple(sorted(e.configs)) == e.declared for e in arms)
    if exact:
        return [
            "What ran, read from each run's own config.yaml: the study's settings and seeds exactly; RL steps "
            f"per run: {_grouped(steps, everyone)}; seeds {_grouped(seeds, everyone)}."
        ]
    lines = [
        "What ran, read from each run's own config.yaml:",
        "",
        f"- RL steps per run: {_grouped(steps, everyone)}.",
        f"- Seeds: {_grouped(seeds, everyone)}.",
    ]
    lines += [
        f"- Not the study's setting: {text} in {_where(labels, everyone)}." for text, labels in differ.items()
    ]
    if not differ and not among:
        lines.append("- Settings: the study's, in every run read.")
    lines += [f"- Runs that differ among themselves: {text}." for text in among]
    if unread:
        lines.append(f"- No readable config.yaml (settings unknown): {'; '.join(unread)}.")
    if unknown_study:
        lines.append(
            f"- The study's own config does not load for {_where(unknown_study, everyone)}: not compared."
        )
    return lines
