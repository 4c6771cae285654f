"""Every committed study report recomputes from its committed run files with the command it prints: each text
file the report writes (table.md, table.csv, ratios.csv, fits.csv, takeoff.csv, aggregate.csv, a named
aggregate's aggregate_<name>.csv, costs.csv, divergence.csv, flips.csv, paper_claims.csv, a sweep's sweep.csv or
sweep_<name>.csv) comes out byte for byte as committed. Figures are left out (their pixels depend on
matplotlib's version, not on prism).

"Committed" is HEAD's tree: the reports and run files are exported with ``git archive`` and the report is made
from that copy (the package's repository root pointed at it), so a grid run that has just finished in the
working tree, not yet committed, does not fail the test while a grid is running. Outside a git checkout the
working tree is used."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from prism.experiments import cli, grid, report

ROOT = Path(__file__).resolve().parents[1]
STUDIES = (
    "protocol-study",
    "reward-budget",
    "table1-study",
    "halfcheetah-paper",
    "fit-cost",
    "control-cost-study",
    "ablation-study",
    "table1-paper",
)
TEXT_FILES = (
    "table.md",
    "table.csv",
    "ratios.csv",
    "fits.csv",
    "takeoff.csv",
    "takeoff_tests.csv",
    "aggregate.csv",
    "aggregate_rrd.csv",
    "costs.csv",
    "divergence.csv",
    "flips.csv",
    "paper_claims.csv",
    "sweep.csv",
    "sweep_channel.csv",
)


def _without_results_path(text: str) -> str:
    """table.md ends with the recompute command, which names the folder the report was written to."""
    return re.sub(r"--results \S+`", "--results RESULTS`", text)


@pytest.fixture(scope="module")
def committed_root(tmp_path_factory) -> Path:
    """A copy of HEAD's docs/results in a folder that stands for the repository root (ROOT outside git)."""
    try:
        archive = subprocess.run(
            ["git", "archive", "HEAD", "docs/results"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return ROOT
    root = tmp_path_factory.mktemp("head")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


@pytest.mark.parametrize("study", STUDIES)
def test_a_committed_study_report_recomputes_byte_for_byte(
    study, committed_root, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("rliable")
    # the report finds joined arms' and reference runs under the repository root, and prints paths relative to it
    monkeypatch.setattr(grid, "ROOT", committed_root)
    monkeypatch.setattr(cli, "ROOT", committed_root)
    committed = committed_root / "docs" / "results" / study
    monkeypatch.setattr(report, "plot", lambda *args, **kwargs: None)
    monkeypatch.setattr(report, "plot_aggregate", lambda *args, **kwargs: None)
    monkeypatch.setattr(report, "plot_sweep", lambda *args, **kwargs: None)
    argv = ["--preset", study, "--report-only", "--out", str(committed / "runs"), "--results", str(tmp_path)]
    assert cli.main(argv) == 0
    # the printed recompute command names the committed runs, in the package's command line
    printed = f"`prism reproduce --preset {study} --report-only --out docs/results/{study}/runs"
    assert printed in capsys.readouterr().out
    written = sorted(name for name in TEXT_FILES if (tmp_path / name).is_file())
    assert written == sorted(name for name in TEXT_FILES if (committed / name).is_file())
    assert "table.md" in written and "table.csv" in written
    for name in written:
        ours, theirs = (tmp_path / name).read_text(), (committed / name).read_text()
        if name == "table.md":
            ours, theirs = _without_results_path(ours), _without_results_path(theirs)
        assert ours == theirs, f"{study}/{name} does not recompute from its run files"


def test_no_committed_run_folder_is_a_run_in_progress():
    """A seed folder under docs/results/*/runs is committed only once its run has finished (its summary.json
    exists): a broad `git add` of a results folder while a grid runs would otherwise commit a half-written
    eval.csv that the report ignores and a reader does not."""
    try:
        tracked = subprocess.run(
            ["git", "ls-files", "docs/results"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = set(tracked)
    seeds = {re.sub(r"(/seed\d+)/.*", r"\1", f) for f in files if re.search(r"/runs/.+/seed\d+/", f)}
    assert seeds, "no committed run folders found"
    unfinished = sorted(s for s in seeds if f"{s}/summary.json" not in files)
    assert not unfinished, f"run folders committed without summary.json: {unfinished[:5]}"
