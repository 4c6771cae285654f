"""``prism`` in a child process for the end-to-end reliability tests: its environment, a run that must succeed,
and a run SIGKILLed at a chosen point."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest


def subprocess_env() -> dict[str, str]:
    """The test's environment, unbuffered and without a MuJoCo renderer."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "MUJOCO_GL": "disable"}


def run_ok(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run ``cmd`` to the end; fail the test with its stderr tail unless it exits 0."""
    result = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def kill_when(cmd: list[str], ready, timeout: float = 300) -> None:
    """Start ``cmd``, SIGKILL it as soon as ``ready()`` holds (polled every 20 ms)."""
    process = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            if process.poll() is not None:
                pytest.fail(f"run ended before the kill point: {process.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("kill point never reached")
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    assert process.returncode == -signal.SIGKILL
