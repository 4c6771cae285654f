"""``prism reproduce``: run (or resume) a preset's grid of envs × arms × seeds, one ``prism fit`` process per
job, then report.

    prism reproduce --preset cpu-medium --parallel 2            # run (or resume) the grid, then report
    prism reproduce --preset cpu-medium --report-only           # tables and plots from finished runs
    prism reproduce --preset paper --envs hopper --seeds 0 1    # any sub-grid
    prism reproduce --preset smoke --backend ray                # the same grid as Ray tasks
    prism reproduce --study my-study.yaml --dry-run             # your own study (docs/studies.md)
    prism reproduce --preset paper --backend ray --address auto # join a running Ray cluster

Each run lives in ``<out>/<env>/<method>/seed<k>`` and is a plain prism run folder. The grid is resumable:
finished runs (``summary.json`` present) are skipped, interrupted ones are continued with ``--resume``, and a
run another prism process is writing (a second driver on the same folder) is left to it. Arms a preset joins
from another study's folder are read, never run. Exit status: 0 every run finished, 1 a run failed, 2 bad
input, 3 no failure but some runs were left to another process (rerun the command when they end).

Backends: ``local`` runs ``--parallel`` runs at once as subprocesses of this machine; ``ray`` submits one Ray
task per run (``--cpus-per-run`` CPUs and ``--gpus-per-run`` GPUs declared; a task whose worker is lost is
retried and the retried run resumes from its last checkpoint — so on a cluster the ``--out`` folder must be on
a filesystem every node shares). ``ray`` is an optional extra: ``pip install -e ".[cluster]"``.

The report (markdown + CSV, in ``--results``, default ``runs/results/<preset>``) gives mean ± standard error
over seeds of the **final evaluation** (the paper's protocol, 100 weights × 5 episodes, the row flagged
``final`` in eval.csv) and of the best periodic evaluation per (env, method, metric), the paper's number beside
each cell, the preset's ratios with a Welch t-test and a bootstrap confidence interval over seeds, per-objective
returns and episode lengths, the reward-fit diagnostics, and (presets that ask for it) an rliable aggregate
over envs (the ``report`` extra: ``pip install -e ".[report]"``); plots show Pareto fronts (one panel per env)
and HV curves (periodic evaluations) with a standard-error band.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import signal
import sys
import time
from pathlib import Path

from prism.config import PROTOCOLS  # equal budget, or the authors' released code's arms
from prism.core.errors import ConfigError
from prism.experiments import studies
from prism.experiments.grid import BACKBONES, ENV_FILES, METHODS, ROOT


def build_parser(prog: str = "prism reproduce") -> argparse.ArgumentParser:
    """The options of ``prism reproduce`` (and of the ``tools/reproduce.py`` shim)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--preset",
        choices=studies.shipped(),
        default="cpu-small",
        help="a shipped study (conf/studies/NAME.yaml)",
    )
    which.add_argument(
        "--study",
        type=Path,
        metavar="FILE",
        help="your own study file (docs/studies.md); its name is the file's",
    )
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
    parser.add_argument(
        "--results",
        type=Path,
        help="report folder (default runs/results/<preset>; the committed reports pass docs/results/<preset>)",
    )
    parser.add_argument("--envs", nargs="+", choices=sorted(ENV_FILES))
    parser.add_argument(
        "--methods", nargs="+", metavar="METHOD", help="methods (or the preset's arms) to run"
    )
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="key=value",
        help="extra prism overrides for every run; they come last, so they win over the preset's and each "
        "arm's own keys",
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
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the command of each run the grid would start (finished runs and runs another process "
        "is writing as '# ...' lines) and exit",
    )
    return parser


def _shown(path: Path) -> str:
    """``path`` relative to the repository root where it lies inside it (a command one can paste there)."""
    for candidate in (path.absolute(), path.resolve()):  # (a folder reached through a link: as given first)
        try:
            return str(candidate.relative_to(ROOT))
        except ValueError:
            continue
    return str(path)


def grid_folders(args: argparse.Namespace, other_backbone: bool, other_protocol: bool) -> tuple[Path, Path]:
    """(grid folder, report folder): ``--out`` and ``--results``, by default ``runs/reproduce/<name>`` and
    ``runs/results/<name>``, where the name adds a backbone or protocol other than the preset's (so resuming
    never mixes two grids). Ad-hoc reports stay out of the committed ``docs/results/``, whose reports name
    their folder explicitly."""
    name = args.preset + (f"-{args.backbone}" if other_backbone else "")
    name += f"-{args.protocol}" if other_protocol else ""
    out = (args.out or ROOT / "runs" / "reproduce" / name).resolve()
    return out, args.results or ROOT / "runs" / "results" / name


