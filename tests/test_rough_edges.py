"""Rough edges a new user met (issue 29, part B): each test fails without its fix."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_evaluations import fake_eval_result
from toy_runs import toy_run

import prism.run.evaluate
import prism.run.fit
from prism.agents.config import CAPQLConfig
from prism.agents.gpi_pd.config import GPIPDConfig
from prism.cli import main
from prism.core.errors import ConfigError
from prism.display.progress import PhaseProgressBar, Progress

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "RUN", "--protocol", "periodic", "eval.episodes=2"],  # item 6, as reported
        ["evaluate", "--protocol", "periodic", "RUN", "eval.episodes=2"],
        ["evaluate", "RUN", "eval.episodes=2", "--protocol", "periodic"],
    ],
)
def test_evaluate_takes_options_and_overrides_in_any_order(argv, monkeypatch):
    seen = {}

    def fake_evaluate(run_dir, overrides, protocol="final", **kwargs):
        seen.update(run_dir=run_dir, overrides=overrides, protocol=protocol)

    monkeypatch.setattr(prism.run.evaluate, "evaluate_run", fake_evaluate)
    assert main(argv) == 0
    assert seen == {"run_dir": "RUN", "overrides": ["eval.episodes=2"], "protocol": "periodic"}


def test_fit_takes_overrides_after_an_option(monkeypatch):
    seen = {}
    monkeypatch.setattr(prism.run.fit, "fit_run", lambda files, overrides, **kw: seen.update(o=overrides))
    argv = ["fit", "seed=1", "--overwrite", "loop.cycles=2", "--config", str(CONF / "quickstart.yaml")]
    assert main(argv) == 0
    assert sorted(seen["o"]) == ["loop.cycles=2", "seed=1"]


def test_a_stray_argument_is_still_unrecognised(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "RUN", "--protocol", "periodic", "ANOTHER_RUN"])
    assert stop.value.code == 2
    assert "unrecognized arguments: ANOTHER_RUN" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_before_or_after_the_command_shows_the_traceback(where):
    """Item 12: `prism --debug fit …` raised nothing (the subcommand's default False overwrote it)."""
    args = ["fit", "--config", "no_such_file.yaml"]
    argv = ["--debug", *args] if where == "before" else [*args, "--debug"]
    with pytest.raises(ConfigError, match="no_such_file.yaml"):
        main(argv)
    assert main(args) == 2  # without --debug: the one-line error


# ---- item 14: what the progress display says -----------------------------------------------------------
def _screen_lines(screen: io.StringIO) -> list[str]:
    return [
        line.strip() for chunk in screen.getvalue().split("\n") for line in chunk.split("\r") if line.strip()
    ]


def test_after_an_evaluation_the_rl_bar_shows_the_phase_and_steps_of_now(monkeypatch):
    """The RL bar redrawn under an evaluation's summary said `phase=eval` and the step count of its last
    250-step refresh (0 at the evaluation at 200 steps); and "1 episodes"."""
    import prism.evaluation.callback as callback_module
    from prism.envs import TOY_SPEC
    from prism.evaluation.callback import EvaluationCallback

    cfg, result = fake_eval_result()
    monkeypatch.setattr(callback_module, "evaluate_agent", lambda *args, **kwargs: result)
    screen = io.StringIO()
    progress = Progress(file=screen, disable=False)
    loop = SimpleNamespace(
        state=SimpleNamespace(phase="rl", cycle=0), settings=SimpleNamespace(cycles=3), total_env_steps=600
    )
    bar = PhaseProgressBar(loop, progress=progress)
    module = SimpleNamespace(env_step_count=0)
    bar.on_train_start(None, module)
    module.env_step_count = 200  # no 250-step crossing since the start: the bar itself still says 0
    callback = EvaluationCallback(TOY_SPEC, cfg, run_seed=0, pool=object())
    callback.progress = progress
    callback._rollout(module, cfg, "eval")
    lines = _screen_lines(screen)
    (summary,) = [i for i, line in enumerate(lines) if line.startswith("evaluation at 200 env steps")]
    assert "(2 weights x 1 episode)" in lines[summary]
    during = [line for line in lines[:summary] if line.startswith("prism fit (RL)") and "phase=eval" in line]
    assert during and all("200/600" in line for line in during)
    after = [line for line in lines[summary + 1 :] if line.startswith("prism fit (RL)")]
    assert after and all("200/600" in line and "phase=rl cycle=1/3" in line for line in after), after
    bar.on_train_end(None, module)


def test_counted_nouns():
    from prism.core._text import counted

    assert [counted(n, "episode") for n in (0, 1, 2)] == ["0 episodes", "1 episode", "2 episodes"]


# ---- items 14 and 15: a run stopped before any RL ------------------------------------------------------
class _Stop(Exception):
    pass


@pytest.fixture(scope="module")
def stopped_before_rl(tmp_path_factory):
    """A toy run stopped in its first reward fit: its checkpoints are at 0 env steps (the phase changes)."""
    import prism.reward.models.resymnet_fit

    run_dir = tmp_path_factory.mktemp("stopped") / "run"

    def stop(*args, **kwargs):
        raise _Stop

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(prism.reward.models.resymnet_fit, "fit_resymnet_model", stop)
        with pytest.raises(_Stop):
            prism.run.fit.fit_run([str(CONF / "quickstart.yaml")], [*toy_run(), f"run_dir={run_dir}"])
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    return run_dir


def test_evaluate_refuses_an_untrained_checkpoint_unless_allowed(stopped_before_rl, capsys):
    with pytest.raises(
        ConfigError, match=r"at 0 env steps, before the policy's first update.*--allow-untrained"
    ):
        prism.run.evaluate.evaluate_run(stopped_before_rl, [])
    assert main(["evaluate", str(stopped_before_rl)]) == 2
    assert not (stopped_before_rl / "evaluate.csv").exists()
    capsys.readouterr()
    assert main(["evaluate", str(stopped_before_rl), "--allow-untrained"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert "untrained=1" in out[0]
    # it says where the row went (issue 50, item 10)
    assert out[1:] == [f"prism evaluate: appended a row to {stopped_before_rl / 'evaluate.csv'}"]
    with (stopped_before_rl / "evaluate.csv").open() as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["untrained"] == "1" and row["env_steps"] == "0"


def test_resume_says_where_it_resumes_from(stopped_before_rl, monkeypatch, capsys):
    def stop(*args, **kwargs):
        raise _Stop

    monkeypatch.setattr(prism.run.fit, "build_run", stop)  # the line comes before the run is built
    with pytest.raises(_Stop):
        prism.run.fit.resume_run(stopped_before_rl, [], [])
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        f"prism: resuming {stopped_before_rl} from {stopped_before_rl / 'checkpoints' / 'last.pt'} at 0/400 "
        "env steps (phase fit, cycle 1/2)"
    ]


# ---- item 16: --resume of a finished run with --config ---------------------------------------------------
def test_resume_of_a_finished_run_with_its_config_says_the_config_is_not_used(tmp_path, capsys):
    from prism.config import load_config, to_yaml

    run_dir = tmp_path / "run"
    args = [*toy_run(), f"run_dir={run_dir}"]
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(to_yaml(load_config([CONF / "quickstart.yaml"], args)))
    (run_dir / "summary.json").write_text("{}")
    assert prism.run.fit.resume_run(run_dir, [str(CONF / "quickstart.yaml")], args) is None
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith(f"prism: run {run_dir} is finished (summary.json present); nothing to resume")
    assert "the --config/overrides given match" in line and "--resume always uses that file" in line


def test_fit_resume_checks_the_request_once(tmp_path, monkeypatch, capsys):
    """The CLI checks --resume before importing Lightning and hands that check on: the run folder's config is
    read and compared once, not again by resume_run."""
    import prism.run.continuation
    from prism.cli import main
    from prism.config import load_config, to_yaml

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(to_yaml(load_config([CONF / "quickstart.yaml"], toy_run())))
    (run_dir / "summary.json").write_text("{}")
    calls = []
    original = prism.run.continuation.resume_request

    def counted(*args, **kwargs):
        calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(prism.run.continuation, "resume_request", counted)
    monkeypatch.setattr(prism.run.fit, "resume_request", counted)
    assert main(["fit", "--resume", str(run_dir)]) == 0
    assert "is finished (summary.json present); nothing to resume" in capsys.readouterr().out
    assert calls == [run_dir]


# ---- item 17: prism list ------------------------------------------------------------------------------
def test_prism_list_names_every_env_overlay_reward_method_and_backbone(capsys):
    from prism.envs import registered_env_ids
    from prism.plugins.registry import AGENTS, REWARD_MODELS, REWARDS

    assert main(["list"]) == 0
    text = capsys.readouterr().out
    sections: dict[str, list[str]] = {}
    title = ""
    for line in text.splitlines():
        if line.startswith("  "):
            sections[title].append(line.split()[0])
        else:
            title = line.split(" (")[0]
            sections[title] = []
    assert sections["envs"] == registered_env_ids() and "mo-walker2d-v5" in sections["envs"]
    assert sections["methods"] == [
        "baseline",
        "oracle",
        "prism",
        "rrd",
    ]  # the files, listed independently below
    assert sections["methods"] == sorted(p.stem for p in (CONF / "method").glob("*.yaml"))
    assert sections["ablations and options"] == sorted(p.stem for p in (CONF / "ablation").glob("*.yaml"))
    assert "wo_residual" in sections["ablations and options"]
    assert sections["reward methods"] == REWARDS.names() == ["none", "random", "resymnet", "rrd", "uniform"]
    assert sections["reward models"] == REWARD_MODELS.names()
    assert sections["backbones"] == AGENTS.names() == ["capql", "gpi_pd"]
    assert "  wo_loss        PRISM without SymReg (λ = 0).\n" in text  # the overlay's own comment


# ---- item 13: structural type errors name the key ------------------------------------------------------
@pytest.mark.parametrize(
    "override, expected",
    [
        (
            "loop=3",
            "loop: must be a mapping of LoopConfig keys (loop.initial_episodes: …), got 3 (in overrides)",
        ),
        ("eval.final=5", "eval.final: must be a mapping of FinalEvalConfig keys"),
        ("env=[1]", "env: must be a mapping of EnvConfig keys (env.id: …), got [1] (in overrides)"),
        (
            "agent.gradient_updates=2",
            "agent.gradient_updates: Key 'gradient_updates' not in 'CAPQLConfig'; it is a key of gpi_pd "
            "(agent.name=gpi_pd)",
        ),
    ],
)
def test_a_structural_type_error_names_the_key(override, expected):
    from prism.config import load_config

    with pytest.raises(ConfigError) as err:
        load_config([CONF / "quickstart.yaml"], [override])
    assert str(err.value).startswith(expected), str(err.value)


def test_a_structural_type_error_in_a_file_names_the_file(tmp_path):
    from prism.config import load_config

    bad = tmp_path / "bad.yaml"
    bad.write_text("eval:\n  final: 5\n")
    with pytest.raises(ConfigError, match=rf"^eval.final: must be a mapping .* got 5 \(in {bad}\)$"):
        load_config([CONF / "quickstart.yaml", bad])
    with pytest.raises(
        ConfigError, match=r"^agent.symmetry_mode: .*; it is a key of capql \(agent.name=capql\)$"
    ):
        load_config([CONF / "quickstart.yaml"], ["agent.name=gpi_pd", "agent.symmetry_mode=exact"])


# ---- item 8: budget overlays; a second env file switching the env --------------------------------------
BUDGET_KEYS = {
    "loop": {"cycles", "steps_per_cycle", "checkpoint_every", "initial_episodes", "expert_episodes"},
    "reward": {"max_epochs", "patience"},
    # the keys a backbone declares as compute-only (its config's budget_keys): CAPQL's and GPI-PD's
    "agent": {*CAPQLConfig.budget_keys, *GPIPDConfig.budget_keys},
    "eval": {"every", "num_weights", "episodes", "final"},
}


@pytest.mark.parametrize("budget", ["tiny", "small"])
@pytest.mark.parametrize("env_file", ["walker", "swimmer", "halfcheetah", "hopper"])
def test_a_budget_overlay_composes_with_any_env_file(env_file, budget, caplog):
    from omegaconf import OmegaConf

    from prism.config import load_config

    overlay = CONF / "budget" / f"{budget}.yaml"
    layer = OmegaConf.to_container(OmegaConf.load(overlay))
    assert set(layer) <= set(BUDGET_KEYS) and all(set(layer[k]) <= BUDGET_KEYS[k] for k in layer)
    alone = load_config([CONF / f"{env_file}.yaml"])
    config = load_config([CONF / f"{env_file}.yaml", CONF / "ablation" / "uniform.yaml", overlay])
    assert (config.env, config.method, config.reward.name) == (alone.env, "uniform", "uniform")
    assert config.agent.symreg_lambda == alone.agent.symreg_lambda
    assert config.loop.steps_per_cycle == layer["loop"]["steps_per_cycle"] < alone.loop.steps_per_cycle
    gpi = load_config([CONF / f"{env_file}.yaml", CONF / "agent" / "gpi_pd.yaml", overlay])
    assert gpi.agent.name == "gpi_pd" and gpi.agent.learning_starts == layer["agent"]["learning_starts"]
    for key, value in layer["agent"].items():  # every agent key of the overlay reaches GPI-PD ...
        assert getattr(gpi.agent, key) == value, key
    assert not hasattr(config.agent, "gradient_updates")  # ... and the ones CAPQL lacks are skipped
    assert "env.id: warning" not in caplog.text


def test_a_later_env_file_switching_the_env_warns(caplog):
    from prism.config import load_config

    with caplog.at_level("WARNING", logger="prism.config"):
        config = load_config([CONF / "walker.yaml", CONF / "quickstart.yaml"])
    assert config.env.id == "mo-hopper-v5"
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("env.id")]
    assert line.startswith(
        f"env.id: warning: {CONF / 'quickstart.yaml'} sets mo-hopper-v5 over mo-walker2d-v5 from "
        f"{CONF / 'walker.yaml'}, so the run is on mo-hopper-v5"
    )


# ---- item 17: prism config --describe ------------------------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["agent.name=gpi_pd"]])
def test_config_describe_documents_every_key_of_the_config(extra, capsys):
    import yaml

    from prism.config import load_config, to_yaml

    assert main(["config", "--describe", "--config", str(CONF / "quickstart.yaml"), *extra]) == 0
    lines = capsys.readouterr().out.splitlines()
    described = {}
    for index, line in enumerate(lines):
        if " = " in line and not line.startswith(" "):
            key, value = line.split(" = ", 1)
            follows = lines[index + 1] if index + 1 < len(lines) else ""
            described[key] = (value, follows)

    def leaves(node, prefix=""):  # the keys of config.yaml, flattened independently of the describer
        if isinstance(node, dict) and node:
            return {k: v for key, sub in node.items() for k, v in leaves(sub, f"{prefix}{key}.").items()}
        return {prefix[:-1]: node}

    saved = leaves(yaml.safe_load(to_yaml(load_config([CONF / "quickstart.yaml"], extra))))
    assert set(saved) <= set(described)  # every key of config.yaml (a population's `seed` aside)
    for key, (_, doc) in described.items():
        assert doc.startswith("    ") and doc.strip() != "(undocumented)", key
    assert described["loop.steps_per_cycle"][0] == "2000"  # quickstart's value, not the default
    assert "M: env steps of RL per cycle" in described["loop.steps_per_cycle"][1]
    if extra:
        assert "agent.gradient_updates" in described and "agent.symmetry_mode" not in described
