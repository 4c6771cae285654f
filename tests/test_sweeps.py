"""A study's sweep (a metric against a swept config key, prism/experiments/sweeps.py) on fake runs: the report's
first section, its CSV read back against statistics computed here, and the loader's refusals."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from prism.experiments import cli, studies
from prism.experiments.sweeps import INSIDE, OUTSIDE, OVERLAPS, band_position, mean_interval

STUDY = """\
description: A sweep of the release probability.
envs: [hopper, swimmer]
seeds: [0, 1, 2]
scale: cpu-medium
arms:
  oracle: {method: oracle, protocol: equal}
  base0: {method: baseline, protocol: equal}
  base1: {method: baseline, protocol: equal, overrides: [env.p_rel=0.2]}
  prism0: {method: prism, protocol: equal}
  prism1: {method: prism, protocol: equal, overrides: [env.p_rel=0.2]}
env_arms:
  swimmer: [oracle, base0, base1]
ratios:
  - {numerator: base0, denominator: oracle, primary: true}
  - {numerator: base1, denominator: oracle, primary: true}
  - {numerator: prism1, denominator: prism0}
sweeps:
  - key: env.p_rel
    reference: oracle
    series:
      - {label: baseline, arms: {0: base0, 0.2: base1}, versus: oracle, band: [0.6, 0.8]}
      - {label: PRISM, arms: {0: prism0, 0.2: prism1}, versus: prism0}
"""

HV = {
    "oracle": (10.0, 10.4, 9.6),
    "base0": (6.9, 7.1, 7.0),  # 0.70 of the oracle: inside [0.6, 0.8]
    "base1": (9.0, 9.9, 9.5),  # ~0.95: outside it
    "prism0": (8.0, 8.1, 7.9),
    "prism1": (8.02, 8.0, 7.98),  # within ±5 % of prism0
}
SEGMENTS = {"prism0": (1000, 1000), "prism1": (5600, 4800)}
"""Arm -> the store's segments at cycle 1 and 2 (of 1000 and 1200 episodes): segments per episode 1 and 5.6, 4."""


