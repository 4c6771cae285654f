"""Where a seed's time goes (issue 61): the run's phase times (prism.core.phase_clock), a fit's training/validation
split (prism.reward.fitting.fit_timer), and validating every k-th epoch (reward.val_every) with early stopping kept on
validated epochs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from segment_stores import synthetic_store
from toy_runs import toy_run

from prism.cli import main
from prism.core.phase_clock import PHASES, REMAINDER, PhaseClock, fit_split, phase_breakdown
from prism.reward.config import ReSymNetConfig
from prism.reward.models.resymnet_fit import fit_resymnet_model

QUICKSTART = str(Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml")
FIT = dict(ensemble_size=3, hidden=16, max_epochs=30, patience=4, batch_size=8, dropout=0.1)


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_phase_clock_counts_each_phase_and_refuses_nesting_and_unknown_names():
    clock = PhaseClock()
    with clock.measure("fit"):
        _burn(0.02)
    with clock.measure("eval_final"):
        pass
    assert clock.cpu_s["fit"] >= 0.02 and clock.wall_s["fit"] >= clock.cpu_s["fit"] * 0.5
    assert clock.cpu_s["collect_random"] == 0.0
    with pytest.raises(RuntimeError, match="nest"), clock.measure("fit"), clock.measure("eval_periodic"):
        pass
    with pytest.raises(ValueError, match="unknown phase 'rl'"), clock.measure("rl"):
        pass


def test_a_checkpoint_inside_a_phase_carries_the_open_phases_seconds_so_far():
    clock = PhaseClock()
    with clock.measure("fit"):
        _burn(0.02)
        saved = clock.state_dict()  # as a fit snapshot saves the run's checkpoint inside the fit phase
    assert saved["cpu_s"]["fit"] >= 0.02
    resumed = PhaseClock()
    resumed.load_state_dict(saved)
    with resumed.measure("fit"):
        _burn(0.01)
    assert resumed.cpu_s["fit"] >= saved["cpu_s"]["fit"] + 0.01
    fresh = PhaseClock()
    fresh.load_state_dict(None)  # a checkpoint from before phase times
    assert set(fresh.cpu_s.values()) == {0.0}


def test_the_breakdown_adds_up_to_the_runs_totals():
    phases = {
        "cpu_s": {
            "collect_random": 1.0,
            "collect_expert": 2.0,
            "fit": 30.0,
            "eval_periodic": 4.0,
            "eval_final": 5.0,
        },
        "wall_s": {
            "collect_random": 1.5,
            "collect_expert": 2.5,
            "fit": 31.0,
            "eval_periodic": 4.5,
            "eval_final": 5.5,
        },
    }
    out = phase_breakdown(phases, cpu_total_s=100.0, wall_total_s=110.0)
    assert list(out) == [*PHASES, REMAINDER]
    assert out[REMAINDER] == {"cpu_s": 58.0, "wall_s": 65.0}
    assert sum(v["cpu_s"] for v in out.values()) == pytest.approx(100.0)
    assert phase_breakdown(phases, None, None)[REMAINDER] == {"cpu_s": None, "wall_s": None}
    assert fit_split({"cpu_time_s": 10.0, "train_cpu_s": 6.0, "validation_cpu_s": 3.5}) == (6.0, 3.5, 0.5)
    assert fit_split({"cpu_time_s": None, "train_cpu_s": None, "validation_cpu_s": None}) is None


def test_a_fit_splits_its_cpu_time_into_training_and_validation():
    store = synthetic_store(80, seed=2, max_length=30)
    _, summary = fit_resymnet_model(store, ReSymNetConfig(**FIT, val_every=1), seed=3)
    assert summary.train_cpu_s > 0 and summary.validation_cpu_s > 0
    assert summary.train_cpu_s + summary.validation_cpu_s <= summary.cpu_time_s


@pytest.mark.parametrize("layout", ["ragged", "padded"])
def test_validating_every_kth_epoch_keeps_early_stopping_on_validated_epochs(layout):
    store = synthetic_store(80, seed=2, max_length=30)
    every = 3
    model, summary = fit_resymnet_model(store, ReSymNetConfig(**FIT, val_every=every), seed=3, layout=layout)
    # Only epochs every-1, 2·every-1, … are validated: every best epoch and every stop lies on one.
    assert all((e + 1) % every == 0 for e in summary.best_epoch)
    assert all(e % every == 0 for e in summary.epochs_run)
    for run, best in zip(summary.epochs_run, summary.best_epoch, strict=True):
        if run < FIT["max_epochs"]:  # stopped early: at the first validation `patience` epochs after its best
            assert FIT["patience"] <= run - 1 - best < FIT["patience"] + every
    # The restored weights are each member's best validated ones: scoring them again gives the best loss.
    fresh, fresh_summary = fit_resymnet_model(
        store, ReSymNetConfig(**FIT, val_every=every), seed=3, layout=layout
    )
    for p, q in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(p, q)
    assert fresh_summary.best_val_loss == summary.best_val_loss
    # val_every=1 is the default, and a fit with k > 1 is another fit.
    _, every_epoch = fit_resymnet_model(store, ReSymNetConfig(**FIT), seed=3, layout=layout)
    assert every_epoch.best_epoch != summary.best_epoch or every_epoch.epochs_run != summary.epochs_run


def test_val_every_must_be_positive():
    with pytest.raises(ValueError, match=r"^reward\.val_every"):
        ReSymNetConfig(val_every=0)


def test_a_runs_summary_reports_where_its_time_went(tmp_path, capsys):
    run_dir = tmp_path / "run"
    main(["fit", "--config", QUICKSTART, *toy_run(), f"run_dir={run_dir}"])
    summary = json.loads((run_dir / "summary.json").read_text())
    phases = summary["phase_times"]
    assert list(phases) == [*PHASES, REMAINDER]
    for phase in ("collect_random", "collect_expert", "fit", "eval_periodic"):
        assert phases[phase]["cpu_s"] > 0, phase
    assert sum(v["cpu_s"] for v in phases.values()) == pytest.approx(summary["cpu_time_s"])
    assert summary["critic_divergence_step"] is None
    assert phases[REMAINDER]["cpu_s"] > 0
    fits = summary["reward_fits"]
    assert len(fits) == 2
    # The fit phase holds both fits (and the shaped-vs-true figure after each).
    assert sum(f["cpu_time_s"] for f in fits) <= phases["fit"]["cpu_s"]
    for record in fits:
        train, validation, rest = fit_split(record)
        assert train > 0 and validation > 0 and rest >= 0


def _summary(fit_cpu: tuple[float, ...] | None, total: float) -> dict:
    """A summary.json with phase times: two fits of (cpu, train, validation) seconds, or none (an oracle)."""
    fits = (
        []
        if fit_cpu is None
        else [
            {"cycle": c, "cpu_time_s": fit_cpu[0], "train_cpu_s": fit_cpu[1], "validation_cpu_s": fit_cpu[2]}
            for c in (1, 2)
        ]
    )
    fit_phase = 2 * fit_cpu[0] + 3.0 if fit_cpu else 0.0
    cpu = {
        "collect_random": 60.0 if fits else 0.0,
        "collect_expert": 30.0 if fits else 0.0,
        "fit": fit_phase,
        "eval_periodic": 40.0,
        "eval_final": 20.0,
    }
    return {
        "cpu_time_s": total,
        "reward_fits": fits,
        "phase_times": phase_breakdown({"cpu_s": cpu, "wall_s": cpu}, total, total),
    }


def test_the_seed_cost_table_adds_up_and_divides_by_the_oracle():
    from tool_modules import load_tool

    bench = load_tool("bench_seed_cost")
    prism = _summary((600.0, 400.0, 150.0), 2400.0)
    oracle = _summary(None, 800.0)
    rows = bench.cost_rows(prism)
    assert rows[-1] == ("total", 2400.0)
    assert sum(v for _, v in rows[:-1]) == pytest.approx(2400.0)
    assert ("fit 2: validation passes", 150.0) in rows and ("fit 1: set-up and scoring", 50.0) in rows
    assert ("fit phase: figures, memory", 3.0) in rows
    assert sum(v for _, v in bench.cost_rows(oracle)[:-1]) == pytest.approx(800.0)
    table = bench.format_table([bench.Column("e-oracle", oracle), bench.Column("prism", prism)])
    last = table.splitlines()[-2].split()
    assert last[-2:] == ["1.00", "3.00"]  # 2400 / 800
    assert table.splitlines()[-1].split()[-1] == f"{1203 / 2400:.0%}"  # fit share: (2·600 + 3) / 2400
