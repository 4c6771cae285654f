"""What the fourth round's new user met (issue 64, part 4): each test fails without its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from prism.cli import main
from prism.experiments.studies import load_preset

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def _described(capsys, *extra: str) -> dict[str, str]:
    assert main(["config", "--describe", "--config", str(CONF / "hopper.yaml"), *extra]) == 0
    return dict(
        line.split(" = ", 1)
        for line in capsys.readouterr().out.splitlines()
        if " = " in line and line[0] != " "
    )


def test_config_describe_prints_yaml_values_not_python_reprs(capsys):
    described = _described(capsys)
    assert described["seeds"] == "null" and described["method_label"] == "null"
    assert described["device"] == "auto" and described["env.dense"] == "false"
    assert described["reward.residual"] == "true" and "[256, 256]" in described.values()
    assert not any(
        value in {"None", "True", "False"} or value.startswith("'") for value in described.values()
    )


@pytest.mark.parametrize(
    "override, hint",
    [
        ("reward.name=resymet", "did you mean 'resymnet'?"),
        ("reward.loss=randomised", "did you mean 'randomized'?"),
        ("reward.sampling=stratifed", "did you mean 'stratified'?"),
        ("agent.name=gpipd", "did you mean 'gpi_pd'?"),
        ("protocol=relesed", "did you mean 'released'?"),
        ("method=prsim", "did you mean 'prism'?"),
    ],
)
def test_a_bad_choice_names_the_nearest_value_in_its_one_line(override, hint, capsys):
    assert main(["config", "--config", str(CONF / "hopper.yaml"), override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and hint in err and override.split("=")[0] in err


def test_a_bad_choice_far_from_every_value_gets_no_guess(capsys):
    assert main(["config", "--config", str(CONF / "hopper.yaml"), "reward.name=xyz"]) == 2
    assert "did you mean" not in capsys.readouterr().err


@pytest.mark.parametrize("extra", [[], ["conf/method/baseline.yaml"], ["conf/ablation/uniform.yaml"]])
def test_p_rel_one_releases_every_step_so_it_is_refused_as_the_dense_env_is(extra, capsys):
    files = [str(CONF / "hopper.yaml"), *(str(ROOT / path) for path in extra)]
    assert main(["config", "--config", *files, "env.p_rel=1.0"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        len(err.splitlines()) == 1 and err.startswith("prism: error: env.p_rel: ") and "env.dense=true" in err
    )
    assert main(["config", "--config", *files, "env.p_rel=0.99"]) == 0  # below 1 the channel stays sparse


def test_conf_not_found_outside_the_clone_says_where_conf_ships(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # outside the repository, as after `pip install` in another folder
    assert main(["config", "--config", "conf/walker.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "conf/ ships in prism's repository" in err
    assert str(CONF / "walker.yaml") in err  # an editable install knows its clone, so the line names the file
    assert main(["config", "--config", "conf/no-such-file.yaml"]) == 2
    assert "run from the clone" in capsys.readouterr().err
    assert main(["config", "--config", "other/walker.yaml"]) == 2  # not a conf/ path: no hint
    assert "ships" not in capsys.readouterr().err


def test_prism_list_names_the_backbone_of_baseline_and_oracle_and_lists_budgets_and_losses():
    from prism.plugins.catalogue import catalogue
    from prism.reward.config import FIT_LOSSES

    listed = catalogue()
    methods = listed.split("methods (overlays")[1].split("ablations")[0]
    for name in ("baseline", "oracle"):
        (line,) = [line for line in methods.splitlines() if line.startswith(f"  {name} ")]
        assert "agent.name" in line and "CAPQL by default" in line
    budgets = listed.split("budgets (overlays: --config ENV.yaml conf/budget/NAME.yaml):\n")[1]
    assert budgets.startswith("  small ") and "\n  tiny " in budgets
    losses = listed.split("reward fit losses (reward.loss")[1]
    assert all(f"\n  {name:<14} " in losses for name in FIT_LOSSES) and "eq. 1" in losses


@pytest.mark.parametrize("backbone", ["capql", "gpi_pd"])
def test_the_run_header_names_the_backbone(backbone, tmp_path, monkeypatch, capsys):
    import prism.run.fit
    from prism.config import load_config

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):  # the header is printed before the run is built: stop there
        raise Stop

    monkeypatch.setattr(prism.run.fit, "build_run", stop)
    config = load_config([CONF / "quickstart.yaml"], [f"agent.name={backbone}", f"run_dir={tmp_path}"])
    with pytest.raises(Stop):
        prism.run.fit._train_new(config, tmp_path, "none")
    header = capsys.readouterr().out.splitlines()[0]
    assert header == f"prism fit: run folder {tmp_path} (prism on mo-hopper-v5, backbone {backbone}, seed 0)"


@pytest.mark.parametrize(
    "overrides, label",
    [
        ([], "eq. 1 loss"),
        (["reward.loss=randomized"], "randomized loss, K=64"),
        (["reward.name=rrd", "method=rrd"], "rrd, randomized loss, K=64"),
    ],
)
def test_the_reward_fit_line_names_its_loss_and_labels_its_validation_loss(overrides, label, tmp_path):
    import io

    from toy_runs import toy_run

    from prism.config import load_config
    from prism.display.progress_lines import LineProgress
    from prism.run.fit import build_run

    resymnet = "reward.name=rrd" not in overrides  # (RRD refuses ReSymNet's own keys)
    extra = [*toy_run({"reward.max_epochs": 2}, resymnet=resymnet), *overrides, f"run_dir={tmp_path / 'run'}"]
    run = build_run(load_config([CONF / "quickstart.yaml"], extra), progress_bar=False)
    log = io.StringIO()
    run.loop.progress = LineProgress(log, fit_every_s=0.0)
    run.loop._advance(run.agent, None)  # collect, fit, stop at RL
    (done,) = [
        line for line in log.getvalue().splitlines() if "reward fit (cycle 1/2" in line and "epochs  " in line
    ]
    assert f"reward fit (cycle 1/2, {label}): 2 epochs  val_sum_mse " in done and "val_loss" not in done


def test_a_randomized_fit_gets_its_own_default_folder_and_its_bias_correction_resolved():
    import yaml

    from prism.config import load_config, resolved_values

    eq1 = load_config([CONF / "hopper.yaml"])
    fast = load_config([CONF / "hopper.yaml"], ["reward.loss=randomized"])
    assert eq1.run_dir == "runs/mo-hopper-v5/prism/seed0"  # eq. 1's folder is unchanged
    assert fast.run_dir == "runs/mo-hopper-v5/prism-randomized/seed0"
    gpi = load_config([CONF / "hopper.yaml"], ["reward.loss=randomized", "agent.name=gpi_pd"])
    assert gpi.run_dir == "runs/mo-hopper-v5/prism-randomized-gpi_pd/seed0"
    rrd = load_config([CONF / "hopper.yaml", CONF / "method" / "rrd.yaml"])
    uniform = load_config(
        [CONF / "hopper.yaml", CONF / "ablation" / "uniform.yaml"], ["reward.loss=randomized"]
    )
    assert (rrd.run_dir, uniform.run_dir) == (
        "runs/mo-hopper-v5/rrd/seed0",
        "runs/mo-hopper-v5/uniform/seed0",
    )
    # config.yaml's resolved: block says whether the sampled-step fit corrects its bias (null: the model's own)
    assert resolved_values(fast)["reward.bias_correction"] is True
    assert resolved_values(rrd)["reward.bias_correction"] is False
    off = load_config([CONF / "hopper.yaml"], ["reward.loss=randomized", "reward.bias_correction=false"])
    assert resolved_values(off)["reward.bias_correction"] is False
    assert "reward.bias_correction" not in resolved_values(eq1)  # eq. 1 samples no steps: nothing to correct
    assert yaml.safe_load(yaml.safe_dump(resolved_values(fast)))["reward.bias_correction"] is True


def test_report_only_without_out_warns_when_it_reads_no_run_and_points_to_the_committed_ones(
    tmp_path, monkeypatch, capsys
):
    from prism.experiments import cli

    # A fresh clone: docs/results/<preset>/runs committed, no runs/reproduce/ folder.
    (tmp_path / "docs" / "results" / "reward-budget").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "reward-budget" / "runs").symlink_to(
        ROOT / "docs/results/reward-budget/runs"
    )
    monkeypatch.setattr(cli, "ROOT", tmp_path)
    assert cli.main(["--preset", "reward-budget", "--report-only"]) == 0
    captured = capsys.readouterr()
    # the grid's own runs (its joined arms are another study's): e-prism-E1000's 5 seeds and e-prism-diag's one
    own = [c for c in load_preset("reward-budget").cells() if c.source is None]
    assert len(own) == 6
    assert "read 0 of 6 finished runs of reward-budget in runs/reproduce/reward-budget" in captured.out
    # (the report is still written, from the arms joined from protocol-study: the warning says what is missing)
    (warning,) = captured.err.strip().splitlines()
    assert "warning: no run of reward-budget in runs/reproduce/reward-budget" in warning
    assert "add --out docs/results/reward-budget/runs" in warning


def test_the_printed_recompute_command_names_the_folder_the_runs_were_read_from(tmp_path, capsys):
    import matplotlib
    from test_experiments_report import _smoke_run

    from prism.experiments import cli

    matplotlib.use("Agg")
    out, results = tmp_path / "grid", tmp_path / "report"
    for arm, hv in (("oracle", 300.0), ("baseline", 100.0), ("prism", 200.0)):
        _smoke_run(out / "hopper" / arm / "seed0", hv)
    assert cli.main(["--preset", "smoke", "--report-only", "--out", str(out), "--results", str(results)]) == 0
    printed = capsys.readouterr().out
    assert f"read 3 of 3 finished runs of smoke in {out}" in printed
    command = f"prism reproduce --preset smoke --report-only --out {out} --results {results}"
    assert command in printed and command in (results / "table.md").read_text()


def test_the_bench_extra_declares_the_pillow_cap_its_moviepy_imposes():
    """`pip install -e ".[test,…,bench]"` replaced a newer pillow by 11.x, unannounced: morl-baselines (bench)
    brings moviepy, which requires pillow < 12. pyproject.toml declares the same cap, with why, in that extra."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.version import Version

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    ours = [Requirement(r) for r in extras["bench"] if Requirement(r).name == "pillow"]
    assert ours, "the bench extra does not declare its pillow cap"
    try:
        theirs = [
            Requirement(r) for r in metadata.requires("moviepy") or [] if Requirement(r).name == "pillow"
        ]
    except metadata.PackageNotFoundError:  # bench not installed: the declaration alone is checked
        theirs = []
    for requirement in theirs:
        # the same bound, as versions ("<12.0" and "<12" are one cap)
        caps = {Version(s.version) for s in requirement.specifier if s.operator == "<"}
        assert caps <= {Version(s.version) for s in ours[0].specifier if s.operator == "<"}, (
            requirement,
            ours[0],
        )
    assert "moviepy" in (ROOT / "pyproject.toml").read_text().split("bench = ")[0].rsplit("\n\n", 1)[-1]


