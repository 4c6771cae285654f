"""Continuing a run to a larger budget: ``prism fit --resume RUN_DIR loop.cycles=K``.

Only the budget may change on ``--resume``, and only upwards: :data:`BUDGET_KEYS` is ``loop.cycles``. Not
``loop.steps_per_cycle``: the cycles already run had M env steps each, their reward fits and expert
collections happened at multiples of M, and a new M would make the config say something the run did not do.
More cycles is exactly what a longer run would have done next: at the end of cycle C the loop collects
expert episodes, refits and runs RL again, as a run started with K cycles does at that step (its evaluation
and reward-fit seeds are the same, so the continued run's new rows equal the longer run's).

A *finished* run (``summary.json``, or a population's ``summary.csv``) is reopened: its end-of-run outputs
and what was made from its final policy are moved to ``continued/from_<env steps>/`` (``summary.json``,
``front.csv``, ``summary.csv``, ``prism evaluate``'s ``evaluate.csv`` and ``prism render``'s ``render/``, with
copies of ``eval.csv`` and ``config.yaml`` as they were; a population's member files under ``seed<N>/``
there), so nothing at the top level describes an older policy than the run's own,
the final row leaves ``eval.csv`` (the new end gets its own), and the checkpoint's loop is moved from
``done`` back to the next cycle's first phase. ``config.yaml`` then records the new budget. Any other change
is refused in one line before anything is written.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from prism.config import ConfigError, RunConfig, load_config, load_run_config, same_run
from prism.config.agent_keys import warn_once, warnings_held
from prism.run.layout import run_config_file
from prism.run.overwrite import check_no_split_contents

BUDGET_KEYS = ("loop.cycles",)
"""The keys ``--resume`` lets grow (see the module docstring for why ``loop.steps_per_cycle`` is not one)."""

CONTINUED_DIR = "continued"
_MOVED = ("summary.json", "front.csv", "summary.csv", "evaluate.csv", "render")
"""Moved aside: the end-of-run outputs, and the evaluations and renders made from the old end's policy."""
_COPIED = ("eval.csv", "config.yaml")


@dataclasses.dataclass(frozen=True)
class ResumeRequest:
    """What ``prism fit --resume RUN_DIR [--config …] [overrides]`` asks, checked against the run folder."""

    config_path: Path
    """``RUN_DIR/config.yaml``."""
    saved: RunConfig
    """The run's own config (``RUN_DIR/config.yaml``)."""
    cycles: int | None
    """The ``loop.cycles`` to continue to; ``None``: resume as saved."""
    given: str
    """Said when --config/overrides were given and change nothing (they match the saved config)."""


def resume_request(run_dir: Path, files: list[str], overrides: list[str]) -> ResumeRequest:
    """Check a ``--resume`` request before anything heavy is imported or anything is written: the folder has a
    ``config.yaml``, and the given config files and overrides (if any) are that config or it with more
    cycles (:func:`budget_growth`); otherwise a one-line :class:`ConfigError`."""
    check_no_split_contents(run_dir, key="--resume")  # before "no config.yaml": it may be in the other half
    config_path = run_config_file(run_dir, key="--resume")
    # Loading warns about what a config would run (SymReg off on an env without a symmetry table, …): said
    # only once the request is accepted, never before the line that refuses it.
    with warnings_held() as held:
        saved = load_run_config(config_path)
        cycles, given = None, ""
        if files or overrides:
            requested = load_config(files, overrides) if files else load_run_config(config_path, overrides)
            cycles = budget_growth(saved, requested, config_path)
            if cycles is None:
                # Said, not silently dropped: the arguments were checked against the run and change nothing.
                given = f" (the --config/overrides given match {config_path}; --resume always uses that file)"
    for message in held:
        warn_once(message)
    return ResumeRequest(config_path, saved, cycles, given)


def budget_growth(saved: RunConfig, requested: RunConfig, config_path: Path) -> int | None:
    """The new ``loop.cycles`` when ``requested`` is ``saved`` with more cycles; ``None`` when the two are the
    same run. Any other difference, or fewer cycles, is a one-line :class:`ConfigError`."""
    if same_run(requested, saved):
        return None
    as_saved = dataclasses.replace(
        requested, loop=dataclasses.replace(requested.loop, cycles=saved.loop.cycles)
    )
    if not same_run(as_saved, saved):
        changed = differing_keys(saved, as_saved)
        shown = ", ".join(
            f"{key} ({_short(old)} in the run, {_short(new)} given)" for key, old, new in changed[:3]
        ) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        verb = "differ" if len(changed) > 1 else "differs"
        raise ConfigError(
            f"--resume: {shown or 'the given config'} {verb} from {config_path}; resume takes the run's saved "
            f"config and only {', '.join(BUDGET_KEYS)} may grow (drop --config/overrides or start a new run_dir)"
        )
    if requested.loop.cycles < saved.loop.cycles:
        raise ConfigError(
            f"loop.cycles: --resume can only add cycles; the run has {saved.loop.cycles}, "
            f"{requested.loop.cycles} asked"
        )
    return requested.loop.cycles


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: data}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def differing_keys(saved: RunConfig, requested: RunConfig) -> list[tuple[str, Any, Any]]:
    """``(dotted key, saved value, requested value)`` for every key where two configs differ, in config order
    (as their config.yaml would say: a population's unused ``seed`` is left out, see :func:`same_run`)."""
    import yaml

    from prism.config import to_yaml

    a, b = (_flat(yaml.safe_load(to_yaml(c))) for c in (saved, requested))
    return [(key, a.get(key), b.get(key)) for key in dict.fromkeys([*a, *b]) if a.get(key) != b.get(key)]


def archive_final_outputs(run_dir: Path, member_dirs: list[Path], env_steps: int) -> Path:
    """Move a finished run's end-of-run outputs, ``evaluate.csv`` and ``render/`` (and copy its ``eval.csv`` /
    ``config.yaml``) to ``continued/from_<env_steps>/`` (``.1``, ``.2``… if taken); returns that folder."""
    # One form for every path: `--resume runs/x` of a run whose config.yaml says /abs/runs/x names one folder
    # twice, and a relative path is not "inside" an absolute one.
    run_dir, member_dirs = run_dir.resolve(), [folder.resolve() for folder in member_dirs]
    target = run_dir / CONTINUED_DIR / f"from_{env_steps}"
    n = 0
    while target.exists():
        n += 1
        target = run_dir / CONTINUED_DIR / f"from_{env_steps}.{n}"
    for folder in dict.fromkeys([run_dir, *member_dirs]):
        dest = target / folder.relative_to(run_dir)
        dest.mkdir(parents=True, exist_ok=True)
        for name in _COPIED:
            if (folder / name).is_file():
                shutil.copy2(folder / name, dest / name)
        for name in _MOVED:
            if (folder / name).is_file() or (folder / name).is_dir():  # render/ is a folder
                (folder / name).replace(dest / name)
    return target


def reopen_state(state: dict[str, Any], needs_model: bool) -> None:
    """A checkpoint taken at the end of a run, made to continue: a loop at ``done`` goes to the next cycle's
    first phase (expert collection, or RL without a reward model) and the final evaluation is due again."""
    loop = state["loop"]["state"]
    if loop["phase"] == "done":
        loop["phase"] = "collect_expert" if needs_model else "rl"
    for evaluation in state["evaluations"]:
        evaluation["final_done"] = False


def with_cycles(config: RunConfig, cycles: int) -> RunConfig:
    """``config`` with ``loop.cycles = cycles``."""
    return dataclasses.replace(config, loop=dataclasses.replace(config.loop, cycles=cycles))
