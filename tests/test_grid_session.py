"""tools/grid_session.sh, the per-session grid driver (issue 27): which runs a lane picks before its deadline,
that it skips finished and held run folders, that it runs each pick with its output in the run's log and stops
on a run that leaves no summary.json, and its one-line refusals of bad input.

The script runs for real, in a scratch git repository with a worktree whose venv is a stand-in: its
``python`` answers ``tools/reproduce.py --dry-run`` with one ``prism.cli fit`` command per seed (0–2) and
"runs" a fit by writing the run folder's summary.json at once."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRESET = "table1-study"

FAKE_PYTHON = r"""#!/usr/bin/env bash
# Stand-in for the grid venv's python (see tests/test_grid_session.py).
if [ "$1" = tools/reproduce.py ]; then
  while [ $# -gt 0 ]; do
    case $1 in --envs) env=$2; shift;; --methods) arm=$2; shift;; --out) out=$2; shift;; esac
    shift
  done
  for seed in 0 1 2; do echo "$0 -m prism.cli fit --config c.yaml seed=$seed run_dir=$out/$env/$arm/seed$seed"; done
  exit 0
fi
dir=${*: -1}
dir=${dir#run_dir=}
mkdir -p "$dir"
echo "fake fit of $dir"
[ -n "${FAKE_FIT_SLEEP:-}" ] && sleep "$FAKE_FIT_SLEEP"
[ -n "${FAKE_FIT_FAIL:-}" ] && exit 3
if [ -n "${FAKE_FIT_EDITS:-}" ]; then  # edit the file in place (same inode), as an editor or a script might
  { printf '# a line added while the grid runs, which shifts every byte after it\n'; cat "$FAKE_FIT_EDITS"; } > "$FAKE_FIT_EDITS.new"
  cat "$FAKE_FIT_EDITS.new" > "$FAKE_FIT_EDITS"
fi
echo '{}' > "$dir/summary.json"
"""


def _git(*args: str, cwd: Path) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture()
def grid(tmp_path: Path) -> dict:
    """A main repository holding the two grid scripts, and a worktree of it at its one commit with a fake venv."""
    main = tmp_path / "main"
    (main / "tools").mkdir(parents=True)
    for name in ("grid_session.sh", "grid_worktree.sh"):
        shutil.copy(ROOT / "tools" / name, main / "tools" / name)
    _git("init", "-q", cwd=main)
    _git("add", ".", cwd=main)
    _git("commit", "-q", "-m", "grid scripts", cwd=main)
    commit = _git("rev-parse", "--short", "HEAD", cwd=main)
    worktree = tmp_path / "worktree"
    _git("worktree", "add", "-q", "--detach", str(worktree), commit, cwd=main)
    venv_bin = worktree / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text(FAKE_PYTHON)
    (venv_bin / "prism").write_text("#!/bin/sh\nexit 0\n")
    for name in ("python", "prism"):
        (venv_bin / name).chmod(0o755)
    runs = main / "docs" / "results" / PRESET / "runs"
    return {"main": main, "commit": commit, "worktree": worktree, "runs": runs}


def _session(grid: dict, deadline: str, *extra: str, **env: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "GRID_WORKTREE": str(grid["worktree"]),
        "GRID_REPORTS": str(grid["main"] / "reports"),
        "GRID_LANES": "0:halfcheetah",
        "GRID_ARMS": "e-prism e-uniform",
        "GRID_MINUTES": "e-prism=60 e-uniform=20",
        **env,
    }
    script = grid["main"] / "tools" / "grid_session.sh"
    return subprocess.run(
        ["bash", str(script), grid["commit"], deadline, *extra],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _starts(stdout: str) -> list[tuple[str, int]]:
    return [(arm, int(seed)) for arm, seed in re.findall(r" start (\S+) seed (\d+) \(expected", stdout)]


def _finish(grid: dict, arm: str, seed: int, env: str = "halfcheetah") -> Path:
    folder = grid["runs"] / env / arm / f"seed{seed}"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text("{}")
    return folder


def test_dry_run_plans_arms_in_order_until_the_deadline_and_skips_finished_runs(grid):
    _finish(grid, "e-prism", 0)
    done = _session(grid, "+150 min", "--dry-run")
    assert done.returncode == 0, done.stderr
    # e-prism seeds 1 and 2 (60 min each, 120 in all), then e-uniform seed 0 (140 ≤ 150); seed 1 would end
    # at 160, after the deadline.
    assert _starts(done.stdout) == [("e-prism", 1), ("e-prism", 2), ("e-uniform", 0)]
    assert "nothing left that ends before" in done.stdout
    assert not (grid["runs"] / "halfcheetah" / "e-prism" / "seed1").exists()  # a plan runs nothing


def test_a_run_folder_another_process_holds_is_left_to_it(grid):
    held = grid["runs"] / "halfcheetah" / "e-prism" / "seed0"
    held.mkdir(parents=True)
    descriptor = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # the run lock: flock on the run folder
        done = _session(grid, "+200 min", "--dry-run")
    finally:
        os.close(descriptor)
    assert done.returncode == 0, done.stderr
    assert _starts(done.stdout) == [
        ("e-prism", 1),
        ("e-prism", 2),
        ("e-uniform", 0),
        ("e-uniform", 1),
        ("e-uniform", 2),
    ]


def test_a_session_runs_each_pick_with_its_output_in_the_runs_log(grid):
    _finish(grid, "e-prism", 1)
    done = _session(grid, "+10 min", GRID_MINUTES="e-prism=1 e-uniform=1")
    assert done.returncode == 0, done.stderr
    ran = [("e-prism", 0), ("e-prism", 2), ("e-uniform", 0), ("e-uniform", 1), ("e-uniform", 2)]
    assert _starts(done.stdout) == ran
    assert done.stdout.count("ended, rc=0") == len(ran)
    for arm, seed in ran:
        folder = grid["runs"] / "halfcheetah" / arm / f"seed{seed}"
        assert (folder / "summary.json").is_file()
        log = (folder.parent / f"seed{seed}.log").read_text()
        assert f"$ {grid['worktree']}/.venv/bin/python -m prism.cli fit " in log
        assert log.rstrip().endswith(f"fake fit of {folder}")
    assert "seed1.log" not in {p.name for p in (grid["runs"] / "halfcheetah" / "e-prism").iterdir()}


def test_two_lanes_on_one_env_run_each_job_once(grid, tmp_path):
    """Two lanes on the same env start in the same second and see the same first pending job; without a claim
    both would run it (the loser's prism then refused the folder and its lane stopped). The fake fit takes a
    moment and takes no run lock, so only the lanes' own claim can keep them apart."""
    done = _session(
        grid,
        "+10 min",
        GRID_LANES="0:halfcheetah 1:halfcheetah",
        GRID_MINUTES="e-prism=1 e-uniform=1",
        FAKE_FIT_SLEEP="0.5",
        TMPDIR=str(tmp_path),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = [(arm, seed) for arm in ("e-prism", "e-uniform") for seed in range(3)]
    assert sorted(_starts(done.stdout)) == jobs  # six starts between the two lanes, none twice
    for arm, seed in jobs:
        log = (grid["runs"] / "halfcheetah" / arm / f"seed{seed}.log").read_text()
        assert log.count("fake fit of") == 1, (arm, seed, log)
    lanes = {lane for lane in re.findall(r"lane (\d):halfcheetah: \S+ start", done.stdout)}
    assert lanes == {"0", "1"}  # both lanes worked


def test_a_staggered_second_lane_plans_its_first_start_later_by_the_stagger(grid):
    done = _session(
        grid,
        "+190 min",
        "--dry-run",
        GRID_LANES="0:halfcheetah 1:swimmer",
        GRID_ARMS="e-prism",
        GRID_STAGGER="30",
    )
    assert done.returncode == 0, done.stderr
    starts = dict(re.findall(r"lane \d:(\w+): (\d\d:\d\d):\d\dZ start e-prism seed 0", done.stdout))
    first, second = (int(starts[env][:2]) * 60 + int(starts[env][3:]) for env in ("halfcheetah", "swimmer"))
    assert (second - first) % (24 * 60) in (30, 31)  # the clock may tick over a minute between the two lanes
    # the later start costs the second lane its third seed: 3 × 60 min fit before the deadline, 30 + 3 × 60 not
    assert "lane 0:halfcheetah" in re.search(r".*start e-prism seed 2 .*", done.stdout).group(0)
    assert _starts(done.stdout).count(("e-prism", 2)) == 1
    assert "lane 1:swimmer: starts 30 min after the first lane (GRID_STAGGER)" in done.stdout


def test_a_staggered_lane_sleeps_the_stagger_in_minutes_before_its_first_run(grid, tmp_path):
    """A real (not dry) session: a stand-in ``sleep`` first on PATH records what it was asked to wait and returns
    at once, so the stagger is checked in seconds of the real command without waiting for it."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    asked = tmp_path / "sleeps.txt"
    (stubs / "sleep").write_text(f'#!/bin/sh\necho "$*" >> {asked}\n')
    (stubs / "sleep").chmod(0o755)
    done = _session(
        grid,
        "+30 min",
        GRID_LANES="0:halfcheetah 1:swimmer",
        GRID_ARMS="e-uniform",
        GRID_MINUTES="e-uniform=1",
        GRID_STAGGER="2",
        PATH=f"{stubs}:{os.environ['PATH']}",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert asked.read_text().split() == ["120"]  # lane 1: 1 × 2 minutes, as seconds; lane 0 does not wait
    assert "lane 1:swimmer: starts 2 min after the first lane (GRID_STAGGER)" in done.stdout
    assert (grid["runs"] / "swimmer" / "e-uniform" / "seed0" / "summary.json").is_file()  # and then it ran


def _env_starts(stdout: str) -> list[tuple[str, str, int]]:
    return [
        (env, arm, int(seed))
        for env, arm, seed in re.findall(r"lane \d:(\w+): \S+ start (\S+) seed (\d+) \(", stdout)
    ]


def test_a_lane_of_several_envs_takes_the_next_env_when_the_first_has_nothing_that_fits(grid):
    """An env-specific expected time ("swimmer/e-prism=10") overrides the arm's on that env only."""
    done = _session(
        grid,
        "+150 min",
        "--dry-run",
        GRID_LANES="0:halfcheetah,swimmer",
        GRID_MINUTES="e-prism=60 e-uniform=20 swimmer/e-prism=10",
    )
    assert done.returncode == 0, done.stderr
    # halfcheetah: e-prism 0 and 1 (120 min), e-uniform 0 (140); its e-uniform 1 would end at 160 and its
    # e-prism 2 at 200, so the lane turns to swimmer, whose e-prism seed takes 10 min here: 150 ≤ 150.
    assert _env_starts(done.stdout) == [
        ("halfcheetah", "e-prism", 0),
        ("halfcheetah", "e-prism", 1),
        ("halfcheetah", "e-uniform", 0),
        ("swimmer", "e-prism", 0),
    ]
    assert "lane 0:halfcheetah,swimmer: nothing left that ends before" in done.stdout


def test_a_lane_whose_env_runs_out_helps_the_other_lanes_env_and_no_job_runs_twice(grid, tmp_path):
    for seed in range(3):
        _finish(grid, "e-uniform", seed, env="swimmer")
    for seed in (1, 2):
        _finish(grid, "e-prism", seed, env="swimmer")
    done = _session(
        grid,
        "+10 min",
        GRID_LANES="0:halfcheetah 1:swimmer,halfcheetah",
        GRID_MINUTES="e-prism=1 e-uniform=1",
        FAKE_FIT_SLEEP="1",
        TMPDIR=str(tmp_path),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    starts = _env_starts(done.stdout)
    halfcheetah = [(arm, seed) for arm in ("e-prism", "e-uniform") for seed in range(3)]
    assert sorted(starts) == sorted(
        [("swimmer", "e-prism", 0)] + [("halfcheetah", *job) for job in halfcheetah]
    )
    for arm, seed in halfcheetah:
        log = (grid["runs"] / "halfcheetah" / arm / f"seed{seed}.log").read_text()
        assert log.count("fake fit of") == 1, (arm, seed, log)
    assert re.search(r"lane 1:halfcheetah: \S+ start", done.stdout)  # lane 1 ran halfcheetah jobs too


def test_a_run_that_leaves_no_summary_stops_its_lane_with_status_1(grid):
    done = _session(grid, "+10 min", GRID_MINUTES="e-prism=1 e-uniform=1", FAKE_FIT_FAIL="1")
    assert done.returncode == 1
    assert _starts(done.stdout) == [("e-prism", 0)]
    assert "e-prism seed 0 ended, rc=3" in done.stdout
    assert "no summary.json; stopping" in done.stdout


@pytest.mark.parametrize(
    ("deadline", "env", "message"),
    [
        ("-5 min", {}, "DEADLINE '-5 min' is already past"),
        ("tomorrow-ish", {}, "DEADLINE: cannot read 'tomorrow-ish'"),
        ("+60 min", {"GRID_ARMS": "e-prism e-nope"}, "GRID_MINUTES has no entry for arm 'e-nope'"),
        ("+60 min", {"GRID_STAGGER": "half"}, "GRID_STAGGER: 'half' is not a whole number of minutes"),
        (
            "+60 min",
            {"GRID_LANES": "0-halfcheetah"},
            "GRID_LANES: '0-halfcheetah' is not CPU:env or CPU:env,env,...",
        ),
        (
            "+60 min",
            {"GRID_MINUTES": "e-prism=1h e-uniform=20"},
            "GRID_MINUTES: 'e-prism=1h' is not KEY=whole minutes",
        ),
        (
            "+60 min",
            {"GRID_MINUTES": "swimmer/e-prism=10 e-uniform=20"},
            "GRID_MINUTES has no entry for arm 'e-prism'",
        ),
    ],
)
def test_bad_input_is_refused_in_one_line_before_anything_runs(grid, deadline, env, message):
    done = _session(grid, deadline, **env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(message)
    assert not grid["runs"].exists()


def test_a_worktree_at_another_commit_is_refused(grid):
    (grid["main"] / "extra").write_text("x")
    _git("add", "extra", cwd=grid["main"])
    _git("commit", "-q", "-m", "later", cwd=grid["main"])
    later = _git("rev-parse", "--short", "HEAD", cwd=grid["main"])
    done = _session({**grid, "commit": later}, "+60 min")
    assert done.returncode == 2
    assert "is not at" in done.stderr and later in done.stderr
    assert not grid["runs"].exists()


def test_a_session_goes_on_unharmed_when_its_script_is_edited_while_it_runs(grid):
    """bash reads a script as it goes; the grid's lasts hours, and its file in the main checkout may be edited
    meanwhile. Each fit here rewrites the script in place, one line longer: the session still runs every
    pick and ends as planned, because the script is parsed whole before it runs."""
    script = grid["main"] / "tools" / "grid_session.sh"
    done = _session(grid, "+10 min", GRID_MINUTES="e-prism=1 e-uniform=1", FAKE_FIT_EDITS=str(script))
    assert script.read_text().count("a line added while the grid runs") == 6  # one edit per fit
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert _starts(done.stdout) == [("e-prism", s) for s in range(3)] + [("e-uniform", s) for s in range(3)]
    assert done.stdout.count("ended, rc=0") == 6
    assert done.stdout.rstrip().endswith("done, status 0")
