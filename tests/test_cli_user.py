"""The command line as a user meets it (issue 21): Ctrl-C, fast config errors, introspection, error edges.

Subprocess tests on the toy env: each either ends at once (a config error) or runs a tiny toy run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from subprocess_runs import child, subprocess_env
from toy_runs import KILLABLE, toy_run

import prism
from prism.config import load_config, resolved_values, same_run, to_yaml
from prism.run.checkpoint_files import read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PRISM = [sys.executable, "-m", "prism.cli"]


def _prism(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PRISM, *args], env=subprocess_env(), capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@pytest.mark.slow  # a subprocess fit killed mid-run (~8 s)
def test_sigint_during_a_fit_exits_130_and_keeps_the_checkpoint(tmp_path):
    """Ctrl-C mid-run: `prism: interrupted`, exit 130 (Lightning alone gives exit 1 and no word), and the
    checkpoint on disk is whole (the kill-and-resume tests of test_reliability.py show that resuming from
    such a checkpoint is byte-identical)."""
    run_dir = tmp_path / "run"
    checkpoint = run_dir / "checkpoints" / "last.pt"
    cmd = [*PRISM, "fit", "--config", str(CONF / "quickstart.yaml"), *toy_run(KILLABLE), f"run_dir={run_dir}"]
    process = subprocess.Popen(
        cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    with child(process):  # a Ctrl-C of the test run ends the child too
        while not (checkpoint.is_file() and (run_dir / "eval.csv").is_file()):
            assert process.poll() is None, process.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "no checkpoint was written"
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    # the exact command that goes on, not just "interrupted" (issue 50, item 5)
    assert (
        stderr.strip().splitlines()[-1]
        == f"prism: interrupted; continue the run with: prism fit --resume {run_dir}"
    )
    assert not (run_dir / "summary.json").exists()
    state = read_checkpoint(checkpoint)  # raises on a damaged file
    assert (
        state["env_steps"] >= 150
    )  # saved mid-RL (loop.checkpoint_every = 150), before the first evaluation
    # config.yaml records what the run resolved and the prism version (issue 21, item 10)
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["resolved"]["prism_version"] == prism.__version__
    assert (
        saved["resolved"]["device"] == "cpu" and saved["resolved"]["env.sparse_channel"] == 0
    )  # the toy spec's


_IMPORTS_AFTER = """
import sys
from prism.cli import main
code = main(sys.argv[1:])
print(code, "lightning" in sys.modules, "lightning.pytorch" in sys.modules)
"""


def _prism_imports(*args: str) -> tuple[list[str], list[str]]:
    """Run ``prism ARGS`` in a child process; its exit code and whether Lightning and torch were imported
    (printed), and its stderr lines."""
    result = subprocess.run(
        [sys.executable, "-c", _IMPORTS_AFTER + "print('torch' in sys.modules)\n", *args],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    return result.stdout.split(), result.stderr.strip().splitlines()


@pytest.mark.parametrize(
    "args",
    [
        ["fit", "--config", "conf/nonexist.yaml"],
        ["fit", "--config", "conf/quickstart.yaml", "loop.cycles=abc"],
        ["fit", "--config", "conf/quickstart.yaml", "env.id=no-such-env-v0"],
        ["config", "--config", "conf/quickstart.yaml", "loop.cycles=0"],
    ],
)
def test_a_config_error_is_reported_before_lightning_is_imported(args):
    printed, lines = _prism_imports(*args)
    assert printed[:3] == ["2", "False", "False"], lines
    assert len(lines) == 1 and lines[0].startswith("prism: error: ")


def test_version():
    result = _prism("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"prism {prism.__version__}"


def test_prism_config_prints_every_key_and_what_it_resolves_without_training(tmp_path):
    run_dir = tmp_path / "never"
    result = _prism("config", "--config", "conf/quickstart.yaml", "seeds=[1,2]", f"run_dir={run_dir}")
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert not run_dir.exists()  # nothing ran
    assert printed["eval"]["final"] == {
        "num_weights": 100,
        "episodes": 5,
        "each_cycle": False,
    }  # defaults a file did not set
    assert printed["agent"]["name"] == "capql" and "seed" not in printed and printed["seeds"] == [1, 2]
    resolved = printed["resolved"]
    assert resolved["prism_version"] == prism.__version__ and resolved["device"] == "cpu"
    assert set(resolved["eval.seed"]) == {"seed1", "seed2"}
    # the printed text is a config file: it loads to the config it shows (the resolved block is ignored)
    saved = tmp_path / "printed.yaml"
    saved.write_text(result.stdout)
    assert same_run(
        load_config([saved]), load_config([CONF / "quickstart.yaml"], ["seeds=[1,2]", f"run_dir={run_dir}"])
    )


def test_config_yaml_with_and_without_the_resolved_block_loads_the_same(tmp_path):
    """--resume and prism evaluate read config.yaml: a new one (with `resolved:`) and an old one (without)."""
    config = load_config([CONF / "quickstart.yaml"], toy_run())
    new, old = tmp_path / "new.yaml", tmp_path / "old.yaml"
    new.write_text(to_yaml(config, resolved_values(config)))
    old.write_text(to_yaml(config))
    assert "resolved:" in new.read_text() and "resolved:" not in old.read_text()
    assert load_config([new]) == load_config([old]) == config


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "is empty (sets no key)"),
        ("# only a comment\n", "is empty (sets no key)"),
        # OmegaConf reads plain text as a key: it used to say `Key 'just some text' not in 'RunConfig'`
        (
            "just some text\n",
            "is not a mapping of keys (`key: value` lines, e.g. `seed: 3`); it holds plain "
            "text ('just some text')",
        ),  # fmt: skip
        ("42\n", "it holds the number 42"),
        ("- a\n- b\n", "it holds a list"),
        ("loop:\n  cycles: [1\nseed: 2\n", "is not valid YAML at line 3, column 5"),
    ],
)
def test_empty_or_invalid_config_file_is_one_line_exit_2(tmp_path, text, expected):
    path = tmp_path / "user.yaml"
    path.write_text(text)
    result = _prism("fit", "--config", str(path), f"run_dir={tmp_path / 'run'}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prism: error: --config: ") and expected in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_a_missing_equals_sign_is_named_as_such():
    result = _prism("fit", "--config", "conf/quickstart.yaml", "loop.cycles", "3")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "prism: error: loop.cycles: not a config file and not key=value; overrides take the form key=value; "
        "did you mean loop.cycles=3?"
    ]


def test_an_unusable_gymnasium_env_is_one_line_without_library_warnings(tmp_path):
    result = _prism(
        "fit", "--config", "conf/quickstart.yaml", "env.id=mo-mountaincar-v0", f"run_dir={tmp_path}"
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "prism: error: env.id: mo-mountaincar-v0 has a Discrete action space; prism needs a Box"
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["eval.num_weights=7"],
            "eval.num_weights: sets the periodic protocol, and prism evaluate uses the final one",
        ),
        (["eval.final.episodes=2", "--protocol", "periodic"], "eval.final.episodes: sets the final protocol"),
        (["eval.every=5"], "eval.every: schedules a training run's periodic evaluations; prism evaluate"),
        (["eval.every=5", "--protocol", "periodic"], "eval.every: schedules a training run's periodic"),
        (["agent.lr=1"], "agent.lr: prism evaluate only takes eval.* overrides"),
    ],
)
def test_evaluate_refuses_the_other_protocols_counts(tmp_path, args, message):
    """Refused in one line, before torch or Lightning is imported (a fraction of a second, not seconds)."""
    (tmp_path / "config.yaml").write_text(to_yaml(load_config([CONF / "quickstart.yaml"])))
    printed, lines = _prism_imports("evaluate", str(tmp_path), *args)
    assert printed == ["2", "False", "False", "False"], lines
    assert len(lines) == 1 and lines[0].startswith(f"prism: error: {message}"), lines


@pytest.mark.parametrize(
    "command, message",
    [
        (["evaluate"], "prism: error: RUN_DIR: '{run}' has no config.yaml (is it a prism run folder?)"),
        (
            ["fit", "--resume"],
            "prism: error: --resume: '{run}' has no config.yaml (is it a prism run folder?)",
        ),
    ],
)
def test_a_folder_that_is_no_run_is_refused_before_lightning_is_imported(tmp_path, command, message):
    printed, lines = _prism_imports(*command, str(tmp_path))
    assert printed == ["2", "False", "False", "False"], lines
    assert lines == [message.format(run=tmp_path)]


def test_a_resume_that_changes_the_run_is_refused_before_lightning_is_imported(tmp_path):
    (tmp_path / "config.yaml").write_text(to_yaml(load_config([CONF / "quickstart.yaml"])))
    printed, lines = _prism_imports("fit", "--resume", str(tmp_path), "loop.steps_per_cycle=7")
    assert printed[:3] == ["2", "False", "False"], lines  # torch may come with the env spec; Lightning not
    assert lines == [  # names the key, both values, and what may change instead
        f"prism: error: --resume: loop.steps_per_cycle (2000 in the run, 7 given) differs from "
        f"{tmp_path / 'config.yaml'}; resume takes the run's saved config and only loop.cycles may grow (drop "
        "--config/overrides or start a new run_dir)"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]  # nothing written


def test_prism_config_alone_lists_every_default():
    result = _prism("config")
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert (
        printed["run_dir"] == "runs/mo-hopper-v5/prism/seed0" and printed["loop"]["initial_episodes"] == 1000
    )
    # every key of the default config, with its value, and nothing else but the resolved block
    resolved = printed.pop("resolved")
    assert printed == yaml.safe_load(to_yaml(load_config([])))
    assert resolved["prism_version"] == prism.__version__


# ---- the resume path (issue 50, item 5) ----------------------------------------------------------------
def _interrupt_at(monkeypatch, target: str) -> None:
    """Ctrl-C when ``prism.run.fit.<target>`` is called (as a SIGINT there would raise it)."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(f"prism.run.fit.{target}", interrupted)


