"""Studies as data: each shipped study file (conf/studies/<name>.yaml) loads to the preset it replaced.

tests/studies_frozen.json is each shipped preset as it was defined in Python before the studies became YAML
(``dataclasses.asdict``, as JSON): a study file that loads to anything else changes what ``prism reproduce``
runs or reports. Run this file as a script (``python tests/test_studies.py``) to rewrite it from the shipped
study files after a deliberate change of a study."""

from __future__ import annotations

import csv
import dataclasses
import json
import sys
from pathlib import Path

import pytest

from prism.experiments import cli, studies
from prism.experiments.grid import ROOT as PACKAGE_ROOT

ROOT = Path(__file__).resolve().parents[1]
FROZEN_FILE = ROOT / "tests" / "studies_frozen.json"
FROZEN = json.loads(FROZEN_FILE.read_text())


def _serialised(preset) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(preset), ensure_ascii=False))


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_each_shipped_study_file_loads_to_the_preset_it_replaces(name):
    preset = studies.load_preset(name)
    assert _serialised(preset) == FROZEN[name]
    hash(preset)  # every field a tuple (or a frozen dataclass of tuples), as the Python presets were


def test_every_shipped_study_is_frozen_and_there_are_at_least_eight():
    assert studies.shipped() == tuple(sorted(FROZEN)) and len(FROZEN) >= 8


USER_STUDY = """\
description: My study, joining the protocol study's committed oracle runs.
envs: [hopper]
seeds: [0, 1, 2]
scale: cpu-medium
overrides: [eval.num_workers=0]
arms:
  my-prism: {method: prism, protocol: equal, overrides: [reward.loss=randomized], per_seed: true}
  e-oracle: {method: oracle, protocol: equal}
joined:
  - {env: hopper, arms: [e-oracle], runs: docs/results/protocol-study/runs, label: protocol-study}
ratios:
  - {numerator: my-prism, denominator: e-oracle, label: mine, primary: true}
"""


def _user_study(folder: Path, text: str = USER_STUDY) -> Path:
    path = folder / "my-study.yaml"
    path.write_text(text)
    return path


