"""The evaluation at the end of every run uses the final protocol (eval.final), is flagged in eval.csv, feeds
front.csv / summary.json, survives a crash during it, and the closing block of ``prism fit``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import prism.evaluation.callback as evaluation
from prism.config import ConfigError, load_config
from prism.evaluation.callback import EvaluationCallback
from prism.run.fit import fit_run

CONF = Path(__file__).resolve().parents[1] / "conf"
M = 200
TOY = [
    "env.id=prism/Toy-v0",
    "loop.initial_episodes=5",
    "loop.expert_episodes=3",
    "loop.cycles=2",
    f"loop.steps_per_cycle={M}",
    f"loop.checkpoint_every={M}",
    "reward.hidden=32",
    "reward.max_epochs=3",
    "agent.learning_starts=100",
    "agent.batch_size=32",
    "agent.buffer_size=5000",
    "agent.actor_hidden=[32,32]",
    "agent.critic_hidden=[32,32]",
    "agent.log_every=100",
    f"eval.every={M}",
    "eval.num_weights=3",
    "eval.episodes=1",
    "figures=false",
]
FINAL_5x2 = ["eval.final.num_weights=5", "eval.final.episodes=2"]
FINAL_SAME = ["eval.final.num_weights=3", "eval.final.episodes=1"]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _fit(run_dir: Path, final: list[str], monkeypatch=None, rollouts: list | None = None):
    if rollouts is not None:
        original = evaluation.evaluate_agent

        def counting(agent, spec, cfg, pool=None, member=0, **kwargs):
            rollouts.append((cfg.num_weights, cfg.episodes))
            return original(agent, spec, cfg, pool=pool, member=member, **kwargs)

        monkeypatch.setattr(evaluation, "evaluate_agent", counting)
    return fit_run([str(CONF / "quickstart.yaml")], [*TOY, *final, f"run_dir={run_dir}"])


@pytest.fixture(scope="module")
def final_run(tmp_path_factory) -> Path:
    """A run whose final protocol (5 weights x 2 episodes) differs from the periodic one (3 x 1)."""
    import contextlib
    import io

    run_dir = tmp_path_factory.mktemp("final") / "run"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _fit(run_dir, FINAL_5x2)
    (run_dir.parent / "stdout.txt").write_text(out.getvalue())  # the closing block, for the test below
    return run_dir


def test_final_row_uses_the_final_protocol(final_run, tmp_path, monkeypatch):
    rows = _rows(final_run / "eval.csv")
    assert list(rows[0])[-1] == "final"  # appended last: the earlier columns keep their order
    assert [(int(r["env_steps"]), r["final"]) for r in rows] == [(M, "0"), (2 * M, "0"), (2 * M, "1")]
    # front.csv is the final evaluation: one row per final weight (not the periodic 3)
    front = _rows(final_run / "front.csv")
    assert len(front) == 5
    assert int(rows[-1]["cardinality"]) == sum(int(r["on_front"]) for r in front)
    summary = json.loads((final_run / "summary.json").read_text())
    assert summary["final_protocol"]["num_weights"] == 5 and summary["final_protocol"]["episodes"] == 2
    assert summary["final"]["hv"] == pytest.approx(float(rows[-1]["hv"]), rel=1e-12)

    # The same run with final protocol = periodic protocol: the periodic rows are untouched by the final
    # protocol, and the final evaluation reuses the periodic result at the last step (no third rollout).
    rollouts: list[tuple[int, int]] = []
    same = tmp_path / "same"
    _fit(same, FINAL_SAME, monkeypatch, rollouts)
    same_rows = _rows(same / "eval.csv")
    assert [r for r in same_rows if r["final"] == "0"] == [r for r in rows if r["final"] == "0"]
    assert rollouts == [(3, 1), (3, 1)]
    last_periodic, final = same_rows[-2], same_rows[-1]
    assert final["final"] == "1" and {**final, "final": "0"} == last_periodic
    assert len(_rows(same / "front.csv")) == 3


def test_final_evaluation_tensorboard_and_closing_block(final_run, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(final_run / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    assert [e.step for e in events.Scalars("eval/hv")] == [M, 2 * M]
    assert [e.step for e in events.Scalars("eval_final/hv")] == [2 * M]
    rows = _rows(final_run / "eval.csv")
    assert events.Scalars("eval_final/hv")[0].value == pytest.approx(float(rows[-1]["hv"]), rel=1e-6)

    # resuming the finished run says so and changes nothing on disk
    before = (final_run / "eval.csv").read_bytes(), (final_run / "front.csv").read_bytes()
    fit_run([], [], resume=str(final_run))
    assert ((final_run / "eval.csv").read_bytes(), (final_run / "front.csv").read_bytes()) == before
    assert "is finished" in capsys.readouterr().out
    # the closing block the fit printed
    out = (final_run.parent / "stdout.txt").read_text()
    assert str(final_run) in out
    assert f"tensorboard --logdir {final_run / 'tb'}" in out
    assert "(5 weights x 2 episodes)" in out
    final = rows[-1]
    for key in ("hv", "eum", "vo"):
        assert f"{key.upper()} {float(final[key]):.6g}" in out  # final
        best = max(rows, key=lambda r: float(r[key]))
        assert f"{key.upper()} {float(best[key]):.6g} @ {best['env_steps']}" in out  # best over eval.csv


def test_crash_during_the_final_evaluation_resumes_byte_identical(final_run, tmp_path, monkeypatch):
    """Killed after the final row reached eval.csv but before the end checkpoint: the resumed run drops that
    row, evaluates again and writes it once (as the uninterrupted run did)."""
    run_dir = tmp_path / "crashed"
    record = EvaluationCallback._record

    def record_then_die(self, trainer, result, env_steps, *, final):
        record(self, trainer, result, env_steps, final=final)
        if final:
            raise RuntimeError("killed during the final evaluation")

    monkeypatch.setattr(EvaluationCallback, "_record", record_then_die)
    with pytest.raises(RuntimeError, match="killed during the final evaluation"):
        _fit(run_dir, FINAL_5x2)
    assert _rows(run_dir / "eval.csv")[-1]["final"] == "1" and not (run_dir / "summary.json").exists()
    monkeypatch.undo()

    fit_run([], [], resume=str(run_dir))
    assert (run_dir / "eval.csv").read_bytes() == (final_run / "eval.csv").read_bytes()
    assert (run_dir / "front.csv").read_bytes() == (final_run / "front.csv").read_bytes()


@pytest.mark.parametrize(
    "override, key",
    [
        ("eval.final.num_weights=0", "eval.final.num_weights"),
        ("eval.final.episodes=0", "eval.final.episodes"),
        ("eval.final.num_weights=2", "eval.final.num_weights"),  # hopper has 3 objectives
        ("eval.num_weights=2", "eval.num_weights"),
        ("eval.seed=-1", "eval.seed"),
    ],
)
def test_bad_final_protocol_is_a_one_line_config_error(override, key):
    with pytest.raises(ConfigError) as err:
        load_config([CONF / "hopper.yaml"], [override])
    assert str(err.value).startswith(f"{key}: ") and "\n" not in str(err.value)
