"""Reproduce the paper's tables: a grid of envs × methods × seeds, one ``prism fit`` process per run.

    python tools/reproduce.py --preset cpu-medium --parallel 2            # run (or resume) the grid, then report
    python tools/reproduce.py --preset cpu-medium --report-only           # tables and plots from finished runs
    python tools/reproduce.py --preset paper --envs hopper --seeds 0 1    # any sub-grid
    python tools/reproduce.py --preset smoke --backend ray                # the same grid as Ray tasks
    python tools/reproduce.py --preset paper --backend ray --address auto # join a running Ray cluster

Each run lives in ``<out>/<env>/<method>/seed<k>`` and is a plain prism run folder. The grid is resumable:
finished runs (``summary.json`` present) are skipped, interrupted ones are continued with ``--resume``.

Backends: ``local`` runs ``--parallel`` runs at once as subprocesses of this machine; ``ray`` submits one Ray
task per run (``--cpus-per-run`` CPUs and ``--gpus-per-run`` GPUs declared; a task whose worker is lost is
retried and the retried run resumes from its last checkpoint — so on a cluster the ``--out`` folder must be on
a filesystem every node shares). ``ray`` is an optional extra: ``pip install -e ".[cluster]"``.

The report (markdown + CSV) gives mean ± standard error over seeds of the **final evaluation** (the paper's
protocol, 100 weights × 5 episodes, the row flagged ``final`` in eval.csv) and of the best periodic evaluation
per (env, method, metric), the paper's number beside each cell, the ratios PRISM / baseline and PRISM / oracle
with a Welch t-test and a bootstrap confidence interval over seeds; plots show Pareto fronts (one panel per env)
and HV curves (periodic evaluations) with a standard-error band.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import itertools
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from prism.config import PROTOCOLS  # equal budget, or the authors' released code's arms

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PAPER = Path(__file__).resolve().parent / "data" / "paper_results.csv"

ENV_FILES = {
    "hopper": "mo-hopper-v5",
    "walker": "mo-walker2d-v5",
    "halfcheetah": "mo-halfcheetah-v5",
    "swimmer": "mo-swimmer-v5",
}
# method name -> (overlay file, the paper's column header in the main / ablation tables)
METHODS = {
    "oracle": ("method/oracle.yaml", "Oracle"),
    "baseline": ("method/baseline.yaml", "Baseline"),
    "prism": ("method/prism.yaml", "PRISM"),
    "wo_residual": ("ablation/wo_residual.yaml", "w/o residual"),
    "wo_dense": ("ablation/wo_dense.yaml", "w/o dense rewards"),
    "wo_ensemble": ("ablation/wo_ensemble.yaml", "w/o ensemble"),
    "wo_refinement": ("ablation/wo_refinement.yaml", "w/o refinement"),
    "wo_loss": ("ablation/wo_loss.yaml", "w/o loss"),
    "uniform": ("ablation/uniform.yaml", "uniform"),
    "random": ("ablation/random.yaml", "random"),
}
METRICS = ("hv", "eum", "vo")


@dataclass(frozen=True)
class Arm:
    """One column of a grid: a method overlay (a key of :data:`METHODS`) run under a protocol, plus overrides.

    A plain method is the arm of the same name with the grid's protocol; a preset may define arms of its own
    (e.g. the same method under both protocols) that pin their protocol."""

    name: str
    """The arm's folder name and report label."""
    method: str
    """The method overlay (and the paper's column it is compared with)."""
    protocol: str | None = None
    """``equal`` or ``released``; None takes the grid's ``--protocol``."""
    overrides: tuple[str, ...] = ()
    """prism overrides of this arm only (after the preset's)."""
    per_seed: bool = False
    """Run this arm one process per seed even where the grid runs populations: for an arm whose population
    would outlast the machine's session (checkpoints do not survive a session; finished seeds' files do)."""
    seeds: tuple[int, ...] | None = None
    """The seeds of this arm (None: the grid's); e.g. one seed of a sensitivity check beside a 5-seed arm."""


@dataclass(frozen=True)
class Ratio:
    """A row of the ratio table: final metric of arm ``numerator`` over that of arm ``denominator``."""

    numerator: str
    denominator: str
    label: str = ""
    """What the ratio measures (e.g. "budget: oracle 25k → 50k"); empty for a plain method comparison."""


@dataclass(frozen=True)
class Preset:
    envs: tuple[str, ...]
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    overrides: tuple[str, ...]
    description: str
    env_overrides: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Per-env additions to ``overrides`` (e.g. smaller collections where episodes are 1000 steps long)."""
    backbone: str = "capql"
    """The agent (``conf/agent/<backbone>.yaml`` is added after the method overlay)."""
    protocol: str = "equal"
    """The protocol of every arm that does not pin its own (``--protocol`` sets it)."""
    arms: tuple[Arm, ...] = ()
    """Arms of this preset beyond the plain methods (``methods`` may name them)."""
    ratios: tuple[Ratio, ...] = ()
    """The ratio table's rows; empty = PRISM / baseline and PRISM / oracle where both arms are in the grid."""
    env_methods: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Per env, the arms run there when they differ from ``methods`` (``methods`` then lists them all)."""

    def methods_for(self, env: str) -> tuple[str, ...]:
        """The arms of ``env``: its own list where ``env_methods`` has one, else ``methods``; only those also
        in ``methods`` (so ``--methods`` narrows every env)."""
        own = dict(self.env_methods).get(env)
        return self.methods if own is None else tuple(m for m in own if m in self.methods)

    def cells(self) -> list[Cell]:
        """Every (env, arm, seed) of the grid, seed-major as before; an arm with its own seeds keeps only
        those of the grid's seeds it names."""
        return [
            Cell(e, m, s)
            for s in self.seeds
            for e in self.envs
            for m in self.methods_for(e)
            if self.arm(m).seeds is None or s in self.arm(m).seeds
        ]

    def overrides_for(self, env: str) -> tuple[str, ...]:
        return self.overrides + dict(self.env_overrides).get(env, ())

    def arm(self, name: str) -> Arm:
        """The arm called ``name``: one of this preset's own, or the plain method of that name."""
        for arm in self.arms:
            if arm.name == name:
                return arm
        return Arm(name, name)

    def protocol_of(self, name: str) -> str:
        return self.arm(name).protocol or self.protocol

    def ratio_rows(self) -> tuple[Ratio, ...]:
        if self.ratios:
            return self.ratios
        return tuple(
            Ratio("prism", other) for other in ("baseline", "oracle") if {"prism", other} <= set(self.methods)
        )


