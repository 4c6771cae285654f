"""A resumed run's main TensorBoard run reads as one run: what the checkpoint had seen stays, the rest is redone.

TensorBoard can only hide events by step: a resumed process's event file starts with ``SessionLog.START`` at
its purge step ``P``, and TensorBoard drops every event of the earlier files with a step ``>= P``. Neither
choice of ``P`` is right for a run resumed from a checkpoint taken at env step ``S``:

- ``P = S`` hides the points logged at ``S`` before the checkpoint was saved (the evaluation and refit at a
  cycle's end precede the saves at that step), and the resumed process does not log them again;
- ``P = S + 1`` keeps the points logged at ``S`` after the checkpoint (a refit checkpointed at its start and
  stopped after it logged), which the resumed process logs again: they would show twice.

So a checkpoint also records where its member's event file stood when it was saved
(:func:`event_file_position`, after a flush), the resumed writer purges from ``S``, and
:func:`carry_events_at_step` copies the events at step ``S`` that lie before that position into the new file,
after its ``START``. Every point at ``S`` the checkpoint had seen is shown once, and whatever the stopped
process logged after the checkpoint, at ``S`` or later, is hidden and logged again. The copied events keep their
step and wall time, so a later resume from a checkpoint at the same step finds them in the newer file.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prism.core.tb_writer import tensorboard_writer

_LENGTH = struct.Struct("<Q")
_HEADER_BYTES = _LENGTH.size + 4  # a record: length, its CRC, the data, the data's CRC
_FOOTER_BYTES = 4


def event_file_position(logger: Any) -> dict[str, Any] | None:
    """The event file ``logger``'s TensorBoard writer is writing and its size once flushed, for a checkpoint
    (``None``: the logger has no TensorBoard writer)."""
    writer = tensorboard_writer(logger)
    if writer is None:
        return None
    file_writer = writer.file_writer  # None once the writer is closed: nothing more is logged to it
    name = getattr(getattr(file_writer, "event_writer", None), "_file_name", None)
    if name is None:
        return None
    file_writer.flush()  # the events logged so far, all on disk: the file's size is where the checkpoint stands
    path = Path(name)
    try:
        size = path.stat().st_size
    except OSError:  # the file was removed under the run: a resume then carries nothing, the run goes on
        return None
    return {"file": path.name, "bytes": size}


def _records(data: bytes) -> Iterator[bytes]:
    position = 0
    while position + _HEADER_BYTES <= len(data):
        (length,) = _LENGTH.unpack_from(data, position)
        start = position + _HEADER_BYTES
        end = start + length
        if end + _FOOTER_BYTES > len(data):
            return
        yield data[start:end]
        position = end + _FOOTER_BYTES


def carry_events_at_step(logger: Any, position: dict[str, Any] | None, step: int) -> int:
    """Copy into ``logger``'s new event file the summaries at ``step`` that the file named by ``position`` (from
    :func:`event_file_position`, in the same folder) held when the checkpoint was saved; returns how many.

    The writer must have been made with ``purge_step=step``: its ``START`` comes first, then these copies."""
    writer = tensorboard_writer(logger)
    if writer is None or position is None:
        return 0
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2

    source = Path(writer.get_logdir()) / str(position["file"])
    if not source.is_file():
        return 0
    with source.open("rb") as stream:
        data = stream.read(int(position["bytes"]))
    file_writer = writer._get_file_writer()  # writes the START event first if it is not written yet
    carried = 0
    for record in _records(data):
        try:
            event = event_pb2.Event.FromString(record)
        except DecodeError:  # a damaged file: carry what came before, never stop the resume over a display
            break
        if event.step == step and event.HasField("summary"):
            file_writer.add_event(event, step=event.step, walltime=event.wall_time)
            carried += 1
    writer.flush()
    return carried