def test_a_users_study_dry_runs_its_own_arms_in_a_folder_named_after_its_file(tmp_path, capsys):
    study = _user_study(tmp_path)
    preset = studies.load_study(study)
    # a relative joined folder resolves against the repository root, as the shipped studies' do
    assert preset.joined[0].folder() == PACKAGE_ROOT / "docs/results/protocol-study/runs"
    assert preset.overrides[-1] == "eval.num_workers=0" and "loop.steps_per_cycle=25000" in preset.overrides
    assert cli.main(["--study", str(study), "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3  # my-prism's three seeds, one process each; the joined oracle is read, never run
    for seed, line in enumerate(lines):
        assert line.endswith(f"/runs/reproduce/my-study/hopper/my-prism/seed{seed}")
        assert (
            " reward.loss=randomized " in line
            and " eval.num_workers=0 " in line
            and "method/prism.yaml" in line
        )


def _fake_run(run_dir: Path, hv: float) -> None:
    run_dir.mkdir(parents=True)
    with (run_dir / "eval.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["env_steps", "hv", "eum", "vo", "final"])
        writer.writerows([[100, hv / 2, 1.0, 1.0, 0], [200, hv, hv / 1e6, hv / 1e6, 1]])
    (run_dir / "summary.json").write_text("{}")
    (run_dir / "config.yaml").write_text("method: prism\n")


def test_a_users_study_reports_its_runs_beside_the_joined_ones_and_names_its_file(tmp_path, capsys):
    study, out, results = _user_study(tmp_path), tmp_path / "grid", tmp_path / "report"
    for seed, hv in enumerate((1.0e7, 1.2e7, 1.1e7)):
        _fake_run(out / "hopper" / "my-prism" / f"seed{seed}", hv)
    argv = ["--study", str(study), "--report-only", "--out", str(out), "--results", str(results)]
    assert cli.main(argv) == 0
    assert f"--study {study} --report-only --out {out}" in capsys.readouterr().out
    rows = {r["method"]: r for r in csv.DictReader((results / "table.csv").open()) if r["metric"] == "hv"}
    assert rows["my-prism"]["n_seeds"] == rows["e-oracle"]["n_seeds"] == "3"  # e-oracle: the committed runs
    (ratio,) = [r for r in csv.DictReader((results / "ratios.csv").open()) if r["metric"] == "hv"]
    assert (ratio["numerator"], ratio["denominator"], ratio["label"]) == ("my-prism", "e-oracle", "mine")
    assert "My study, joining" in (results / "table.md").read_text()


BAD = {
    "unknown key": ("seeds: [0, 1, 2]", "seeds: [0, 1, 2]\nsedes: [3]", "sedes: unknown key"),
    "wrong type": ("seeds: [0, 1, 2]", "seeds: [0, one, 2]", "seeds[1]: expected an integer, got str 'one'"),
    "unknown arm in a ratio": (
        "denominator: e-oracle",
        "denominator: e-orcale",
        "ratios[0].denominator: 'e-orcale' is not an arm",
    ),
    "unknown method": ("{method: prism,", "{method: prsim,", "arms.my-prism.method: 'prsim' is not a method"),
    "unknown arm key": ("per_seed: true}", "per_seed: true, seed: [0]}", "arms.my-prism.seed: unknown key"),
    "unknown env": ("envs: [hopper]", "envs: [hoper]", "envs[0]: 'hoper' is not an env"),
    "joined arm not of the env": (
        "arms: [e-oracle], runs",
        "arms: [r-oracle], runs",
        "joined[0].arms: 'r-oracle' is not an arm of hopper",
    ),
    "a negative seed": ("seeds: [0, 1, 2]", "seeds: [0, -1, 2]", "seeds: -1 is not a seed"),
    "a joined seed twice": (
        "label: protocol-study}",
        "label: protocol-study, seeds: [3, 4, 3]}",
        "joined[0].seeds: seed 3 is given twice",
    ),
    "a key twice": ("seeds: [0, 1, 2]", "seeds: [0, 1, 2]\nseeds: [4]", "seeds: given twice (line 4)"),
    "unknown scale": ("scale: cpu-medium", "scale: cpu-huge", "scale: no scale 'cpu-huge'"),
    "missing description": (
        "description: My study, joining the protocol study's committed oracle runs.\n",
        "",
        "description: missing",
    ),
    "an override without =": (
        "[eval.num_workers=0]",
        "[eval.num_workers]",
        "overrides: 'eval.num_workers' is not an override",
    ),
    "not a mapping": (USER_STUDY, "- hopper\n", "a study is a mapping of keys"),
}


@pytest.mark.parametrize("mistake", sorted(BAD))
def test_a_bad_study_is_refused_with_one_line_naming_the_key_and_exit_2(mistake, tmp_path, capsys):
    old, new, message = BAD[mistake]
    assert old in USER_STUDY
    study = _user_study(tmp_path, USER_STUDY.replace(old, new, 1))
    with pytest.raises(studies.StudyError) as err:
        studies.load_study(study)
    assert str(err.value).startswith(f"{study}: ") and message in str(err.value), str(err.value)
    assert cli.main(["--study", str(study), "--dry-run", "--out", str(tmp_path / "grid")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"prism reproduce: error: {err.value}"]
    assert not (tmp_path / "grid").exists()


def test_a_claim_on_a_ratio_the_study_lacks_and_a_missing_file_are_refused(tmp_path):
    claim = "paper_claims:\n  - {quote: q, ratios: [[e-oracle, my-prism]], expect: lower}\n"
    with pytest.raises(studies.StudyError, match="paper_claims: .*e-oracle / my-prism is not a ratio"):
        studies.load_study(_user_study(tmp_path, USER_STUDY + claim))
    with pytest.raises(studies.StudyError, match="nowhere.yaml: cannot read it"):
        studies.load_study(tmp_path / "nowhere.yaml")


if __name__ == "__main__":
    frozen = {name: _serialised(studies.load_preset(name)) for name in studies.shipped()}
    FROZEN_FILE.write_text(json.dumps(frozen, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    sys.exit(0)