CPU_MEDIUM_OVERRIDES = (
    "loop.cycles=2",
    "loop.steps_per_cycle=25000",
    "loop.checkpoint_every=5000",
    "loop.initial_episodes=1000",
    "loop.expert_episodes=50",
    "reward.max_epochs=100",
    "agent.buffer_size=200000",
    "eval.every=5000",
    "eval.num_weights=10",
    "eval.episodes=2",
    "eval.final.num_weights=100",
    "eval.final.episodes=5",
)
"""The cpu-medium scale (hopper: 2 × 25 000 RL steps, N = 1000, E = 50, ≤ 100 fit epochs, final 100 × 5)."""

PRESETS = {
    "paper": Preset(
        envs=tuple(ENV_FILES),
        methods=tuple(METHODS),
        seeds=tuple(range(10)),
        overrides=(),
        description="The paper's full settings (conf/<env>.yaml as shipped), 10 seeds.",
    ),
    "cpu-small": Preset(
        envs=("hopper", "swimmer"),
        methods=("oracle", "baseline", "prism"),
        seeds=tuple(range(5)),
        overrides=(
            "loop.cycles=2",
            "loop.steps_per_cycle=5000",
            "loop.checkpoint_every=2500",
            "reward.max_epochs=40",
            "agent.learning_starts=1000",
            "agent.buffer_size=100000",
            "eval.every=2500",
            "eval.num_weights=10",
            "eval.episodes=2",
        ),
        env_overrides=(
            ("hopper", ("loop.initial_episodes=100", "loop.expert_episodes=20")),
            # Swimmer episodes always last 1000 steps: 10 random + 5 expert episodes are already 15 000
            # reward-model training steps (ReSymNet fits are the dominant cost of a PRISM run on CPU).
            ("swimmer", ("loop.initial_episodes=10", "loop.expert_episodes=5")),
        ),
        description=(
            "mo-hopper-v5 and mo-swimmer-v5, oracle / baseline / PRISM, 5 seeds. Every method gets the same "
            "10 000 RL env steps (2 cycles × 5 000; learning starts at 1 000). PRISM collects 100 random + 20 "
            "expert episodes on hopper and 10 + 5 on swimmer, and fits ReSymNet (K = 3, hidden 256) for at most "
            "40 epochs (patience 20). Evaluation every 2 500 steps on 10 weights × 2 episodes (γ = 0.99), "
            "not the paper's 100 × 5 (runs made since the final-evaluation rule end with one 100 × 5 "
            "evaluation). About 1/20 of the paper's RL budget."
        ),
    ),
    "cpu-medium": Preset(
        envs=("hopper",),
        methods=("oracle", "baseline", "prism"),
        seeds=tuple(range(5)),
        overrides=CPU_MEDIUM_OVERRIDES,
        description=(
            "mo-hopper-v5, oracle / baseline / PRISM, 5 seeds. Every method gets the same 50 000 RL env steps "
            "(2 cycles × 25 000; learning starts at 1 000), 1/4 of the paper's 200 000 and 5× cpu-small. PRISM "
            "collects the paper's N = 1000 random episodes and E = 50 expert episodes (paper: 1000; each expert "
            "episode lasts up to 1000 steps and the refit is the dominant CPU cost), and fits ReSymNet (K = 3, "
            "paper architecture and optimiser, patience 20) for at most 100 epochs (paper: 1000). Periodic "
            "evaluation every 5 000 steps on 10 weights × 2 episodes (the curves); the final evaluation uses the "
            "paper's protocol, 100 weights × 5 episodes (γ = 0.99)."
        ),
    ),
    "gpi-pd-small": Preset(
        envs=("hopper",),
        methods=("oracle", "baseline", "prism"),
        seeds=tuple(range(3)),
        overrides=(
            "loop.cycles=2",
            "loop.steps_per_cycle=6000",
            "loop.checkpoint_every=3000",
            "loop.initial_episodes=100",
            "loop.expert_episodes=20",
            "reward.max_epochs=40",
            "agent.learning_starts=1000",
            "agent.buffer_size=100000",
            "agent.gradient_updates=5",
            "agent.timesteps_per_iter=2000",
            "eval.every=3000",
            "eval.num_weights=10",
            "eval.episodes=2",
            "eval.final.num_weights=100",
            "eval.final.episodes=5",
        ),
        description=(
            "GPI-PD backbone (conf/agent/gpi_pd.yaml: PER, GPI-LS, Dyna on) on mo-hopper-v5, oracle / baseline / "
            "PRISM, 3 seeds. Every method gets the same 12 000 RL env steps (2 cycles × 6 000; learning starts "
            "at 1 000) with 5 gradient updates per env step (morl-baselines: 20) and a GPI-LS iteration every "
            "2 000 steps (morl-baselines: 10 000, i.e. the paper's ~20 iterations scaled to 6). PRISM collects "
            "100 random + 20 expert episodes and fits ReSymNet (K = 3) for at most 40 epochs. Periodic evaluation "
            "every 3 000 steps on 10 weights × 2 episodes; the final evaluation uses the paper's protocol, 100 "
            "weights × 5 episodes (γ = 0.99). About 1/17 of the paper's env steps at 1/4 of its update ratio."
        ),
        backbone="gpi_pd",
    ),
    "protocol-study": Preset(
        envs=("hopper",),
        methods=(
            "r-oracle",
            "r-baseline",
            "r-prism",
            "r-uniform",
            "d-oracle-plus",
            "e-oracle",
            "e-prism",
            "e-baseline",
            "e-uniform",
            "d-oracle-layer",
        ),
        seeds=tuple(range(5)),
        overrides=CPU_MEDIUM_OVERRIDES,
        arms=(
            Arm("r-oracle", "oracle", "released"),
            Arm("r-baseline", "baseline", "released"),
            # A 5-member PRISM population needs ~4 h of one core here (two refits per member), more than a
            # 180-minute session, whose end loses unfinished checkpoints: PRISM arms run one process per seed.
            Arm("r-prism", "prism", "released", per_seed=True),
            Arm("r-uniform", "uniform", "released"),
            # R-PRISM's agent (the released actor, λ = 1) on the true dense rewards, at R-PRISM's budget.
            Arm(
                "d-oracle-plus",
                "oracle",
                "equal",
                ("agent.actor_hidden=[256,256,256]", "agent.symreg_lambda=1.0"),
            ),
            Arm("e-oracle", "oracle", "equal"),
            Arm("e-prism", "prism", "equal", per_seed=True),
            Arm("e-baseline", "baseline", "equal"),
            Arm("e-uniform", "uniform", "equal"),
            # Splits d-oracle-plus's "agent" step: the released actor's extra layer alone, λ kept at 0.
            Arm("d-oracle-layer", "oracle", "equal", ("agent.actor_hidden=[256,256,256]",)),
        ),
        ratios=(
            Ratio("r-prism", "r-oracle", "headline, released protocol"),
            Ratio("r-prism", "r-baseline", "headline, released protocol"),
            Ratio("r-uniform", "r-oracle", "headline, released protocol"),
            Ratio("e-prism", "e-oracle", "headline, equal budget"),
            Ratio("e-prism", "e-baseline", "headline, equal budget"),
            Ratio("e-uniform", "e-oracle", "headline, equal budget"),
            Ratio("e-oracle", "r-oracle", "budget: oracle 25 000 → 50 000 steps"),
            Ratio("d-oracle-plus", "e-oracle", "agent: +1 actor layer and λ = 1, true dense reward"),
            Ratio(
                "d-oracle-layer", "e-oracle", "agent, layer alone: +1 actor layer, λ = 0, true dense reward"
            ),
            Ratio("d-oracle-plus", "d-oracle-layer", "agent, λ alone: λ = 0 → 1 with the +1-layer actor"),
            Ratio(
                "d-oracle-plus",
                "r-oracle",
                "budget and agent together: released oracle → R-PRISM's agent at 50 000",
            ),
            Ratio(
                "r-uniform",
                "d-oracle-plus",
                "redistribution: uniform R/T vs true dense, same agent and budget",
            ),
            Ratio("r-prism", "r-uniform", "ReSymNet vs uniform R/T, same agent and budget"),
            Ratio(
                "r-prism",
                "d-oracle-plus",
                "redistribution: ReSymNet-shaped vs true dense, same agent and budget",
            ),
        ),
        description=(
            "The protocol study (issue M): mo-hopper-v5 at the cpu-medium scale (M = 25 000, IR = 2, N = 1000, "
            "E = 50, ReSymNet ≤ 100 fit epochs, 5 seeds per arm as one population (PRISM arms: one process per seed), final evaluation 100 weights "
            "× 5 episodes). r-* arms use the authors' released protocol (oracle/baseline train one cycle of "
            "25 000 steps with the paper's actor and λ = 0; PRISM and uniform train 2 × 25 000 with λ = 1 and one "
            "more actor layer); e-* arms the equal budget (50 000 steps for every method, the paper's actor, "
            "the paper's λ = 0.01 for PRISM-side arms); d-oracle-plus is R-PRISM's agent on true dense rewards "
            "for 50 000 steps, and d-oracle-layer the same with λ = 0 (the extra actor layer alone)."
        ),
    ),
    "table1-study": Preset(
        envs=("walker", "halfcheetah", "swimmer"),
        methods=("e-oracle", "e-baseline", "e-prism", "e-uniform", "r-oracle", "r-prism", "e-prism-N1000"),
        seeds=tuple(range(5)),
        overrides=CPU_MEDIUM_OVERRIDES,
        env_overrides=(
            # Halfcheetah and swimmer episodes always last 1000 steps: N = 1000 would make every fit epoch
            # ~10⁶ steps (~36 s on one core), 1–2 h of fitting per PRISM seed; N = 250 keeps a seed in a session.
            ("halfcheetah", ("loop.initial_episodes=250",)),
            ("swimmer", ("loop.initial_episodes=250",)),
        ),
        env_methods=(
            ("walker", ("e-oracle", "e-baseline", "e-prism", "e-uniform", "r-oracle", "r-prism")),
            ("halfcheetah", ("e-oracle", "e-baseline", "e-prism", "e-uniform", "e-prism-N1000")),
            ("swimmer", ("e-oracle", "e-baseline", "e-prism", "e-uniform", "e-prism-N1000")),
        ),
        arms=(
            Arm("e-oracle", "oracle", "equal", per_seed=True),
            Arm("e-baseline", "baseline", "equal", per_seed=True),
            Arm("e-prism", "prism", "equal", per_seed=True),
            Arm("e-uniform", "uniform", "equal", per_seed=True),
            Arm("r-oracle", "oracle", "released", per_seed=True),
            Arm("r-prism", "prism", "released", per_seed=True),
            # The sensitivity check: one PRISM seed with the paper's N = 1000 where the grid uses N = 250.
            Arm(
                "e-prism-N1000", "prism", "equal", ("loop.initial_episodes=1000",), per_seed=True, seeds=(0,)
            ),
        ),
        ratios=(
            Ratio("e-prism", "e-oracle", "equal budget"),
            Ratio("e-prism", "e-baseline", "equal budget"),
            Ratio("e-uniform", "e-oracle", "equal budget"),
            Ratio("e-prism", "e-uniform", "ReSymNet vs uniform R/T, equal budget"),
            Ratio("r-prism", "r-oracle", "released protocol"),
        ),
        description=(
            "The paper's Table 1 on mo-walker2d-v5, mo-halfcheetah-v5 and mo-swimmer-v5 (issue R) at the protocol "
            "study's scale: 2 × 25 000 RL steps, E = 50 expert episodes, ReSymNet ≤ 100 fit epochs (patience "
            "20), final evaluation 100 weights × 5 episodes, 5 seeds per arm (one process per seed), λ from "
            "each env's conf file. N = 1000 random episodes on walker2d, N = 250 on halfcheetah and swimmer "
            "(their episodes always last 1000 steps), with one e-prism seed at N = 1000 there as a sensitivity "
            "check. e-* arms: equal budget; r-* arms (walker2d only): the authors' released protocol."
        ),
    ),
    "reward-budget": Preset(
        envs=("hopper",),
        methods=("e-prism-E1000", "e-prism-diag"),
        seeds=tuple(range(5)),
        overrides=CPU_MEDIUM_OVERRIDES,
        arms=(
            Arm(
                "e-prism-E1000",
                "prism",
                "equal",
                ("loop.expert_episodes=1000", "reward.max_epochs=1000"),
                per_seed=True,
            ),
            # The protocol study's e-prism (E = 50, ≤ 100 epochs) predates the fit records: one seed of it
            # again, at this commit, for the diagnostics side by side (its HV arm stays the study's).
            Arm("e-prism-diag", "prism", "equal", per_seed=True, seeds=(0,)),
        ),
        ratios=(Ratio("e-prism-E1000", "e-prism-diag", "E = 1000, ≤ 1000 epochs vs E = 50, ≤ 100 epochs"),),
        description=(
            "Is the reward model starved? (issue U): mo-hopper-v5 at the protocol study's RL scale and equal "
            "protocol (2 × 25 000 steps, λ = 0.01, N = 1000, final evaluation 100 × 5), PRISM with the paper's "
            "reward-model budget: E = 1000 expert episodes and fits of ≤ 1000 epochs (patience 20), 5 seeds; "
            "plus one seed of the study's e-prism (E = 50, ≤ 100 epochs) for its fit diagnostics."
        ),
    ),
    "smoke": Preset(
        envs=("hopper",),
        methods=("oracle", "baseline", "prism"),
        seeds=(0,),
        overrides=(
            "loop.cycles=2",
            "loop.steps_per_cycle=300",
            "loop.checkpoint_every=300",
            "loop.initial_episodes=5",
            "loop.expert_episodes=2",
            "reward.max_epochs=2",
            "agent.learning_starts=100",
            "agent.buffer_size=5000",
            "eval.every=300",
            "eval.num_weights=3",
            "eval.episodes=1",
            "eval.final.num_weights=3",
            "eval.final.episodes=1",
        ),
        description=(
            "A grid that finishes in a few minutes on 2 cores, to try a backend or a cluster: mo-hopper-v5, "
            "oracle / baseline / PRISM, seed 0, 600 RL env steps, tiny collections, fits and evaluations. "
            "Its numbers mean nothing."
        ),
    ),
}