def test_wall_time_counts_an_interrupted_process_up_to_its_last_checkpoint_as_readme_says(monkeypatch):
    """prism/run/clock.py counts the work a run's result is made of; the docs said "across every process that
    trained the run", which reads as every second of every process. Code and docs/usage.md now say the same: a
    killed process's time after its last checkpoint is redone, and counted once, by the next process."""
    import prism.run.clock as clock

    now = {"t": 0.0}
    monkeypatch.setattr(clock.time, "perf_counter", lambda: now["t"])
    monkeypatch.setattr(clock.time, "process_time", lambda: now["t"] / 2)
    first = clock.RunClock()
    now["t"] = 100.0
    saved = first.state_dict()  # the last checkpoint, at 100 s
    now["t"] = 130.0  # 30 s more, then SIGKILL: lost, redone below
    second = clock.RunClock()
    second.carry(saved)
    now["t"] = 190.0  # the resumed process trains 60 s and finishes
    times = second.read()
    assert (times.wall_s, times.cpu_s, times.wall_s_this_process) == (160.0, 80.0, 60.0)
    usage = " ".join((ROOT / "docs" / "usage.md").read_text().split())  # the README's reference page
    assert (
        "what a killed or interrupted process did after its last checkpoint is redone by the next one"
        in usage
    )
    assert "after its last checkpoint is not in the totals" in usage


