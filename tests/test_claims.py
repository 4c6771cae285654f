"""Every "beats", "ties", "matches" and "as well" in the study reports, docs/results/README.md, README.md,
docs/usage.md and CHANGELOG.md cites a row of a committed ratios.csv whose verdict allows it
(prism.experiments.claims); and the check fails on planted bad sentences, so that a green run means something."""

from __future__ import annotations

from pathlib import Path

from prism.experiments.claims import check_files, check_text, load_rows

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
ROWS = {
    ("t1", "mo-walker2d-v5", "e-prism", "e-baseline"): "beats",
    ("t1", "mo-hopper-v5", "e-prism", "e-baseline"): "not distinguishable",
    ("t1", "mo-swimmer-v5", "e-prism", "e-oracle"): "ties",
    ("t1", "mo-swimmer-v5", "e-prism", "e-uniform"): "ahead (exploratory)",
}


def _words(text: str, preset: str | None = None) -> list[str]:
    return [problem.word for problem in check_text(text, "x.md", ROWS, preset)]


def test_a_backed_claim_passes():
    assert _words("PRISM beats the baseline on walker2d [t1 walker2d: e-prism / e-baseline].") == []
    assert _words("On swimmer PRISM ties the oracle [t1 mo-swimmer-v5: e-prism / e-oracle].") == []
    # inside its own report a citation may leave the preset out
    assert _words("- PRISM matches the oracle\n  [swimmer: e-prism / e-oracle].", preset="t1") == []


def test_planted_bad_sentences_fail():
    # uncited
    assert _words("PRISM beats the sparse baseline on every env.") == ["beats"]
    # cited, but the row is not significant after Holm
    assert _words("PRISM beats the baseline on hopper [t1 hopper: e-prism / e-baseline].") == ["beats"]
    # an exploratory row at uncorrected p < 0.05 is not a "beats"
    assert _words("ReSymNet beats uniform on swimmer [t1 swimmer: e-prism / e-uniform].") == ["beats"]
    # "ties" and "as well" need a TOST rejection, not a CI containing 1
    assert _words("Uniform does as well on hopper [t1 hopper: e-prism / e-baseline].") == ["as well"]
    assert _words("At equal budget PRISM ties the oracle (1.01 [0.94, 1.07]).") == ["ties"]
    # a row that is not in any table
    assert _words("PRISM beats RRD [t1 walker2d: e-prism / e-rrd].") == ["beats"]
    # a row that backs one word does not back another in the same sentence
    assert _words("It beats the baseline and ties uniform [t1 walker2d: e-prism / e-baseline].") == ["ties"]
    # the line number points at the sentence
    text = "# A report\n\nFine here.\n\n- **It ties the\n  oracle.**\n"
    assert [p.line for p in check_text(text, "x.md", ROWS)] == [5]


def test_quoted_words_are_mentions_not_claims():
    assert _words('Reports say "beats" only for a primary row; `ties` needs TOST.') == []


def test_the_committed_rows_carry_verdicts():
    rows = load_rows(RESULTS)
    assert rows[("table1-study", "mo-walker2d-v5", "e-prism", "e-baseline")] == "beats"
    assert rows[("table1-study", "mo-hopper-v5", "e-prism", "e-baseline")] == "not distinguishable"


def test_every_claim_in_the_reports_readme_and_changelog_is_backed_by_its_row():
    # every hand-written page of a study (report.md, and linked pages such as halfcheetah-paper's oracle.md);
    # table.md is generated, its verdict column the rows themselves
    written = sorted(p for p in RESULTS.glob("*/*.md") if p.name != "table.md")
    assert RESULTS / "halfcheetah-paper" / "oracle.md" in written
    assert (RESULTS / "README.md").is_file() and (ROOT / "docs" / "usage.md").is_file()
    paths = written + [
        RESULTS / "README.md",
        ROOT / "README.md",
        ROOT / "docs" / "usage.md",
        ROOT / "CHANGELOG.md",
    ]
    problems = check_files(paths, ROOT, load_rows(RESULTS))
    assert not problems, "\n".join(map(str, problems))


def test_the_scan_of_a_real_report_fails_on_a_planted_sentence(tmp_path):
    report = (RESULTS / "table1-study" / "report.md").read_text()
    planted = tmp_path / "docs" / "results" / "table1-study" / "report.md"
    planted.parent.mkdir(parents=True)
    planted.write_text(report)
    before = check_files([planted], tmp_path, load_rows(RESULTS))
    planted.write_text(report + "\n- PRISM beats the baseline on hopper [hopper: e-prism / e-baseline].\n")
    after = check_files([planted], tmp_path, load_rows(RESULTS))
    assert after[: len(before)] == before and [p.word for p in after[len(before) :]] == ["beats"]


def test_a_table_row_under_an_env_heading_cites_its_own_row():
    table = (
        "## mo-walker2d-v5\n\n### Ratios\n| A / B | verdict |\n|---|---|\n| e-prism / e-baseline | beats |\n"
    )
    assert _words(table, preset="t1") == []
    assert _words(table.replace("walker2d", "hopper"), preset="t1") == ["beats"]
    assert _words(table.replace("## mo-walker2d-v5", "## Summary"), preset="t1") == ["beats"]
    assert _words(table.replace("### Ratios", "## Summary"), preset="t1") == ["beats"]
