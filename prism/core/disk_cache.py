"""An on-disk cache for deterministic arrays that take seconds to compute and are needed by every process.

Evaluation weight sets (pymoo's Riesz-energy directions, seconds of optimisation for 100 weights) are the same
for every run with the same number of objectives, yet each ``prism fit`` / ``prism evaluate`` process used to
compute them anew. They are kept as ``.npy`` files under:

- ``$PRISM_CACHE_DIR`` when set (``PRISM_CACHE_DIR=off`` turns the cache off);
- else ``$XDG_CACHE_HOME/prism``, else ``~/.cache/prism``.

A file is written whole (to a temporary name, then renamed), so processes that fill the same entry at once
never read half of one; an entry that does not load or fails the caller's check is computed again and
replaced; a folder that cannot be written only costs the computation. ``np.save`` / ``np.load`` round-trip
float64 exactly, so a cached array is bit for bit the computed one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ENV_VAR = "PRISM_CACHE_DIR"


def cache_dir() -> Path | None:
    """Where cached arrays live (``None``: the cache is off)."""
    configured = os.environ.get(ENV_VAR)
    if configured is not None:
        return None if configured.strip().lower() in ("", "off") else Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no home folder to be found: no cache
            return None
    return Path(base) / "prism"


def cached_array(
    name: str, compute: Callable[[], np.ndarray], valid: Callable[[np.ndarray], bool]
) -> np.ndarray:
    """The array stored as ``name`` (a file name without folders) if it loads and ``valid`` accepts it; else
    ``compute()``, stored for the next process when the cache folder can be written."""
    folder = cache_dir()
    path = folder / f"{name}.npy" if folder is not None else None
    if path is not None:
        try:
            stored = np.load(path, allow_pickle=False)
        except (OSError, ValueError):  # missing, unreadable, or not an .npy file
            stored = None
        if stored is not None and valid(stored):
            return stored
    array = compute()
    if path is not None:
        _store(path, array)
    return array


def _store(path: Path, array: np.ndarray) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".npy")
        try:
            with os.fdopen(handle, "wb") as out:
                np.save(out, array, allow_pickle=False)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError:  # a read-only or full disk: the computed array is still returned
        pass
