"""The halfcheetah-paper report's take-off count: the seeds of each arm whose final mean undiscounted forward
return exceeds the threshold, here and in the reference study's runs, against a count done by hand."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from prism.experiments.grid import TakeOff
from prism.experiments.presets import HALFCHEETAH_PAPER_ARMS, PRESETS
from prism.experiments.takeoff import final_returns, take_off_section


def _run(folder: Path, forward: list[float]) -> None:
    """A finished run whose periodic evaluations have these forward returns; the last row is the final one."""
    folder.mkdir(parents=True)
    lines = ["env_steps,hv,undiscounted_return_forward,final"]
    lines += [f"{(i + 1) * 5000},1.0,{v},{int(i == len(forward) - 1)}" for i, v in enumerate(forward)]
    (folder / "eval.csv").write_text("\n".join(lines) + "\n")
    (folder / "summary.json").write_text(json.dumps({}))


def test_take_off_counts_the_seeds_above_the_threshold_here_and_in_the_reference(tmp_path):
    reference = {"e-oracle": [530.0, 7.0, 499.9], "e-prism": [85.3]}
    for arm, finals in reference.items():
        for seed, value in enumerate(finals):
            _run(tmp_path / "ref" / "halfcheetah" / arm / f"seed{seed}", [1.0, value])
    (tmp_path / "ref" / "halfcheetah" / "e-oracle" / "seed7").mkdir()  # unfinished: no summary.json
    assert final_returns(tmp_path / "ref", "halfcheetah", "e-oracle", "forward") == [
        (0, 530.0),
        (1, 7.0),
        (2, 499.9),
    ]
    spec = TakeOff("halfcheetah", "forward", 500.0, str(tmp_path / "ref"), "the small budget")
    preset = dataclasses.replace(PRESETS["halfcheetah-paper"], take_off=spec)
    key = "final_undiscounted_return_forward"
    table = {
        ("halfcheetah", "e-oracle"): {key: [900.0, 501.0, 12.0]},
        ("halfcheetah", "e-prism"): {key: [700.0]},
        ("halfcheetah", "e-uniform"): {key: [500.0]},  # not above: equal
    }
    lines, rows = take_off_section(preset, table)
    by_arm = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| e-")}
    assert by_arm["e-oracle"] == "| e-oracle | 2 of 3 | 900.0, 501.0, 12.0 | 1 of 3 | 530.0, 499.9, 7.0 |"
    assert by_arm["e-prism"] == "| e-prism | 1 of 1 | 700.0 | 0 of 1 | 85.3 |"
    assert by_arm["e-uniform"] == "| e-uniform | 0 of 1 | 500.0 | — | — |"
    assert by_arm["e-baseline"] == "| e-baseline | — | — | — | — |"
    assert {"arm": "e-oracle", "study": "the small budget", "took_off": 1, "runs": 3} in rows
    assert {"arm": "e-oracle", "study": "this", "took_off": 2, "runs": 3} in rows


def test_the_halfcheetah_paper_preset_runs_halfcheetah_only_and_joins_the_rest_at_their_budget():
    preset = PRESETS["halfcheetah-paper"]
    own = [c for c in preset.cells() if c.source is None]
    assert {c.env for c in own} == {"halfcheetah"} and len(own) == 25
    # e-prism-paper runs on halfcheetah only: the joined envs hold the four arms their studies ran
    assert {c.method for c in preset.cells() if c.source is not None} == set(HALFCHEETAH_PAPER_ARMS)
    paper = preset.arm("e-prism-paper").overrides
    assert {"loop.initial_episodes=1000", "loop.expert_episodes=1000", "reward.loss=randomized"} <= set(paper)
    assert {c.env for c in preset.cells() if c.source is not None} == {"walker", "swimmer", "hopper"}
    assert "loop.steps_per_cycle=100000" in preset.overrides_for("halfcheetah")
    assert not any(o.startswith("loop.steps_per_cycle=25000") for o in preset.overrides_for("halfcheetah"))
    assert preset.take_off.reference_folder().is_dir()
