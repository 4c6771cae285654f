"""The report's diverged-critic count: per env and arm, the finished runs whose summary.json records the watch,
those that diverged and at which step, and the runs from before the watch, against a count done by hand."""

from __future__ import annotations

import json
from pathlib import Path

from prism.experiments.divergence import divergence_section, run_divergence
from prism.experiments.grid import Cell
from prism.experiments.studies import load_preset


def _summary(folder: Path, **fields) -> None:
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(fields))


def test_the_divergence_count_reads_each_runs_step_and_leaves_older_runs_unrecorded(tmp_path):
    hc = tmp_path / "halfcheetah"
    _summary(hc / "e-oracle" / "seed0", critic_divergence_step=None)  # watched, healthy
    _summary(hc / "e-oracle" / "seed1", critic_divergence_step=117500)  # watched, diverged
    _summary(hc / "e-oracle" / "seed2")  # from before the watch
    (hc / "e-oracle" / "seed3").mkdir(parents=True)  # unfinished: no summary.json, left out
    _summary(hc / "morlb-capql" / "seed0", critic_divergence_step=None, peer={"library": "morl-baselines"})
    _summary(hc / "e-oracle-ln" / "seed3", critic_divergence_step=None)
    assert run_divergence(hc / "e-oracle" / "seed1") == (True, 117500)
    assert run_divergence(hc / "e-oracle" / "seed2") == (False, None)
    assert run_divergence(hc / "morlb-capql" / "seed0") == (False, None)  # a peer's run: not watched
    cells = [Cell("halfcheetah", "e-oracle", s) for s in range(4)] + [
        Cell("halfcheetah", "e-oracle-ln", 3),
        Cell("halfcheetah", "morlb-capql", 0),
    ]
    lines, rows = divergence_section(load_preset("halfcheetah-paper"), cells, tmp_path)
    table = {line.split(" | ")[1]: line for line in lines if line.startswith("| mo-")}
    assert table["e-oracle"] == "| mo-halfcheetah-v5 | e-oracle | 2 | 1 | 1: 117500 | 1 |"
    assert table["e-oracle-ln"] == "| mo-halfcheetah-v5 | e-oracle-ln | 1 | 0 | — | 0 |"
    assert "morlb-capql" not in table  # only unrecorded runs: no row
    assert [(r["arm"], r["seed"], r["critic_divergence_step"]) for r in rows] == [
        ("e-oracle", 0, None),
        ("e-oracle", 1, 117500),
        ("e-oracle-ln", 3, None),
    ]
    # only runs from before the watch: no section at all
    assert divergence_section(
        load_preset("halfcheetah-paper"), [Cell("halfcheetah", "e-oracle", 2)], tmp_path
    ) == (
        [],
        [],
    )
