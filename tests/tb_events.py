"""A TensorBoard run's scalars as TensorBoard shows them (purged events hidden), for tests to compare."""

from __future__ import annotations

from pathlib import Path

FIT_TIMING = frozenset({"reward_fit/fit_time_s", "reward_fit/seconds_per_epoch"})
"""A reward fit's wall-second scalars: they differ from run to run, unlike every other scalar of the fit."""


def scalar_curves(folder: Path, skip: frozenset[str] = frozenset()) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of the TensorBoard run in ``folder`` but those in ``skip``, as ``(step, value)`` pairs
    in the order TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
        if tag not in skip
    }
