"""The report's judgement of the paper's sentences (prism/experiments/paper_claims.py, issue 62): each rule on
hand-built ratio rows, and the section a report writes from synthetic runs whose verdicts are known by
construction."""

from __future__ import annotations

import csv
import dataclasses
import json
import math

import pytest

from prism.experiments import inference
from prism.experiments.grid import PaperClaim, Ratio
from prism.experiments.paper_claims import (
    CONTRADICTED,
    HOLDS,
    NOT_RUN,
    NOT_SHOWN,
    SAME_DIRECTION,
    check_claims,
    claim_rows,
    claim_verdict,
    paper_ratio_in_interval,
    row_status,
)
from prism.experiments.ratios import RatioRow
from prism.experiments.studies import load_preset, shipped

ABLATION = load_preset("ablation-study")


def _row(
    a: str,
    b: str,
    *,
    ahead: bool,
    p: float,
    holm: float = math.nan,
    tost: float = 0.5,
    metric="hv",
    env="mo-swimmer-v5",
    paper_ratio=math.nan,
):
    primary = not math.isnan(holm)
    return RatioRow(
        env=env,
        metric=metric,
        ratio=Ratio(a, b, primary=primary),
        protocols="equal / equal",
        boot={"ratio": 1.1 if ahead else 0.9, "p_welch": p, "ci_low": 0.8, "ci_high": 1.2},
        interval=(0.8, 1.2),
        p_tost=tost,
        primary=primary,
        p_holm=holm,
        paper="—",
        ahead=ahead,
        paper_ratio=paper_ratio,
    )


LOWER = PaperClaim("x", (("a", "b"),), "lower", metrics=("hv", "eum"))
EQUAL = PaperClaim("y", (("a", "b"),), "equal")


def test_a_primary_row_supports_a_claim_only_at_holm_p_below_5_percent():
    assert row_status(_row("a", "b", ahead=False, p=0.001, holm=0.01), "lower") == "supports"
    # significant uncorrected but not after Holm: a primary row stays open
    assert row_status(_row("a", "b", ahead=False, p=0.01, holm=0.08), "lower") == "open"
    assert row_status(_row("a", "b", ahead=True, p=0.001, holm=0.01), "lower") == "opposes"
    assert row_status(_row("a", "b", ahead=True, p=0.001, holm=0.01), "higher") == "supports"


def test_an_exploratory_row_counts_at_uncorrected_p_and_a_tie_only_supports_an_equal_claim():
    assert row_status(_row("a", "b", ahead=False, p=0.01, metric="eum"), "lower") == "supports"
    assert row_status(_row("a", "b", ahead=True, p=0.01, metric="eum"), "lower") == "opposes"
    tie = _row("a", "b", ahead=False, p=0.6, holm=0.9, tost=0.01)
    assert tie.verdict == inference.TIES
    assert row_status(tie, "equal") == "supports" and row_status(tie, "lower") == "open"
    assert row_status(_row("a", "b", ahead=False, p=0.001, holm=0.01), "equal") == "opposes"
    assert row_status(_row("a", "b", ahead=True, p=0.001, holm=0.01), "equal") == "opposes"


@pytest.mark.parametrize(
    ("rows", "claim", "expected"),
    [
        ([dict(ahead=False, p=0.001, holm=0.01), dict(ahead=False, p=0.01, metric="eum")], LOWER, HOLDS),
        (
            [dict(ahead=False, p=0.001, holm=0.01), dict(ahead=False, p=0.2, metric="eum")],
            LOWER,
            SAME_DIRECTION,
        ),
        ([dict(ahead=False, p=0.001, holm=0.01), dict(ahead=True, p=0.3, metric="eum")], LOWER, NOT_SHOWN),
        (
            [dict(ahead=False, p=0.001, holm=0.01), dict(ahead=True, p=0.01, metric="eum")],
            LOWER,
            CONTRADICTED,
        ),
        ([dict(ahead=False, p=math.nan, holm=math.nan)], LOWER, NOT_RUN),
        ([dict(ahead=False, p=0.7, holm=0.9, tost=0.01)], EQUAL, HOLDS),
        ([dict(ahead=False, p=0.7, holm=0.9, tost=0.2)], EQUAL, NOT_SHOWN),
        ([dict(ahead=False, p=0.001, holm=0.02, tost=0.9)], EQUAL, CONTRADICTED),
    ],
)
def test_a_claims_verdict_follows_its_rows(rows, claim, expected):
    assert claim_verdict(claim, [_row("a", "b", **r) for r in rows]) == expected
    assert claim_verdict(claim, []) == NOT_RUN


def test_a_claim_is_carried_by_its_pairs_and_metrics_only():
    rows = [
        _row("a", "b", ahead=False, p=0.01, holm=0.02),
        _row("a", "b", ahead=False, p=0.01, metric="eum"),
        _row("a", "b", ahead=False, p=0.01, metric="vo"),
        _row("c", "b", ahead=False, p=0.01, holm=0.02),
    ]
    assert claim_rows(LOWER, rows) == rows[:2]


