"""A reward fit resumed from a snapshot (prism.reward.fitting.fit.FitSnapshots) is the uninterrupted fit: the same
weights, early-stopping record and curves, bit for bit, in both batch layouts. A fit of hours (the paper's
E = 1000, ≤ 1000 epochs) killed half-way then goes on instead of starting again from epoch 0."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from segment_stores import synthetic_store
from tb_events import FIT_TIMING, scalar_curves

from prism.reward.config import ReSymNetConfig
from prism.reward.models.resymnet_fit import fit_resymnet_model

# Patience long enough that some member is still improving at the snapshots, short enough that one stops.
CONFIG = dict(ensemble_size=3, hidden=16, max_epochs=12, patience=3, batch_size=8, dropout=0.1)


def _fit(layout: str, **kwargs):
    store = synthetic_store(60, seed=1, max_length=11)
    return fit_resymnet_model(store, ReSymNetConfig(**CONFIG), seed=5, layout=layout, **kwargs)


def _same(a, b) -> None:
    for (name, p), q in zip(a.model.named_parameters(), b.model.parameters(), strict=True):
        assert torch.equal(p, q), name
    sa, sb = a.summary, b.summary
    assert (sa.epochs_run, sa.best_epoch, sa.best_val_loss) == (
        sb.epochs_run,
        sb.best_epoch,
        sb.best_val_loss,
    )
    assert sa.val_correlation == sb.val_correlation


@pytest.mark.parametrize("layout", ["ragged", "padded"])
def test_a_fit_resumed_from_any_snapshot_is_the_uninterrupted_fit(layout):
    snapshots: list[bytes] = []
    whole = _fit(layout, on_snapshot=snapshots.append, snapshot_every_s=0)
    epochs = [torch.load(io.BytesIO(s), weights_only=False)["epoch"] for s in snapshots]
    # one snapshot per epoch but the last (the fit returns then), numbered as Lightning counts epochs
    assert epochs == list(range(len(snapshots))) and len(snapshots) == max(whole.summary.epochs_run) - 1
    assert min(whole.summary.epochs_run) < max(whole.summary.epochs_run)  # a member stopped early
    assert _fit(layout).summary.epochs_run == whole.summary.epochs_run  # snapshots change nothing
    for snapshot in (snapshots[0], snapshots[len(snapshots) // 2], snapshots[-1]):
        _same(_fit(layout, resume=snapshot), whole)
    # a resumed fit's time includes the time before the snapshot
    late = torch.load(io.BytesIO(snapshots[-1]), weights_only=False)["prism_fit_wall_s"]
    assert _fit(layout, resume=snapshots[-1]).summary.wall_time_s > late > 0


def test_a_snapshot_of_a_resumed_fit_resumes_too():
    first: list[bytes] = []
    _fit("ragged", on_snapshot=first.append, snapshot_every_s=0)
    second: list[bytes] = []
    resumed = _fit("ragged", resume=first[1], on_snapshot=second.append, snapshot_every_s=0)
    assert len(second) == len(first) - 2  # epochs 2.. of the same fit
    _same(_fit("ragged", resume=second[0]), resumed)


def test_snapshots_wait_for_their_interval():
    taken: list[bytes] = []
    _fit("ragged", on_snapshot=taken.append, snapshot_every_s=3600)
    assert taken == []


def test_checkpoints_inside_a_fit_carry_the_runs_random_state_from_before_the_fit(tmp_path, monkeypatch):
    """The fit draws from its own forked stream; a checkpoint taken inside it must hold the run's global RNG
    state as the fit phase found it (what the run goes on with after the fit), not the fit's stream."""
    from pathlib import Path

    from toy_runs import toy_run

    import prism.run.checkpoint as checkpoint
    from prism.cli import main

    saved = []
    original = checkpoint.save_atomic

    def recording(state, path, previous=None):
        progress = state["loop"]["fit_progress"][0]
        saved.append((state["loop"]["state"]["phase"], progress is not None, state["rng"]["torch"].clone()))
        return original(state, path, previous)

    monkeypatch.setattr(checkpoint, "save_atomic", recording)
    conf = Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml"
    args = [*toy_run({"reward.max_epochs": 6, "reward.patience": 6}), "loop.fit_checkpoint_every_s=0"]
    assert (
        main(["fit", "--config", str(conf), *args, f"run_dir={tmp_path / 'run'}", "--progress", "none"]) == 0
    )
    fits = [i for i, (phase, _, _) in enumerate(saved) if phase == "fit"]
    for start in [i for i in fits if not saved[i][1]]:  # each fit phase's start (no snapshot yet) ...
        inside = [saved[i] for i in fits if i > start and saved[i][1] and i - start <= 6]
        assert inside, "no checkpoint was taken inside the fit"
        for _, _, rng in inside:  # ... and the checkpoints inside that fit
            assert torch.equal(rng, saved[start][2])


