"""The fit-cost preset (issue 61): its fast-fit arm is conf/fit/fast.yaml on top of table1-study's e-prism-fast, and
the report's cost table and gate read each run's CPU time right."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from prism.config import load_config
from prism.core.phase_clock import phase_breakdown
from prism.experiments.costs import cost_section, gate_line, run_cost
from prism.experiments.grid import CostGate
from prism.experiments.runner import Job, fit_command
from prism.experiments.studies import load_preset

ROOT = Path(__file__).resolve().parents[1]
FIT_COST = load_preset("fit-cost")


def _flat(node: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in node.items():
        if isinstance(value, dict):
            out += _flat(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={str(value).lower() if isinstance(value, bool) else value}")
    return out


def test_the_fast_fit_overrides_are_conf_fit_fast_yaml():
    shipped = yaml.safe_load((ROOT / "conf" / "fit" / "fast.yaml").read_text())
    assert sorted(_flat(shipped)) == sorted(FIT_COST.arm("e-prism-fastfit").overrides)


def _config(command: list[str]):
    at = command.index("--config") + 1
    files = [c for c in command[at:] if c.endswith(".yaml")]
    keys = [c for c in command[at:] if "=" in c and not c.startswith(("run_dir=", "method_label="))]
    return load_config(files, keys)


def test_the_fast_fit_arm_is_table1_studys_e_prism_fast_with_only_the_fast_keys_changed(tmp_path):
    fast_fit = _config(fit_command(Job("swimmer", "e-prism-fastfit", (0,), False), FIT_COST, tmp_path))
    committed = ROOT / "docs/results/table1-study/runs/swimmer/e-prism-fast/seed0/config.yaml"
    before = load_config([committed], record=True)
    assert before.reward.loss == "randomized" and before.loop.initial_episodes == 1000
    changed = {"val_every": 2, "warm_start": True, "loss": "randomized"}
    expected = dataclasses.replace(before, reward=dataclasses.replace(before.reward, **changed))
    mine = dataclasses.replace(fast_fit, run_dir=before.run_dir, method_label=before.method_label)
    assert mine == expected


def test_the_rerun_oracle_is_table1_studys_e_oracle_apart_from_labels(tmp_path):
    for seed in range(5):
        planned = _config(fit_command(Job("swimmer", "e-oracle-rerun", (seed,), False), FIT_COST, tmp_path))
        path = ROOT / f"docs/results/table1-study/runs/swimmer/e-oracle/seed{seed}/config.yaml"
        committed = load_config([path], record=True)
        # (on the CPU, agent.cuda_graph auto is false: the committed runs' files say false)
        mine = dataclasses.replace(
            planned, run_dir=committed.run_dir, method_label=committed.method_label,
            agent=dataclasses.replace(planned.agent, cuda_graph=committed.agent.cuda_graph),
        )  # fmt: skip
        assert mine == committed, seed


def _summary(total: float, fits: int) -> dict:
    cpu = {
        "collect_random": 60.0,
        "collect_expert": 30.0,
        "fit": 100.0 * fits + 6.0,
        "eval_periodic": 40.0,
        "eval_final": 20.0,
    }
    if not fits:
        cpu.update(collect_random=0.0, collect_expert=0.0, fit=0.0)
    records = [
        {"cycle": c + 1, "cpu_time_s": 100.0, "train_cpu_s": 70.0, "validation_cpu_s": 20.0}
        for c in range(fits)
    ]
    return {
        "cpu_time_s": total,
        "reward_fits": records,
        "phase_times": phase_breakdown({"cpu_s": cpu, "wall_s": cpu}, total, total),
    }


def test_a_runs_cost_splits_its_fits_and_adds_up():
    cost = run_cost(_summary(900.0, 2))
    assert cost["fit_train"] == 140.0 and cost["fit_validation"] == 40.0 and cost["fit_rest"] == 26.0
    assert cost["collect"] == 90.0 and cost["eval"] == 60.0
    assert sum(v for k, v in cost.items() if k != "total") == pytest.approx(900.0)
    assert run_cost({"cpu_time_s": 5.0}) == {**dict.fromkeys(cost, None), "total": 5.0}


@pytest.mark.parametrize(
    ("totals", "verdict", "ratio"),
    [((1200.0, 1300.0, 1400.0), "holds", "1.44"), ((1300.0, 1400.0, 2000.0), "fails", "1.56")],
)
def test_the_cost_table_takes_medians_and_judges_the_gate(totals, verdict, ratio):
    oracle = {"costs": [run_cost(_summary(t, 0)) for t in (800.0, 900.0, 1000.0)]}
    table = {
        ("swimmer", "e-oracle-rerun"): oracle,
        ("swimmer", "e-oracle"): {"costs": [run_cost(_summary(2 * t, 0)) for t in (800.0, 900.0, 1000.0)]},
        ("swimmer", "e-prism-fastfit"): {"costs": [run_cost(_summary(t, 2)) for t in totals]},
    }
    lines, rows = cost_section(FIT_COST, table)
    fast = next(r for r in rows if r["arm"] == "e-prism-fastfit")
    # The table divides by the first gate's reference, the oracle run on the same machine.
    assert fast["total_min"] == f"{sorted(totals)[1] / 60:.1f}" and fast["over_e-oracle-rerun"] == ratio
    assert lines[-3].endswith(f"**{ratio}** (bound ≤ 1.5): {verdict}.")
    assert lines[-1].endswith(f"**{float(ratio) / 2:.2f}** (bound ≤ 1.5): holds.")  # the committed oracle's
    assert "not measurable" in gate_line(CostGate("swimmer", "e-prism-fast", "e-oracle", 1.5), table)
