"""``prism reproduce`` as a user drives it: ``--set`` wins over an arm's own keys, a file in ``--set`` is refused
in one line, a second command into the same ``--out`` with another ``--set`` is refused naming the runs whose
config differs, a dry run that selects no run says why, one Ctrl-C stops the whole grid (exit 130), and the
report's header says what ran (steps, seeds, settings), read from the runs' own config.yaml."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from prism.config.files import to_yaml
from prism.config.loader import load_config
from prism.experiments.cli import main
from prism.experiments.runner import Job, fit_command, fresh_arguments
from prism.experiments.studies import load_preset

ROOT = Path(__file__).resolve().parents[1]


def _items(command: list[str]) -> list[str]:
    return [item for item in command if "=" in item]


def test_a_user_set_wins_over_the_arms_own_key(tmp_path):
    preset = load_preset("fit-cost")  # its arm e-oracle-rerun sets loop.initial_episodes=250 itself
    job = Job("swimmer", "e-oracle-rerun", (0,), False)
    command = fit_command(job, preset, tmp_path, ("loop.initial_episodes=5",))
    items = _items(command)
    assert items.index("loop.initial_episodes=5") > items.index("loop.initial_episodes=250")
    config = load_config(*fresh_arguments(job, preset, tmp_path, ("loop.initial_episodes=5",)))
    assert config.loop.initial_episodes == 5


def test_a_file_or_a_grid_key_in_set_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "grid"
    argv = ["--preset", "cpu-small", "--out", str(out), "--dry-run"]
    assert main([*argv, "--set", "conf/budget/tiny.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--set: 'conf/budget/tiny.yaml' is not key=value" in err
    assert main([*argv, "--set", "run_dir=/tmp/x"]) == 2
    assert "--set: run_dir is set by the grid for each run" in capsys.readouterr().err
    assert not out.exists()


def _started(out: Path, preset_name: str, env: str, arm: str, seed: int, sets: tuple[str, ...]) -> None:
    """A run folder as `prism fit` leaves it at start: its config.yaml."""
    job = Job(env, arm, (seed,), False)
    config = load_config(*fresh_arguments(job, load_preset(preset_name), out, sets))
    job.run_dir(out).mkdir(parents=True)
    (job.run_dir(out) / "config.yaml").write_text(to_yaml(config))


def test_a_rerun_into_the_same_out_with_another_set_is_refused_naming_the_run(tmp_path, capsys):
    out = tmp_path / "grid"
    _started(out, "cpu-small", "hopper", "prism", 0, ("loop.initial_episodes=7",))
    argv = ["--preset", "cpu-small", "--envs", "hopper", "--out", str(out), "--dry-run"]
    assert main([*argv, "--set", "loop.initial_episodes=9"]) == 2
    err = capsys.readouterr().err
    assert "hopper/prism/seed0 (loop.initial_episodes: 7 there, 9 now)" in err
    assert main(argv) == 2  # dropping the --set is another config too
    assert "loop.initial_episodes: 7 there" in capsys.readouterr().err
    assert main([*argv, "--set", "loop.initial_episodes=7"]) == 0  # the same --set resumes it
    assert "--resume" in capsys.readouterr().out


def test_a_key_left_to_the_codes_default_is_not_compared(tmp_path, capsys):
    # a default that changed between versions (agent.cuda_graph: false, now auto) is no choice of the command
    out = tmp_path / "grid"
    _started(out, "cpu-small", "hopper", "prism", 0, ())
    config = out / "hopper" / "prism" / "seed0" / "config.yaml"
    assert "  cuda_graph: auto\n" in config.read_text()
    config.write_text(config.read_text().replace("  cuda_graph: auto\n", "  cuda_graph: false\n"))
    assert main(["--preset", "cpu-small", "--envs", "hopper", "--out", str(out), "--dry-run"]) == 0
    assert "--resume" in capsys.readouterr().out


def test_a_dry_run_that_selects_no_run_says_why(tmp_path, capsys):
    # table1-study's hopper arms are all joined from other studies' runs: nothing to run here
    argv = ["--preset", "table1-study", "--envs", "hopper", "--out", str(tmp_path), "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("# no run to make: the selected arms") and "joined from another study" in out


def _finished(out: Path, preset_name: str, env: str, arm: str, seed: int, sets: tuple[str, ...]) -> None:
    """A finished run folder made with ``sets``: its config.yaml as `prism fit` writes it, an eval.csv with a
    final row and a summary.json."""
    _started(out, preset_name, env, arm, seed, sets)
    run_dir = Job(env, arm, (seed,), False).run_dir(out)
    rows = ["env_steps,hv,eum,vo,final", f"100,{1.0 + seed},1.0,1.0,0", f"200,{2.0 + seed},1.0,1.0,1"]
    (run_dir / "eval.csv").write_text("\n".join(rows) + "\n")
    (run_dir / "summary.json").write_text("{}")


def _what_ran(results: Path) -> str:
    """The report's header: the lines between its title and the paragraph on final / best columns."""
    text = (results / "table.md").read_text()
    return text[: text.index("Final = the evaluation")]


