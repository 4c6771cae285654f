"""Host↔device traffic of an env step: one copy in, one copy out, for the whole population.

Per env step of S members the host has, after stepping the envs, the replay rows to store (float32), their
storage slots (int64, from the host-side ring bookkeeping) and the next observations (float32), which the
next step's policy forward reads. :func:`to_device` sends all of them in **one** host-to-device copy (packed
into one pinned byte buffer, views unpacked on the device); the actions come back in one device-to-host copy
(``act(...).cpu()``). No device value is read on the host per step: the clock, the ring positions and the
NaN check of the actions all live on the host. On the CPU there is no copy at all (the tensors share the
numpy arrays' memory), so the CPU path computes exactly what it did before.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

_ALIGN = 8  # bytes: every packed array starts at a multiple of the widest element (int64)
_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.int64): torch.int64}

Layout = list[tuple[int, int, torch.dtype, tuple[int, ...]]]  # (byte offset, bytes, dtype, shape) per array


def pack(arrays: Sequence[np.ndarray], out: np.ndarray | None = None) -> tuple[np.ndarray, Layout]:
    """``arrays`` (float32 / int64) laid end to end, 8-byte aligned, in one uint8 buffer (``out`` when given,
    e.g. a pinned tensor's memory), and where each one is."""
    layout: Layout = []
    offset = 0
    for a in arrays:
        if a.dtype not in _DTYPES:
            raise TypeError(f"pack: float32 or int64 arrays only, got {a.dtype}")
        layout.append((offset, a.nbytes, _DTYPES[a.dtype], tuple(a.shape)))
        offset += -(-a.nbytes // _ALIGN) * _ALIGN
    buffer = np.empty(offset, dtype=np.uint8) if out is None else out[:offset]
    for a, (start, nbytes, _, _) in zip(arrays, layout):
        buffer[start : start + nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    return buffer, layout


def packed_size(arrays: Sequence[np.ndarray]) -> int:
    """Bytes :func:`pack` needs for ``arrays``."""
    return sum(-(-a.nbytes // _ALIGN) * _ALIGN for a in arrays)


def unpack(buffer: torch.Tensor, layout: Layout) -> list[torch.Tensor]:
    """Views of a packed uint8 ``buffer`` (wherever it lives) as the original arrays' dtypes and shapes."""
    return [buffer[start : start + nbytes].view(dtype).view(shape) for start, nbytes, dtype, shape in layout]


def to_device(device: torch.device, arrays: Sequence[np.ndarray]) -> list[torch.Tensor]:
    """``arrays`` as tensors on ``device`` with one host-to-device copy (none on the CPU: shared memory).

    The staging buffer is pinned and the copy asynchronous; torch's caching host allocator does not hand a
    pinned block out again before the copy that reads it has finished, so a fresh buffer per call is safe."""
    if device.type == "cpu":
        return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    staging = torch.empty(packed_size(arrays), dtype=torch.uint8, pin_memory=True)
    _, layout = pack(arrays, out=staging.numpy())
    return unpack(staging.to(device, non_blocking=True), layout)


class StepTransferMixin:
    """The transfers of :meth:`OffPolicyAgent.env_step` (it owns ``buffer``, ``device`` and ``_obs``)."""

    _obs_dev: tuple[np.ndarray, torch.Tensor] | None = None

    def _device_obs(self, obs: np.ndarray) -> torch.Tensor:
        """The policy input ``[S, 1, obs_dim]`` for ``obs`` on the device: the tensor that came with the last
        step's copy; copied here only when ``obs`` did not come from a step (a reset, a resumed run)."""
        cached = self._obs_dev
        if cached is None or cached[0] is not obs or cached[1].device != self.device:
            cached = (obs, torch.as_tensor(obs, device=self.device).unsqueeze(1))
            self._obs_dev = cached
        return cached[1]

    def _store_step(self, members: list[int], rows: list[np.ndarray], next_obs: np.ndarray) -> None:
        """This step's replay rows (row j for member ``members[j]``; maybe none) into the rings and the next
        observations onto the device, in one host-to-device copy."""
        buffer = self.buffer
        if rows:
            index, packed_rows = buffer.plan_rows(np.asarray(members), np.stack(rows))
        else:
            index, packed_rows = np.empty(0, np.int64), np.empty((0, buffer.width), np.float32)
        index_t, rows_t, obs_t = to_device(self.device, [index, packed_rows, next_obs])
        if rows:
            buffer.write_rows(index_t, rows_t)
        self._obs_dev = (next_obs, obs_t.unsqueeze(1))