class _Killed(Exception):
    """Raised by a stand-in checkpoint writer: the run is killed there."""


def _kill_and_resume(tmp_path, monkeypatch, capsys, decide, *overrides: str) -> tuple[Path, Path, str]:
    """A two-seed toy population (6 fit epochs) run whole, then again with ``loop.fit_checkpoint_every_s=0``
    under a checkpoint writer that asks ``decide(state)`` at each save: ``"save"``, ``"skip"`` (the process
    went on past a checkpoint it did not write) or ``"kill"``; then ``prism fit --resume``. Returns the two
    run folders (uninterrupted, resumed) and what the resume printed."""
    from toy_runs import toy_run

    import prism.run.checkpoint as checkpoint
    from prism.cli import main

    conf = Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml"
    resymnet = not any(o.startswith("reward.name=") and o != "reward.name=resymnet" for o in overrides)
    args = [*toy_run({"reward.max_epochs": 6, "reward.patience": 6}, resymnet=resymnet), "seeds=[0,1]",
            "figures=false"]  # fmt: skip

    def fit(run_dir, *extra):
        command = ["fit", "--config", str(conf), *args, *overrides, *extra, f"run_dir={run_dir}"]
        return main([*command, "--progress", "none"])

    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert fit(whole) == 0
    original = checkpoint.save_atomic

    def writer(state, path, previous=None):
        verdict = decide(state)
        if verdict == "kill":
            raise _Killed
        if verdict == "save":
            original(state, path, previous)

    monkeypatch.setattr(checkpoint, "save_atomic", writer)
    with pytest.raises(_Killed):
        fit(stopped, "loop.fit_checkpoint_every_s=0")
    monkeypatch.setattr(checkpoint, "save_atomic", original)
    capsys.readouterr()
    assert main(["fit", "--resume", str(stopped), "--progress", "none"]) == 0
    return whole, stopped, capsys.readouterr().out