def test_the_report_header_says_what_ran_steps_seeds_and_overrides_read_from_the_runs(tmp_path, capsys):
    # runs made with `--set loop.steps_per_cycle=2000 --seeds 0 1`; the report is asked for without the --set
    # (and without --seeds): it reads what ran from the runs' own config.yaml, not from its command line
    out, results = tmp_path / "grid", tmp_path / "report"
    for arm in ("oracle", "prism"):
        for seed in (0, 1):
            _finished(out, "cpu-small", "hopper", arm, seed, ("loop.steps_per_cycle=2000",))
    argv = ["--preset", "cpu-small", "--envs", "hopper", "--methods", "oracle", "prism", "--report-only"]
    assert main([*argv, "--out", str(out), "--results", str(results)]) == 0
    header = _what_ran(results)
    assert header.startswith("## cpu-small: mo-hopper-v5 and mo-swimmer-v5")  # the study's description stays
    assert "- RL steps per run: 2 × 2 000 = 4 000 in every arm." in header
    assert "- Seeds: 0, 1 of the study's 0–4 in every arm." in header
    assert "`loop.steps_per_cycle=2000` (the study: 5000) in every arm." in header
    assert str(tmp_path) not in header  # no machine path


def test_the_report_header_names_an_arm_whose_runs_differ_among_themselves(tmp_path, capsys):
    out, results = tmp_path / "grid", tmp_path / "report"
    _finished(out, "cpu-small", "hopper", "prism", 0, ())
    _finished(out, "cpu-small", "hopper", "prism", 1, ("loop.steps_per_cycle=3000",))
    argv = ["--preset", "cpu-small", "--envs", "hopper", "--methods", "prism", "--report-only"]
    assert main([*argv, "--seeds", "0", "1", "--out", str(out), "--results", str(results)]) == 0
    header = _what_ran(results)
    assert "- RL steps per run: 2 × 5 000 = 10 000 or 2 × 3 000 = 6 000 in every arm." in header
    assert (
        "- Runs that differ among themselves: hopper/prism: `loop.steps_per_cycle` 5000 (seed 0), "
        "3000 (seed 1); the study: 5000." in header
    )


def test_the_report_header_says_briefly_when_the_runs_are_the_study_exactly(tmp_path, capsys):
    from dataclasses import replace

    from prism.experiments.report import write_report

    out, results = tmp_path / "grid", tmp_path / "report"
    for seed in (0, 1):
        _finished(out, "cpu-small", "hopper", "oracle", seed, ())
    study = replace(load_preset("cpu-small"), envs=("hopper",), methods=("oracle",), seeds=(0, 1))
    write_report("cpu-small", study, study.cells(), out, results)
    lines = [line for line in _what_ran(results).splitlines() if line]
    assert lines[1:] == [
        "What ran, read from each run's own config.yaml: the study's settings and seeds exactly; RL steps per "
        "run: 2 × 5 000 = 10 000 in every arm; seeds 0, 1 in every arm."
    ]


def test_the_header_loads_a_config_once_for_seeds_that_differ_only_in_per_run_keys(tmp_path, monkeypatch):
    # a study has hundreds of runs and each typed load takes a noticeable time: seeds of one arm differ only in
    # seed, run_dir and the `resolved:` record (eval.seed is derived from the seed), which the loader ignores
    import prism.config.loader as loader
    from prism.experiments.what_ran import what_ran_lines

    out = tmp_path / "grid"
    for seed in (0, 1, 2):
        _finished(
            out, "cpu-small", "hopper", "prism", seed, ("loop.steps_per_cycle=3000",) if seed == 2 else ()
        )
        config = Job("hopper", "prism", (seed,), False).run_dir(out) / "config.yaml"
        config.write_text(config.read_text() + f"resolved:\n  eval.seed: {1000 + seed}\n")
    loads = []
    real = loader.load_run_config
    monkeypatch.setattr(
        loader, "load_run_config", lambda path, *a, **k: loads.append(path) or real(path, *a, **k)
    )
    study = load_preset("cpu-small")
    cells = [cell for cell in study.cells() if cell.env == "hopper" and cell.method == "prism"]
    lines = what_ran_lines(study, cells, out)
    assert len(loads) == 2  # seeds 0 and 1 share one load; seed 2 ran another setting
    assert any("`loop.steps_per_cycle` 5000 (seeds 0, 1), 3000 (seed 2)" in line for line in lines), lines


