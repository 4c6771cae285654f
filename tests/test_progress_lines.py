"""Plain progress lines when stderr is not a terminal (issue 29, item 3): ``prism fit --progress
{auto,bar,lines,none}``; a log file gets each phase's start and end, and the RL bar's numbers every N steps."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from toy_runs import toy_run

from prism.cli import main
from prism.display.progress import PhaseProgressBar, Progress, RewardFitProgress
from prism.display.progress_lines import LineProgress, make_progress

CONF = Path(__file__).resolve().parents[1] / "conf"
STAMP = r"^\[\d+:\d\d:\d\d\] "


def _drive(progress: Progress, total: int = 2000, batch: int = 8) -> None:
    """An RL phase of ``total`` env steps, ``batch`` steps per Lightning batch, through the RL bar."""
    loop = SimpleNamespace(
        state=SimpleNamespace(phase="rl", cycle=0), settings=SimpleNamespace(cycles=1), total_env_steps=total
    )
    bar = PhaseProgressBar(loop, progress=progress)
    module = SimpleNamespace(env_step_count=0)
    progress.clock = lambda: module.env_step_count
    progress.total_steps = total
    bar.on_train_start(None, module)
    for step in range(batch, total + 1, batch):
        module.env_step_count = step
        bar.on_train_batch_end(None, module, None, None, 0)
    bar.on_train_end(None, module)


def test_rl_lines_carry_the_bars_numbers_every_n_steps():
    screen, log = io.StringIO(), io.StringIO()
    _drive(Progress(file=screen, disable=False))
    _drive(LineProgress(log, every=500))
    lines = log.getvalue().splitlines()
    assert all(re.match(STAMP, line) for line in lines), lines
    shown = [int(m) for m in re.findall(r"RL: (\d+)/2000 env steps", log.getvalue())]
    # each time the clock crosses a multiple of 500 (batches of 8 steps: 504, 1000, 1504, 2000) ...
    assert shown == [504, 1000, 1504, 2000]
    # ... with the counts the bar showed at its refreshes
    assert set(shown) <= {int(m) for m in re.findall(r"(\d+)/2000", screen.getvalue())}
    first = next(line for line in lines if "RL: " in line)
    assert "(25%)" in first and "phase=rl cycle=1/1" in first
    assert "RL (cycle 1/1): start at env step 0/2000" in lines[0]


def test_modes_pick_bars_lines_or_nothing():
    log = io.StringIO()  # not a terminal
    assert isinstance(make_progress("auto", log), LineProgress)
    bars = make_progress("bar", log)
    assert not isinstance(bars, LineProgress) and bars.active
    assert not make_progress("none", log).active
    assert isinstance(make_progress("lines", log), LineProgress)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    auto = make_progress("auto", Terminal())
    assert not isinstance(auto, LineProgress) and auto.active


def _fit_to_file(path: Path, run_dir: Path, *args: str, monkeypatch) -> str:
    """``prism fit`` in this process with stdout and stderr both going to one real file (as `> log 2>&1`)."""
    with path.open("w") as log:
        monkeypatch.setattr(sys, "stdout", log)
        monkeypatch.setattr(sys, "stderr", log)
        overrides = toy_run({"figures": "false"})
        code = main(
            ["fit", "--config", str(CONF / "quickstart.yaml"), *overrides, f"run_dir={run_dir}", *args]
        )
        monkeypatch.undo()
    assert code == 0
    return path.read_text()


def test_a_run_logging_to_a_file_writes_phase_lines_before_the_closing_block(tmp_path, monkeypatch):
    text = _fit_to_file(tmp_path / "log.txt", tmp_path / "run", monkeypatch=monkeypatch)
    lines = text.splitlines()
    done = next(i for i, line in enumerate(lines) if line.startswith("prism fit: done"))
    assert (
        lines[0]
        == f"prism fit: run folder {tmp_path / 'run'} (prism on prism/Toy-v0, backbone capql, seed 0)"
    )
    order = [
        "collect random episodes (cycle 1/2): start (5 episodes)",
        "collect random episodes (cycle 1/2): 5 episodes, mean length",
        "reward fit (cycle 1/2, eq. 1 loss): start (3 epochs at most)",
        "reward fit (cycle 1/2, eq. 1 loss): 3 epochs",
        "RL (cycle 1/2): start at env step 0/400",
        "evaluation: start (3 episodes)",
        "evaluation at 200 env steps (3 weights x 1 episode): HV ",
        "RL (cycle 1/2): end at env step 200/400, 200 env steps in ",
        "collect expert episodes (cycle 1/2): start (3 episodes)",
        "reward fit (cycle 2/2, eq. 1 loss): start",
        "RL (cycle 2/2): start at env step 200/400",
        "RL (cycle 2/2): end at env step 400/400, 200 env steps in ",
        "final evaluation at 400 env steps",
    ]
    found = [next((i for i, line in enumerate(lines) if want in line), None) for want in order]
    assert None not in found, [w for w, i in zip(order, found) if i is None]
    assert found == sorted(found) and found[-1] < done, lines
    assert all(re.match(STAMP, lines[i]) for i in found)
    assert "\r" not in text and "\x1b" not in text  # no bar redraws in a log


def test_progress_none_writes_only_the_run_folder_and_the_closing_block(tmp_path, monkeypatch):
    text = _fit_to_file(tmp_path / "log.txt", tmp_path / "run", "--progress", "none", monkeypatch=monkeypatch)
    lines = text.splitlines()
    assert (
        lines[0]
        == f"prism fit: run folder {tmp_path / 'run'} (prism on prism/Toy-v0, backbone capql, seed 0)"
    ), text[:500]
    assert lines[1].startswith("prism fit: done"), text[:500]


def test_an_unknown_mode_is_refused(capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--progress", "loud", "--config", str(CONF / "quickstart.yaml")])
    assert info.value.code == 2 and "--progress" in capsys.readouterr().err


class _Clock:
    """A stand-in for ``time.perf_counter`` that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _drive_fit(monkeypatch, *, first_epoch: int, epochs: int, seconds: float) -> list[str]:
    """The log lines of a reward fit of ``epochs`` epochs from ``first_epoch`` (a resumed fit starts past 0),
    each ``seconds`` long on a stand-in clock, through :class:`RewardFitProgress` on a line display that
    prints at most once a minute."""
    clock = _Clock()
    monkeypatch.setattr("time.perf_counter", clock)
    log = io.StringIO()
    progress = LineProgress(log, fit_every_s=60.0)
    callback = RewardFitProgress(progress, "reward fit (cycle 2/2)", max_epochs=100)
    trainer = SimpleNamespace(current_epoch=first_epoch, callback_metrics={})
    callback.on_fit_start(trainer, None)
    for epoch in range(first_epoch, first_epoch + epochs):
        trainer.current_epoch = epoch
        callback.on_train_epoch_start(trainer, None)
        clock.now += seconds
        trainer.callback_metrics = {
            "reward_fit/val_loss/m0": torch.tensor(float(epoch)),
            "reward_fit/val_loss/m1": torch.tensor(float(epoch) + 2),
            "reward_fit/val_corr": torch.tensor(0.5),
        }
        callback.on_train_epoch_end(trainer, None)
    callback.on_fit_end(trainer, None)
    callback.report([1.0], [0.75])  # the kept model's scores, once the fit has returned
    return log.getvalue().splitlines()


