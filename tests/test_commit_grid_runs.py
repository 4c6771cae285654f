"""tools/commit_grid_runs.sh: which files of which runs it commits, and what --report adds.

The script runs for real in a scratch git repository holding it; the prism it calls for --report is a stand-in
(``$PRISM``) that writes a table.md and a ratios.csv naming the runs it found, as ``prism reproduce
--report-only`` writes the report from the committed runs. A test makes it do something once, before or after
it reads the runs, with a docs/results/before.sh or after.sh that it sources (and removes)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_PRISM = r"""#!/usr/bin/env bash
# Stand-in for `prism reproduce --report-only` (see tests/test_commit_grid_runs.py).
while [ $# -gt 0 ]; do
  case $1 in --out) out=$2; shift;; --results) results=$2; shift;; esac
  shift
done
echo "$*" >> "$results/../calls.log"
once() { [ -f "$results/../$1" ] && mv "$results/../$1" "$results/../$1.done" && . "$results/../$1.done"; true; }
once before.sh
runs=$(cd "$out" && find . -name summary.json | sort | tr '\n' ' ')
echo "report of $runs" > "$results/table.md"
echo "runs,$runs" > "$results/ratios.csv"
once after.sh
"""

RUN_FILES = ("config.yaml", "eval.csv", "front.csv", "summary.json")


def _git(*args: str, cwd: Path) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PRISM": str(repo.parent / "fake-prism"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
    }
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(
        ["bash", "tools/commit_grid_runs.sh", *args], cwd=repo, env=env, capture_output=True, text=True
    )


def _make_run(repo: Path, preset: str, name: str, finished: bool) -> Path:
    run = repo / "docs" / "results" / preset / "runs" / "swimmer" / "e-prism" / name
    (run / "tb").mkdir(parents=True)
    (run / "tb" / "events.out").write_text("tb")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.pt").write_text("weights")
    for file in RUN_FILES:
        if file != "summary.json" or finished:
            (run / file).write_text(f"{name} {file}")
    return run


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "main"
    (repo / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "commit_grid_runs.sh", repo / "tools")
    results = repo / "docs" / "results" / "study"
    results.mkdir(parents=True)
    (results / "report.md").write_text("hand-written\n")
    _git("init", "-q", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("commit", "-q", "-m", "start", cwd=repo)
    fake = tmp_path / "fake-prism"
    fake.write_text(FAKE_PRISM)
    fake.chmod(0o755)
    return repo


def _committed(repo: Path, ref: str = "HEAD") -> list[str]:
    return _git("show", "--name-only", "--format=", ref, cwd=repo).splitlines()


def test_commits_the_four_files_of_finished_runs_only(repo):
    _make_run(repo, "study", "seed0", finished=True)
    _make_run(repo, "study", "seed1", finished=False)
    (repo / "elsewhere.txt").write_text("uncommitted work")
    result = _run(repo, "study")
    assert result.returncode == 0, result.stderr
    prefix = "docs/results/study/runs/swimmer/e-prism/seed0/"
    assert sorted(_committed(repo)) == sorted(prefix + f for f in RUN_FILES)
    assert "study/runs/swimmer/e-prism/seed0" in _git("log", "-1", "--format=%s", cwd=repo)
    # the unfinished run, the other work and the run's big folders stay out of git
    assert "elsewhere.txt" in _git("status", "--porcelain", cwd=repo)
    assert not (repo / "calls.log").exists() and not (repo / "docs/results/calls.log").exists()
    again = _run(repo, "study")
    assert again.returncode == 0 and "nothing new" in again.stdout


def test_report_regenerates_and_commits_the_report_of_the_presets_that_grew(repo):
    _make_run(repo, "study", "seed0", finished=True)
    (repo / "docs" / "results" / "other" / "runs").mkdir(parents=True)
    result = _run(repo, "--report")
    assert result.returncode == 0, result.stderr
    report_commit, runs_commit = "HEAD", "HEAD~1"
    assert len(_committed(repo, runs_commit)) == len(RUN_FILES)
    assert sorted(_committed(repo, report_commit)) == [
        "docs/results/study/ratios.csv",
        "docs/results/study/table.md",
    ]
    assert "./swimmer/e-prism/seed0/summary.json" in (repo / "docs/results/study/table.md").read_text()
    # only the preset that gained runs was regenerated; the hand-written report is left as it was
    assert (repo / "docs/results/calls.log").read_text().count("\n") == 1
    assert (repo / "docs/results/study/report.md").read_text() == "hand-written\n"
    assert "docs/results/study/" not in _git("status", "--porcelain", "--untracked-files=no", cwd=repo)
    # a later run makes a new runs commit and a new report commit naming both runs
    _make_run(repo, "study", "seed1", finished=True)
    assert _run(repo, "--report", "study").returncode == 0
    assert "seed1/summary.json" in (repo / "docs/results/study/table.md").read_text()
    assert sorted(_committed(repo)) == ["docs/results/study/ratios.csv", "docs/results/study/table.md"]
    assert sorted(_committed(repo, "HEAD~1")) == sorted(
        f"docs/results/study/runs/swimmer/e-prism/seed1/{f}" for f in RUN_FILES
    )


def test_unknown_option_and_missing_preset_are_refused_in_one_line(repo):
    for args, named in ((["--reprot"], "--reprot"), (["nosuch"], "nosuch")):
        result = _run(repo, *args)
        assert result.returncode == 2
        assert len(result.stderr.strip().splitlines()) == 1 and named in result.stderr
    assert _git("log", "--oneline", cwd=repo).count("\n") == 0


def _hook(repo: Path, when: str, script: str) -> None:
    (repo / "docs" / "results" / f"{when}.sh").write_text(script)


def test_a_rerun_naming_the_preset_redoes_a_report_step_that_failed(repo):
    _make_run(repo, "study", "seed0", finished=True)
    _hook(repo, "before", "exit 1\n")
    failed = _run(repo, "--report", "study")
    assert failed.returncode != 0
    assert len(_committed(repo)) == len(RUN_FILES)  # the runs were committed before the report failed
    assert not (repo / "docs/results/study/table.md").exists()
    again = _run(repo, "--report", "study")
    assert again.returncode == 0, again.stderr
    assert "nothing new" in again.stdout
    assert sorted(_committed(repo)) == ["docs/results/study/ratios.csv", "docs/results/study/table.md"]
    assert "seed0/summary.json" in (repo / "docs/results/study/table.md").read_text()
    # once the committed report is current, a third run commits nothing
    head = _git("rev-parse", "HEAD", cwd=repo)
    third = _run(repo, "--report", "study")
    assert third.returncode == 0 and "report unchanged" in third.stdout
    assert _git("rev-parse", "HEAD", cwd=repo) == head


@pytest.mark.parametrize("when", ["between the commits", "during the report"])
def test_a_run_finishing_while_the_report_is_made_joins_the_reports_commit(repo, when):
    """One that finishes right after the runs commit (a git post-commit hook finishes it) is in the report; one
    that finishes after the report read the runs makes the report be made again to hold it. Either way the report
    commit holds the run's files, so the committed report recomputes from committed runs."""
    _make_run(repo, "study", "seed0", finished=True)
    late = "docs/results/study/runs/swimmer/e-prism/seed9"
    finish = "".join(f"mkdir -p {late}; echo late > {late}/{f}\n" for f in RUN_FILES)
    if when == "between the commits":
        hook = repo / ".git" / "hooks" / "post-commit"
        hook.write_text(f'#!/usr/bin/env bash\nrm -- "$0"\n{finish}')
        hook.chmod(0o755)
    else:
        _hook(repo, "after", finish)
    result = _run(repo, "--report", "study")
    assert result.returncode == 0, result.stderr
    assert sorted(_committed(repo, "HEAD~1")) == sorted(
        f"docs/results/study/runs/swimmer/e-prism/seed0/{f}" for f in RUN_FILES
    )
    assert sorted(_committed(repo)) == sorted(
        ["docs/results/study/ratios.csv", "docs/results/study/table.md"] + [f"{late}/{f}" for f in RUN_FILES]
    )
    assert "study/runs/swimmer/e-prism/seed9" in _git("log", "-1", "--format=%s", cwd=repo)
    assert "seed9/summary.json" in (repo / "docs/results/study/table.md").read_text()
    assert late not in _git("status", "--porcelain", cwd=repo)
    calls = (repo / "docs/results/calls.log").read_text().count("\n")
    assert calls == (1 if when == "between the commits" else 2)


