"""One writer per run folder (prism.run.lock): a second `prism fit` / `--resume` / `--overwrite` on a folder
another process is writing is refused in one line and touches nothing; a killed holder leaves no stale lock;
forked workers do not keep the folder locked."""

from __future__ import annotations

import multiprocessing as mp
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prism.config import load_config, to_yaml
from prism.core.errors import ConfigError
from prism.run.fit import fit_run
from prism.run.lock import run_dir_lock

CONF = Path(__file__).resolve().parents[1] / "conf"
HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(120)
"""
BUSY = "is being written by another prism process"


@pytest.fixture
def held(tmp_path):
    """A run folder with a file in it, locked by another process (SIGKILLed at teardown)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "eval.csv").write_text("env_steps,hv\n100,1.0\n")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    yield run_dir, holder
    holder.kill()
    holder.wait()


def test_a_folder_locked_by_another_process_is_refused_and_left_as_it_is(held):
    run_dir, _ = held
    config = load_config([CONF / "quickstart.yaml"], [f"run_dir={run_dir}"])
    with pytest.raises(ConfigError, match=f"^run_dir: .* {BUSY}"):
        fit_run([], [], config=config, overwrite=True)  # --overwrite must not empty a live run's folder
    assert sorted(p.name for p in run_dir.iterdir()) == ["eval.csv"]
    assert (run_dir / "eval.csv").read_text() == "env_steps,hv\n100,1.0\n"


def test_a_resume_of_a_folder_another_process_writes_is_refused(held):
    run_dir, _ = held
    config_yaml = to_yaml(load_config([CONF / "quickstart.yaml"], [f"run_dir={run_dir}"]))
    (run_dir / "config.yaml").write_text(config_yaml)
    with pytest.raises(ConfigError, match=f"^--resume: .* {BUSY}"):
        fit_run([], [], resume=str(run_dir))
    assert (run_dir / "config.yaml").read_text() == config_yaml
    assert not (run_dir / "checkpoints").exists()


def test_a_killed_holder_leaves_no_stale_lock(held):
    run_dir, holder = held
    with pytest.raises(ConfigError, match=BUSY), run_dir_lock(run_dir, key="run_dir"):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with run_dir_lock(run_dir, key="run_dir"):  # the kernel dropped the lock with the process
        assert (run_dir / "eval.csv").is_file()


def _sleep(started) -> None:
    started.set()  # after the at-fork hooks: the worker runs
    time.sleep(60)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs the fork start method")
def test_a_forked_worker_does_not_keep_the_folder_locked(tmp_path):
    """Evaluation workers are forked inside the lock: when the run ends (or is killed) while a worker lingers,
    the folder must be free for the next writer."""
    worker, context = None, mp.get_context("fork")
    started = context.Event()
    try:
        with run_dir_lock(tmp_path, key="run_dir"):
            worker = context.Process(target=_sleep, args=(started,), daemon=True)
            worker.start()
            assert started.wait(30)
        assert worker.is_alive()
        with run_dir_lock(tmp_path, key="run_dir"):  # the worker's inherited descriptor was closed at fork
            pass
    finally:
        if worker is not None:
            worker.kill()
            worker.join()


def test_the_lock_is_released_after_a_refused_or_failed_block(tmp_path):
    with pytest.raises(RuntimeError), run_dir_lock(tmp_path, key="run_dir"):
        raise RuntimeError("the run failed")
    refused = pytest.raises(ConfigError, match=f"^run_dir: {re.escape(repr(str(tmp_path)))} {BUSY}")
    with run_dir_lock(tmp_path, key="run_dir"), refused, run_dir_lock(tmp_path, key="run_dir"):
        pass  # the second open of the folder is another writer, even in the same process
