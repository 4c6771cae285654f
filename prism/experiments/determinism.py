"""``prism check-determinism``: does a run repeat bit for bit? Run one ``prism fit`` config twice, each in a
fresh process, and compare every member's eval.csv and front.csv byte for byte (docs/benchmarks.md quotes it).

    prism check-determinism --out DIR [--modes true false] -- [prism fit arguments]
    # e.g. the population quickstart on a GPU:
    prism check-determinism --out /tmp/det -- --config conf/quickstart.yaml device=cuda "seeds=[0,1,2,3]"

A pair runs per value of ``--modes`` (default ``true``: ``deterministic=true``, docs: ``prism config
--describe``); ``--modes true false`` adds a pair without the key, to show whether the key is what makes the
difference on this machine. Each pair prints its runs' wall seconds and final hypervolumes, then
``<label>_files_identical: N/M`` and ``<label>_run_wall_s: <mean>`` (``deterministic`` / ``nondeterministic``;
read by tools/gpu_check_verdicts.py). Exit status 1 when the ``true`` pair differs or a run fails.
(``tools/determinism_check.py`` runs this from a source tree without installed metadata, the device image.)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

COMPARED = ("eval.csv", "front.csv")


def run_once(
    run_dir: Path, fit_args: list[str], deterministic: bool, env: dict[str, str] | None = None
) -> tuple[int, float]:
    """One ``prism fit`` in its own process (so the flags are set before CUDA starts): (exit code, seconds)."""
    command = [sys.executable, "-m", "prism.cli", "fit", *fit_args, f"deterministic={str(deterministic).lower()}",
               f"run_dir={run_dir}", "--overwrite", "--progress", "none"]  # fmt: skip
    start = time.perf_counter()
    code = subprocess.run(command, env=env).returncode
    return code, time.perf_counter() - start


def compared_files(run_dir: Path) -> dict[str, bytes]:
    """Every member's eval.csv and front.csv under ``run_dir``, by path relative to it."""
    return {
        str(path.relative_to(run_dir)): path.read_bytes()
        for name in COMPARED
        for path in sorted(run_dir.rglob(name))
        if "continued" not in path.parts
    }


def final_hvs(run_dir: Path) -> list[float]:
    """The members' final hypervolumes (``summary.json``), in folder order."""
    return [json.loads(p.read_text())["final"]["hv"] for p in sorted(run_dir.rglob("summary.json"))]


def check_pair(
    out: Path, fit_args: list[str], deterministic: bool, env: dict[str, str] | None = None
) -> bool:
    """Run the pair, print what it gave; True when every compared file is equal."""
    label = "deterministic" if deterministic else "nondeterministic"
    dirs = [out / f"{label}{attempt}" for attempt in (0, 1)]
    walls = []
    for run_dir in dirs:
        code, wall = run_once(run_dir, fit_args, deterministic, env)
        walls.append(wall)
        hvs = final_hvs(run_dir) if code == 0 else []
        print(f"{label} run {run_dir.name}: rc {code}, {wall:.1f} s, final HV {[round(h, 1) for h in hvs]}")
        if code != 0:
            print(f"{label}_files_identical: 0/0")
            return False
    first, second = (compared_files(d) for d in dirs)
    names = sorted(set(first) | set(second))
    same = [n for n in names if first.get(n) == second.get(n)]
    for name in names:
        print(f"  {name}: {'identical' if name in same else 'DIFFERENT'}")
    print(f"{label}_files_identical: {len(same)}/{len(names)}")
    print(f"{label}_run_wall_s: {sum(walls) / len(walls):.1f}")
    return bool(names) and len(same) == len(names)


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    """``prism check-determinism``; ``env``: the runs' environment (default: this process's)."""
    parser = argparse.ArgumentParser(
        prog="prism check-determinism",
        description="Run one prism fit config twice, each in a fresh process, and compare every member's "
        "eval.csv and front.csv byte for byte.",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs")
    parser.add_argument(
        "--modes", nargs="+", choices=("true", "false"), default=["true"], help="deterministic= of each pair"
    )
    parser.add_argument("fit_args", nargs="*", help="prism fit arguments (after --)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {
        mode: check_pair(args.out, args.fit_args, deterministic=mode == "true", env=env)
        for mode in args.modes
    }
    return 0 if results.get("true", True) else 1