def test_a_setting_written_differently_but_the_same_in_effect_is_no_finding(tmp_path):
    # agent.cuda_graph false, true and auto all run the eager update on the CPU (a graph is CUDA's only), and
    # env.sparse_channel names no channel on the dense oracle: the header compares what a value does on the
    # device the run resolved, and still names a difference that acts (a graph off where the study's is on)
    from prism.experiments.what_ran import what_ran_lines

    out = tmp_path / "grid"
    sets = ("agent.cuda_graph=false", "env.sparse_channel=0")
    for seed, device in ((0, "cpu"), (1, "cpu"), (2, "cuda:0")):
        _finished(out, "cpu-small", "hopper", "oracle", seed, sets)
        config = Job("hopper", "oracle", (seed,), False).run_dir(out) / "config.yaml"
        config.write_text(config.read_text() + f"resolved:\n  device: {device}\n")
    study = load_preset("cpu-small")
    cells = [c for c in study.cells() if c.env == "hopper" and c.method == "oracle"]
    on_cpu = "\n".join(what_ran_lines(study, [c for c in cells if c.seed < 2], out))
    assert "cuda_graph" not in on_cpu and "sparse_channel" not in on_cpu, on_cpu
    # compared and found the study's (the header is the long form only because seeds 0, 1 are not its 0–4)
    assert "- Settings: the study's, in every run read." in on_cpu, on_cpu
    # seed 2 ran on CUDA, where the study's auto captures a graph and its false does not
    with_cuda = what_ran_lines(study, cells[:3], out)
    assert "- Not the study's setting: `agent.cuda_graph=false` (the study: auto) in every arm." in with_cuda
    assert not any("sparse_channel" in line for line in with_cuda), with_cuda
    # on a hidden channel the index written acts: 0 is not the study's last channel
    _finished(out, "cpu-small", "hopper", "baseline", 0, ("env.sparse_channel=0",))
    baseline = [c for c in study.cells() if (c.env, c.method, c.seed) == ("hopper", "baseline", 0)]
    assert "`env.sparse_channel=0`" in "\n".join(what_ran_lines(study, baseline, out))


def test_an_arm_read_at_an_earlier_cycles_end_is_not_reported_as_another_setting():
    # table1-paper's r-oracle is e-oracle's runs read at the end of cycle 1 of 2: its 2 cycles, equal protocol
    # and cycle-end evaluation are how it is read, not settings that differ from the study's released arm
    from prism.experiments.what_ran import what_ran_lines

    study = load_preset("table1-paper")
    out = ROOT / "docs" / "results" / "table1-paper" / "runs"
    cells = [c for c in study.cells() if c.env == "hopper" and c.method in ("r-oracle", "e-oracle")]
    lines = what_ran_lines(study, cells, out)
    assert any("read at the end of cycle 1 of 2 (hopper: r-oracle)" in line for line in lines), lines
    assert not [line for line in lines if line.startswith("- Not the study's setting")], lines


DRIVER = """
import sys
from pathlib import Path
import prism.experiments.runner as runner
from prism.experiments.cli import main

CHILD = '''
import signal, sys, time
from pathlib import Path
marker = Path(sys.argv[1])
def stop(*_):
    marker.write_text("interrupted")
    sys.exit(130)
# the handler first, then the marker the test waits for before it sends the Ctrl-C
signal.signal(signal.SIGINT, stop)
marker.write_text("started")
time.sleep(60)
marker.write_text("slept")
'''

def fit_command(job, preset, out, sets=()):
    return [sys.executable, "-c", CHILD, str(Path(out) / f"seed{job.seeds[0]}.marker")]

runner.fit_command = fit_command
sys.exit(main(["--preset", "cpu-small", "--envs", "hopper", "--methods", "oracle", "--seeds", "0", "1",
               "--per-seed-processes", "--parallel", "1", "--out", sys.argv[1]]))
"""


def test_one_ctrl_c_stops_the_whole_grid_exits_130_and_says_how_to_resume(tmp_path):
    out = tmp_path / "grid"
    out.mkdir()
    driver = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(DRIVER), str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (out / "seed0.marker").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (out / "seed0.marker").is_file(), driver.communicate(timeout=10)
    driver.send_signal(signal.SIGINT)
    stdout, stderr = driver.communicate(timeout=60)
    assert driver.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    assert "rerun the same command to continue" in stderr
    assert (out / "seed0.marker").read_text() == "interrupted"  # the running child got the Ctrl-C
    assert not (out / "seed1.marker").exists()  # and the next run never started
