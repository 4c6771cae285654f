"""Every `prism` command of the README works in README order on a fresh clone.

The commands are read from README.md's bash blocks and run as they are, in a folder holding only `conf/` (as a
fresh clone has no `runs/`), each `prism fit` that starts a run with the tiny budget's keys appended
(`conf/budget/tiny.yaml`, as overrides so that they win over the README's own)."""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from subprocess_runs import subprocess_env

from prism.agents.config import CAPQLConfig

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[list[str]]:
    """The `prism …` commands of README.md's bash blocks, in order, as argument lists (comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():  # a line ending in \ goes on on the next
            for part in line.split("&&"):
                args = shlex.split(part, comments=True)
                if args and args[0] == "prism":
                    commands.append(args[1:])
    return commands


CAPQL_KEYS = {f.name for f in dataclasses.fields(CAPQLConfig)}


def _flat(node, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [item for key, value in node.items() for item in _flat(value, f"{prefix}{key}.")]
    return [f"{prefix[:-1]}={node}"]


TINY = _flat(OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "budget" / "tiny.yaml")))
# As overrides (typed for one run, so a key the backbone lacks is refused) only CAPQL's agent keys: the budget
# file's GPI-PD keys are skipped on CAPQL when it is read as a file, and the README's runs are CAPQL's.
TINY = [item for item in TINY if not item.startswith("agent.") or item[6:].split("=")[0] in CAPQL_KEYS]
# Cheaper still, since only "does the command work" is checked: half the RL steps, small update batches, and
# evaluations in this process (no worker pool to start). The run's every phase still happens.
TINY += [
    "loop.steps_per_cycle=150",
    "loop.checkpoint_every=150",
    "eval.every=150",
    "agent.batch_size=32",
    "eval.num_workers=0",
]


def test_the_readme_commands_are_found():
    commands = readme_commands()
    assert commands[0] == ["fit", "--config", "conf/quickstart.yaml", "run_dir=runs/quickstart"]  # the set-up
    assert sum(c[:1] == ["fit"] and "--resume" not in c for c in commands) >= 6
    assert any(c[:1] == ["evaluate"] for c in commands) and any("--resume" in c for c in commands)


@pytest.mark.slow  # nine tiny MuJoCo runs, their resumes and an evaluation (minutes on one core)
def test_every_readme_command_works_in_readme_order_on_a_fresh_clone(tmp_path, monkeypatch, capsys):
    # Each command runs through `prism`'s entry point (prism.cli.main) in this process, which saves the ~5
    # CPU-seconds a child spends importing torch, Lightning and MuJoCo per command; only `prism render` runs in
    # a child, since MuJoCo reads MUJOCO_GL (egl, to render) once, at its import.
    from prism import cli

    (tmp_path / "conf").symlink_to(ROOT / "conf")
    monkeypatch.chdir(tmp_path)
    for args in readme_commands():
        starts_a_run = args[:1] == ["fit"] and "--resume" not in args
        extra = TINY if starts_a_run else []
        if args[:1] == ["reproduce"]:
            # A preset's grid is hours of runs: check that the command and its preset are accepted and list
            # the runs it would start.
            extra = ["--dry-run"]
        if args[:1] == ["render"]:
            cmd = [sys.executable, "-m", "prism.cli", *args, "--max-steps", "5", "--size", "64x48"]
            env = {**subprocess_env(), "MUJOCO_GL": "egl"}
            out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
            assert out.returncode == 0, (args, out.stderr[-3000:])
            continue
        try:
            code = cli.main([*args, *extra])
        except SystemExit as exit_:  # argparse's --version and --help
            code = exit_.code or 0
        assert code == 0, (args, capsys.readouterr().err[-3000:])
    finished = sorted(str(p.parent.relative_to(tmp_path)) for p in tmp_path.glob("runs/**/summary.json"))
    assert "runs/quickstart" in finished and "runs/mo-walker2d-v5/baseline/seed3" in finished
    assert (tmp_path / "runs" / "mo-walker2d-v5" / "prism" / "seed0" / "evaluate.csv").is_file()
    assert (tmp_path / "runs" / "hopper-prism" / "summary.csv").is_file()
    assert (tmp_path / "runs" / "quickstart" / "render" / "rollouts.gif").is_file()