def test_a_long_fit_writes_its_epoch_and_numbers_about_once_a_minute(monkeypatch):
    lines = _drive_fit(monkeypatch, first_epoch=0, epochs=10, seconds=25.0)
    epochs = [line for line in lines if ": epoch " in line]
    # 25 s epochs, a line at the first epoch end 60 s after the last one: after epochs 3, 6 and 9
    assert [int(re.search(r"epoch (\d+)/100", line).group(1)) for line in epochs] == [3, 6, 9]
    assert all(re.match(STAMP, line) for line in epochs)
    # the bar's numbers (mean of the members' validation losses at that epoch) and the pace
    assert "val_sum_mse 3, val_corr 0.5, 25.0 s/epoch" in epochs[0]
    assert "val_sum_mse 6, val_corr 0.5" in epochs[1]
    assert (
        lines[-1]
        .split("] ", 1)[1]
        .startswith("reward fit (cycle 2/2): 10 epochs  val_sum_mse 1  val_corr 0.75 (kept model)  250.0s")
    )


def test_a_resumed_fit_counts_on_from_its_snapshots_epoch(monkeypatch):
    lines = _drive_fit(monkeypatch, first_epoch=10, epochs=4, seconds=40.0)
    epochs = [int(m) for line in lines for m in re.findall(r": epoch (\d+)/100", line)]
    assert epochs == [12, 14]  # epochs 11–14 ran here; 80 s after the start, then 80 s after that
    assert "40.0 s/epoch" in lines[1]
    assert "reward fit (cycle 2/2): 14 epochs" in lines[-1]