def test_render_says_how_long_and_how_big_before_it_starts():
    from prism.render import SECONDS_PER_FRAME, render_estimate

    line = render_estimate(clips=3, max_frames=1001, width=320, height=240, gif=True)
    low, high = (3 * 1001 * t for t in SECONDS_PER_FRAME)  # 15 s and 60 s at the reference size
    assert line == (
        f"prism render: 3 rollouts of at most 1001 frames at 320x240: roughly {low:.0f} s–{high:.0f} s, "
        f"a GIF of at most {3 * 1001 * 320 * 240 / 1e6:.0f} MB (fewer frames where episodes end)"
    )
    assert "MP4 of well under" in render_estimate(100, 1001, 640, 480, gif=False)
    assert "min" in render_estimate(
        100, 1001, 640, 480, gif=False
    )  # 100 long clips at 4x the pixels: minutes


def test_a_ctrl_c_in_a_subprocess_test_passes_sigint_on_to_the_child_and_ends_it(tmp_path):
    """Under `pytest -n auto` one Ctrl-C must end the run: a test holding a child (`prism fit`, Ray) passes the
    SIGINT on and does not wait on a child that never got it. The child here is in a session of its own, so
    only the helper can reach it, and it records the SIGINT before it exits."""
    import signal
    import subprocess
    import sys
    import time

    from subprocess_runs import child

    marker = tmp_path / "got-sigint"
    code = (
        "import signal, sys, time\n"
        f"def on_int(*_):\n    open({str(marker)!r}, 'w').close()\n    sys.exit(130)\n"
        "signal.signal(signal.SIGINT, on_int)\nprint('ready', flush=True)\ntime.sleep(600)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert process.stdout.readline().strip() == "ready"
    start = time.monotonic()
    # pytest-xdist's workers ignore SIGINT (their controller handles Ctrl-C): Python's own handler for the
    # test, so the signal raises KeyboardInterrupt here as it does in a plain pytest process.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), child(process, grace_s=30):
            signal.raise_signal(signal.SIGINT)  # the Ctrl-C that reaches the test's process
            time.sleep(60)  # (a test waiting on its child)
    finally:
        signal.signal(signal.SIGINT, before)
    assert process.returncode == 130 and marker.is_file()  # the child got SIGINT and ended on it
    assert time.monotonic() - start < 30