@dataclass(frozen=True)
class Cell:
    env: str
    method: str
    seed: int

    def run_dir(self, out: Path) -> Path:
        return out / self.env / self.method / f"seed{self.seed}"


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
    already finished as per-seed runs (so an older per-seed grid is completed, not redone)."""
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


def fit_command(job: Job, preset: Preset, out: Path) -> list[str]:
    run_dir = job.run_dir(out)
    if (run_dir / "config.yaml").is_file():
        return [sys.executable, "-m", "prism.cli", "fit", "--resume", str(run_dir)]
    who = f"seeds=[{','.join(map(str, job.seeds))}]" if job.population else f"seed={job.seeds[0]}"
    arm = preset.arm(job.method)
    return [
        sys.executable,
        "-m",
        "prism.cli",
        "fit",
        "--config",
        str(CONF / f"{job.env}.yaml"),
        str(CONF / METHODS[arm.method][0]),
        *([str(CONF / "agent" / f"{preset.backbone}.yaml")] if preset.backbone != "capql" else []),
        *preset.overrides_for(job.env),
        *arm.overrides,
        f"protocol={preset.protocol_of(job.method)}",
        *([f"method={arm.name}"] if arm.name != arm.method else []),
        who,
        f"run_dir={run_dir}",
    ]


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGKILL it when its parent dies, so a lost (killed) grid worker never leaves
    an orphaned ``prism fit`` writing into a run folder that the retried task is about to resume."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: best effort only
        pass


def run_job(job: Job, preset: Preset, out: Path) -> tuple[Job, int, float]:
    """Run (or resume) one job to the end; ``(job, exit code, seconds)``. A finished job returns at once.

    The command is chosen here, when the run starts, not when it is submitted: a retried Ray task finds the
    run folder of the lost attempt and resumes it from its last checkpoint."""
    if job.finished(out):
        return job, 0, 0.0
    log = job.log(out)
    log.parent.mkdir(parents=True, exist_ok=True)
    command = fit_command(job, preset, out)
    start = time.perf_counter()
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(command)}\n")
        fh.flush()
        code = subprocess.call(
            command,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    return job, code, time.perf_counter() - start


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
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = [pool.submit(run, job) for job in jobs]
        for future in as_completed(futures):
            yield future.result()


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
    # Tasks are defined in this file, which a worker may not be able to import by name: ship it by value.
    module = sys.modules[__name__]
    if __name__ != "__main__":
        ray.cloudpickle.register_pickle_by_value(module)
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


# ---- collection and statistics -----------------------------------------------------------------------------
def read_eval(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "eval.csv").open(newline="") as fh:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(fh)]


def mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


BACKBONES = ("capql", "gpi_pd")
"""Backbones a grid can run (``conf/agent/<name>.yaml``); the paper reports CAPQL in its main and ablation
tables and GPI-PD in its appendix table."""
PAPER_TABLES = {"capql": ("main", "ablation", "ablation2"), "gpi_pd": ("gpi_pd",)}


def paper_values(backbone: str = "capql") -> dict[tuple[str, str, str], tuple[float, float]]:
    """(env id, paper method header, metric) -> (raw mean, raw err) from the paper's tables of ``backbone``."""
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    with PAPER.open() as fh:
        rows = csv.DictReader(line for line in fh if not line.startswith("#"))
        for row in rows:
            if row["table"] not in PAPER_TABLES[backbone]:
                continue
            scale = float(row["scale"])
            out.setdefault(
                (row["env"], row["method"], row["metric"].lower()),
                (float(row["mean"]) * scale, float(row["err"]) * scale),
            )
    return out


