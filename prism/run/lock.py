"""One writer per run folder: ``prism fit`` and ``prism fit --resume`` hold an exclusive lock on the run folder
while they write it, so a second process on the same folder (a grid started twice, a resume typed while the
run is still going, ``--overwrite`` aimed at a live run) is refused in one line instead of interleaving two
runs' checkpoints and eval.csv rows, or deleting a live run's files.

The lock is ``flock`` on the folder itself: no lock file is left behind, and the kernel drops the lock when
the process ends, however it ends (SIGKILL included), so a killed run never leaves a stale lock. Forked
evaluation workers inherit the descriptor; each closes its copy at once (:func:`os.register_at_fork`), so a
worker that outlives a killed parent for a moment cannot keep the folder locked. Where ``fcntl`` is missing
(Windows) the lock is a no-op.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from prism.core.errors import ConfigError

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are not protected from a second writer there
    fcntl = None

_held: set[int] = set()
"""Descriptors of the run folders this process has locked (closed in forked children)."""


def _close_in_child() -> None:
    for fd in list(_held):
        with suppress(OSError):
            os.close(fd)
    _held.clear()


if fcntl is not None:
    os.register_at_fork(after_in_child=_close_in_child)


@contextmanager
def run_dir_lock(run_dir: Path, *, key: str) -> Iterator[None]:
    """Hold the exclusive lock on ``run_dir`` (an existing folder) for the block; refuse in one
    :class:`ConfigError` naming ``key`` when another process holds it."""
    if fcntl is None:
        yield
        return
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(
            f"{key}: {str(run_dir)!r} is being written by another prism process; wait for it to end (or stop "
            "it), or choose another run_dir"
        ) from None
    _held.add(fd)
    try:
        yield
    finally:
        _held.discard(fd)
        os.close(fd)  # closing the last descriptor of the open folder releases the lock


def locked_elsewhere(run_dir: Path) -> bool:
    """Whether another prism process holds ``run_dir``'s lock now (a grid driver's check before it starts a
    run: a run being written elsewhere is skipped, not failed). False for a missing folder, and where
    ``fcntl`` is missing. The answer can age at once; the run's own lock stays the guarantee."""
    if fcntl is None or not run_dir.is_dir():
        return False
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the probe's lock, if it got one
    return False
