"""TensorBoard layout (issue 21, item 9): each reward fit is a run of its own under
``tb/reward_fit/cycle<c>/version_<n>``, its ``reward_fit/*`` curves against epochs with no ``epoch`` tag, the
main run keeps ``reward/*`` against env steps, and a fit run again gets a fresh version."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from toy_runs import toy_run

ROOT = Path(__file__).resolve().parents[1]


def _scalars(folder: Path) -> EventAccumulator:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def test_each_reward_fit_is_its_own_run_against_epochs(tmp_path):
    from prism.run.fit import fit_run

    run_dir = tmp_path / "run"
    overrides = toy_run({"reward.patience": 10})
    run = fit_run(
        [str(ROOT / "conf" / "quickstart.yaml")], [*overrides, "figures=false", f"run_dir={run_dir}"]
    )
    fits = run_dir / "tb" / "reward_fit"
    # counted from 1, as the progress lines count cycles (issue 50, item 4)
    assert sorted(p.name for p in fits.iterdir()) == ["cycle1", "cycle2"]
    acc = _scalars(fits / "cycle2" / "version_0")
    tags = set(acc.Tags()["scalars"])
    assert {"reward_fit/train_loss/m0", "reward_fit/val_loss/m0", "reward_fit/val_corr"} <= tags
    assert all(tag.startswith("reward_fit/") for tag in tags), sorted(tags)  # no bare `epoch`, no `reward/`
    assert [e.step for e in acc.Scalars("reward_fit/val_loss/m0")] == [0, 1, 2]  # epochs, not optimiser steps
    assert [e.step for e in acc.Scalars("reward_fit/train_loss/m0")] == [0, 1, 2]
    main = set(_scalars(run_dir / "tb").Tags()["scalars"])
    assert "reward/fit_time_s" in main and not any(t.startswith("reward_fit/") for t in main)
    # the same cycle's fit run again (as after a kill during it and --resume): a fresh version beside it
    run.loop._fit(run.agent, run.trainer)
    assert sorted(p.name for p in (fits / "cycle2").iterdir()) == ["version_0", "version_1"]
    assert len(_scalars(fits / "cycle2" / "version_0").Scalars("reward_fit/val_loss/m0")) == 3
    # the main run's loop/cycle scalar counts from 1 too: 1 through the first cycle, 2 at the end
    cycles = [e.value for e in _scalars(run_dir / "tb").Scalars("loop/cycle")]
    assert cycles[0] == 1.0 and cycles[-1] == 2.0 and set(cycles) == {1.0, 2.0}
