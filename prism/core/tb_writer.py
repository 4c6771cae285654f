"""The TensorBoard writer behind a Lightning logger, where there is one (figures and HParams summaries)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning.pytorch.loggers import Logger, TensorBoardLogger

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


def tensorboard_writer(logger: Logger | None) -> SummaryWriter | None:
    """``logger``'s ``SummaryWriter`` when it is a TensorBoard logger, else None (a CSV or plug-in logger
    gets the scalars only)."""
    return logger.experiment if isinstance(logger, TensorBoardLogger) else None