def split_rows(rows: list[dict[str, float]]) -> tuple[list[dict[str, float]], dict[str, float]]:
    """(periodic rows, the final-evaluation row) of one eval.csv.

    The final row is the one flagged ``final = 1`` (the paper's protocol, written once at the end of a run);
    eval.csv files from before that rule have no flag, and then the last row stands for it."""
    if rows and "final" in rows[0]:
        periodic = [r for r in rows if not r.get("final")]
        finals = [r for r in rows if r.get("final")]
        if finals:
            return periodic or finals, finals[-1]
    return rows, rows[-1]


def collect(cells: list[Cell], out: Path) -> dict[tuple[str, str], dict[str, list]]:
    """Per (env, method): the final evaluation and the best periodic one per metric (one value per finished
    seed), the env steps of the final evaluation, and the HV curves of the periodic evaluations."""
    table: dict[tuple[str, str], dict[str, list]] = {}
    for cell in cells:
        run_dir = cell.run_dir(out)
        if not (run_dir / "summary.json").is_file():
            continue
        periodic, final = split_rows(read_eval(run_dir))
        entry = table.setdefault((cell.env, cell.method), {"seeds": [], "curves": [], "env_steps": []})
        entry["seeds"].append(cell.seed)
        entry["env_steps"].append(final["env_steps"])
        for metric in METRICS:
            entry.setdefault(f"final_{metric}", []).append(final[metric])
            entry.setdefault(f"best_{metric}", []).append(max(r[metric] for r in periodic))
        # Per-objective mean returns of the final evaluation (over its policies) and its mean episode length.
        for key, value in final.items():
            if key.startswith(("return_", "undiscounted_return_")) or key == "mean_episode_length":
                entry.setdefault(f"final_{key}", []).append(value)
        entry["curves"].append([(r["env_steps"], r["hv"]) for r in periodic])
    return table


