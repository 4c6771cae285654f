"""Ctrl-C during ``trainer.fit``: a ``KeyboardInterrupt`` for the caller, as Python (and the CLI) expect.

Lightning catches ``KeyboardInterrupt`` inside ``Trainer.fit``, runs its ``on_exception`` hooks and teardown,
then calls ``sys.exit(1)``, so a plain caller sees ``SystemExit(1)``, indistinguishable from a crash. The run
is left as it was at its last checkpoint (checkpoints are written atomically; nothing is written on the
way out), so all that is missing is the right signal to the caller. :func:`fit` notes a SIGINT in a flag
(then raises ``KeyboardInterrupt`` exactly as Python's default handler does) and turns Lightning's
``SystemExit`` back into ``KeyboardInterrupt``; ``prism fit`` answers that with ``prism: interrupted`` and
exit code 130 (128 + SIGINT, the shell's convention). This also covers a Ctrl-C during a reward fit, whose
own Trainer exits inside the run's.
"""

from __future__ import annotations

import signal
import threading
from typing import Any


class _SigintFlag:
    """Installed as the SIGINT handler while a fit runs: remembers the signal, raises ``KeyboardInterrupt``."""

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.seen = True
        raise KeyboardInterrupt


def fit(trainer: Any, module: Any, **kwargs: Any) -> None:
    """``trainer.fit(module, **kwargs)``; a Ctrl-C (SIGINT) during it raises ``KeyboardInterrupt`` here."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        trainer.fit(module, **kwargs)
        return
    flag = _SigintFlag()
    previous = signal.signal(signal.SIGINT, flag)
    try:
        trainer.fit(module, **kwargs)
    except SystemExit:
        if flag.seen:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
