"""prism.core.memory: freed heap pages go back to the system, and a run does it after every reward fit."""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from toy_runs import toy_run

from prism.core.memory import release_freed_memory
from prism.loop import phases
from prism.run.fit import fit_run

QUICKSTART = str(Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml")
MiB = 1 << 20


def _rss_bytes() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim is Linux's")
def test_freed_heap_blocks_are_given_back_only_by_the_release():
    # 256 MiB in 64 KiB blocks (below glibc's mmap threshold, so in the heap), then one block after them that
    # stays in use: it holds the heap's top, so free() alone cannot shrink the heap below it.
    blocks = [np.ones(64 * 1024 // 8) for _ in range(4096)]
    pin = np.ones(64 * 1024 // 8)
    held = _rss_bytes()
    del blocks
    gc.collect()
    kept = _rss_bytes()
    assert held - kept < 64 * MiB  # free() kept the pages
    assert release_freed_memory()
    released = kept - _rss_bytes()
    assert released > 128 * MiB, f"only {released / MiB:.0f} MiB given back"
    assert pin.sum() == 64 * 1024 // 8


def test_a_run_releases_freed_memory_after_every_reward_fit(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(phases, "release_freed_memory", lambda: calls.append(1) or True)
    fit_run(
        [QUICKSTART],
        [*toy_run({"eval.num_workers": 0, "reward.max_epochs": 1}), "figures=false", f"run_dir={tmp_path}"],
        progress="none",
    )
    fits = json.loads((tmp_path / "summary.json").read_text())["reward_fits"]
    assert len(fits) == 2 and len(calls) == len(fits)
