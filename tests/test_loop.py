"""Integration tier: the PRISM loop end to end on the toy env, and the shipped configs build."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
import torch
from fit_quality_reference import assert_quality_equal, brute_force, brute_force_uniform, store_episodes
from toy_runs import toy_run

from prism.agents.capql import CAPQLModule
from prism.config import load_config
from prism.loop import fit_phase
from prism.loop.phases import PrismLoopCallback
from prism.plugins.registry import AGENTS
from prism.run.fit import build_run, fit_run

CONF = Path(__file__).resolve().parents[1] / "conf"
FIT_SUMMARIES: list = []
"""The prism_run fixture's fit summaries, in order (a spy on the fit phase's record builder)."""

TINY = toy_run(
    {"loop.cycles": 3, "loop.steps_per_cycle": 300, "loop.checkpoint_every": 300, "eval.every": 300}
)
TINY_NO_MODEL = toy_run(
    {"loop.cycles": 3, "loop.steps_per_cycle": 300, "loop.checkpoint_every": 300, "eval.every": 300},
    resymnet=False,
)
"""The same without ReSymNet's own keys, for an overlay without a reward model (they would be refused)."""


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _scalar_tags(run_dir: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: set[str] = set()
    for events in run_dir.rglob("events.out.tfevents*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    return tags


@pytest.fixture(scope="module")
def prism_run(tmp_path_factory):
    """One 3-cycle toy PRISM run shared by the tests below: ``(run, run_dir, fitted, updates)``, where ``fitted``
    is a deep copy of every reward model the loop installed, in order (a spy on ``set_model``), and ``updates``
    is ``(env step, static update object)`` of every CAPQL update (a spy on ``static_update``). Spies only:
    behaviour unchanged."""
    fitted: list = []
    updates: list = []
    FIT_SUMMARIES.clear()
    original = PrismLoopCallback.set_model
    original_record = fit_phase.fit_record

    def record_spy(store, fitted_reward, **kwargs):
        FIT_SUMMARIES.append(fitted_reward.summary)
        return original_record(store, fitted_reward, **kwargs)

    original_static = CAPQLModule.static_update

    def spy(self, agent, models):
        fitted.append(copy.deepcopy(models[0] if isinstance(models, list | tuple) else models))
        return original(self, agent, models)

    def static_spy(self):
        runner = original_static(self)
        updates.append((self.env_step_count, runner))  # the object itself: an id() may be reused
        return runner

    run_dir = tmp_path_factory.mktemp("prism") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PrismLoopCallback, "set_model", spy)
        patch.setattr(CAPQLModule, "static_update", static_spy)
        patch.setattr(fit_phase, "fit_record", record_spy)
        run = fit_run([str(CONF / "quickstart.yaml")], [*TINY, f"run_dir={run_dir}"])
    return run, run_dir, fitted, updates


def test_prism_loop_phase_order_and_counts(prism_run):
    run, run_dir, _, _ = prism_run
    M = 300
    assert run.loop.state.history == [
        ("collect_random", 0, 0),
        ("fit", 0, 0),
        ("rl", 0, 0),
        ("collect_expert", 0, M),
        ("fit", 1, M),
        ("rl", 1, M),
        ("collect_expert", 1, 2 * M),
        ("fit", 2, 2 * M),
        ("rl", 2, 2 * M),
        ("done", 2, 3 * M),
    ]
    # N random episodes, then E expert episodes before every cycle but the first — none after the last.
    assert run.loop.state.episodes_collected == [5, 3, 3]
    assert run.loop.state.fits == 3
    assert run.loop.store.num_segments == 11  # p_rel = 0: one segment per episode
    assert int(run.agent.env_steps) == 3 * M
    assert run.agent.shaper.model is run.loop.model

    rows = _rows(run_dir / "eval.csv")
    # periodic evaluations, then the final one (same step as the last periodic one, flagged)
    assert [(int(r["env_steps"]), r["final"]) for r in rows] == [
        (M, "0"),
        (2 * M, "0"),
        (3 * M, "0"),
        (3 * M, "1"),
    ]
    for row in rows:
        for key in ("hv", "eum", "vo"):
            assert float(row[key]) == float(row[key])  # finite, not NaN
    assert (run_dir / "config.yaml").is_file()
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert state["env_steps"] == 3 * M and state["loop"]["state"]["phase"] == "done"
    tags = _scalar_tags(run_dir)
    assert {"eval/hv", "eval/eum", "eval/vo", "reward/val_correlation", "loop/phase"} <= tags
    assert any(t.startswith("train/") for t in tags) and any(t.startswith("rollout/") for t in tags)


def test_every_cycle_updates_through_a_static_update_built_after_its_reward_fit(prism_run):
    """A reward fit runs Lightning Trainers of its own; on CUDA they free cuBLAS's workspaces, which an
    update graph captured before the fit may point at (its next replay was an illegal memory access on an
    H200). So the loop drops the agent's static update after every fit: each cycle updates through one built
    after its fit."""
    run, _, _, updates = prism_run
    M = 300
    per_cycle = [[runner for step, runner in updates if (step - 1) // M == cycle] for cycle in range(3)]
    assert all(per_cycle), "every cycle has updates"
    first = [runners[0] for runners in per_cycle]
    for runners, runner in zip(per_cycle, first):
        assert all(r is runner for r in runners)  # built once per cycle ...
    assert first[0] is not first[1] and first[1] is not first[2]  # ... and again after each refit


def test_oracle_has_no_reward_model_and_same_budget(tmp_path):
    run_dir = tmp_path / "oracle"
    run = fit_run(
        [str(CONF / "quickstart.yaml"), str(CONF / "method" / "oracle.yaml")],
        [*TINY_NO_MODEL, f"run_dir={run_dir}"],
    )
    phases = [p for p, _, _ in run.loop.state.history]
    assert "fit" not in phases and "collect_random" not in phases
    assert run.loop.model is None and run.loop.store is None
    assert int(run.agent.env_steps) == 900
    assert run.agent.effective_symreg_lambda == 0.0
    assert [int(r["env_steps"]) for r in _rows(run_dir / "eval.csv")] == [300, 600, 900, 900]
    assert json.loads((run_dir / "summary.json").read_text())["reward_fits"] == []  # no model, no fit record


def test_every_fit_is_on_record_and_each_number_is_the_brute_force_one(prism_run):
    """Issue 27 item 1 on the 3-cycle toy PRISM run: summary.json lists 3 fits; each record's validation numbers
    and each refit's new-episode numbers (scored by the *previous* fit's model) equal loops over the stored
    episodes (tests/fit_quality_reference.py)."""
    run, run_dir, fitted, _ = prism_run
    summary = json.loads((run_dir / "summary.json").read_text())
    records = summary["reward_fits"]
    # counted from 1 in summary.json, as in the progress lines and tb/reward_fit/cycle<c> (issue 50, item 4)
    assert [r["cycle"] for r in records] == [1, 2, 3] and len(fitted) == 3
    store = run.loop.store
    collections = store.segment_collections()
    assert store.collection_starts == [0, 5, 8]  # 5 random, then 3 + 3 expert episodes
    for k, record in enumerate(records):
        model = fitted[k]
        summary_k = FIT_SUMMARIES[k]
        val = summary_k.val_segments.tolist()
        # the store as it was at fit k: every segment of collections 0..k
        in_store = [s for s in range(store.num_segments) if int(collections[s]) <= k]
        assert record["store"]["segments"] == len(in_store) and record["store"]["episodes"] == len(in_store)
        assert record["store"]["steps"] == int(store.segment_lengths[in_store].sum())
        assert record["store"]["validation"]["segments"] == len(val)
        assert record["store"]["train"]["segments"] == len(in_store) - len(val)
        assert (
            record["store"]["train"]["steps"] + record["store"]["validation"]["steps"]
            == record["store"]["steps"]
        )
        assert record["epochs_run"] == summary_k.epochs_run and record["best_epoch"] == summary_k.best_epoch
        assert record["wall_time_s"] == pytest.approx(summary_k.wall_time_s)
        assert_quality_equal(record["validation"], brute_force(store_episodes(store, val), model.predict))
        # uniform R/T on the same held-out episodes: the per-step baseline beside the model's numbers
        assert_quality_equal(record["validation_uniform"], brute_force_uniform(store_episodes(store, val)))
        expert_val = [s for s in val if int(collections[s]) >= 1]
        if expert_val:
            assert_quality_equal(
                record["validation_expert"], brute_force(store_episodes(store, expert_val), model.predict)
            )
        else:
            assert record["validation_expert"] is None
        if k == 0:
            assert record["new_episodes"] is None  # no model before the first fit
            assert record["new_episodes_uniform"] is None
        else:
            new = [s for s in range(store.num_segments) if int(collections[s]) == k]
            previous = fitted[k - 1]
            assert_quality_equal(
                record["new_episodes"], brute_force(store_episodes(store, new), previous.predict)
            )
            assert_quality_equal(
                record["new_episodes_uniform"], brute_force_uniform(store_episodes(store, new))
            )
    # the same numbers in TensorBoard, against env steps, in the member's main run
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    main_events = [p for p in run_dir.glob("tb/**/events.out.tfevents*") if "reward_fit" not in p.parts]
    values: dict[str, list[tuple[int, float]]] = {}
    for events in main_events:
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            values.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    pearson = sorted(values["reward/val_pearson"])
    assert [s for s, _ in pearson] == [r["env_steps"] for r in records]
    assert [v for _, v in pearson] == pytest.approx([r["validation"]["pearson"] for r in records], rel=1e-5)
    uniform = sorted(values["reward/val_uniform_pearson"])
    # (one held-out episode priced by a constant has no correlation: None in the record, no scalar)
    scored = [r for r in records if r["validation_uniform"]["pearson"] is not None]
    assert [s for s, _ in uniform] == [r["env_steps"] for r in scored] and len(scored) >= 2
    assert [v for _, v in uniform] == pytest.approx(
        [r["validation_uniform"]["pearson"] for r in scored], rel=1e-5
    )
    new_mse = sorted(values["reward/new_segment_sum_mse"])
    assert [v for _, v in new_mse] == pytest.approx(
        [r["new_episodes"]["segment_sum_mse"] for r in records[1:]], rel=1e-5
    )
    assert sorted(values["reward/validation_steps"])[-1][1] == records[-1]["store"]["validation"]["steps"]


@pytest.mark.parametrize(
    "files",
    [[p] for p in sorted(CONF.glob("*.yaml"))]
    + [
        [CONF / "hopper.yaml", p]
        for p in sorted(
            [
                *CONF.glob("method/*.yaml"),
                *CONF.glob("ablation/*.yaml"),
                *CONF.glob("agent/*.yaml"),
                *CONF.glob("budget/*.yaml"),
            ]
        )
    ],
    ids=lambda fs: "+".join(f.stem for f in fs),
)
def test_every_shipped_config_builds(files, tmp_path):
    config = load_config(files, [f"run_dir={tmp_path / 'r'}"])
    run = build_run(config, progress_bar=False)
    assert run.agent.spec.id == config.env.id
    assert isinstance(run.agent, AGENTS.entry("agent.name", config.agent.name).agent_class())
    expected_lambda = 0.0 if config.agent.symreg_lambda == 0.0 else run.spec.symreg_lambda
    assert run.agent.symreg_lambda == pytest.approx(expected_lambda)
    assert run.loop.settings.needs_model == (config.reward.name in ("resymnet", "rrd"))  # the learned models
    assert not (tmp_path / "r").exists()  # building writes nothing


def test_prism_evaluate_reloads_the_last_checkpoint(tmp_path, capsys):
    from prism.run.evaluate import evaluate_run

    run_dir = tmp_path / "run"
    overrides = [o for o in TINY_NO_MODEL if not o.startswith("loop.cycles")] + [
        "loop.cycles=1",
        f"run_dir={run_dir}",
    ]
    run = fit_run([str(CONF / "quickstart.yaml"), str(CONF / "method" / "baseline.yaml")], overrides)
    rows = _rows(run_dir / "eval.csv")
    final, periodic = rows[-1], [r for r in rows if r["final"] == "0"][-1]
    assert final["final"] == "1"
    row = evaluate_run(run_dir, [])
    # Same weights, same evaluation seeds: re-evaluating the checkpoint with the default (final) protocol
    # reproduces the run's final evaluation, and with the periodic one the last periodic evaluation.
    assert row["protocol"] == "final" and (row["num_weights"], row["episodes"]) == (3, 1)
    assert row["env_steps"] == int(final["env_steps"]) == int(run.agent.env_steps)
    assert row["hv"] == pytest.approx(float(final["hv"]), rel=1e-9)
    again = evaluate_run(run_dir, ["eval.episodes=1"], protocol="periodic")
    assert again["protocol"] == "periodic" and again["hv"] == pytest.approx(float(periodic["hv"]), rel=1e-9)
    saved = _rows(run_dir / "evaluate.csv")
    assert [r["protocol"] for r in saved] == ["final", "periodic"] and saved[0]["env_steps"] == final[
        "env_steps"
    ]
    out = capsys.readouterr().out
    assert "protocol=final, num_weights=3, episodes=1, untrained=0, env_steps=" in out and "hv=" in out
