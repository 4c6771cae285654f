"""Studies as data: each shipped study file (conf/studies/<name>.yaml) loads to the preset it replaced.

tests/studies_frozen.json is each shipped preset as it was defined in Python before the studies became YAML
(``dataclasses.asdict``, as JSON): a study file that loads to anything else changes what ``prism reproduce``
runs or reports. Run this file as a script (``python tests/test_studies.py``) to rewrite it from the shipped
study files after a deliberate change of a study."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from prism.experiments import studies
from prism.experiments.presets import PRESETS

ROOT = Path(__file__).resolve().parents[1]
FROZEN_FILE = ROOT / "tests" / "studies_frozen.json"
FROZEN = json.loads(FROZEN_FILE.read_text())


def _serialised(preset) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(preset), ensure_ascii=False))


def test_the_frozen_presets_are_the_python_ones():
    assert {name: _serialised(p) for name, p in PRESETS.items()} == FROZEN


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_each_shipped_study_file_loads_to_the_preset_it_replaces(name):
    preset = studies.load_preset(name)
    assert preset == PRESETS[name]
    assert _serialised(preset) == FROZEN[name]
    hash(preset)  # every field a tuple (or a frozen dataclass of tuples), as the Python presets were


def test_every_shipped_study_is_frozen_and_there_are_at_least_eight():
    assert studies.shipped() == tuple(sorted(FROZEN)) and len(FROZEN) >= 8


if __name__ == "__main__":
    frozen = {name: _serialised(studies.load_preset(name)) for name in studies.shipped()}
    FROZEN_FILE.write_text(json.dumps(frozen, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    sys.exit(0)