def compare(a: list[float], b: list[float], *, resamples: int = 10_000, seed: int = 0) -> dict[str, float]:
    """PRISM-vs-X statistics over seeds: ratio of means, Welch's t-test (two-sided p) and a percentile
    bootstrap 95% CI of the ratio of means (seeds resampled with replacement within each group)."""
    import numpy as np
    from scipy import stats

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2 or len(y) < 2 or y.mean() == 0:
        return {"ratio": math.nan, "p_welch": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    p = float(stats.ttest_ind(x, y, equal_var=False).pvalue)
    rng = np.random.default_rng(seed)
    xs = x[rng.integers(0, len(x), (resamples, len(x)))].mean(1)
    ys = y[rng.integers(0, len(y), (resamples, len(y)))].mean(1)
    ok = ys != 0
    low, high = np.percentile(xs[ok] / ys[ok], [2.5, 97.5])
    return {"ratio": float(x.mean() / y.mean()), "p_welch": p, "ci_low": float(low), "ci_high": float(high)}


def _fmt(mean: float, se: float) -> str:
    if math.isnan(mean):
        return "—"
    scale = max(abs(mean), 1e-12)
    exponent = int(math.floor(math.log10(scale))) if scale >= 1e4 else 0
    if exponent:
        if math.isnan(se):
            return f"{mean / 10**exponent:.2f} e{exponent}"
        return f"{mean / 10**exponent:.2f} ± {se / 10**exponent:.2f} e{exponent}"
    return f"{mean:.2f} ± {se:.2f}" if not math.isnan(se) else f"{mean:.2f}"


def write_report(preset_name: str, cells: list[Cell], out: Path, results: Path) -> str:
    """``table.csv``, ``table.md`` and the plots in ``results`` from the finished runs of ``cells``."""
    preset = PRESETS[preset_name]
    table = collect(cells, out)
    paper = paper_values(preset.backbone)
    results.mkdir(parents=True, exist_ok=True)
    csv_rows = []
    lines = [
        "| env | method | protocol | n | env steps | metric | final (mean ± SE) | best periodic (mean ± SE) "
        "| paper (mean ± SE) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for env in preset.envs:
        env_id = ENV_FILES[env]
        for method in preset.methods:
            entry = table.get((env, method))
            steps = int(sum(entry["env_steps"]) / len(entry["env_steps"])) if entry else 0
            for metric in METRICS:
                final = mean_se(entry[f"final_{metric}"]) if entry else (math.nan, math.nan)
                best = mean_se(entry[f"best_{metric}"]) if entry else (math.nan, math.nan)
                ref = paper.get((env_id, METHODS[preset.arm(method).method][1], metric), (math.nan, math.nan))
                n = len(entry["seeds"]) if entry else 0
                protocol = preset.protocol_of(method)
                lines.append(
                    f"| {env_id} | {method} | {protocol} | {n} | {steps} | {metric.upper()} | {_fmt(*final)} "
                    f"| {_fmt(*best)} | {_fmt(*ref)} |"
                )
                csv_rows.append(
                    {
                        "env": env_id,
                        "method": method,
                        "protocol": protocol,
                        "metric": metric,
                        "n_seeds": n,
                        "env_steps": steps,
                        "final_mean": final[0],
                        "final_se": final[1],
                        "best_mean": best[0],
                        "best_se": best[1],
                        "paper_mean": ref[0],
                        "paper_se": ref[1],
                    }
                )

    def theirs(env_id: str, arm: str, metric: str) -> float:
        return paper.get((env_id, METHODS[preset.arm(arm).method][1], metric), (math.nan, math.nan))[0]

    def paper_ratio(env_id: str, a: str, b: str, metric: str) -> str:
        if preset.arm(a).method == preset.arm(b).method:
            return "—"  # the same method of the paper under two protocols or agents: no paper counterpart
        x, y = theirs(env_id, a, metric), theirs(env_id, b, metric)
        return "—" if math.isnan(x) or math.isnan(y) or y == 0 else f"{x / y:.2f}"

    ratio_lines = [
        "| env | metric | A / B | protocols | what it measures | ours (final means) | bootstrap 95% CI | Welch p "
        "| paper |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ratio_rows = []
    for env in preset.envs:
        env_id = ENV_FILES[env]
        for ratio in preset.ratio_rows():
            a, b = ratio.numerator, ratio.denominator
            if a not in preset.methods or b not in preset.methods:
                continue
            a_entry, b_entry = table.get((env, a)), table.get((env, b))
            for metric in METRICS:
                if a_entry and b_entry:
                    st = compare(a_entry[f"final_{metric}"], b_entry[f"final_{metric}"])
                else:
                    st = {"ratio": math.nan, "p_welch": math.nan, "ci_low": math.nan, "ci_high": math.nan}
                ci = "—" if math.isnan(st["ci_low"]) else f"[{st['ci_low']:.2f}, {st['ci_high']:.2f}]"
                ours = "—" if math.isnan(st["ratio"]) else f"{st['ratio']:.2f}"
                p = "—" if math.isnan(st["p_welch"]) else f"{st['p_welch']:.3f}"
                protocols = f"{preset.protocol_of(a)} / {preset.protocol_of(b)}"
                theirs_ratio = paper_ratio(env_id, a, b, metric)
                ratio_lines.append(
                    f"| {env_id} | {metric.upper()} | {a} / {b} | {protocols} | {ratio.label or '—'} | {ours} | {ci} "
                    f"| {p} | {theirs_ratio} |"
                )
                ratio_rows.append(
                    {
                        "env": env_id,
                        "metric": metric,
                        "numerator": a,
                        "denominator": b,
                        "protocols": protocols,
                        "label": ratio.label,
                        **st,
                        "paper": theirs_ratio,
                    }
                )
    objective_lines = objective_table(preset, table)
    with (results / "table.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(csv_rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(csv_rows)
    if ratio_rows:
        with (results / "ratios.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(ratio_rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(ratio_rows)
    copy_run_files(cells, out, results)
    markdown = "\n".join(
        [
            f"## {preset_name}: {preset.description}",
            "",
            "Final = the evaluation at the end of each run (row flagged `final` in eval.csv); best periodic = "
            "the best of the periodic evaluations along the run. Mean ± standard error over seeds.",
            "",
            *lines,
            "",
            "Ratios of final means over seeds, with a percentile bootstrap 95% CI (10 000 resamples of the seeds "
            "within each method) and the two-sided p-value of Welch's t-test on the final values (a ratio of "
            "negative or near-zero values is not meaningful):",
            "",
            *ratio_lines,
            "",
            "Per-objective mean returns of the final evaluation (mean over its policies, then mean ± SE over "
            "seeds): discounted (γ = 0.99, what HV/EUM/VO are computed from) and undiscounted, and the mean "
            "episode length (on mo-hopper-v5 and mo-walker2d-v5 every objective includes a healthy bonus of 1 "
            "per step alive, so an undiscounted return minus the episode length is the objective net of "
            "survival):",
            "",
            *objective_lines,
            "",
        ]
    )
    (results / "table.md").write_text(markdown)
    plot(preset, table, out, cells, results)
    return markdown


def objective_table(preset: Preset, table) -> list[str]:
    """Markdown rows: per arm, the final evaluation's mean episode length and per-objective returns."""
    names: list[str] = []
    for entry in table.values():
        for key in entry:
            if key.startswith("final_return_") and key[len("final_return_") :] not in names:
                names.append(key[len("final_return_") :])
    if not names:
        return ["(no per-objective returns in these eval.csv files)"]
    header = ["env", "method", "protocol", "n", "episode length"]
    header += [f"{n} (disc.)" for n in names] + [f"{n} (undisc.)" for n in names]
    header += [f"{n} (undisc. − length)" for n in names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for env in preset.envs:
        for method in preset.methods:
            entry = table.get((env, method))
            if not entry:
                continue
            lengths = entry.get("final_mean_episode_length", [])
            cells = [ENV_FILES[env], method, preset.protocol_of(method), str(len(entry["seeds"]))]
            cells.append(_fmt(*mean_se(lengths)))
            cells += [_fmt(*mean_se(entry.get(f"final_return_{n}", []))) for n in names]
            cells += [_fmt(*mean_se(entry.get(f"final_undiscounted_return_{n}", []))) for n in names]
            for n in names:
                undiscounted = entry.get(f"final_undiscounted_return_{n}", [])
                net = (
                    [u - length for u, length in zip(undiscounted, lengths)]
                    if len(lengths) == len(undiscounted)
                    else []
                )
                cells.append(_fmt(*mean_se(net)))
            lines.append("| " + " | ".join(cells) + " |")
    return lines


RUN_FILES = ("config.yaml", "eval.csv", "front.csv", "summary.json")
"""What a run's numbers are recomputed from (no checkpoints, no TensorBoard events)."""
POPULATION_FILES = ("config.yaml", "summary.csv")


def copy_run_files(cells: list[Cell], out: Path, results: Path) -> None:
    """Copy each finished run's small files (:data:`RUN_FILES`, and a population's own config and summary) to
    ``results/runs/<env>/<method>/[seed<k>/]``, so every reported number can be recomputed from the repository
    (``--report-only --out <results>/runs`` rebuilds the tables from them)."""
    for cell in cells:
        run_dir = cell.run_dir(out)
        if not (run_dir / "summary.json").is_file():
            continue
        target = results / "runs" / cell.env / cell.method / f"seed{cell.seed}"
        if target.resolve() == run_dir.resolve():  # reporting from the copies themselves
            continue
        target.mkdir(parents=True, exist_ok=True)
        for name in RUN_FILES:
            if (run_dir / name).is_file():
                shutil.copyfile(run_dir / name, target / name)
        for name in POPULATION_FILES:
            if (run_dir.parent / name).is_file():
                shutil.copyfile(run_dir.parent / name, target.parent / name)


def plot(preset: Preset, table, out: Path, cells: list[Cell], results: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    base_colours = {"oracle": "tab:green", "baseline": "tab:red", "prism": "tab:blue"}
    # The plain methods keep their colours; other arms (e.g. the protocol study's) take the default cycle.
    # The default cycle has 10 colours: beyond 7 extra arms they would repeat, so larger presets use tab20.
    cycle = (
        [f"C{3 + i}" for i in range(7)] if len(preset.methods) <= 7 else list(plt.get_cmap("tab20").colors)
    )
    colours = {m: base_colours.get(m, cycle[i % len(cycle)]) for i, m in enumerate(preset.methods)}
    many = len(preset.methods) > 4  # a legend inside the axes would hide curves: put it to the right
    width = 5 * len(preset.envs) + (1.8 if many else 0)

    def add_legend(ax) -> None:
        if not ax.get_legend_handles_labels()[0]:
            return
        if many:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        else:
            ax.legend()

    # HV curves with a standard-error band.
    fig, axes = plt.subplots(1, len(preset.envs), figsize=(width, 3.6), squeeze=False)
    for ax, env in zip(axes[0], preset.envs):
        for method in preset.methods:
            entry = table.get((env, method))
            if not entry:
                continue
            steps = [s for s, _ in entry["curves"][0]]
            n = min(len(c) for c in entry["curves"])
            values = np.array([[v for _, v in c[:n]] for c in entry["curves"]])
            mean = values.mean(0)
            se = values.std(0, ddof=1) / np.sqrt(len(values)) if len(values) > 1 else np.zeros_like(mean)
            style = "--" if preset.protocol_of(method) == "released" else "-"
            # Lines above every band: drawn in order, later bands would wash out earlier arms' lines.
            ax.plot(steps[:n], mean, style, label=method, color=colours.get(method), zorder=3)
            band_alpha = 0.12 if many else 0.25
            ax.fill_between(
                steps[:n], mean - se, mean + se, alpha=band_alpha, color=colours.get(method), zorder=1
            )
        ax.set_title(ENV_FILES[env])
        ax.set_xlabel("env steps")
        ax.set_ylabel("HV")
        add_legend(ax)
    fig.tight_layout()
    fig.savefig(results / "hv_curves.png", dpi=120)
    plt.close(fig)
    # Final Pareto fronts of every seed (undominated points of each run's final evaluation).
    fig, axes = plt.subplots(1, len(preset.envs), figsize=(width, 3.8), squeeze=False)
    for ax, env in zip(axes[0], preset.envs):
        for method in preset.methods:
            first = True
            for cell in cells:
                front = cell.run_dir(out) / "front.csv"
                if cell.env != env or cell.method != method or not front.is_file():
                    continue
                with front.open(newline="") as fh:
                    rows = [r for r in csv.DictReader(fh) if r["on_front"] == "1"]
                # front.csv's mean-return columns: discounted_return_mean_<objective> (mean_<i> before)
                means = [
                    c for c in (rows[0] if rows else {}) if c.startswith(("discounted_return_mean_", "mean_"))
                ]
                pts = np.array([[float(r[c]) for c in means[:2]] for r in rows])
                # With 3+ objectives the front's projection on (0, 1) is not a curve: points only.
                style = "o-" if len(means) == 2 else "o"
                if len(pts):
                    pts = pts[np.argsort(pts[:, 0])]
                    ax.plot(
                        pts[:, 0],
                        pts[:, 1],
                        style,
                        ms=3,
                        lw=0.8,
                        alpha=0.6,
                        color=colours.get(method),
                        label=method if first else None,
                    )
                    first = False
        ax.set_title(f"{ENV_FILES[env]}: final fronts of every seed (objectives 0, 1)", fontsize=9)
        ax.set_xlabel("discounted return, objective 0")
        ax.set_ylabel("discounted return, objective 1")
        add_legend(ax)
    fig.tight_layout()
    fig.savefig(results / "pareto_fronts.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu-small")
    parser.add_argument("--backend", choices=("local", "ray"), default="local", help="where runs execute")
    parser.add_argument("--parallel", type=int, default=2, help="runs at once (local; a local Ray instance)")
    parser.add_argument(
        "--address", help="ray: cluster address (`auto` joins a running cluster; default: start a local one)"
    )
    parser.add_argument("--cpus-per-run", type=float, default=1.0, help="ray: CPUs declared per run")
    parser.add_argument(
        "--gpus-per-run",
        type=float,
        help="ray: GPUs declared per run (fractions share a GPU); default 0.25 with device=cuda, else 0",
    )
    parser.add_argument("--out", type=Path, help="grid folder (default runs/reproduce/<preset>)")
    parser.add_argument("--results", type=Path, help="report folder (default docs/results/<preset>)")
    parser.add_argument("--envs", nargs="+", choices=sorted(ENV_FILES))
    parser.add_argument(
        "--methods", nargs="+", metavar="METHOD", help="methods (or the preset's arms) to run"
    )
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="key=value", help="extra prism overrides for every run"
    )
    parser.add_argument(
        "--backbone",
        choices=BACKBONES,
        help="the agent (default: the preset's, capql unless it says otherwise; the paper's GPI-PD appendix "
        "table for gpi_pd; GPI-PD runs one process per seed)",
    )
    parser.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        help="equal (default: every method the same RL budget and agent) or released (the authors' released "
        "code: oracle/baseline one cycle of M steps, PRISM-side arms IR x M with lambda = 1 and one more actor "
        "layer); applied to every arm of the grid",
    )
    parser.add_argument(
        "--per-seed-processes",
        action="store_true",
        help="one prism process per seed (default: one population process per env × method cell)",
    )
    parser.add_argument("--report-only", action="store_true", help="only collect finished runs and report")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    args = parser.parse_args(argv)

    base = PRESETS[args.preset]
    backbone = args.backbone or base.backbone
    protocol = args.protocol or base.protocol
    if args.protocol and any(arm.protocol for arm in base.arms):
        print(
            f"reproduce: error: --protocol: preset {args.preset} fixes each arm's protocol", file=sys.stderr
        )
        return 2
    unknown = [m for m in args.methods or () if m not in METHODS and m not in {a.name for a in base.arms}]
    if unknown:
        print(
            f"reproduce: error: --methods: {unknown[0]!r} is not a method or an arm of {args.preset}",
            file=sys.stderr,
        )
        return 2
    preset = dataclasses.replace(
        base,
        envs=tuple(args.envs or base.envs),
        methods=tuple(args.methods or base.methods),
        seeds=tuple(args.seeds if args.seeds is not None else base.seeds),
        overrides=base.overrides + tuple(args.set),
        description=base.description
        + ("" if backbone == base.backbone else f" Backbone: {backbone}.")
        + ("" if protocol == base.protocol else f" Protocol: {protocol} (prism/config/protocols.py)."),
        backbone=backbone,
        protocol=protocol,
    )
    PRESETS[args.preset] = preset
    # A grid under another backbone or protocol lives in its own folder: resuming never mixes them.
    name = args.preset + ("" if backbone == base.backbone else f"-{backbone}")
    name += "" if protocol == base.protocol else f"-{protocol}"
    out = (args.out or ROOT / "runs" / "reproduce" / name).resolve()
    results = args.results or ROOT / "docs" / "results" / name
    cells = preset.cells()
    # GPI-PD trains one member per process (its config refuses populations)
    jobs = make_jobs(
        cells,
        out,
        per_seed=args.per_seed_processes or backbone == "gpi_pd",
        per_seed_methods=frozenset(m for m in preset.methods if preset.arm(m).per_seed),
    )
    if args.dry_run:
        for job in jobs:
            print(" ".join(fit_command(job, preset, out)))
        return 0
    start = time.perf_counter()
    failures = 0
    if not args.report_only:
        todo = [job for job in jobs if not job.finished(out)]
        done_runs = sum(Job(c.env, c.method, (c.seed,), False).finished(out) for c in cells)
        print(
            f"{done_runs} of {len(cells)} runs already finished; running {len(todo)} "
            f"{'process' if len(todo) == 1 else 'processes'}",
            flush=True,
        )

        def run(job: Job) -> tuple[Job, int, float]:
            return run_job(job, preset, out)

        if args.backend == "ray":
            on_cuda = any(o.replace(" ", "").startswith("device=cuda") for o in preset.overrides)
            gpus = args.gpus_per_run if args.gpus_per_run is not None else (0.25 if on_cuda else 0.0)
            try:
                results_iter = run_ray(
                    todo,
                    run,
                    address=args.address,
                    parallel=args.parallel,
                    cpus_per_run=args.cpus_per_run,
                    gpus_per_run=gpus,
                )
                first = next(results_iter, None)
            except BackendError as err:
                print(f"reproduce: error: {err}", file=sys.stderr)
                return 2
            # The first result came through next() above (where a missing ray raises); the rest stream in.
            stream = itertools.chain([first] if first is not None else [], results_iter)
        else:
            stream = run_local(todo, run, args.parallel)
        for k, (job, code, seconds) in enumerate(stream, start=1):
            status = "ok" if code == 0 else f"FAILED (exit {code}; log {job.log(out)})"
            print(f"[{k}/{len(todo)}] {job}: {status} {seconds:.0f}s", flush=True)
            if code != 0:
                failures += 1
                print("    " + log_tail(job, out).replace("\n", "\n    "), flush=True)
    wall = time.perf_counter() - start
    if any((c.run_dir(out) / "summary.json").is_file() for c in cells):
        print(write_report(args.preset, cells, out, results))
    else:
        print("no finished runs to report")
    print(f"grid wall time: {wall / 60:.1f} min; failed runs: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
