"""What a run says about itself: a reward fit's closing line, the shaped-vs-true figure's title, the
per-objective evaluation returns in TensorBoard."""

from __future__ import annotations

import io
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_evaluations import fake_eval_result
from toy_runs import toy_run

from prism.config import load_config

CONF = Path(__file__).resolve().parents[1] / "conf"


@pytest.fixture(scope="module")
def fitted_toy_run(tmp_path_factory):
    """A toy run advanced through its first collection and reward fit (stopped at RL), with its progress
    lines. Patience 2 of 12 epochs: the fit runs on past its best epoch, so its last epoch is not what it keeps."""
    from prism.display.progress_lines import LineProgress
    from prism.run.fit import build_run

    changes = {"reward.max_epochs": 12, "reward.patience": 2, "reward.val_every": 1}
    run_dir = tmp_path_factory.mktemp("messages") / "run"
    run = build_run(
        load_config([CONF / "quickstart.yaml"], [*toy_run(changes), f"run_dir={run_dir}"]), progress_bar=False
    )
    log = io.StringIO()
    run.loop.progress = LineProgress(log, fit_every_s=0.0)  # a line every epoch
    run.loop._advance(run.agent, None)  # collect, fit, stop at RL
    return run, log.getvalue()


def test_the_reward_fit_line_shows_the_kept_models_scores_not_the_last_epochs(fitted_toy_run):
    """Early stopping keeps each network's best epoch, so the last epoch's val_corr (what the bar showed last)
    is not the kept model's; the closing line shows the kept model's, summary.json's fit record's values."""
    run, text = fitted_toy_run
    (done,) = [line for line in text.splitlines() if "reward fit (cycle 1/2" in line and " epochs  " in line]
    (record,) = run.loop.state.member_fits(0)
    kept_corr = record["validation"]["pearson"]
    epochs = [line for line in text.splitlines() if ": epoch " in line]
    last_corr = float(re.search(r"val_corr ([-+\d.e]+)", epochs[-1]).group(1))
    assert f"{last_corr:.4g}" != f"{kept_corr:.4g}"  # the case the line used to get wrong
    assert f"val_corr {kept_corr:.4g} (kept model)" in done, done


def test_the_shaped_vs_true_figure_says_which_model_episode_and_policy_it_shows(fitted_toy_run, monkeypatch):
    import prism.loop.phases as phases

    run, _ = fitted_toy_run
    figures = []
    writer = SimpleNamespace(
        add_figure=lambda tag, figure, global_step: figures.append((tag, figure, global_step))
    )
    monkeypatch.setattr(phases, "tensorboard_writer", lambda logger: writer)
    loop = run.loop
    loop._log_shaped_vs_true(run.agent, None, 0)  # after the first fit: no RL yet
    monkeypatch.setattr(loop.state, "cycle", 1)  # as after the refit that follows cycle 1's RL
    loop._log_shaped_vs_true(run.agent, None, 0)
    (tag, first, step), (_, later, _) = figures
    assert tag == "reward/shaped_vs_true" and step == run.agent.env_step_count
    title = first.axes[0].get_title()
    assert "reward model of fit 1 (shapes cycle 1/2); policy: uniform random actions (no RL yet)" in title, (
        title
    )
    assert re.search(r"one episode of its own \(reset seed \d+\), \d+ steps: true sum", title), title
    assert f"policy: the agent at {step} env steps, deterministic, a random preference per step" in (
        later.axes[0].get_title()
    )


def test_each_evaluation_logs_the_per_objective_returns_of_its_eval_csv_row():
    from prism.envs import TOY_SPEC
    from prism.evaluation.callback import EvaluationCallback

    cfg, result = fake_eval_result()
    logged: list[dict[str, float]] = []
    logger = SimpleNamespace(log_metrics=lambda metrics, step: logged.append(metrics))
    callback = EvaluationCallback(TOY_SPEC, cfg, logger=logger, figures=False)
    trainer = SimpleNamespace(is_global_zero=True)
    callback._record(trainer, result, 100, final=False)
    callback._record(trainer, result, 200, final=True)
    (row, final_row), (periodic, final) = callback.history, logged
    for name in TOY_SPEC.objective_names:
        for column in (f"return_{name}", f"undiscounted_return_{name}"):
            assert periodic[f"eval/{column}"] == pytest.approx(row[column])
            assert final[f"eval_final/{column}"] == pytest.approx(final_row[column])
