"""Running a grid: one ``prism fit`` process per job, on this machine (``local``) or as Ray tasks (``ray``).

A job is a population of every seed of an (env, arm) cell, or one seed of it; its command is chosen when it
starts, so a job that finds its folder started resumes it (``prism fit --resume``), one that finds it finished
returns at once, and one that finds it being written by another process (a second driver on the same grid:
:mod:`prism.run.lock`) is skipped with :data:`RUNNING_ELSEWHERE` rather than failed. Joined arms (cells
with a ``source``) are never run.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from prism.experiments.grid import CONF, METHODS, ROOT, Cell, Preset
from prism.run.lock import locked_elsewhere

RUNNING_ELSEWHERE = -2
"""The "exit code" :func:`run_job` reports for a job whose run folder another prism process is writing: the job
was not run here, and did not fail; rerunning the grid after that process ends picks up its result."""


@dataclass(frozen=True)
class Job:
    """One ``prism fit`` process: a population of every seed of an (env, method) cell, or one seed of it.

    A population job's folder is ``<out>/<env>/<method>`` and its members' folders are ``seed<k>/`` inside it —
    the same paths per-seed jobs write, so the report reads both alike."""

    env: str
    method: str
    seeds: tuple[int, ...]
    population: bool

    def run_dir(self, out: Path) -> Path:
        folder = out / self.env / self.method
        return folder if self.population else folder / f"seed{self.seeds[0]}"

    def finished(self, out: Path) -> bool:
        return (self.run_dir(out) / ("summary.csv" if self.population else "summary.json")).is_file()

    def log(self, out: Path) -> Path:
        # A population's log sits beside its folder: prism starts a fresh run only in an empty folder.
        if self.population:
            return out / self.env / f"{self.method}.log"
        return out / self.env / self.method / f"seed{self.seeds[0]}.log"

    def __str__(self) -> str:
        who = f"seeds {','.join(map(str, self.seeds))}" if self.population else f"seed {self.seeds[0]}"
        return f"{self.env:8s} {self.method:10s} {who}"


def make_jobs(
    cells: list[Cell], out: Path, per_seed: bool, per_seed_methods: frozenset[str] = frozenset()
) -> list[Job]:
    """Group the cells into jobs: one population per (env, method), or one job per seed (every method with
    ``per_seed``, the methods in ``per_seed_methods`` otherwise). A population job takes only the seeds not
    already finished as per-seed runs (so an older per-seed grid is completed, not redone). Joined arms'
    cells (``source`` set) make no job: their runs belong to another grid."""
    cells = [c for c in cells if c.source is None]
    if per_seed:
        return [Job(c.env, c.method, (c.seed,), False) for c in cells]
    jobs = []
    for env, method in dict.fromkeys((c.env, c.method) for c in cells):
        seeds = tuple(c.seed for c in cells if (c.env, c.method) == (env, method))
        if method in per_seed_methods:
            jobs += [Job(env, method, (s,), False) for s in seeds]
            continue
        population = Job(env, method, seeds, True)
        if (population.run_dir(out) / "config.yaml").is_file():
            jobs.append(population)  # a population already started here: resume it as it is
            continue
        todo = tuple(s for s in seeds if not Job(env, method, (s,), False).finished(out))
        if todo and any((population.run_dir(out) / f"seed{s}").exists() for s in seeds):
            # per-seed runs live in this folder already: finish the grid the same way
            jobs += [Job(env, method, (s,), False) for s in todo]
        elif todo:
            jobs.append(Job(env, method, todo, True))
    return jobs


GRID_KEYS = ("run_dir", "seed", "seeds", "method_label", "protocol")
"""Keys the grid sets for each run itself: a ``--set`` of one is refused (``--protocol`` picks the protocol)."""


def fresh_arguments(
    job: Job, preset: Preset, out: Path, sets: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    """(config files, ``key=value`` overrides) of ``job`` started afresh: the env file, the arm's overlay (and
    the backbone's file), then the preset's and the arm's overrides, then the user's ``sets`` (last, so they
    win over both), then the grid's own keys (:data:`GRID_KEYS`)."""
    who = f"seeds=[{','.join(map(str, job.seeds))}]" if job.population else f"seed={job.seeds[0]}"
    arm = preset.arm(job.method)
    files = [
        str(CONF / f"{job.env}.yaml"),
        str(CONF / METHODS[arm.method][0]),
        *([str(CONF / "agent" / f"{preset.backbone}.yaml")] if preset.backbone != "capql" else []),
    ]
    items = [
        *preset.overrides_for(job.env),
        *arm.overrides,
        *sets,
        f"protocol={preset.protocol_of(job.method)}",
        *([f"method_label={arm.name}"] if arm.name != arm.method else []),
        who,
        f"run_dir={job.run_dir(out)}",
    ]
    return files, items


def fit_command(job: Job, preset: Preset, out: Path, sets: tuple[str, ...] = ()) -> list[str]:
    """The ``prism fit`` command of ``job``: ``--resume`` where its folder holds a config, else
    :func:`fresh_arguments`."""
    run_dir = job.run_dir(out)
    if (run_dir / "config.yaml").is_file():
        return [sys.executable, "-m", "prism.cli", "fit", "--resume", str(run_dir)]
    files, items = fresh_arguments(job, preset, out, sets)
    return [sys.executable, "-m", "prism.cli", "fit", "--config", *files, *items]


