"""Named random streams derived from the run seed.

Every consumer of randomness that is not part of RL training itself (data collection, diagnostics,
evaluation resets) draws from its own stream, so that turning a diagnostic on or off, or changing how much
data is collected, never shifts the numbers the training RNGs produce. A stream is named by a string and an
index (e.g. the collection number); :func:`derive_seed` maps ``(run_seed, stream, index)`` to a seed.

The stream name is hashed with SHA-256 (stable across processes and Python versions), never with Python's
``hash()``, which is salted per process for strings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

__all__ = ["derive_seed", "population_seed", "stream_key"]


def stream_key(stream: str) -> list[int]:
    """A stable 128-bit key of a stream name, as four 32-bit words (SHA-256 of its UTF-8 bytes)."""
    digest = hashlib.sha256(stream.encode("utf-8")).digest()
    return [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


def derive_seed(run_seed: int, stream: str, index: int = 0) -> int:
    """The seed of stream ``stream`` (number ``index``) of a run seeded with ``run_seed``.

    Built with :class:`numpy.random.SeedSequence` over ``(run_seed, key(stream), index)``, so distinct run
    seeds, stream names or indices give statistically independent seeds. The result lies in ``[0, 2**32)``:
    valid for ``torch.Generator.manual_seed``, ``numpy.random.default_rng`` and ``gymnasium`` resets.

    Example: ``derive_seed(0, "collect", 2)`` seeds the third data collection of run seed 0.
    """
    if run_seed < 0 or index < 0:
        raise ValueError(f"derive_seed: run_seed and index must be >= 0, got {run_seed} and {index}")
    entropy = [int(run_seed), *stream_key(stream), int(index)]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint32)[0])


def population_seed(seeds: Sequence[int], stream: str) -> int:
    """The seed of a draw shared by a whole population of run seeds (e.g. the update's policy noise).

    For one member it is ``derive_seed(seed, stream)``, so a single run is the population of one; for several
    it depends on every member's seed and on their order (this is what makes such draws depend on the
    population's composition)."""
    if len(seeds) == 1:
        return derive_seed(seeds[0], stream)
    entropy = [*map(int, seeds), *stream_key(stream), len(seeds)]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint32)[0])