def test_a_claim_about_one_envs_row_is_carried_by_that_env_only():
    hopper = PaperClaim("PRISM above the oracle on hopper", (("a", "b"),), "higher", envs=("hopper",))
    rows = [_row("a", "b", ahead=True, p=0.01, env=env) for env in ("mo-hopper-v5", "mo-walker2d-v5")]
    assert claim_rows(hopper, rows) == rows[:1]
    assert claim_rows(dataclasses.replace(hopper, envs=()), rows) == rows


@pytest.mark.parametrize(
    ("paper_ratio", "inside"), [(1.215, "yes"), (1.25, "no"), (0.79, "no"), (math.nan, "—")]
)
def test_the_papers_ratio_is_read_against_the_rows_interval(paper_ratio, inside):
    row = _row("a", "b", ahead=True, p=0.01, paper_ratio=paper_ratio)  # its interval: [0.8, 1.2]
    row = dataclasses.replace(row, interval=(0.8, 1.22))
    assert paper_ratio_in_interval(row) == inside


def test_a_claim_naming_an_env_the_study_lacks_is_refused():
    # table1-paper's own two envs (it joins halfcheetah and swimmer for its aggregates only)
    table1 = dataclasses.replace(load_preset("table1-paper"), envs=("hopper", "walker"), joined=())
    claim = PaperClaim("z", (("e-prism", "e-oracle"),), "higher", envs=("swimmer",))
    with pytest.raises(ValueError, match="env 'swimmer' is not one of the study's"):
        check_claims(dataclasses.replace(table1, paper_claims=(claim,)))


def test_every_presets_claims_name_its_own_ratios_and_a_typo_is_refused():
    for name in shipped():
        check_claims(load_preset(name))
    assert len(ABLATION.paper_claims) == 6
    typo = dataclasses.replace(
        ABLATION, paper_claims=(PaperClaim("z", (("a-wo-residul", "a-prism"),), "lower"),)
    )
    with pytest.raises(ValueError, match="a-wo-residul / a-prism is not a ratio of the preset"):
        check_claims(typo)
    with pytest.raises(ValueError, match="expect='less'"):
        check_claims(
            dataclasses.replace(
                ABLATION, paper_claims=(PaperClaim("z", (("a-wo-loss", "a-prism"),), "less"),)
            )
        )


def _write_run(run_dir, env_id: str, hv: float, eum: float) -> None:
    run_dir.mkdir(parents=True)
    fields = ["env_steps", "hv", "eum", "vo", "final"]
    with (run_dir / "eval.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(fields)
        writer.writerow([50000, hv, eum, 1.0, 1])
    (run_dir / "summary.json").write_text(json.dumps({"env_id": env_id, "final": {"hv": hv, "eum": eum}}))


def test_the_ablation_report_judges_each_sentence_from_its_runs(tmp_path):
    """(And drops a stale section's CSV.) Synthetic swimmer runs (5 seeds) where w/o residual is clearly worse on HV and EUM (holds), w/o loss a
    little better (not shown), w/o refinement equal within ±1 % (ties: holds) and uniform clearly better than
    PRISM (contradicts the last sentence); the report's section and CSV say so."""
    from prism.experiments.report import write_report

    spread = (-2.0, -1.0, 0.0, 1.0, 2.0)
    levels = {
        "a-prism": (1000.0, 10.0),
        "a-wo-residual": (800.0, 8.0),
        "a-wo-refinement": (1000.5, 10.05),
        "a-wo-loss": (1003.0, 10.1),
        "a-uniform": (1300.0, 13.0),
        "a-random": (700.0, 7.0),
    }
    preset = dataclasses.replace(ABLATION, envs=("swimmer",), joined=())
    cells = [c for c in preset.cells() if c.method in levels]
    out = tmp_path / "runs"
    for cell in cells:
        hv, eum = levels[cell.method]
        s = spread[cell.seed] * (40.0 if cell.method == "a-wo-loss" else 1.0)  # w/o loss: a noisy +0.3 %
        _write_run(cell.run_dir(out), "mo-swimmer-v5", hv + 0.4 * s, eum + 0.01 * s)
    results = tmp_path / "report"
    results.mkdir()
    # a previous report's section that this one has no rows for, and a file of somebody else's
    (results / "divergence.csv").write_text("stale\n")
    (results / "notes.md").write_text("mine\n")
    markdown = write_report("ablation-study", preset, cells, out, results)
    assert not (results / "divergence.csv").exists() and (results / "notes.md").read_text() == "mine\n"
    rows = list(csv.DictReader((results / "paper_claims.csv").open()))
    verdict = {int(r["claim"]): r["claim_verdict"] for r in rows}
    assert verdict == {1: HOLDS, 2: NOT_RUN, 3: NOT_RUN, 4: HOLDS, 5: NOT_SHOWN, 6: CONTRADICTED}
    residual = [r for r in rows if r["claim"] == "1"]
    assert [(r["metric"], r["family"], r["row_status"]) for r in residual] == [
        ("hv", "primary", "supports"),
        ("eum", "exploratory", "supports"),
    ]
    assert float(residual[0]["ratio"]) == pytest.approx(0.8)
    assert "> removing the residual blocks reduces HV and EUM across all environments" in markdown
    assert "**Verdict: contradicted.**" in markdown
