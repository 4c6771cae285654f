"""Every phase of a run in the terminal, each with its own progress (issue 21, item 2)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_evaluations import fake_eval_result
from toy_runs import toy_run

from prism.config import load_config
from prism.display.progress import PhaseProgressBar, Progress

CONF = Path(__file__).resolve().parents[1] / "conf"


def test_rl_bar_refreshes_each_time_the_clock_crosses_250_steps():
    """A batch runs 8 env steps: `steps % 250 == 0` held only every 1000 steps; crossing is honest."""
    loop = SimpleNamespace(
        state=SimpleNamespace(phase="rl", cycle=0), settings=SimpleNamespace(cycles=1), total_env_steps=2000
    )
    bar = PhaseProgressBar(loop, progress=Progress(file=io.StringIO(), disable=False))
    module = SimpleNamespace(env_step_count=0)
    bar.on_train_start(None, module)
    for step in range(8, 2001, 8):
        module.env_step_count = step
        bar.on_train_batch_end(None, module, None, None, 0)
    assert bar.refreshes == 1 + 8  # the start, then 250, 500, …, 2000
    bar.on_train_end(None, module)


@pytest.mark.slow  # a whole toy run through every phase (~5 s)
def test_every_phase_shows_its_own_progress(tmp_path):
    from prism.run.fit import build_run

    config = load_config(
        [CONF / "quickstart.yaml"], [*toy_run({"eval.final.num_weights": 4}), f"run_dir={tmp_path / 'run'}"]
    )
    screen = io.StringIO()
    run = build_run(config, progress_bar=Progress(file=screen, disable=False))
    run.trainer.fit(run.agent)
    text = screen.getvalue()
    # one summary line per phase, in order, above the RL bar
    lines = [line.strip() for chunk in text.split("\n") for line in chunk.split("\r") if line.strip()]
    order = [
        "collect random episodes (cycle 1/2): 5 episodes",
        "reward fit (cycle 1/2, eq. 1 loss): 3 epochs  val_sum_mse ",
        "evaluation at 200 env steps (3 weights x 1 episode): HV ",
        "collect expert episodes (cycle 1/2): 3 episodes",
        "reward fit (cycle 2/2, eq. 1 loss): 3 epochs  val_sum_mse ",
        "evaluation at 400 env steps (3 weights x 1 episode): HV ",
        "final evaluation at 400 env steps (4 weights x 1 episode): HV ",
    ]
    found = [next((i for i, line in enumerate(lines) if want in line), None) for want in order]
    assert None not in found and found == sorted(found), (found, [line for line in lines if line[-1] == "s"])
    assert "val_corr" in text
    # the RL bar's postfix names the real phase (not only rl / done)
    for phase in ("phase=rl", "phase=eval", "phase=final_eval", "phase=done"):
        assert phase in text, phase
    assert "prism fit (RL)" in text and "400/400" in text


def test_a_population_members_evaluation_line_names_its_seed_as_the_other_phase_lines_do(monkeypatch):

    import prism.evaluation.callback as callback_module
    from prism.envs import TOY_SPEC
    from prism.evaluation.callback import EvaluationCallback

    cfg, result = fake_eval_result()
    monkeypatch.setattr(callback_module, "evaluate_agent", lambda *args, **kwargs: result)
    screen = io.StringIO()
    callback = EvaluationCallback(TOY_SPEC, cfg, run_seed=7, member=1, logger=object(), pool=object())
    callback.progress = Progress(file=screen, disable=False)
    callback._rollout(SimpleNamespace(env_step_count=100), cfg.final_protocol(), "final_eval")
    assert "final evaluation (seed 7) at 100 env steps (100 weights x 5 episodes): HV " in screen.getvalue()
