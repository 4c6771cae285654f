"""Ctrl-C during ``trainer.fit``: a ``KeyboardInterrupt`` for the caller, as Python (and the CLI) expect.

Lightning catches ``KeyboardInterrupt`` inside ``Trainer.fit``, runs its ``on_exception`` hooks and teardown,
then calls ``sys.exit(1)``, so a plain caller sees ``SystemExit(1)``, indistinguishable from a crash. The run
is left as it was at its last checkpoint (checkpoints are written atomically; nothing is written on the
way out), so all that is missing is the right signal to the caller. :func:`fit` notes a SIGINT in a flag
(then raises ``KeyboardInterrupt`` exactly as Python's default handler does) and turns Lightning's
``SystemExit`` back into ``KeyboardInterrupt``; ``prism fit`` answers that with ``prism: interrupted`` and
exit code 130 (128 + SIGINT, the shell's convention). This also covers a Ctrl-C during a reward fit, whose
own Trainer exits inside the run's. A SIGTERM, which Lightning turns into a ``SystemExit`` without a code (exit
0, as if the run had succeeded), becomes :class:`~prism.core.errors.Terminated`, a ``KeyboardInterrupt`` that
``prism fit`` answers as a Ctrl-C but with exit code 143.

A ``KeyboardInterrupt`` raised by the handler can be lost: Python runs a signal handler between any two
bytecodes of the main thread, and if those belong to a weakref callback or a ``__del__`` (run by the garbage
collector in the middle of anything), the exception is printed as "Exception ignored in ..." and dropped.
The flag outlives it: a callback checks it at the start of every training batch and raises the interrupt
again there, so a Ctrl-C always stops the fit within one batch (one env step).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from prism.core.errors import Terminated, terminated


class _SigintFlag:
    """Installed as the SIGINT handler while a fit runs: remembers the signal, raises ``KeyboardInterrupt``."""

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.seen = True
        raise KeyboardInterrupt


class _RaiseAfterALostInterrupt(Callback):
    """Raises ``KeyboardInterrupt`` at a batch start once the SIGINT flag is set (see the module docstring)."""

    def __init__(self, flag: _SigintFlag) -> None:
        self.flag = flag

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.flag.seen:
            raise KeyboardInterrupt


def fit(trainer: Any, module: Any, **kwargs: Any) -> None:
    """``trainer.fit(module, **kwargs)``; a Ctrl-C (SIGINT) during it raises ``KeyboardInterrupt`` here."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        trainer.fit(module, **kwargs)
        return
    previous = signal.getsignal(signal.SIGINT)
    # A fit inside a fit (a reward fit inside a run's RL fit) shares the outer flag: the inner Trainer turns the
    # interrupt into SystemExit(1), this function turns that back into KeyboardInterrupt, the outer Trainer
    # makes it SystemExit(1) again, and the outer call must know it was a Ctrl-C too.
    flag = previous if isinstance(previous, _SigintFlag) else _SigintFlag()
    checker = _RaiseAfterALostInterrupt(flag)
    trainer.callbacks.insert(0, checker)  # first at each batch start: nothing of a stopped step runs
    signal.signal(signal.SIGINT, flag)
    try:
        trainer.fit(module, **kwargs)
    except SIGTERMException:
        raise Terminated from None
    except SystemExit as exit_:
        # An outer Trainer turns an inner fit's Terminated (a KeyboardInterrupt) into SystemExit(1) as well,
        # raised while handling it: the SIGTERM is on its context.
        if terminated(exit_):
            raise Terminated from None
        if flag.seen:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        trainer.callbacks.remove(checker)