def _run(run_dir: Path, hv: float, segments: tuple[int, int] | None, pearson: float) -> None:
    run_dir.mkdir(parents=True)
    with (run_dir / "eval.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["env_steps", "hv", "eum", "vo", "final"])
        writer.writerows([[100, hv / 2, hv / 20, 1.0, 0], [200, hv, hv / 10, 1.0, 1]])
    summary: dict = {}
    if segments is not None:
        summary["reward_fits"] = [
            {
                "store": {"episodes": episodes, "segments": count},
                "validation": {"pearson": pearson + cycle / 10},
            }
            for cycle, (count, episodes) in enumerate(zip(segments, (1000, 1200)))
        ]
    (run_dir / "summary.json").write_text(json.dumps(summary))


def _report(tmp_path: Path, text: str = STUDY) -> Path:
    study, out, results = tmp_path / "sweep-study.yaml", tmp_path / "grid", tmp_path / "report"
    study.write_text(text)
    for env, arms in (("hopper", HV), ("swimmer", ("oracle", "base0", "base1"))):
        for arm in arms:
            for seed, hv in enumerate(HV[arm]):
                pearson = 0.5 + seed / 100
                _run(out / env / arm / f"seed{seed}", hv, SEGMENTS.get(arm), pearson)
    argv = ["--study", str(study), "--report-only", "--out", str(out), "--results", str(results)]
    assert cli.main(argv) == 0
    return results


def _rows(results: Path, **where) -> list[dict]:
    rows = csv.DictReader((results / "sweep.csv").open())
    return [r for r in rows if all(r[k] == v for k, v in where.items())]


def test_the_sweep_comes_first_with_each_levels_mean_and_t_interval(tmp_path):
    results = _report(tmp_path)
    markdown = (results / "table.md").read_text()
    assert markdown.index("baseline, PRISM against env.p_rel") < markdown.index("Final = the evaluation")
    assert (results / "sweep.png").stat().st_size > 0
    for arm, level in (("base1", "0.2"), ("prism0", "0"), ("oracle", "—")):
        (row,) = _rows(results, statistic="mean", env="mo-hopper-v5", arm=arm, metric="hv")
        values = np.array(HV[arm])
        half = stats.t.ppf(0.975, 2) * values.std(ddof=1) / math.sqrt(3)
        assert row["level"] == level and row["n"] == "3"
        assert float(row["value"]) == pytest.approx(values.mean())
        assert float(row["ci_low"]) == pytest.approx(values.mean() - half)
        assert float(row["ci_high"]) == pytest.approx(values.mean() + half)
    # swimmer runs no PRISM arm: no point of that series there
    assert not _rows(results, statistic="mean", env="mo-swimmer-v5", series="PRISM")


def test_each_comparison_is_its_ratio_row_with_the_band_judged(tmp_path):
    results = _report(tmp_path)
    ratios = {
        (r["env"], r["numerator"], r["denominator"]): r
        for r in csv.DictReader((results / "ratios.csv").open())
        if r["metric"] == "hv"
    }
    compared = _rows(results, statistic="ratio")
    # base0 and base1 over the oracle in both envs, prism1 over prism0 on hopper; prism0 / prism0 is no row
    assert sorted((r["env"], r["arm"]) for r in compared) == [
        ("mo-hopper-v5", "base0"),
        ("mo-hopper-v5", "base1"),
        ("mo-hopper-v5", "prism1"),
        ("mo-swimmer-v5", "base0"),
        ("mo-swimmer-v5", "base1"),
    ]
    for row in compared:
        ratio = ratios[(row["env"], row["arm"], row["versus"])]
        assert float(row["value"]) == pytest.approx(float(ratio["ratio"]))
        assert float(row["ci_low"]) == pytest.approx(float(ratio["ci_fieller_low"]))
        assert float(row["ci_high"]) == pytest.approx(float(ratio["ci_fieller_high"]))
        assert (row["verdict"], row["family"]) == (ratio["verdict"], ratio["family"])
    position = {(r["env"], r["arm"]): r["band_position"] for r in compared}
    assert position[("mo-hopper-v5", "base0")] == INSIDE and position[("mo-hopper-v5", "base1")] == OUTSIDE
    assert position[("mo-hopper-v5", "prism1")] == "—"  # the PRISM series has no band
    (prism,) = [r for r in compared if r["arm"] == "prism1"]
    assert prism["verdict"] == "ties"  # within ±5 % of its own p_rel = 0 by TOST
    assert "| mo-hopper-v5 | baseline | 0.2 | base1 / oracle |" in (results / "table.md").read_text()


def test_the_segment_store_per_level_and_cycle(tmp_path):
    results = _report(tmp_path)
    per_episode = {
        (r["arm"], r["cycle"]): float(r["value"]) for r in _rows(results, statistic="segments_per_episode")
    }
    expected = {
        ("prism0", "1"): 1.0,
        ("prism0", "2"): 1000 / 1200,
        ("prism1", "1"): 5.6,
        ("prism1", "2"): 4.0,
    }
    assert per_episode == pytest.approx(expected)
    (pearson,) = _rows(results, statistic="val_pearson", arm="prism1", cycle="2")
    assert float(pearson["value"]) == pytest.approx(np.mean([0.6, 0.61, 0.62]))
    # the baseline fits nothing: no store row
    assert not _rows(results, statistic="segments_per_episode", arm="base1")


@pytest.mark.parametrize(
    ("low", "high", "position"),
    [
        (0.62, 0.78, INSIDE),
        (0.81, 0.9, OUTSIDE),
        (0.4, 0.59, OUTSIDE),
        (0.55, 0.65, OVERLAPS),
        (0.5, 0.9, OVERLAPS),
    ],
)
def test_where_an_interval_lies_against_a_band(low, high, position):
    assert band_position(low, high, (0.6, 0.8)) == position
    assert band_position(low, high, None) == "—" and band_position(math.nan, math.nan, (0.6, 0.8)) == "—"


def test_a_single_value_has_no_interval():
    mean, low, high = mean_interval([3.0])
    assert mean == 3.0 and math.isnan(low) and math.isnan(high)


BAD = {
    "an arm at another level": (
        "[env.p_rel=0.2]}\n  prism0",
        "[env.p_rel=0.5]}\n  prism0",
        "base1 sets env.p_rel=0.5, not its level 0.2",
    ),
    "a comparison the study lacks": (
        "  - {numerator: prism1, denominator: prism0}\n",
        "",
        "prism1 / prism0 is not a ratio of the study",
    ),
    "two arms at one level": (
        "{0: base0, 0.2: base1}",
        "[[0, base0], [0.2, base1], [0.2, base0]]",
        "hopper runs two arms at level 0.2",
    ),
    "an unknown metric": (
        "    reference: oracle",
        "    metrics: [hv, eumm]\n    reference: oracle",
        "sweeps[0].metrics: 'eumm' is not a metric",
    ),
    "an unknown reference": (
        "    reference: oracle",
        "    reference: orcale",
        "sweeps[0].reference: 'orcale' is not an arm",
    ),
    "two sweeps without a name": (
        "sweeps:\n",
        "sweeps:\n  - {key: env.p_rel, series: [{label: b, arms: {0: base0}}]}\n",
        "sweeps: two have the same name",
    ),
    "a band upside down": (
        "band: [0.6, 0.8]",
        "band: [0.8, 0.6]",
        "sweeps[0].series[0].band: [0.8, 0.6] is not a range",
    ),
}


@pytest.mark.parametrize("mistake", sorted(BAD))
def test_a_bad_sweep_is_refused_naming_the_key(mistake, tmp_path):
    old, new, message = BAD[mistake]
    assert old in STUDY
    study = tmp_path / "sweep-study.yaml"
    study.write_text(STUDY.replace(old, new, 1))
    with pytest.raises(studies.StudyError) as err:
        studies.load_study(study)
    assert message in str(err.value), str(err.value)
