"""The docs say what the code does (issue 21, item 8): GPI-PD named where the backbones are listed, results
folders' per-run files not hidden by .gitignore, and the three early grids' reports say their files are gone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_method_md_no_longer_says_gpi_pd_is_missing():
    text = (ROOT / "docs" / "method.md").read_text()
    assert "not implemented" not in text and "agent.name=gpi_pd" in text


def test_architecture_lists_the_gpi_pd_package_in_the_tree_and_the_plugin_table():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    tree = re.search(r"```\nprism/\n(.*?)```", text, flags=re.S).group(1)
    assert "gpi_pd/" in tree
    (row,) = [line for line in text.splitlines() if line.startswith("| `AGENTS` |")]
    assert "`capql`" in row and "`gpi_pd`" in row


def test_readme_intro_and_cli_help_name_both_backbones():
    intro = (ROOT / "README.md").read_text().split("\n## ", 1)[0]
    assert "CAPQL" in intro and "GPI-PD" in intro
    from prism.cli import _parser

    assert "GPI-PD" in _parser().format_help()


def _ignored(path: str) -> bool:
    out = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, capture_output=True)
    return out.returncode == 0


def test_gitignore_hides_run_outputs_but_not_a_results_folders_per_run_files():
    if subprocess.run(["git", "rev-parse"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    for name in ("config.yaml", "eval.csv", "front.csv", "summary.json"):
        assert not _ignored(f"docs/results/some-grid/runs/hopper/prism/seed0/{name}"), name
    assert _ignored("runs/quickstart/eval.csv")
    assert _ignored("docs/results/some-grid/runs/hopper/prism/seed0/checkpoints/last.pt")


@pytest.mark.parametrize("grid", ["cpu-small", "cpu-medium", "gpi-pd-small"])
def test_early_grid_reports_say_their_per_run_files_are_gone(grid):
    report = (ROOT / "docs" / "results" / grid / "report.md").read_text()
    assert "**The per-run files are gone.**" in report
    assert "no longer exist on any machine" in " ".join(report.split())
    assert not (ROOT / "docs" / "results" / grid / "runs").exists()


def test_no_tracker_labels_in_the_readme_docs_package_tests_and_tools():
    """A reader of the repository cannot look up the tracker's letter labels (the word issue followed by one or
    two capitals; issue 50, item 11): README, docs/*.md, the results folders' markdown, the package's
    docstrings and help (what ``help()`` and ``--help`` show), the shipped configs, the tests and the tools say
    what they mean, or the issue's number, instead. (CHANGELOG keeps its history as written.)"""
    label = re.compile(r"\b[Ii]ssue [A-Z]{1,2}\b")
    files = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "docs").glob("results/*.md")),
        *sorted((ROOT / "docs").glob("results/*/*.md")),
        *sorted((ROOT / "prism").rglob("*.py")),
        *sorted((ROOT / "conf").rglob("*.yaml")),
        *sorted((ROOT / "tests").rglob("*.py")),
        *sorted(p for p in (ROOT / "tools").rglob("*") if p.is_file() and p.suffix in {".py", ".sh"}),
    ]
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if label.search(line)
    ]
    assert len(files) > 10 and hits == []


def test_the_readme_is_a_front_page_with_one_results_row_per_study():
    """README.md is the front door: at most 200 lines, no commit hashes or tracker numbers (history belongs in
    CHANGELOG and git), one results-table row per committed study linking its report (or its table where it
    has none), and every docs page it names exists."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert not re.search(r"\b[Ii]ssues? \d+", text)
    assert not re.search(r"(?<![\w/.-])[0-9a-f]{7,40}(?![\w/.-])", text)
    studies = sorted(p.name for p in (ROOT / "docs" / "results").iterdir() if (p / "table.md").is_file())
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    for study in studies:
        page = "report.md" if (ROOT / "docs" / "results" / study / "report.md").is_file() else "table.md"
        assert f"(docs/results/{study}/{page})" in rows.get(study, ""), study
    for page in re.findall(r"\b(docs/[\w/.-]+\.md)\b", text):
        assert (ROOT / page).is_file(), page


def test_the_changelog_has_a_dated_section_for_the_released_version():
    """CHANGELOG.md follows Keep a Changelog: [Unreleased] first, then a dated section for the version that
    pyproject.toml and ``prism.__version__`` carry; the long history stays in git, not in the file."""
    import tomllib

    import prism

    text = (ROOT / "CHANGELOG.md").read_text()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version == prism.__version__
    sections = re.findall(r"^## \[([^\]]+)\](.*)$", text, flags=re.M)
    assert sections[0][0] == "Unreleased"
    dated = dict(sections[1:])
    assert re.fullmatch(r" - \d{4}-\d{2}-\d{2}", dated.get(version, "")), sections
    assert len(text.encode()) <= 40_000


def test_architecture_tree_lists_prisms_top_level_as_it_is():
    """docs/ARCHITECTURE.md's tree names every package and module at prism/'s top level, and nothing that is
    not there (a module moved into a package is no longer listed at the top)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    tree = re.search(r"```\nprism/\n(.*?)```", text, flags=re.S).group(1)
    listed = set(re.findall(r"^  ([A-Za-z_]\w*(?:/|\.py))\s", tree, flags=re.M))
    prism = ROOT / "prism"
    actual = {f"{path.name}/" for path in prism.iterdir() if (path / "__init__.py").is_file()}
    actual |= {path.name for path in prism.glob("*.py") if path.name != "__init__.py"}
    assert listed == actual
