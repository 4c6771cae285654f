"""Ctrl-C during ``trainer.fit`` (``prism.core.interrupt``): the interrupt is never lost, and a SIGTERM is no
clean exit.

CI stop 58 saw ``prism fit`` run to its end and exit 0 after a SIGINT: the handler's ``KeyboardInterrupt`` was
raised inside a weakref callback (run by the garbage collector), where Python prints "Exception ignored" and
drops it. These tests raise SIGINT exactly there, deterministically, on a plain Lightning Trainer."""

from __future__ import annotations

import signal
import weakref
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from prism.core import interrupt
from prism.core.errors import Terminated


class _Box:
    pass


class _SigintAtStep(pl.LightningModule):
    """A linear fit whose training step ``at`` raises SIGINT, either plainly or inside a weakref callback."""

    def __init__(self, at: int, in_weakref_callback: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.at, self.in_weakref_callback = at, in_weakref_callback
        self.steps_run = 0

    def training_step(self, batch, batch_idx):
        self.steps_run += 1
        if self.global_step == self.at:
            if self.in_weakref_callback:
                box = _Box()
                # signal.raise_signal runs the Python handler before it returns, i.e. inside the callback
                weakref.finalize(box, signal.raise_signal, signal.SIGINT)
                del box  # the finalizer runs here; its KeyboardInterrupt is printed and dropped
            else:
                signal.raise_signal(signal.SIGINT)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        x = torch.linspace(0, 1, 64).unsqueeze(1)
        return DataLoader(TensorDataset(x, 2 * x), batch_size=1)


def _trainer() -> pl.Trainer:
    return pl.Trainer(
        max_steps=40,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )


@pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning"
)  # the dropped raise, on purpose
@pytest.mark.parametrize("in_weakref_callback", [False, True], ids=["plain", "inside-a-weakref-callback"])
def test_a_sigint_mid_fit_raises_keyboard_interrupt_and_stops_within_one_step(in_weakref_callback):
    module = _SigintAtStep(at=5, in_weakref_callback=in_weakref_callback)
    trainer = _trainer()
    callbacks_before = list(trainer.callbacks)
    handler_before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        interrupt.fit(trainer, module)
    # the sixth step saw the signal: plainly it stops there; when the handler's raise was dropped, that step
    # finishes and the checker stops the fit before the seventh starts
    assert module.steps_run == 6
    assert trainer.global_step < 40
    assert signal.getsignal(signal.SIGINT) is handler_before  # the caller's handler is back
    assert list(trainer.callbacks) == callbacks_before  # the checker is gone again


def test_a_fit_without_a_sigint_runs_to_its_end_untouched():
    module = _SigintAtStep(at=-1, in_weakref_callback=False)
    trainer = _trainer()
    interrupt.fit(trainer, module)
    assert module.steps_run == 40 and trainer.global_step == 40


class _FitsAnInnerModuleAtStep(_SigintAtStep):
    """An outer fit whose step ``at`` runs a whole inner fit (as a run's RL fit runs its reward fits)."""

    def __init__(self, at: int, inner: _SigintAtStep) -> None:
        super().__init__(at=-1, in_weakref_callback=False)
        self.inner_at, self.inner = at, inner

    def training_step(self, batch, batch_idx):
        if self.global_step == self.inner_at:
            interrupt.fit(_trainer(), self.inner)
        return super().training_step(batch, batch_idx)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("in_weakref_callback", [False, True], ids=["plain", "inside-a-weakref-callback"])
def test_a_sigint_inside_a_nested_fit_is_a_keyboard_interrupt_for_the_outer_caller(in_weakref_callback):
    """Both Trainers turn the interrupt into SystemExit(1); the outer call must still answer KeyboardInterrupt
    (a separate flag per call made it SystemExit(1): `prism fit` exit 1 for a Ctrl-C during a reward fit)."""
    inner = _SigintAtStep(at=3, in_weakref_callback=in_weakref_callback)
    outer = _FitsAnInnerModuleAtStep(at=2, inner=inner)
    with pytest.raises(KeyboardInterrupt):
        interrupt.fit(_trainer(), outer)
    assert inner.steps_run == 4 and outer.steps_run == 2  # the outer step that ran the inner fit never ends


class _SigtermAtStep(_SigintAtStep):
    """A linear fit whose training step ``at`` sends this process SIGTERM (``kill PID``, a scheduler's limit)."""

    def __init__(self, at: int) -> None:
        super().__init__(at=-1, in_weakref_callback=False)
        self.sigterm_at = at

    def training_step(self, batch, batch_idx):
        if self.global_step == self.sigterm_at:
            signal.raise_signal(signal.SIGTERM)
        return super().training_step(batch, batch_idx)


def test_a_sigterm_mid_fit_is_terminated_not_a_clean_exit():
    """Lightning raises a SystemExit without a code at the step's end: left alone, the process exits 0 as if
    the run had succeeded."""
    module = _SigtermAtStep(at=5)
    handler_before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        interrupt.fit(_trainer(), module)
    assert module.steps_run == 6  # the step that got the signal ends, no further one starts
    assert signal.getsignal(signal.SIGTERM) is handler_before


def test_a_sigterm_inside_a_nested_fit_is_terminated_for_the_outer_caller():
    inner = _SigtermAtStep(at=3)
    outer = _FitsAnInnerModuleAtStep(at=2, inner=inner)
    with pytest.raises(Terminated):
        interrupt.fit(_trainer(), outer)
    assert inner.steps_run == 4 and outer.steps_run == 2


@pytest.mark.parametrize(
    ("stop", "code", "line"),
    [
        (KeyboardInterrupt, 130, "prism: interrupted; continue the run with: prism fit --resume runs/x"),
        (Terminated, 143, "prism: terminated (SIGTERM); continue the run with: prism fit --resume runs/x"),
    ],
)
def test_prism_fit_exits_143_on_sigterm_and_130_on_ctrl_c(stop, code, line, monkeypatch, capsys):
    import prism.run.fit
    from prism import cli
    from prism.core.errors import RunInterrupted

    def stopped_run(*args, **kwargs):
        try:
            raise stop
        except KeyboardInterrupt:  # as the run wraps what stopped it
            raise RunInterrupted(Path("runs/x"), resumable=True) from None

    monkeypatch.setattr(prism.run.fit, "fit_run", stopped_run)
    assert cli.main(["fit", "--config", "conf/quickstart.yaml"]) == code
    assert capsys.readouterr().err.strip() == line
