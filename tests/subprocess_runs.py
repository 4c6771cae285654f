"""``prism`` in a child process for the end-to-end reliability tests: its environment, a run that must succeed,
and a run SIGKILLed at a chosen point."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest


def subprocess_env() -> dict[str, str]:
    """The test's environment, unbuffered and without a MuJoCo renderer."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "MUJOCO_GL": "disable"}


def run_ok(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run ``cmd`` to the end; fail the test with its stderr tail unless it exits 0."""
    result = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def stop_child(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End ``process`` as a Ctrl-C would: SIGINT (a ``prism fit`` saves nothing half-written and exits 130),
    then SIGKILL if it is still running after ``grace_s``."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def child(process: subprocess.Popen, grace_s: float = 10.0) -> Iterator[subprocess.Popen]:
    """``with child(Popen(...)) as process:``: a Ctrl-C (or a failure) in the block passes SIGINT on to the
    child and ends it before the exception goes on. Without it a test waiting on its child (``process.wait()``
    in a ``finally``) kept ``pytest -n auto`` alive after one Ctrl-C: the signal reaches an xdist worker, not
    always its children, and the worker then waited on a child that never heard of it."""
    try:
        yield process
    except BaseException:  # KeyboardInterrupt included: that is the point
        stop_child(process, grace_s)
        raise


def kill_when(cmd: list[str], ready, timeout: float = 300) -> None:
    """Start ``cmd``, SIGKILL it as soon as ``ready()`` holds (polled every 20 ms)."""
    process = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    with child(process):
        while not ready():
            if process.poll() is not None:
                pytest.fail(f"run ended before the kill point: {process.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("kill point never reached")
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL
