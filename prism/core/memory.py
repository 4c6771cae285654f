"""Handing freed heap memory back to the operating system after a large, short-lived allocation (a reward fit).

glibc's allocator keeps the pages a process freed in its heap for reuse, and once large blocks have been freed it
raises its mmap threshold (up to 32 MiB), so the next large tensors also land in the heap. After a reward fit on
a store of ~10⁶ steps the process then holds its peak (GBs) through the whole RL phase that follows, though the
fit's tensors are gone: two runs side by side on one machine each keep the other's headroom. ``malloc_trim(0)``
returns every whole free page to the system (measured: ``tools/bench_reward_fit.py --memory``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import cache


@cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or ``None`` where the C library is not glibc (macOS, Windows, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_memory() -> bool:
    """Return the heap's free pages to the operating system (glibc ``malloc_trim(0)``); no numbers change.
    ``False`` where there is nothing to call (not glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
