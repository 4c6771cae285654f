"""``prism`` command line: ``prism fit`` and ``prism evaluate``.

Bad input (a config key, a value, a file, a run folder, a run whose checkpoints are all damaged) ends with
one line on stderr that names the key and the problem, and exit code 2; ``--debug`` shows the traceback
instead.

Exit codes:

- 0: done (also ``prism fit --resume`` of a finished run, which changes nothing).
- 2: bad input (``prism: error: <key>: <problem>``).
- 3: a loss, a shaped reward or a parameter became NaN/inf during training: the run stops with
  ``prism: error: <quantity> is <nan|inf> at env step <N>; last good checkpoint: <path>``, and that
  checkpoint (the newest on disk) holds only finite values.
- 130: interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from prism._warnings import silence_library_noise

USAGE_ERROR = 2
NON_FINITE = 3
INTERRUPTED = 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prism",
        description="PRISM for multi-objective RL: ReSymNet reward redistribution + SymReg on CAPQL or GPI-PD.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="{fit,evaluate}")

    fit = sub.add_parser(
        "fit",
        help="train a run (PRISM loop, or oracle/baseline/ablation by config)",
        description="Train a run. Later config files override earlier ones; key=value overrides come last.",
    )
    fit.add_argument(
        "--config", "-c", nargs="+", action="extend", default=[], metavar="FILE", help="YAML config file(s)"
    )
    fit.add_argument("overrides", nargs="*", metavar="key=value", help="OmegaConf dot-list overrides")
    fit.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint"
    )
    fit.add_argument(
        "--overwrite", action="store_true", help="delete an existing non-empty run folder and start afresh"
    )
    fit.add_argument("--debug", action="store_true", help="show full tracebacks")

    evaluate = sub.add_parser("evaluate", help="re-evaluate the last checkpoint of a run")
    evaluate.add_argument("run_dir", metavar="RUN_DIR")
    evaluate.add_argument(
        "overrides", nargs="*", metavar="key=value", help="eval.* overrides, e.g. eval.episodes=10"
    )
    evaluate.add_argument("--debug", action="store_true", help="show full tracebacks")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Deprecation chatter from dependencies is not the user's problem (and would break one-line errors).
    silence_library_noise(deprecations=True)
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return USAGE_ERROR
    debug = args.debug or bool(os.environ.get("PRISM_DEBUG"))

    from prism.config import ConfigError
    from prism.errors import NonFiniteError

    try:
        if args.command == "fit":
            # `--config a.yaml key=value` lets argparse put the override among the files: move it back.
            files = [item for item in args.config if "=" not in item]
            overrides = [item for item in args.config if "=" in item] + list(args.overrides)
            if not files and not args.resume:
                raise ConfigError("--config: give at least one config file (or --resume RUN_DIR)")
            from prism.loop.run import fit_run

            fit_run(files, overrides, resume=args.resume, overwrite=args.overwrite)
        elif args.command == "evaluate":
            from prism.loop.run import evaluate_run

            evaluate_run(args.run_dir, list(args.overrides))
    except ConfigError as err:
        if debug:
            raise
        print(f"prism: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    except NonFiniteError as err:
        if debug:
            raise
        print(f"prism: error: {err}", file=sys.stderr)
        return NON_FINITE
    except KeyboardInterrupt:
        print("prism: interrupted", file=sys.stderr)
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