def test_a_committed_config_names_its_run_folder_relative_to_the_results_folder(repo):
    run = _make_run(repo, "study", "seed0", finished=True)
    (run / "config.yaml").write_text(f"seed: 0\nrun_dir: {run.resolve()}\nloop:\n  cycles: 2\n")
    result = _run(repo, "study")
    assert result.returncode == 0, result.stderr
    committed = _git("show", "HEAD:docs/results/study/runs/swimmer/e-prism/seed0/config.yaml", cwd=repo)
    assert committed == "seed: 0\nrun_dir: runs/swimmer/e-prism/seed0\nloop:\n  cycles: 2"
    assert "nothing new" in _run(repo, "study").stdout  # the rewritten file is what git has: done once


def test_no_committed_run_config_carries_an_absolute_run_dir():
    # table1-paper is left out while its grid still commits runs made before configs were written relative
    tracked = _git("ls-files", "docs/results", cwd=ROOT).splitlines()
    configs = [
        p for p in tracked if p.endswith("/config.yaml") and not p.startswith("docs/results/table1-paper/")
    ]
    assert configs
    absolute = [
        p
        for p in configs
        if any(line.startswith("run_dir: /") for line in (ROOT / p).read_text().splitlines())
    ]
    assert absolute == []


def test_the_reports_copy_of_a_run_config_names_its_folder_relative_to_the_results_folder(tmp_path):
    from prism.experiments.collect import copy_run_files
    from prism.experiments.grid import Cell

    run = tmp_path / "grid" / "hopper" / "prism" / "seed0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"seed: 0\nrun_dir: {run}\n")
    (run / "summary.json").write_text("{}")
    (run.parent / "config.yaml").write_text(f"run_dir: {run.parent}\nseeds:\n- 0\n")
    results = tmp_path / "docs" / "results" / "study"
    copy_run_files([Cell("hopper", "prism", 0)], tmp_path / "grid", results)
    copies = results / "runs" / "hopper" / "prism"
    assert (copies / "seed0" / "config.yaml").read_text() == "seed: 0\nrun_dir: runs/hopper/prism/seed0\n"
    assert (copies / "config.yaml").read_text() == "run_dir: runs/hopper/prism\nseeds:\n- 0\n"
    assert (copies / "seed0" / "summary.json").read_text() == "{}"