_STOP = threading.Event()
"""Set by :func:`stop_children`: no job starts after it."""
_CHILDREN: set[subprocess.Popen] = set()
_CHILDREN_LOCK = threading.Lock()


def stop_children(timeout: float | None = None) -> None:
    """Stop the grid: no further job starts, each running ``prism fit`` child gets one SIGINT (it saves a
    checkpoint and exits, as on a Ctrl-C of its own), and this waits for them to end. The children run in
    their own process group, so a Ctrl-C at the terminal reaches only the driver and each child is
    interrupted exactly once, from here."""
    _STOP.set()
    with _CHILDREN_LOCK:
        children = list(_CHILDREN)
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
    for child in children:
        child.wait(timeout)


def _child_setup() -> None:
    os.setpgrp()  # its own process group: the terminal's Ctrl-C goes to the driver, which passes one on
    _die_with_parent()


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGKILL it when its parent dies, so a lost (killed) grid worker never leaves
    an orphaned ``prism fit`` writing into a run folder that the retried task is about to resume."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: best effort only
        pass


def run_job(job: Job, preset: Preset, out: Path, sets: tuple[str, ...] = ()) -> tuple[Job, int, float]:
    """Run (or resume) one job to the end; ``(job, exit code, seconds)``. A finished job returns at once.

    The command is chosen here, when the run starts, not when it is submitted: a retried Ray task finds the
    run folder of the lost attempt and resumes it from its last checkpoint; a run another process is writing
    (its folder locked) is left to it: ``(job, RUNNING_ELSEWHERE, 0.0)``."""
    if job.finished(out):
        return job, 0, 0.0
    if _STOP.is_set():
        raise KeyboardInterrupt  # the grid was stopped before this job's turn came
    if locked_elsewhere(job.run_dir(out)):
        return job, RUNNING_ELSEWHERE, 0.0
    log = job.log(out)
    log.parent.mkdir(parents=True, exist_ok=True)
    command = fit_command(job, preset, out, sets)
    start = time.perf_counter()
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(command)}\n")
        fh.flush()
        with _CHILDREN_LOCK:
            if _STOP.is_set():
                raise KeyboardInterrupt
            child = subprocess.Popen(
                command,
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                preexec_fn=_child_setup if sys.platform.startswith("linux") else None,
            )
            _CHILDREN.add(child)
        try:
            code = child.wait()
        finally:
            with _CHILDREN_LOCK:
                _CHILDREN.discard(child)
    seconds = time.perf_counter() - start
    if code != 0 and locked_elsewhere(job.run_dir(out)):
        # The other writer took the folder between the check above and our child's start: the child was
        # refused by the run's own lock (nothing written), which is this job's "running elsewhere" too.
        return job, RUNNING_ELSEWHERE, seconds
    return job, code, seconds


def log_tail(job: Job, out: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a job's log (what the driver shows for a failed run)."""
    path = job.log(out)
    if not path.is_file():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").rstrip().splitlines()[-lines:])


class BackendError(Exception):
    """A backend cannot be used as asked (one line; the CLI exits 2)."""


RunFn = Callable[[Job], tuple[Job, int, float]]


def run_local(jobs: list[Job], run: RunFn, parallel: int) -> Iterator[tuple[Job, int, float]]:
    """``parallel`` jobs at once as subprocesses of this machine; results as they finish."""
    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    futures = [pool.submit(run, job) for job in jobs]
    try:
        for future in as_completed(futures):
            yield future.result()
    finally:
        # On a Ctrl-C (or any early exit) the queued jobs are dropped, not started one after another.
        pool.shutdown(wait=False, cancel_futures=True)


def run_ray(
    cells: list[Job],
    run: RunFn,
    *,
    address: str | None,
    parallel: int,
    cpus_per_run: float,
    gpus_per_run: float,
    max_retries: int = 3,
) -> Iterator[tuple[Job, int, float]]:
    """One Ray task per job (a population or one seed), resources declared; a task whose worker is lost is retried (and resumes).

    ``address=None`` starts a local Ray instance with ``parallel × cpus_per_run`` CPUs; ``auto`` (or a
    ``ray://`` / ``host:port`` address) joins a running cluster, whose resources then bound the parallelism."""
    try:
        import ray
    except ImportError:
        raise BackendError(
            '--backend: ray is not installed; install the cluster extra: pip install -e ".[cluster]"'
        ) from None
    if not ray.is_initialized():
        if address is None:
            ray.init(
                num_cpus=max(1, math.ceil(parallel * cpus_per_run)),
                include_dashboard=False,
                log_to_driver=False,
            )
        else:
            ray.init(address=address, log_to_driver=False)
    # Tasks are functions of this package, which every node imports anyway (a task runs `python -m prism.cli`).
    remote = ray.remote(run).options(
        num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=max_retries, retry_exceptions=False
    )
    pending = {remote.remote(cell): cell for cell in cells}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            cell = pending.pop(ref)
            try:
                yield ray.get(ref)
            except Exception as err:  # the task itself failed (after its retries): report, go on
                print(f"ray task for {cell} failed: {type(err).__name__}: {err}", file=sys.stderr)
                yield cell, -1, 0.0