def test_a_population_stopped_inside_its_second_members_fit_resumes_to_the_uninterrupted_run(
    tmp_path, monkeypatch, capsys
):
    """Members are fitted one after the other: a checkpoint inside member 1's fit keeps member 0's finished
    model, and the resumed run fits neither again from scratch, ending as the uninterrupted run."""
    inside_member_1 = []

    def decide(state) -> str:
        progress = state["loop"]["fit_progress"]
        if state["loop"]["state"]["phase"] == "fit" and progress[1] is not None:
            assert "model" in progress[0]  # member 0's finished fit is kept
            inside_member_1.append(True)
            # Killed two epochs after the second snapshot inside member 1's fit: the fit went on (and logged
            # its curves) past the last checkpoint written.
            if len(inside_member_1) > 2:
                return "kill" if len(inside_member_1) == 4 else "skip"
        return "save"

    whole_run, stopped, out = _kill_and_resume(tmp_path, monkeypatch, capsys, decide)
    # the second snapshot inside member 1's fit was taken at the end of its second epoch
    assert "(phase fit, cycle 1/2; the reward fit of member 1 goes on after epoch 2)" in out
    for seed in (0, 1):
        whole, resumed = (d / f"seed{seed}" / "eval.csv" for d in (whole_run, stopped))
        assert resumed.read_text() == whole.read_text()

    # member 1's fit went on in its own TensorBoard run, and its curves read as the uninterrupted fit's: what
    # the stopped process logged after the snapshot is purged, and nothing before it is lost
    def fit_runs(run: Path, seed: int) -> list[str]:
        return sorted(p.name for p in (run / f"seed{seed}" / "tb" / "reward_fit" / "cycle1").iterdir())

    assert fit_runs(stopped, 0) == ["version_0"] and fit_runs(stopped, 1) == ["version_0"]
    whole, resumed = (
        scalar_curves(run / "seed1" / "tb" / "reward_fit" / "cycle1" / "version_0")
        for run in (whole_run, stopped)
    )
    assert len(whole["reward_fit/val_loss/m0"]) == 6 and set(resumed) >= FIT_TIMING
    for tag in set(whole) - FIT_TIMING:
        assert resumed[tag] == whole[tag], tag
    assert set(resumed) == set(whole)


def test_a_resumed_fits_progress_counts_on_from_the_snapshots_epoch():
    """The epoch bar (here as log lines, one per epoch) of a fit resumed from the snapshot taken at the end of
    the third epoch counts on from 3: its first line is the fourth epoch, the first one this process ran
    (Lightning ends the third epoch again, which counts it without a line)."""
    from prism.display.progress import RewardFitProgress
    from prism.display.progress_lines import LineProgress

    snapshots: list[bytes] = []
    whole = _fit("ragged", on_snapshot=snapshots.append, snapshot_every_s=0)
    log = io.StringIO()
    progress = LineProgress(log, fit_every_s=0.0)
    bar = RewardFitProgress(progress, "reward fit", max_epochs=CONFIG["max_epochs"])
    resumed = _fit(
        "ragged", resume=snapshots[2], callbacks=[bar]
    )  # snapshot taken at the end of epoch index 2
    bar.report(
        [sum(resumed.summary.best_val_loss) / len(resumed.summary.best_val_loss)],
        [resumed.summary.val_correlation],
    )
    shown = [
        int(line.split("epoch ")[1].split("/")[0])
        for line in log.getvalue().splitlines()
        if ": epoch " in line
    ]
    last = max(whole.summary.epochs_run)
    assert shown == list(range(4, last + 1))
    assert f"reward fit: {last} epochs" in log.getvalue()


