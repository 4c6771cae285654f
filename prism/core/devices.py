"""The run's ``device`` key on this machine: checked, resolved to a torch device and to Lightning's accelerator;
and the ``deterministic`` key's torch flags."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from prism.core.errors import ConfigError

if TYPE_CHECKING:
    import torch


def check_cuda_device(device: str) -> None:
    """``device: cuda`` (or ``cuda:N``) must name a GPU torch can use on this machine."""
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            f"device: {device!r} requested but CUDA is not available on this machine "
            f"(torch {torch.__version__}); use device=cpu or device=auto"
        )
    if ":" in device:
        index = device.split(":", 1)[1]
        count = torch.cuda.device_count()
        if not index.isdigit() or int(index) >= count:
            raise ConfigError(f"device: {device!r} is not one of this machine's {count} CUDA device(s)")


def torch_device(device: str) -> torch.device:
    """The torch device the run's ``device`` resolves to on this machine (``auto``: CUDA when available)."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def accelerator(device: str) -> str:
    """The Lightning ``Trainer(accelerator=...)`` value of the run's ``device``."""
    return "gpu" if torch_device(device).type == "cuda" else "cpu"


CUBLAS_DETERMINISTIC_WORKSPACE = ":4096:8"
"""The cuBLAS workspace setting NVIDIA documents as reproducible (one buffer per stream, no split reductions
across a varying number of buffers); torch refuses CUDA matmuls in deterministic mode without it."""


def make_deterministic() -> None:
    """The ``deterministic: true`` flags, process-wide: torch's deterministic algorithms (an op with only a
    non-deterministic CUDA kernel then raises instead of drifting), cuBLAS's fixed workspace and no cuDNN
    autotuning. Must run before this process's first cuBLAS call for the workspace setting to take effect."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
