"""The command line as a user meets it (issue 21): Ctrl-C, fast config errors, introspection, error edges.

Subprocess tests on the toy env: each either ends at once (a config error) or runs a tiny toy run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from subprocess_runs import subprocess_env
from toy_runs import KILLABLE, toy_run

from prism.loop.checkpoint_io import read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PRISM = [sys.executable, "-m", "prism.cli"]


def _prism(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PRISM, *args], env=subprocess_env(), capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


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
    while not (checkpoint.is_file() and (run_dir / "eval.csv").is_file()):
        assert process.poll() is None, process.stderr.read()[-2000:]
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == "prism: interrupted"
    assert not (run_dir / "summary.json").exists()
    state = read_checkpoint(checkpoint)  # raises on a damaged file
    assert state["env_steps"] >= 150  # saved mid-RL (loop.checkpoint_every = 150), before the first evaluation