def test_a_resumed_fit_writes_no_temporary_file(tmp_path, monkeypatch):
    """The snapshot Lightning resumes from is handed over in memory: nothing lies in the temporary folder while
    the fit runs (a process killed mid-fit would leave it there) and nothing is left in memory after."""
    import tempfile

    import fsspec
    from lightning.pytorch.callbacks import Callback

    snapshots: list[bytes] = []
    _fit("ragged", on_snapshot=snapshots.append, snapshot_every_s=0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen: list[list[str]] = []

    class LookInTheTemporaryFolder(Callback):
        def on_train_epoch_start(self, trainer, pl_module) -> None:
            seen.append(sorted(p.name for p in tmp_path.rglob("*")))

    _fit("ragged", resume=snapshots[1], callbacks=[LookInTheTemporaryFolder()])
    assert seen and all(found == [] for found in seen), seen
    assert not fsspec.filesystem("memory").glob("/prism-fit/*")


def test_a_population_stopped_inside_its_stacked_fit_resumes_to_the_uninterrupted_run(
    tmp_path, monkeypatch, capsys
):
    """``reward.stacked_fit``: the population's one fit keeps its snapshot in the run's checkpoint as every
    member's; a run killed inside it goes on from there and ends as the uninterrupted run."""
    inside = []

    def decide(state) -> str:
        progress = state["loop"]["fit_progress"]
        if state["loop"]["state"]["phase"] == "fit" and progress[0] is not None:
            assert progress[0]["stacked"] and progress[1] is None  # one snapshot, for every member
            inside.append(True)
            if len(inside) == 3:  # killed at the third epoch's end, before its checkpoint is written
                return "kill"
        return "save"

    overrides = ("reward.stacked_fit=true", "device=cpu")
    whole_run, stopped, out = _kill_and_resume(tmp_path, monkeypatch, capsys, decide, *overrides)
    assert "(phase fit, cycle 1/2; the stacked reward fit of every member goes on after epoch 2)" in out
    for seed in (0, 1):
        whole, resumed = (d / f"seed{seed}" for d in (whole_run, stopped))
        assert (resumed / "eval.csv").read_text() == (whole / "eval.csv").read_text()
        fits = [json.loads((d / "summary.json").read_text())["reward_fits"] for d in (whole, resumed)]
        assert len(fits[0]) == 2  # both cycles' fits
        for mine, theirs in zip(*fits, strict=True):
            assert mine["epochs_run"] == theirs["epochs_run"] and mine["validation"] == theirs["validation"]
    # Each member's curves go to its own fit's TensorBoard run, as its own fit would log them, and the resumed
    # fit's read as the uninterrupted fit's: what the stopped process logged after the snapshot is purged.
    for seed in (0, 1):
        runs = [run / f"seed{seed}" / "tb" / "reward_fit" / "cycle1" for run in (whole_run, stopped)]
        assert [sorted(p.name for p in folder.iterdir()) for folder in runs] == [["version_0"]] * 2
        whole, resumed = (scalar_curves(folder / "version_0") for folder in runs)
        assert len(whole["reward_fit/val_loss/m0"]) == 6 and len(whole["reward_fit/train_loss/m0"]) == 6
        assert {"reward_fit/val_corr", "reward_fit/members_active", "reward_fit/final_val_corr"} <= set(whole)
        assert set(resumed) == set(whole) >= FIT_TIMING
        for tag in set(whole) - FIT_TIMING:
            assert resumed[tag] == whole[tag], (seed, tag)


def test_a_snapshot_taken_inside_a_resumed_fit_counts_the_time_before_the_resume(monkeypatch):
    """A fit's wall time adds on across resumes: a snapshot of a fit resumed from an earlier snapshot holds that
    one's seconds plus its own, so a fit stopped twice still reports its whole time (a fake clock, 100 s an
    epoch, makes the seconds exact)."""
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import Callback

    import prism.reward.fitting.fit as fit_module
    from prism.reward.fitting.fit import snapshot_wall_s

    clock = [0.0]
    monkeypatch.setattr(fit_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    class Tick(Callback):  # every epoch takes 100 s on the fit's clock
        def on_train_epoch_start(self, trainer, pl_module):
            clock[0] += 100.0

    first: list[bytes] = []
    whole = _fit("ragged", on_snapshot=first.append, snapshot_every_s=0, callbacks=[Tick()])
    assert [snapshot_wall_s(s) for s in first] == [100.0 * (e + 1) for e in range(len(first))]
    second: list[bytes] = []
    resumed = _fit(
        "ragged", resume=first[1], on_snapshot=second.append, snapshot_every_s=0, callbacks=[Tick()]
    )
    assert snapshot_wall_s(second[0]) == 300.0  # 200 s before the resume, then epoch 2's 100 s
    assert [snapshot_wall_s(s) for s in second] == [snapshot_wall_s(s) for s in first[2:]]
    assert resumed.summary.wall_time_s == whole.summary.wall_time_s
    again = _fit("ragged", resume=second[0], callbacks=[Tick()])  # resumed twice: still the whole time
    assert again.summary.wall_time_s == whole.summary.wall_time_s
