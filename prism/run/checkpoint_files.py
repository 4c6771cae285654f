"""Checkpoint files on disk: where they live, writing them atomically, and reading them back with a fallback.

A run keeps ``checkpoints/last.pt`` and the one before it, ``checkpoints/previous.pt``: a save writes
``last.tmp``, makes ``previous.pt`` a second name (hard link) of the current ``last.pt``, then renames
``last.tmp`` over ``last.pt``. Each step is atomic and ``last.pt`` is never absent, so a kill or a Ctrl-C at
any point leaves a complete ``last.pt`` (the old or the new one). Where the file system has no hard links,
``last.pt`` is renamed to ``previous.pt`` instead, and a kill between the two renames leaves only
``previous.pt``, which the loader then takes as the newest. A checkpoint holds only tensors and plain Python
containers, so it loads with ``torch.load(weights_only=True)``.

A checkpoint that does not load (truncated, garbage, wrong format, missing keys, non-finite weights) is
reported in one warning line and the previous one is used; ``--resume`` renames the damaged file to
``*.damaged`` (:func:`set_aside`: nothing is deleted, and the next save cannot rotate it over the good one).
With no loadable checkpoint left, a :class:`~prism.config.ConfigError` names the file.

This module knows files, not runs: what goes into a checkpoint is :mod:`prism.run.checkpoint`, resuming is
:func:`prism.run.fit.resume_run`.
"""

from __future__ import annotations

import os
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from prism.agents.config import OffPolicyConfig
from prism.config import ConfigError
from prism.run.layout import CHECKPOINT_DIR

LAST = "last.pt"
PREVIOUS = "previous.pt"
DAMAGED_SUFFIX = ".damaged"
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


def torch_load(path: Path) -> dict:
    """Checkpoints hold tensors and plain containers only: load them without unpickling arbitrary objects."""
    return torch.load(path, map_location="cpu", weights_only=True)


def save_atomic(payload: dict[str, Any], path: Path, previous: Path | None = None) -> None:
    """Write ``payload`` to ``path`` through a temporary file; with ``previous``, keep the old ``path`` there.

    Every step is atomic on POSIX and ``path`` is always a complete checkpoint: a kill while writing keeps
    ``path`` (and ``previous``) as they were; the old ``path`` becomes ``previous`` through a hard link
    (``previous`` is replaced whole, never half-written), then the new file is renamed over ``path``. On a file
    system without hard links the old ``path`` is renamed to ``previous``, and a kill between that rename and
    the next leaves no ``path`` (the loader then takes ``previous``).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    if previous is not None and path.is_file():
        link = previous.with_name(previous.name + ".link")
        try:
            link.unlink(missing_ok=True)  # left by a save killed between its link and its rename
            os.link(path, link)
        except OSError:  # no hard links here (some network and FUSE file systems): rename instead
            os.replace(path, previous)
        else:
            os.replace(link, previous)
            # (a no-op when both already name one file, after a save killed just before its last rename)
            link.unlink(missing_ok=True)
    os.replace(tmp, path)


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


def set_aside(path: Path) -> Path:
    """Rename a damaged checkpoint to ``<name>.damaged`` (``.damaged.1``, ... if taken): never delete it."""
    target = path.with_name(path.name + DAMAGED_SUFFIX)
    n = 0
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}{DAMAGED_SUFFIX}.{n}")
    os.replace(path, target)
    return target


def load_agent_weights(run) -> int:
    """Load the agent's weights from the run's last good checkpoint (for ``prism evaluate``); returns env
    steps. Read-only: a damaged ``last.pt`` is reported and skipped, not renamed."""
    loaded = load_checkpoint(
        run.run_dir, key="RUN_DIR", check=lambda state: run.agent.load_state_dict(state["agent"])
    )
    if loaded is None:
        raise ConfigError(f"RUN_DIR: no checkpoint at {checkpoint_path(run.run_dir)}")
    return int(loaded.state["env_steps"])


def is_untrained(agent_config: OffPolicyConfig, env_steps: int) -> bool:
    """Whether a checkpoint at ``env_steps`` predates the first policy update (the agent updates from its
    ``learning_starts``-th env step on)."""
    return env_steps < max(int(agent_config.learning_starts), 1)


def resume_line(run_dir: Path, loop_config: Any, loaded: LoadedCheckpoint | None) -> str:
    """Where ``--resume`` starts (``loop_config``: the run's ``loop.*``): the checkpoint file, its env steps,
    and the loop's phase and cycle there."""
    if loaded is None:
        return f"prism: resuming {run_dir} from the start (no checkpoint was saved)"
    steps, loop = int(loaded.state["env_steps"]), loaded.state["loop"]["state"]
    total = loop_config.cycles * loop_config.steps_per_cycle
    where = f"phase {loop['phase']}, cycle {int(loop['cycle']) + 1}/{loop_config.cycles}"
    progress = loaded.state["loop"].get("fit_progress") or []
    for member, entry in enumerate(progress):
        if entry is not None and "snapshot" in entry:  # a checkpoint taken inside a reward fit
            snapshot = torch_load_bytes(entry["snapshot"].numpy().tobytes())
            if entry.get("stacked"):  # the population's one stacked fit (prism.loop.fit_phase)
                what = "the stacked reward fit of every member"
            else:
                what = "the reward fit" + (f" of member {member}" if len(progress) > 1 else "")
            where += f"; {what} goes on after epoch {int(snapshot['epoch']) + 1}"
    return f"prism: resuming {run_dir} from {loaded.path} at {steps}/{total} env steps ({where})"


def torch_load_bytes(data: bytes) -> Any:
    """A ``torch.save`` payload held in memory (a reward fit's snapshot), loaded."""
    import io

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