def main(argv: list[str] | None = None, prog: str = "prism reproduce") -> int:
    """Run, resume or report a preset's grid; exit 0 (done), 1 (a run failed), 2 (bad input) or 3 (runs left to
    another process writing their folders)."""
    from prism.experiments.grid_configs import differing_runs
    from prism.experiments.report import write_report
    from prism.experiments.runner import (
        GRID_KEYS,
        BackendError,
        Job,
        fit_command,
        make_jobs,
        run_job,
        run_local,
        run_ray,
        stop_children,
    )
    from prism.run.lock import locked_elsewhere

    args = build_parser(prog).parse_args(argv)
    try:
        base = studies.load_study(args.study) if args.study else studies.load_preset(args.preset)
    except studies.StudyError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    if args.study:
        args.preset = args.study.stem  # a user's study is named after its file (its folders, its report)
    backbone = args.backbone or base.backbone
    protocol = args.protocol or base.protocol
    if args.protocol and any(arm.protocol for arm in base.arms):
        print(f"{prog}: error: --protocol: preset {args.preset} fixes each arm's protocol", file=sys.stderr)
        return 2
    unknown = [m for m in args.methods or () if m not in METHODS and m not in {a.name for a in base.arms}]
    if unknown:
        print(
            f"{prog}: error: --methods: {unknown[0]!r} is not a method or an arm of {args.preset}",
            file=sys.stderr,
        )
        return 2
    for item in args.set:
        key = item.split("=", 1)[0].strip()
        if "=" not in item:
            print(
                f"{prog}: error: --set: {item!r} is not key=value (a config file's keys go in one by one, "
                "e.g. --set loop.cycles=2 loop.steps_per_cycle=300)",
                file=sys.stderr,
            )
            return 2
        if key in GRID_KEYS:
            print(f"{prog}: error: --set: {key} is set by the grid for each run", file=sys.stderr)
            return 2
    sets = tuple(args.set)
    preset = dataclasses.replace(
        base,
        envs=tuple(args.envs or base.envs),
        methods=tuple(args.methods or base.methods),
        seeds=tuple(args.seeds if args.seeds is not None else base.seeds),
        overrides=base.overrides,
        description=base.description
        + ("" if backbone == base.backbone else f" Backbone: {backbone}.")
        + ("" if protocol == base.protocol else f" Protocol: {protocol} (prism/config/protocols.py)."),
        backbone=backbone,
        protocol=protocol,
    )
    out, results = grid_folders(args, backbone != base.backbone, protocol != base.protocol)
    cells = preset.cells()
    # GPI-PD trains one member per process (its config refuses populations)
    jobs = make_jobs(
        cells,
        out,
        per_seed=args.per_seed_processes or backbone == "gpi_pd",
        per_seed_methods=frozenset(m for m in preset.methods if preset.arm(m).per_seed),
    )
    if not args.report_only:
        try:
            differing = differing_runs(cells, preset, out, sets)
        except ConfigError as err:  # the config this command would start runs with does not load
            print(f"{prog}: error: {err}", file=sys.stderr)
            return 2
        if differing:
            named = "; ".join(
                f"{c.env}/{c.method}/seed{c.seed} ({', '.join(d[:2])}{', …' if len(d) > 2 else ''})"
                for c, d in differing[:3]
            )
            more = f" and {len(differing) - 3} more" if len(differing) > 3 else ""
            print(
                f"{prog}: error: --out {_shown(out)}: {len(differing)} of its runs were made with another "
                f"config than this command gives: {named}{more}; rerun with the --set they were made with, "
                "or give another --out (one report never mixes two configs)",
                file=sys.stderr,
            )
            return 2
    if args.dry_run:
        # What a run of this command would start, one command line each; the jobs it would skip are listed
        # too, as comment lines, so a script can take the commands (`grep -v '^#'`) and a reader sees it all.
        for job in jobs:
            if job.finished(out):
                print(f"# finished: {job.run_dir(out)}")
            elif locked_elsewhere(job.run_dir(out)):
                print(f"# running elsewhere (left to that process): {job.run_dir(out)}")
            else:
                print(" ".join(fit_command(job, preset, out, sets)))
        if not jobs:
            print(f"# {_nothing_to_run(preset, cells)}")
        return 0
    start = time.perf_counter()
    failures = elsewhere = 0
    if not args.report_only:
        own = [c for c in cells if c.source is None]  # joined arms' runs are another grid's
        todo = [job for job in jobs if not job.finished(out)]
        done_runs = sum(Job(c.env, c.method, (c.seed,), False).finished(out) for c in own)
        print(
            f"{done_runs} of {len(own)} runs already finished; running {len(todo)} "
            f"{'process' if len(todo) == 1 else 'processes'}",
            flush=True,
        )

        def run(job: Job) -> tuple[Job, int, float]:
            return run_job(job, preset, out, sets)

        if args.backend == "ray":
            on_cuda = any(o.replace(" ", "").startswith("device=cuda") for o in preset.overrides + sets)
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
                print(f"{prog}: error: {err}", file=sys.stderr)
                return 2
            # The first result came through next() above (where a missing ray raises); the rest stream in.
            stream = itertools.chain([first] if first is not None else [], results_iter)
        else:
            stream = run_local(todo, run, args.parallel)
        try:
            failures, elsewhere = _report_progress(stream, len(todo), out)
        except KeyboardInterrupt:
            # One Ctrl-C stops the grid: no queued run starts, each running child gets one SIGINT (it saves
            # its checkpoint and exits), and a second Ctrl-C meanwhile is ignored rather than a traceback.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            stop_children()
            print(
                f"{prog}: interrupted: no further run starts; finished runs are kept and interrupted ones "
                "resume from their last checkpoint: rerun the same command to continue",
                file=sys.stderr,
                flush=True,
            )
            return 130
    wall = time.perf_counter() - start
    if args.report_only:
        _say_what_was_read(args, cells, out, prog)
    if any((c.run_dir(out) / "summary.json").is_file() for c in cells):
        recompute = _recompute_command(args, out, results)
        try:
            print(write_report(args.preset, preset, cells, out, results, recompute, base.seeds))
        except ConfigError as err:  # an optional dependency of the report is missing
            print(f"{prog}: error: {err}", file=sys.stderr)
            return 2
    else:
        print("no finished runs to report")
    busy = f"; running elsewhere: {elsewhere} (rerun this command when they end)" if elsewhere else ""
    print(f"grid wall time: {wall / 60:.1f} min; failed runs: {failures}{busy}")
    return 1 if failures else 3 if elsewhere else 0