def test_ctrl_c_before_the_run_wrote_anything_leaves_no_empty_folder(tmp_path, monkeypatch, capsys):
    from prism.cli import main

    run_dir = tmp_path / "new" / "nested" / "run"  # every folder of it made by this run
    _interrupt_at(monkeypatch, "resolved_values")  # before config.yaml is written
    assert main(["fit", "--config", str(CONF / "quickstart.yaml"), *toy_run(), f"run_dir={run_dir}"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == [
        f"prism: interrupted before the run wrote anything; {run_dir} removed; run the same command to start it"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # not the empty folder --resume would refuse
    # a folder that was there before the run is kept (empty, as it was)
    kept = tmp_path / "kept"
    kept.mkdir()
    assert main(["fit", "--config", str(CONF / "quickstart.yaml"), *toy_run(), f"run_dir={kept}"]) == 130
    assert kept.is_dir() and "; run the same command" in capsys.readouterr().err


def test_ctrl_c_inside_import_mujoco_is_an_interrupt_too(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the run's first MuJoCo env imports mujoco (a ~1 s window before config.yaml is written):
    mujoco turns the KeyboardInterrupt into ``ImportError: initialization failed`` and gymnasium that into
    ``DependencyNotInstalled: MuJoCo is not installed``. It used to end in that 63-line traceback, exit 1,
    and an empty run folder that --resume refused ("has no config.yaml")."""
    from gymnasium.error import DependencyNotInstalled

    from prism.cli import main

    def importing_mujoco(*args, **kwargs):  # the chain a real SIGINT inside `import mujoco` leaves
        try:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as interrupt:
                raise ImportError("initialization failed") from interrupt
        except ImportError as err:
            raise DependencyNotInstalled(
                'MuJoCo is not installed, run `pip install "gymnasium[mujoco]"`'
            ) from err

    monkeypatch.setattr("prism.run.fit.resolved_values", importing_mujoco)
    run_dir = tmp_path / "run"
    assert main(["fit", "--config", str(CONF / "quickstart.yaml"), *toy_run(), f"run_dir={run_dir}"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == [
        f"prism: interrupted before the run wrote anything; {run_dir} removed; run the same command to start it"
    ]
    assert not run_dir.exists()
    # the same error without a Ctrl-C behind it is not taken for one
    monkeypatch.setattr(
        "prism.run.fit.resolved_values",
        lambda *a, **k: (_ for _ in ()).throw(DependencyNotInstalled("MuJoCo is not installed")),
    )
    with pytest.raises(DependencyNotInstalled):
        main(["fit", "--config", str(CONF / "quickstart.yaml"), *toy_run(), f"run_dir={run_dir}"])


def test_caused_by_interrupt_follows_the_exception_chain():
    from prism.core.errors import caused_by_interrupt

    def chained(outer: Exception) -> Exception:
        try:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt:
                raise outer  # noqa: B904 (implicit __context__, as mujoco's import leaves it)
        except Exception as err:
            return err

    assert caused_by_interrupt(KeyboardInterrupt()) and caused_by_interrupt(chained(ImportError("x")))
    assert not caused_by_interrupt(ImportError("x")) and not caused_by_interrupt(ValueError("y"))


def test_ctrl_c_names_the_resume_command_and_resume_then_runs_the_whole_run(tmp_path, monkeypatch, capsys):
    from prism.cli import main

    run_dir = tmp_path / "run"
    args = [
        "fit",
        "--config",
        str(CONF / "quickstart.yaml"),
        *toy_run(),
        f"run_dir={run_dir}",
        "--progress",
        "none",
    ]
    with monkeypatch.context() as patch:
        _interrupt_at(patch, "build_run")  # config.yaml written, nothing trained, no checkpoint
        assert main(args) == 130
    out, err = capsys.readouterr()
    # the folder is named when the run starts, and the exact command that goes on when it is stopped
    assert (
        out.splitlines()[0]
        == f"prism fit: run folder {run_dir} (prism on prism/Toy-v0, backbone capql, seed 0)"
    )
    assert (
        err.strip().splitlines()[-1]
        == f"prism: interrupted; continue the run with: prism fit --resume {run_dir}"
    )
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml"]
    assert main(["fit", "--resume", str(run_dir), "--progress", "none"]) == 0
    out = capsys.readouterr().out
    assert f"prism: resuming {run_dir} from the start (no checkpoint was saved)" in out
    assert (run_dir / "summary.json").is_file()


def test_an_interrupted_reward_fit_says_interrupted_not_stopped():
    """ "(stopped)" read like early stopping, which ends a fit normally."""
    import io

    from prism.display.progress import RewardFitProgress
    from prism.display.progress_lines import LineProgress

    def ended(exception: BaseException) -> str:
        log = io.StringIO()
        callback = RewardFitProgress(LineProgress(log), "reward fit (cycle 1/2)", max_epochs=10)
        callback.on_fit_start(None, None)
        callback.on_exception(None, None, exception)
        return log.getvalue().splitlines()[-1]

    assert ended(KeyboardInterrupt()).endswith("s  (interrupted)")
    assert ended(RuntimeError("boom")).endswith("s  (failed: RuntimeError)")
    assert "stopped" not in ended(KeyboardInterrupt())
