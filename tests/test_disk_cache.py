"""The on-disk cache of evaluation weight sets (prism.core.disk_cache): a cached set is bit for bit pymoo's, a
damaged entry is computed again, and a cache that cannot be written or is turned off costs only the time."""

from __future__ import annotations

import numpy as np
import pytest
from pymoo.util import ref_dirs

from prism.metrics import functional as F


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("PRISM_CACHE_DIR", str(folder))
    F._energy_directions.cache_clear()
    yield folder
    F._energy_directions.cache_clear()


def _pymoo(n_objectives: int, n: int) -> np.ndarray:
    return np.asarray(ref_dirs.get_reference_directions("energy", n_objectives, n, seed=42), dtype=np.float64)


def _forbid_pymoo(monkeypatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError("pymoo was asked although the cache holds the weights")

    monkeypatch.setattr(ref_dirs, "get_reference_directions", fail)


def test_a_second_process_reads_the_weights_bit_for_bit_without_pymoo(cache, monkeypatch):
    first = F.equally_spaced_weights(3, 12)
    assert first.tobytes() == _pymoo(3, 12).tobytes()
    (entry,) = cache.glob("energy-weights-L3-n12-seed42-pymoo*.npy")
    F._energy_directions.cache_clear()  # as a new process starts
    _forbid_pymoo(monkeypatch)
    again = F.equally_spaced_weights(3, 12)
    assert again.tobytes() == first.tobytes() and again.dtype == np.float64
    assert list(cache.iterdir()) == [entry]  # no temporary file left beside it


@pytest.mark.parametrize(
    "damage",
    [b"not an npy file", None],  # garbage bytes; a well-formed array of the wrong shape
    ids=["garbage", "wrong-shape"],
)
def test_a_damaged_entry_is_computed_again_and_replaced(damage, cache):
    F.equally_spaced_weights(2, 9)
    (entry,) = cache.glob("energy-weights-L2-n9-*.npy")
    if damage is None:
        np.save(entry, np.full((8, 2), 0.5))
    else:
        entry.write_bytes(damage)
    F._energy_directions.cache_clear()
    assert F.equally_spaced_weights(2, 9).tobytes() == _pymoo(2, 9).tobytes()
    assert np.load(entry).tobytes() == _pymoo(2, 9).tobytes()


def test_an_unwritable_or_switched_off_cache_still_gives_the_weights(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for setting in (str(blocker / "cache"), "off"):
        monkeypatch.setenv("PRISM_CACHE_DIR", setting)
        F._energy_directions.cache_clear()
        assert F.equally_spaced_weights(2, 7).tobytes() == _pymoo(2, 7).tobytes()
    F._energy_directions.cache_clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # nothing written anywhere
