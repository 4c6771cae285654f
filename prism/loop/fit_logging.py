"""Where a reward fit's per-epoch curves go: ``tb/reward_fit/cycle<c>/version_<n>`` of the member's folder,
``c`` counted from 1 as everywhere a user reads a cycle (progress lines, ``summary.json``, reports).

Each fit has a TensorBoard run of its own (its scalars are against the epoch, the main run's against env
steps). A fit resumed from a snapshot (``loop.fit_checkpoint_every_s``) logs on into the run it was in,
with ``purge_step`` set to the first epoch after the snapshot, so the curves of a fit stopped and resumed
read as one run: what the stopped process logged after the snapshot is hidden by TensorBoard, and the
resumed process logs those epochs again (the same numbers, as the fit goes on bit for bit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prism.loop.checkpoint_io import torch_load_bytes


def fit_tensorboard_logger(member_dir: Path, cycle: int, progress: dict[str, Any] | None):
    """The TensorBoard logger of the fit of (0-based, the loop's own count) cycle ``cycle``, in the folder
    ``cycle<cycle + 1>``; ``progress``: the member's fit progress from the run's checkpoint (a ``snapshot`` and
    the ``tb_version`` it was logging to) or ``None`` for a fresh fit, which gets the next free version."""
    from lightning.pytorch.loggers import TensorBoardLogger

    resumed: dict[str, Any] = {}
    if progress and "snapshot" in progress and progress.get("tb_version") is not None:
        epoch = int(torch_load_bytes(progress["snapshot"])["epoch"])  # the epoch whose end it was taken at
        resumed = {"version": int(progress["tb_version"]), "purge_step": epoch + 1}
    return TensorBoardLogger(
        str(Path(member_dir) / "tb" / "reward_fit"),
        name=f"cycle{cycle + 1}",
        default_hp_metric=False,
        **resumed,
    )