def test_a_slow_rl_phase_writes_a_line_at_least_every_30_seconds():
    """GPI-PD at its default 20 updates per env step runs a few env steps per second: 1000 steps between two
    lines would leave a log silent for minutes. A line comes after 30 s too, whichever bound comes first."""
    now = [0.0]
    log = io.StringIO()
    progress = LineProgress(log, every=1000, every_s=30.0, timer=lambda: now[0])
    loop = SimpleNamespace(
        state=SimpleNamespace(phase="rl", cycle=0), settings=SimpleNamespace(cycles=1), total_env_steps=600
    )
    bar = PhaseProgressBar(loop, progress=progress)
    module = SimpleNamespace(env_step_count=0)
    progress.clock = lambda: module.env_step_count
    progress.total_steps = 600
    bar.on_train_start(None, module)
    for step in range(1, 601):  # one env step per batch, 0.7 s each: 420 s, never 1000 steps
        now[0] += 0.7
        module.env_step_count = step
        bar.on_train_batch_end(None, module, None, None, 0)
    lines = [line for line in log.getvalue().splitlines() if "RL: " in line]
    seconds = [
        int(m) * 60 + int(s) for m, s in (re.match(r"^\[0:(\d\d):(\d\d)\]", x).groups() for x in lines)
    ]
    assert len(seconds) >= 13  # 420 s / 30 s
    gaps = [b - a for a, b in zip([0, *seconds], seconds)]
    assert max(gaps) <= 31 and min(gaps) >= 29, gaps
    steps = [int(m) for m in re.findall(r"RL: (\d+)/600 env steps", log.getvalue())]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)  # each line says where RL is now
    assert "phase=rl cycle=1/1" in lines[0] and "steps/s" in lines[0]


def test_a_cycles_rl_rate_is_its_own_not_diluted_by_the_refit_before_it():
    """The steps/s of an RL line is the current RL phase's: after 10 minutes of reward fit between two RL
    phases of 100 env steps/s each, the second phase's lines say ~100, not the run-long average (~3)."""
    now = [0.0]
    log = io.StringIO()
    progress = LineProgress(log, every=500, every_s=1e9, timer=lambda: now[0])
    state = SimpleNamespace(phase="rl", cycle=0)
    loop = SimpleNamespace(state=state, settings=SimpleNamespace(cycles=2), total_env_steps=2000)
    bar = PhaseProgressBar(loop, progress=progress)
    module = SimpleNamespace(env_step_count=0)
    progress.clock = lambda: module.env_step_count
    progress.total_steps = 2000
    bar.on_train_start(None, module)

    def rl_steps(first: int, last: int) -> None:
        for step in range(first, last + 1):
            now[0] += 0.01
            module.env_step_count = step
            bar.on_train_batch_end(None, module, None, None, 0)

    rl_steps(1, 1000)
    state.phase = "fit"  # the cycle-2 refit: 600 s without an env step
    progress.set_phase("fit", 0, 2, 1000)
    now[0] += 600.0
    state.phase, state.cycle = "rl", 1
    rl_steps(1001, 2000)
    rates = {
        int(step): float(rate)
        for step, rate in re.findall(r"RL: (\d+)/2000 env steps \(\d+%\), (\d+) steps/s", log.getvalue())
    }
    assert {500, 1000, 1500, 2000} <= rates.keys()
    assert all(95 <= rates[step] <= 105 for step in (500, 1000, 1500, 2000)), rates
    # the phase's end line times it on the same clock: 1000 steps in 10 s
    assert "RL (cycle 1/2): end at env step 1000/2000, 1000 env steps in 10.0s" in log.getvalue()


def test_a_phase_change_keeps_the_step_count_it_is_given_without_a_clock():
    """Ending an RL phase without a clock (nothing tells its env steps) still shows the count ``set_phase``
    was given, not 0."""
    progress = LineProgress(io.StringIO(), timer=lambda: 0.0)
    progress.set_phase("rl", 0, 2, steps=0)
    progress.set_phase("fit", 0, 2, steps=500)
    assert progress.steps == 500
