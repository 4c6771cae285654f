"""``eval.csv``: the row of one evaluation, appending rows, and dropping rows newer than a checkpoint.

Lines end with ``\n`` (the csv module's default is ``\r\n``). A row has no wall time: the same config and seed must give a byte-identical file (the time goes to
TensorBoard as ``time/eval_s``).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prism.evaluation.result import EvalResult

__all__ = ["append_csv", "eval_row", "truncate_eval_csv"]


def eval_row(
    result: EvalResult,
    objective_names: Sequence[str],
    env_steps: int,
    final: bool | None = None,
    cycle_end: bool | None = None,
) -> dict[str, float | int | str]:
    """A flat record for ``eval.csv``: ``env_steps, hv, eum, vo, cardinality``, then per-objective mean
    returns over all policies (discounted, then undiscounted), the mean episode length, the equivariance
    error (empty when not measured), on an env with ``EnvSpec.pitch_obs`` the ``flipped_fraction`` of its episodes,
    and, when ``final`` is given, a ``final`` column (1 on the end-of-run
    evaluation, 0 on periodic ones), and when ``cycle_end`` is given (runs with ``eval.final.each_cycle``) a
    ``cycle_end`` column (1 on the final-protocol evaluation at the end of a cycle but the last, 0 elsewhere)."""
    record: dict[str, float | int | str] = {
        "env_steps": int(env_steps),
        "hv": result.hv,
        "eum": result.eum,
        "vo": result.vo,
        "cardinality": result.cardinality,
    }
    for i, name in enumerate(objective_names):
        record[f"return_{name}"] = float(result.mean[:, i].mean())
    for i, name in enumerate(objective_names):
        record[f"undiscounted_return_{name}"] = float(result.undiscounted_mean[:, i].mean())
    record["mean_episode_length"] = float(result.lengths.mean())
    record["equivariance_error"] = "" if result.equivariance_error is None else result.equivariance_error
    if result.flipped_fraction is not None:  # (an env with EnvSpec.pitch_obs: halfcheetah)
        record["flipped_fraction"] = result.flipped_fraction
    if final is not None:
        record["final"] = int(final)
    if cycle_end is not None:
        record["cycle_end"] = int(cycle_end)
    return record


def append_csv(path: Path, record: dict[str, Any], *, extend_header: bool = False) -> None:
    """Append ``record`` to a CSV file, writing the header if the file is new. The existing header wins
    (keys it lacks are dropped), unless ``extend_header``: then a file whose header lacks some of the keys
    is rewritten with them appended (its older rows get empty cells)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = list(record)
    exists = path.is_file() and path.stat().st_size > 0
    if exists:
        with path.open(newline="") as fh:
            old_header = next(csv.reader(fh), header)
        header = old_header
        missing = [key for key in record if key not in old_header]
        if extend_header and missing:
            with path.open(newline="") as fh:
                rows = list(csv.DictReader(fh))
            header = [*old_header, *missing]
            tmp = path.with_suffix(".tmp")
            with tmp.open("w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=header, restval="", lineterminator="\n")
                writer.writeheader()
                writer.writerows(rows)
            os.replace(tmp, path)
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=header, restval="", extrasaction="ignore", lineterminator="\n")
        if not exists:
            writer.writeheader()
        writer.writerow(record)


def truncate_eval_csv(path: Path, last_step: int, keep_final: bool = False) -> None:
    """Drop rows evaluated after ``last_step`` (a resumed run recomputes them identically), and the final
    row unless ``keep_final`` (the checkpoint says the final evaluation was already recorded)."""
    if not path.is_file():
        return
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return
    header, body = rows[0], rows[1:]
    column = header.index("env_steps")
    final = header.index("final") if "final" in header else None
    kept = [
        row
        for row in body
        if int(row[column]) <= last_step and (keep_final or final is None or row[final] != "1")
    ]
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(kept)
    os.replace(tmp, path)