def _report_progress(stream, todo: int, out: Path) -> tuple[int, int]:
    """Print one line per finished job (and a failed one's log tail); (failed jobs, jobs left to another
    process)."""
    from prism.experiments.runner import RUNNING_ELSEWHERE, log_tail

    failures = elsewhere = 0
    for k, (job, code, seconds) in enumerate(stream, start=1):
        if code == RUNNING_ELSEWHERE:
            elsewhere += 1
            print(f"[{k}/{todo}] {job}: skipped, another process is writing {job.run_dir(out)}", flush=True)
            continue
        status = "ok" if code == 0 else f"FAILED (exit {code}; log {job.log(out)})"
        print(f"[{k}/{todo}] {job}: {status} {seconds:.0f}s", flush=True)
        if code != 0:
            failures += 1
            print("    " + log_tail(job, out).replace("\n", "\n    "), flush=True)
    return failures, elsewhere


def _nothing_to_run(preset, cells: list) -> str:
    """Why a dry run lists no run: every cell is a joined arm's (read from its own study), or none is left."""
    joined = sorted({c.method for c in cells if c.source is not None})
    if cells and len(joined) == len({c.method for c in cells}):
        return (
            f"no run to make: the selected arms ({', '.join(joined)}) are joined from another study's runs, "
            "which are read, never run here"
        )
    return "no run to make: the selection (--envs/--methods/--seeds) holds no run of this preset"


def _say_what_was_read(args: argparse.Namespace, cells: list, out: Path, prog: str) -> None:
    """``--report-only``: how many of the grid's own runs were found in ``out``, and when none were, where the
    committed ones are (``docs/results/<preset>/runs``): without ``--out`` the command reads
    ``runs/reproduce/<preset>``, which a fresh clone does not have, and it used to say only "no finished runs"
    (or report the joined arms alone)."""
    own = [c for c in cells if c.source is None]  # joined arms are read from their own study's folder
    found = sum((c.run_dir(out) / "summary.json").is_file() for c in own)
    print(f"{prog}: read {found} of {len(own)} finished runs of {args.preset} in {_shown(out)}", flush=True)
    committed = ROOT / "docs" / "results" / args.preset / "runs"
    if found == 0 and own and committed.is_dir() and committed.resolve() != out.resolve():
        print(
            f"{prog}: warning: no run of {args.preset} in {_shown(out)}; its committed runs are in "
            f"{_shown(committed)}: add --out {_shown(committed)} (and --results DIR to leave the committed "
            "report as it is)",
            file=sys.stderr,
            flush=True,
        )


def _recompute_command(args: argparse.Namespace, out: Path, results: Path) -> str:
    """The ``prism reproduce --report-only`` line that rebuilds this report: it names the folder the runs were
    read from (``--out``), so pasting it reads the same files."""
    # One exception: a report written into docs/results/ from runs outside it names the copies it keeps
    # beside itself (results/runs), since only they are committed with it.
    docs = (ROOT / "docs" / "results").resolve()
    copies = results.resolve().is_relative_to(docs) and not out.resolve().is_relative_to(docs)
    runs = results / "runs" if copies else out
    parts = ["prism reproduce", f"--study {_shown(args.study)}" if args.study else f"--preset {args.preset}"]
    for flag in ("envs", "methods", "seeds"):
        values = vars(args)[flag]
        if values:
            parts.append(f"--{flag} " + " ".join(map(str, values)))
    parts += [f"--backbone {args.backbone}"] if args.backbone else []
    parts += [f"--protocol {args.protocol}"] if args.protocol else []
    parts += ["--report-only", f"--out {_shown(runs)}", f"--results {_shown(results)}"]
    return " ".join(parts)
