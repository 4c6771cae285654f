"""A resumed run's main TensorBoard run, as TensorBoard reads it (purges applied), shows every point once.

After ``--resume`` from a checkpoint at env step S, the points logged at S before that checkpoint (the
evaluation and refit at S) stay, and what the stopped process logged after it (later evaluations, or a refit
checkpointed at its start and logged before the stop) is shown once, as the resumed process logs it again.
Ctrl-C is a real SIGINT at a chosen point, handled as ``prism fit`` handles it (exit 130).
"""

from __future__ import annotations

import csv
import shutil
import signal
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from toy_runs import toy_run

from prism.cli import main
from prism.loop.loop_state import PHASES

CONF = Path(__file__).resolve().parents[1] / "conf"
EVERY = 100
"""Evaluations and checkpoints every 100 env steps; two cycles of 200, so the refit is at env step 200."""
REFIT_STEP = 200
INTERRUPTED = 130


def _fit(run_dir: Path) -> list[str]:
    overrides = toy_run({"loop.checkpoint_every": EVERY, "eval.every": EVERY})
    return [
        "fit",
        "--config",
        str(CONF / "quickstart.yaml"),
        *overrides,
        f"run_dir={run_dir}",
        "--progress",
        "none",
    ]


def _resume(run_dir: Path) -> int:
    return main(["fit", "--resume", str(run_dir), "--progress", "none"])


def _ctrl_c() -> None:
    signal.raise_signal(
        signal.SIGINT
    )  # the handler prism.core.interrupt installs for the fit raises the interrupt


def _events(run_dir: Path) -> EventAccumulator:
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    return events


def _points(events: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in events.Scalars(tag)]


def _assert_eval_csv_is_what_tensorboard_shows(run_dir: Path) -> EventAccumulator:
    """Each periodic row of eval.csv is exactly one ``eval/hv`` point with its HV, the final row one
    ``eval_final/hv`` point, and each periodic evaluation's front figure is there once."""
    with (run_dir / "eval.csv").open() as f:
        rows = list(csv.DictReader(f))
    periodic = [(int(r["env_steps"]), float(r["hv"])) for r in rows if r["final"] == "0"]
    final = [(int(r["env_steps"]), float(r["hv"])) for r in rows if r["final"] == "1"]
    assert [step for step, _ in periodic] == list(range(EVERY, 2 * REFIT_STEP + 1, EVERY))  # the whole run
    events = _events(run_dir)
    for tag, expected in (("eval/hv", periodic), ("eval_final/hv", final)):
        shown = _points(events, tag)
        assert [step for step, _ in shown] == [step for step, _ in expected], tag
        assert [value for _, value in shown] == pytest.approx([value for _, value in expected], rel=1e-6), tag
    assert [e.step for e in events.Images("eval/front")] == [step for step, _ in periodic]
    return events


@pytest.fixture(scope="module")
def stopped_mid_cycle_two(tmp_path_factory) -> Path:
    """A run stopped by Ctrl-C at env step 350: last.pt at 300 (after the evaluation at 300), previous.pt at
    200 (after the evaluation and refit at 200)."""
    from prism.loop.phases import PrismLoopCallback

    run_dir = tmp_path_factory.mktemp("stopped") / "run"
    step_end = PrismLoopCallback.on_train_batch_end

    def stop_at_350(self, trainer, pl_module, *args):
        step_end(self, trainer, pl_module, *args)
        if pl_module.env_step_count >= 350:
            _ctrl_c()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PrismLoopCallback, "on_train_batch_end", stop_at_350)
        assert main(_fit(run_dir)) == INTERRUPTED
    return run_dir


def _checkpoint_step(path: Path) -> int:
    from prism.run.checkpoint_files import read_checkpoint

    return int(read_checkpoint(path)["env_steps"])


def test_resume_from_last_after_ctrl_c_keeps_the_evaluation_at_the_checkpoint_step(
    stopped_mid_cycle_two, tmp_path
):
    run_dir = shutil.copytree(stopped_mid_cycle_two, tmp_path / "run")
    assert _checkpoint_step(run_dir / "checkpoints" / "last.pt") == 300
    assert _resume(run_dir) == 0
    events = _assert_eval_csv_is_what_tensorboard_shows(run_dir)
    assert [step for step, _ in _points(events, "reward/val_pearson")] == [0, REFIT_STEP]


