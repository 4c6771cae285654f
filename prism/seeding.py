"""Named random streams derived from a run seed.

Every consumer of randomness in a run (env resets, release draws, preference draws, replay indices, data
collection, diagnostics, evaluation resets) draws from its own stream, so adding or removing one consumer
(e.g. switching figures off, or collecting more episodes) never shifts the draws of another.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np


def _stream_key(stream: str) -> int:
    # crc32 is stable across processes and Python versions (unlike hash(), which is salted per process).
    return zlib.crc32(stream.encode("utf-8"))


def derive_seed(run_seed: int, stream: str, index: int = 0) -> int:
    """A 32-bit seed for ``stream`` (and its ``index``-th instance) of the run seeded ``run_seed``."""
    sequence = np.random.SeedSequence([int(run_seed), _stream_key(stream), int(index)])
    return int(sequence.generate_state(1, dtype=np.uint32)[0])


def population_seed(seeds: Sequence[int], stream: str) -> int:
    """A seed for a draw shared by a whole population (e.g. the update's policy noise); for one member it is
    ``derive_seed(seed, stream)``."""
    if len(seeds) == 1:
        return derive_seed(seeds[0], stream)
    sequence = np.random.SeedSequence([*map(int, seeds), _stream_key(stream), len(seeds)])
    return int(sequence.generate_state(1, dtype=np.uint32)[0])
