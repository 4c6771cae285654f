"""Continuing a finished run to a larger budget (issue 29, item 5): ``prism fit --resume RUN_DIR
loop.cycles=K`` runs the extra cycles as a run started with K cycles would; any other change is refused in
one line and leaves the run folder untouched."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from tb_events import scalar_curves
from toy_runs import toy_run

from prism.cli import USAGE_ERROR, main
from prism.run.checkpoint_files import read_checkpoint, save_atomic

CONF = Path(__file__).resolve().parents[1] / "conf"
COMPARABLE = ("env_steps", "hv", "eum", "vo", "final")


def _fit(run_dir: Path, cycles: int, *files: str) -> None:
    # (a method overlay's reward.name may not be ReSymNet's: its own keys are then left out)
    overrides = toy_run({"loop.cycles": cycles, "figures": "false"}, resymnet=not files)
    config = [str(CONF / "quickstart.yaml"), *files]
    assert main(["fit", "--config", *config, *overrides, f"run_dir={run_dir}", "--progress", "none"]) == 0


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return [{k: r[k] for k in COMPARABLE} for r in csv.DictReader(fh)]


def _final_row(run_dir: Path) -> dict[str, str]:
    (final,) = [row for row in _rows(run_dir / "eval.csv") if row["final"] == "1"]
    return final


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module", params=["prism", "baseline"])
def finished(request, tmp_path_factory) -> tuple[Path, list[str]]:
    """A finished two-cycle toy run (PRISM: reward fits between cycles; baseline: none)."""
    files = [] if request.param == "prism" else [str(CONF / "method" / "baseline.yaml")]
    run_dir = tmp_path_factory.mktemp(request.param) / "run"
    _fit(run_dir, 2, *files)
    return run_dir, files


def test_a_finished_run_continued_to_more_cycles_is_the_longer_run(finished, tmp_path, capsys):
    original, files = finished
    run_dir = tmp_path / "continued"
    shutil.copytree(original, run_dir)
    carried = read_checkpoint(run_dir / "checkpoints" / "last.pt")["time"]
    # made from the old end's policy: a re-evaluation and a render (a stand-in file: the toy env has no frames)
    assert main(["evaluate", str(run_dir)]) == 0
    evaluated = (run_dir / "evaluate.csv").read_bytes()
    (run_dir / "render").mkdir()
    (run_dir / "render" / "rollouts.gif").write_bytes(b"GIF89a")
    capsys.readouterr()
    assert main(["fit", "--resume", str(run_dir), "loop.cycles=3", "--progress", "none"]) == 0
    assert " in all)" in capsys.readouterr().out  # the closing block adds the run's whole time

    summary = json.loads((run_dir / "summary.json").read_text())
    # the run's time is its first process's (as of its last checkpoint) plus the continuing one's
    last = summary["wall_time_s_last_process"]
    assert summary["wall_time_s"] == pytest.approx(carried["wall_time_s"] + last, rel=1e-12)
    assert summary["cpu_time_s"] > carried["cpu_time_s"] > 0
    assert summary["env_steps"] == 600  # the new budget: 3 cycles x 200 steps
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["loop"]["cycles"] == 3
    loop = read_checkpoint(run_dir / "checkpoints" / "last.pt")["loop"]["state"]
    assert loop["phase"] == "done" and loop["cycle"] == 2
    rows = _rows(run_dir / "eval.csv")
    assert [(r["env_steps"], r["final"]) for r in rows] == [
        ("200", "0"),
        ("400", "0"),
        ("600", "0"),
        ("600", "1"),
    ]
    if not files:  # PRISM: a third collection and reward fit happened at the old end
        assert len(summary["reward_fits"]) == 3 and len(loop["episodes_collected"]) == 3

    # the old end's outputs are kept aside, as they were
    kept = run_dir / "continued" / "from_400"
    assert json.loads((kept / "summary.json").read_text())["env_steps"] == 400
    assert (kept / "summary.json").read_bytes() == (original / "summary.json").read_bytes()
    assert (kept / "eval.csv").read_bytes() == (original / "eval.csv").read_bytes()
    assert (kept / "front.csv").is_file()
    # nothing made from the old policy stays at the top level (issue 50, item 9)
    assert (kept / "evaluate.csv").read_bytes() == evaluated and not (run_dir / "evaluate.csv").exists()
    assert (kept / "render" / "rollouts.gif").is_file() and not (run_dir / "render").exists()

    # ... and the continuation is what a run started with three cycles does
    fresh = tmp_path / "fresh"
    _fit(fresh, 3, *files)
    assert rows == _rows(fresh / "eval.csv")
    assert (run_dir / "front.csv").read_bytes() == (fresh / "front.csv").read_bytes()
    # TensorBoard keeps the old end's events (its eval/* and its final evaluation's eval_final/* at step 400;
    # a purge from that step would drop them), and its eval/* curves are the longer run's
    continued, longer = scalar_curves(run_dir / "tb"), scalar_curves(fresh / "tb")
    evals = sorted(tag for tag in longer if tag.startswith("eval/"))
    assert evals and evals == sorted(tag for tag in continued if tag.startswith("eval/"))
    assert all(continued[tag] == longer[tag] for tag in evals)
    assert [step for step, _ in continued["eval/hv"]] == [200, 400, 600]
    finals = [tag for tag in continued if tag.startswith("eval_final/")]
    assert finals and all([step for step, _ in continued[tag]] == [400, 600] for tag in finals)
    assert continued["eval_final/hv"][0][1] == pytest.approx(float(_final_row(original)["hv"]))


def test_a_fresh_runs_time_is_its_process_and_an_old_checkpoint_leaves_the_total_unknown(
    finished, tmp_path, capsys
):
    original, _ = finished
    first = json.loads((original / "summary.json").read_text())
    assert first["wall_time_s"] == first["wall_time_s_last_process"] > 0
    assert first["cpu_time_s"] > 0
    carried = read_checkpoint(original / "checkpoints" / "last.pt")["time"]
    assert 0 < carried["wall_time_s"] <= first["wall_time_s"]  # the final save came just before the summary

    # A checkpoint written before runs carried their time: the total would leave the first process out.
    run_dir = tmp_path / "old"
    shutil.copytree(original, run_dir)
    state = read_checkpoint(run_dir / "checkpoints" / "last.pt")
    del state["time"]
    save_atomic(state, run_dir / "checkpoints" / "last.pt")
    capsys.readouterr()
    assert main(["fit", "--resume", str(run_dir), "loop.cycles=3", "--progress", "none"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["wall_time_s"] is None and summary["cpu_time_s"] is None
    assert summary["wall_time_s_last_process"] > 0
    assert read_checkpoint(run_dir / "checkpoints" / "last.pt")["time"] is None  # and stays unknown
    assert "(this process, resumed)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("overrides", "message"),
    [  # more cycles together with another change is refused too
        (
            ["loop.cycles=3", "loop.steps_per_cycle=300"],
            "--resume: loop.steps_per_cycle (200 in the run, 300 given) differs from",
        ),
        (
            ["loop.cycles=3", "agent.lr=0.1", "seed=4"],
            "--resume: seed (0 in the run, 4 given), agent.lr (0.0003 in the run, 0.1 given) differ from",
        ),
        (["loop.cycles=1"], "loop.cycles: --resume can only add cycles; the run has 2, 1 asked"),
    ],
)
def test_any_other_change_is_refused_in_one_line_and_touches_nothing(finished, overrides, message, capsys):
    run_dir, _ = finished
    before = _digest(run_dir)
    mtimes = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    capsys.readouterr()
    assert main(["fit", "--resume", str(run_dir), *overrides]) == USAGE_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"prism: error: {message}"), err
    assert _digest(run_dir) == before
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == mtimes


def test_a_continued_population_moves_every_members_old_outputs_aside(tmp_path):
    from prism.run.continuation import archive_final_outputs

    run_dir = tmp_path / "pop"
    members = [run_dir / "seed3", run_dir / "seed5"]
    for folder in (run_dir, *members):
        (folder / "render").mkdir(parents=True)
        (folder / "render" / "rollouts.mp4").write_text(folder.name)
        for name in ("evaluate.csv", "eval.csv", "config.yaml", "summary.json", "front.csv"):
            (folder / name).write_text(f"{folder.name}/{name}")
    (run_dir / "summary.csv").write_text("pop")
    target = archive_final_outputs(run_dir, members, 800)
    assert target == run_dir / "continued" / "from_800"
    for folder in (run_dir, *members):
        dest = target / folder.relative_to(run_dir)
        for name in ("evaluate.csv", "summary.json", "front.csv"):  # moved
            assert (dest / name).read_text() == f"{folder.name}/{name}" and not (folder / name).exists()
        assert (dest / "render" / "rollouts.mp4").read_text() == folder.name
        assert not (folder / "render").exists()
        for name in ("eval.csv", "config.yaml"):  # copied: the continued run goes on writing them
            assert (dest / name).read_text() == (folder / name).read_text()
    assert (target / "summary.csv").read_text() == "pop" and not (run_dir / "summary.csv").exists()


def test_archiving_a_finished_run_named_relative_while_its_config_says_absolute(tmp_path, monkeypatch):
    # `prism fit --resume runs/x loop.cycles=3` of a run started with run_dir=/abs/runs/x: one folder under two
    # names used to move its evaluate.csv, then crash (relative_to) half-way, leaving a half-made archive
    from prism.run.continuation import archive_final_outputs

    run = tmp_path / "runs" / "x"
    run.mkdir(parents=True)
    for name, text in (
        ("eval.csv", "env_steps\n300\n"),
        ("config.yaml", "seed: 0\n"),
        ("evaluate.csv", "hv\n1\n"),
    ):
        (run / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    target = archive_final_outputs(Path("runs/x"), [run], 300)
    assert target == run / "continued" / "from_300"
    assert sorted(p.name for p in target.iterdir()) == ["config.yaml", "eval.csv", "evaluate.csv"]
    assert not (run / "evaluate.csv").exists() and (run / "eval.csv").is_file()
