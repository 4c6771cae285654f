"""``eval.final.each_cycle``: the final protocol also runs at the end of every cycle but the last, as rows flagged
``cycle_end`` in eval.csv, and a fit-free run's cycle-end row is the final evaluation of a run one cycle long
(the released protocol's oracle budget, read from the same run)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import prism.evaluation.callback as evaluation
from prism.experiments.collect import cycle_end_rows, read_eval, split_rows
from prism.run.fit import fit_run

CONF = Path(__file__).resolve().parents[1] / "conf"
M = 200
TOY = [
    "env.id=prism/Toy-v0",
    "method=oracle",
    "env.dense=true",
    "reward.name=none",
    "agent.symreg_lambda=0",
    f"loop.steps_per_cycle={M}",
    f"loop.checkpoint_every={M}",
    "agent.learning_starts=100",
    "agent.batch_size=32",
    "agent.buffer_size=5000",
    "agent.actor_hidden=[32,32]",
    "agent.critic_hidden=[32,32]",
    "agent.log_every=100",
    # Not a divisor of M: the cycle end is scheduled on its own, not met by a periodic evaluation.
    "eval.every=150",
    "eval.num_weights=3",
    "eval.episodes=1",
    "eval.final.num_weights=5",
    "eval.final.episodes=2",
    "figures=false",
]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _fit(run_dir: Path, *extra: str, rollouts: list | None = None, monkeypatch=None):
    if rollouts is not None:
        original = evaluation.evaluate_agent

        def counting(agent, spec, cfg, pool=None, member=0, **kwargs):
            rollouts.append((agent.env_step_count, cfg.num_weights, cfg.episodes))
            return original(agent, spec, cfg, pool=pool, member=member, **kwargs)

        monkeypatch.setattr(evaluation, "evaluate_agent", counting)
    fit_run([str(CONF / "quickstart.yaml")], [*TOY, *extra, f"run_dir={run_dir}"])
    return _rows(run_dir / "eval.csv")


def test_each_cycle_end_but_the_last_gets_a_final_protocol_row(tmp_path, monkeypatch):
    rollouts: list = []
    rows = _fit(
        tmp_path / "run",
        "loop.cycles=3",
        "eval.final.each_cycle=true",
        rollouts=rollouts,
        monkeypatch=monkeypatch,
    )
    flagged = [(int(r["env_steps"]), r["final"], r["cycle_end"]) for r in rows]
    assert [f for f in flagged if f[2] == "1"] == [(M, "0", "1"), (2 * M, "0", "1")]
    assert [f for f in flagged if f[1] == "1"] == [(3 * M, "1", "0")]
    # The cycle-end rollouts use the final protocol (5 weights x 2 episodes), at exactly M and 2M.
    assert [(s, w, e) for s, w, e in rollouts if (w, e) == (5, 2)] == [
        (M, 5, 2),
        (2 * M, 5, 2),
        (3 * M, 5, 2),
    ]
    # The periodic evaluations keep their own schedule (every 150 steps).
    assert [s for s, w, e in rollouts if (w, e) == (3, 1)] == [150, 300, 450, 600]


def test_off_by_default_and_no_column(tmp_path):
    rows = _fit(tmp_path / "run", "loop.cycles=2")
    assert "cycle_end" not in rows[0]
    assert [int(r["env_steps"]) for r in rows if r["final"] == "1"] == [2 * M]


def test_a_fit_free_cycle_end_row_is_the_final_evaluation_of_a_one_cycle_run(tmp_path):
    """What the option is for: the oracle at M (one cycle) read from a run of two cycles."""
    two = _fit(tmp_path / "two", "loop.cycles=2", "eval.final.each_cycle=true")
    one = _fit(tmp_path / "one", "loop.cycles=1")
    (cycle_end,) = [r for r in two if r["cycle_end"] == "1"]
    (final,) = [r for r in one if r["final"] == "1"]
    assert int(cycle_end["env_steps"]) == M
    shared = [k for k in final if k not in ("final",)]
    assert {k: cycle_end[k] for k in shared} == {k: final[k] for k in shared}


def test_readers_keep_cycle_end_rows_out_of_curves_and_finals(tmp_path):
    run_dir = tmp_path / "run"
    _fit(run_dir, "loop.cycles=3", "eval.final.each_cycle=true")
    rows = read_eval(run_dir)
    periodic, final = split_rows(rows)
    assert all(not r.get("cycle_end") for r in periodic)
    assert final["env_steps"] == 3 * M and final["final"] == 1
    assert [r["env_steps"] for r in cycle_end_rows(rows)] == [M, 2 * M]


def test_killed_after_the_cycle_end_row_resumes_byte_identical(tmp_path, monkeypatch):
    """Killed after the cycle-end row reached eval.csv but before the checkpoint of that step: the resumed run
    drops the row with the rest of the step, evaluates again and writes it once (as the uninterrupted run)."""
    from prism.evaluation.callback import EvaluationCallback

    extra = ("loop.cycles=2", "loop.checkpoint_every=100", "eval.final.each_cycle=true")
    whole = _fit(tmp_path / "whole", *extra)
    assert [r["cycle_end"] for r in whole].count("1") == 1
    record = EvaluationCallback._record

    def record_then_die(self, trainer, result, env_steps, *, final, cycle_end=False):
        record(self, trainer, result, env_steps, final=final, cycle_end=cycle_end)
        if cycle_end:
            raise RuntimeError("killed after the cycle-end evaluation")

    monkeypatch.setattr(EvaluationCallback, "_record", record_then_die)
    run_dir = tmp_path / "killed"
    with pytest.raises(RuntimeError, match="killed after the cycle-end evaluation"):
        _fit(run_dir, *extra)
    assert _rows(run_dir / "eval.csv")[-1]["cycle_end"] == "1"
    monkeypatch.undo()
    fit_run([], [], resume=str(run_dir))
    assert (run_dir / "eval.csv").read_bytes() == (tmp_path / "whole" / "eval.csv").read_bytes()


def test_a_joined_arm_reads_the_cycle_end_row_as_its_final(tmp_path):
    """The released protocol's oracle at M, read by a report from a 2 × M run's cycle-end row."""
    from prism.experiments.collect import collect
    from prism.experiments.grid import Cell

    out = tmp_path / "runs"
    rows = _fit(out / "toy" / "e-oracle" / "seed0", "loop.cycles=2", "eval.final.each_cycle=true")
    table = collect(
        [Cell("toy", "e-oracle", 0), Cell("toy", "r-oracle", 0, out, "e-oracle", cycle_end=1)], out
    )
    (cycle_end,) = [r for r in rows if r["cycle_end"] == "1"]
    (final,) = [r for r in rows if r["final"] == "1"]
    assert table[("toy", "r-oracle")]["final_hv"] == [float(cycle_end["hv"])]
    assert table[("toy", "r-oracle")]["env_steps"] == [M]
    assert table[("toy", "e-oracle")]["final_hv"] == [float(final["hv"])]
    # The curve stops at M: the periodic rows up to the cycle's end (eval.every = 150: 150 only).
    assert [step for step, _ in table[("toy", "r-oracle")]["curves"][0]] == [150]