def test_resume_from_previous_keeps_the_refit_and_shows_redone_steps_once(stopped_mid_cycle_two, tmp_path):
    """The stopped process logged the evaluation at 300 after previous.pt; the resumed one logs it again."""
    run_dir = shutil.copytree(stopped_mid_cycle_two, tmp_path / "run")
    (run_dir / "checkpoints" / "last.pt").unlink()
    assert _checkpoint_step(run_dir / "checkpoints" / "previous.pt") == REFIT_STEP
    assert _resume(run_dir) == 0
    events = _assert_eval_csv_is_what_tensorboard_shows(run_dir)
    assert [step for step, _ in _points(events, "reward/val_pearson")] == [0, REFIT_STEP]


def test_a_refit_stopped_after_it_logged_is_shown_once_after_resume(tmp_path):
    """Ctrl-C after the refit at 200 logged its scalars, before the checkpoint that ends the fit phase: the
    resume takes the checkpoint from the fit's start, redoes the fit and logs it again."""
    import prism.loop.phases as phases

    run_dir = tmp_path / "run"
    fit_members = phases.fit_members
    logged: dict[str, list[tuple[int, float]]] = {}

    def stop_after_the_refit(*args, **kwargs):
        models = fit_members(*args, **kwargs)
        if kwargs["agent"].env_step_count == REFIT_STEP:
            for logger in kwargs["loggers"]:
                logger.experiment.flush()
            logged.update(val_pearson=_points(_events(run_dir), "reward/val_pearson"))
            _ctrl_c()
        return models

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(phases, "fit_members", stop_after_the_refit)
        assert main(_fit(run_dir)) == INTERRUPTED
    assert [step for step, _ in logged["val_pearson"]] == [0, REFIT_STEP]  # the stopped process logged it
    assert _resume(run_dir) == 0
    events = _assert_eval_csv_is_what_tensorboard_shows(run_dir)
    shown = _points(events, "reward/val_pearson")
    assert [step for step, _ in shown] == [0, REFIT_STEP]  # once: the resumed process's, the same fit
    assert [value for _, value in shown] == pytest.approx([value for _, value in logged["val_pearson"]])
    at_refit = [value for step, value in _points(events, "loop/phase") if step == REFIT_STEP]
    assert at_refit == [PHASES.index("collect_expert"), PHASES.index("fit"), PHASES.index("rl")]
    assert [e.step for e in events.Images("reward/shaped_vs_true")] == [0, REFIT_STEP]


def test_carrying_copies_only_the_points_at_the_step_logged_before_the_position(tmp_path):
    """The mechanism alone, on a bare logger: of the points at step 2, those logged before the recorded position
    are carried into the resumed file, the later ones (and step 3) stay hidden; a position in a file that is
    gone carries nothing."""
    from lightning.pytorch.loggers import TensorBoardLogger

    from prism.run.tensorboard_resume import carry_events_at_step, event_file_position

    def logger(purge_step: int | None = None) -> TensorBoardLogger:
        return TensorBoardLogger(str(tmp_path), name="tb", version="", purge_step=purge_step)

    stopped = logger()
    stopped.log_metrics({"a": 1.0}, step=1)
    stopped.log_metrics({"a": 2.0, "b": 2.0}, step=2)
    position = event_file_position(stopped)
    stopped.log_metrics({"b": 20.0, "c": 2.0}, step=2)  # after the checkpoint: redone by the resumed process
    stopped.log_metrics({"a": 3.0}, step=3)
    stopped.experiment.flush()
    resumed = logger(purge_step=2)
    assert carry_events_at_step(resumed, position, 2) == 2  # a and b, one event each
    resumed.log_metrics({"c": 2.0}, step=2)
    resumed.experiment.flush()
    events = _events(tmp_path)
    shown = {tag: _points(events, tag) for tag in events.Tags()["scalars"]}
    assert shown == {"a": [(1, 1.0), (2, 2.0)], "b": [(2, 2.0)], "c": [(2, 2.0)]}
    assert carry_events_at_step(logger(purge_step=2), {**position, "file": "gone"}, 2) == 0
