"""``prism`` command line: ``prism fit``, ``prism evaluate``, ``prism config``, ``prism list``, ``prism render``,
``prism reproduce`` (a preset's grid of runs and its report, :mod:`prism.experiments`), ``prism advise`` (which
reward method for an env), ``prism uniform-credit`` and ``prism check-determinism``; ``prism --version``.

``prism config`` prints the config a ``prism fit`` with the same arguments would run, with every key and its
default, and a ``resolved:`` block (what the run would decide for keys left ``null`` / ``auto``), without
training. A config is loaded and checked before torch's training stack (Lightning) is imported, so bad input
is reported at once.

Bad input (a config key, a value, a file, a run folder, a run whose checkpoints are all damaged) ends with
one line on stderr that names the key and the problem, and exit code 2; ``--debug`` shows the traceback
instead.

Exit codes:

- 0: done (also ``prism fit --resume`` of a finished run, which changes nothing).
- 2: bad input (``prism: error: <key>: <problem>``).
- 3: a loss, a shaped reward or a parameter became NaN/inf during training: the run stops with
  ``prism: error: <quantity> is <nan|inf> at env step <N>; last good checkpoint: <path>``, and that
  checkpoint (the newest on disk) holds only finite values.
- 130: interrupted (Ctrl-C); ``prism fit`` then prints ``prism: interrupted; continue the run with: prism fit
  --resume RUN_DIR``.
- 143: terminated (SIGTERM during training: ``kill PID``, a scheduler's time limit); as 130, and the line says
  ``prism: terminated (SIGTERM)``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from prism import __version__
from prism.core._warnings import silence_library_noise
from prism.core.errors import ConfigError, caused_by_interrupt

USAGE_ERROR = 2
NON_FINITE = 3
INTERRUPTED = 130
TERMINATED = 143


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config FILE…`` and ``key=value`` overrides, shared by ``prism fit`` and ``prism config``."""
    parser.add_argument(
        "--config", "-c", nargs="+", action="extend", default=[], metavar="FILE", help="YAML config file(s)"
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="OmegaConf dot-list overrides")


def _add_debug_argument(parser: argparse.ArgumentParser) -> None:
    """``--debug`` after the command. SUPPRESS as default: a subcommand's own default would otherwise
    overwrite ``prism --debug fit``'s True with False (argparse copies a subparser's defaults over its
    parent's namespace)."""
    parser.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show full tracebacks"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prism",
        description="PRISM for multi-objective RL: ReSymNet reward redistribution + SymReg on CAPQL or GPI-PD.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    parser.add_argument("--version", action="version", version=f"prism {__version__}")
    sub = parser.add_subparsers(
        dest="command",
        metavar="{fit,evaluate,config,list,render,reproduce,advise,uniform-credit,check-determinism}",
    )

    fit = sub.add_parser(
        "fit",
        help="train a run (PRISM loop, or oracle/baseline/ablation by config)",
        description="Train a run. Later config files override earlier ones; key=value overrides come last.",
    )
    _add_config_arguments(fit)
    fit.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint"
    )
    fit.add_argument(
        "--overwrite", action="store_true", help="delete an existing non-empty run folder and start afresh"
    )
    _add_debug_argument(fit)
    _add_progress_argument(fit)

    show = sub.add_parser(
        "config",
        help="print the resolved config of a run (every key, its default, what null/auto resolve to)",
        description="Print the config `prism fit` would run with these arguments (every key with its "
        "default, then the values it would resolve at start), without training. Without --config: the "
        "defaults of every key.",
    )
    _add_config_arguments(show)  # the same arguments as `prism fit`: it shows what that would run
    show.add_argument(
        "--describe", action="store_true", help="print every key with its value and its documentation"
    )
    _add_debug_argument(show)

    evaluate = sub.add_parser(
        "evaluate",
        help="re-evaluate the last checkpoint of a run (final protocol by default)",
        description="Evaluate the last checkpoint of a run, population or population member and append a row "
        "per member to its evaluate.csv. The default protocol is the run's final one (eval.final: the "
        "paper's 100 weights x 5 episodes), so a finished run reproduces its final eval.csv row.",
    )
    evaluate.add_argument("run_dir", metavar="RUN_DIR")
    evaluate.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="eval.* overrides, e.g. eval.final.episodes=10 (eval.episodes=10 with --protocol periodic)",
    )
    evaluate.add_argument(
        "--protocol",
        choices=("final", "periodic"),
        default="final",
        help="final (eval.final.*, default) or periodic (eval.num_weights x eval.episodes)",
    )
    evaluate.add_argument(
        "--allow-untrained",
        action="store_true",
        help="evaluate a checkpoint taken before the policy's first update (refused otherwise)",
    )
    _add_debug_argument(evaluate)

    listing = sub.add_parser(
        "list",
        help="list the envs, methods, ablations, reward methods and models, and backbones a config can name",
        description="List what a config can name: registered envs, the method and ablation overlays in "
        "conf/, reward methods and models, backbones (installed plug-ins included).",
    )
    _add_debug_argument(listing)
    _add_render_parser(sub)
    # Listed here for `prism --help`; main() hands `prism reproduce ...` to prism.experiments.cli, imported
    # only then, which parses its own options (`prism reproduce --help`).
    sub.add_parser(
        "reproduce",
        add_help=False,
        help="run (or resume) a preset's grid of envs x methods x seeds and report it (the paper's tables)",
    )
    # Each handed to its own module's parser as well (`prism uniform-credit --help`).
    sub.add_parser(
        "advise",
        add_help=False,
        help="uniform R/T, ReSymNet or the fast fit for an env? measured on random episodes, with the studies "
        "behind the advice",
    )
    sub.add_parser(
        "uniform-credit",
        add_help=False,
        help="how much per-step information uniform R/T redistribution carries, per env (random episodes)",
    )
    sub.add_parser(
        "check-determinism",
        add_help=False,
        help="run a prism fit config twice in fresh processes and compare eval.csv / front.csv byte for byte",
    )
    return parser


def _add_progress_argument(fit: argparse.ArgumentParser) -> None:
    """``prism fit --progress``: bars in a terminal, plain lines in a log (prism.display.progress_lines)."""
    fit.add_argument(
        "--progress",
        choices=("auto", "bar", "lines", "none"),
        default="auto",
        help="what stderr shows: bars in a terminal and plain lines (phase starts and ends, RL progress every "
        "1000 env steps or 30 s) otherwise (auto, default), always bars, always lines, or nothing",
    )


def _add_render_parser(sub) -> None:
    """``prism render RUN_DIR``: a video and a contact sheet of the trained policy (:mod:`prism.render`)."""
    render = sub.add_parser(
        "render",
        help="render the trained policy's rollouts to a video (MP4/GIF) and a contact-sheet PNG",
        description="Roll out the last checkpoint's deterministic policy headless (MuJoCo via MUJOCO_GL=egl, "
        "else osmesa) and write a video and a contact sheet (<out stem>_sheet.png). Default preferences: the "
        "final front's extreme ones and the balanced one. Needs the render extra: pip install "
        "'prism-morl[render]'.",
    )
    render.add_argument("run_dir", metavar="RUN_DIR")
    render.add_argument(
        "--weights",
        nargs="+",
        metavar="W1,W2,...",
        help="preferences to render, one comma-separated vector each (normalised to sum 1)",
    )
    render.add_argument("--episodes", type=int, default=1, help="episodes per preference (default 1)")
    render.add_argument("--seed", type=int, help="base reset seed (default: the run's evaluation seed)")
    render.add_argument(
        "--out", metavar="FILE", help="video file, .mp4 or .gif (default RUN_DIR/render/rollouts.mp4)"
    )
    render.add_argument("--size", default="320x240", metavar="WxH", help="frame size (default 320x240)")
    render.add_argument("--max-steps", type=int, help="stop each episode after this many steps")
    render.add_argument("--debug", action="store_true", help="show full tracebacks")


def _render(args: argparse.Namespace) -> None:
    """Run ``prism render`` and print where its files went."""
    from prism.render import parse_size, parse_weights, render_run

    width, height = parse_size(args.size)
    result = render_run(
        args.run_dir,
        weights=parse_weights(args.weights) if args.weights else None,
        episodes=args.episodes,
        seed=args.seed,
        out=args.out,
        width=width,
        height=height,
        max_steps=args.max_steps,
    )
    names = result.objective_names
    for clip in result.clips:
        w = ", ".join(f"{x:.3g}" for x in clip.weight)
        # named as on the contact sheet: the return of each objective, undiscounted
        returns = ", ".join(f"{name} {x:.4g}" for name, x in zip(names, clip.undiscounted_return))
        print(f"w=({w}) episode {clip.episode}: {len(clip.frames) - 1} steps, return {returns}")
    print(f"video          {result.video}")
    print(f"contact sheet  {result.contact_sheet}")


def _files_and_overrides(items: list[str], overrides: list[str]) -> tuple[list[str], list[str]]:
    """Split ``--config``'s items into files and ``key=value`` overrides (argparse puts overrides given after
    ``--config a.yaml`` among the files). An item that is neither an existing file nor ``key=value`` but looks
    like a key (``loop.cycles 3``: a missing ``=``) is a one-line error saying so, not "missing file"."""
    files = [item for item in items if "=" not in item]
    for index, item in enumerate(files):
        if os.path.exists(item) or item.endswith((".yaml", ".yml")):
            continue  # a file (a missing one is reported by the loader)
        following = files[index + 1] if index + 1 < len(files) else None
        hint = f"; did you mean {item}={following}?" if following is not None else ""
        raise ConfigError(
            f"{item}: not a config file and not key=value; overrides take the form key=value{hint}"
        )
    return files, [item for item in items if "=" in item] + list(overrides)


def _interrupted_line(err: KeyboardInterrupt) -> str:
    """What Ctrl-C (or SIGTERM) prints: for a ``prism fit``, the exact command that continues the run (or,
    stopped before the run wrote anything, that the same command starts it again)."""
    from prism.core.errors import RunInterrupted, terminated

    stopped = "terminated (SIGTERM)" if terminated(err) else "interrupted"
    if not isinstance(err, RunInterrupted):
        return f"prism: {stopped}"
    import shlex

    where = shlex.quote(str(err.run_dir))
    if err.resumable:
        return f"prism: {stopped}; continue the run with: prism fit --resume {where}"
    if err.restored:
        return (
            f"prism: {stopped} before the run started; {where} is as it was; run the same command to start it"
        )
    gone = f"; {where} removed" if err.removed else ""
    return f"prism: {stopped} before the run wrote anything{gone}; run the same command to start it"


def main(argv: Sequence[str] | None = None) -> int:
    # Deprecation chatter from dependencies is not the user's problem (and would break one-line errors).
    silence_library_noise(deprecations=True)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["reproduce"]:
        from prism.experiments.cli import main as reproduce

        return reproduce(argv[1:])
    if argv[:1] == ["advise"]:
        from prism.experiments.advise_cli import main as advise

        return advise(argv[1:])
    if argv[:1] == ["uniform-credit"]:
        from prism.experiments.uniform_credit import main as uniform_credit

        return uniform_credit(argv[1:])
    if argv[:1] == ["check-determinism"]:
        from prism.experiments.determinism import main as check_determinism

        return check_determinism(argv[1:])
    parser = _parser()
    # Known args first: argparse fills a `key=value…` positional list at its first occurrence, so overrides
    # after an option (`prism evaluate RUN --protocol periodic eval.episodes=2`) come back unparsed. They
    # are overrides all the same, in the order given; anything else left over is an unrecognised argument.
    args, extra = parser.parse_known_args(argv)
    unrecognised = [item for item in extra if item.startswith("-") or "=" not in item]
    if unrecognised or (extra and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(unrecognised or extra)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    if args.command is None:
        parser.print_help()
        return USAGE_ERROR
    debug = args.debug or bool(os.environ.get("PRISM_DEBUG"))

    from prism.core.errors import NonFiniteError

    try:
        if args.command in ("fit", "render", "evaluate"):
            from prism.core.gl_backend import check_mujoco_gl

            # Before any run folder is made: MuJoCo reads MUJOCO_GL only at a run's first MuJoCo env.
            check_mujoco_gl()
        if args.command in ("fit", "config"):
            files, overrides = _files_and_overrides(args.config, args.overrides)
            resume = getattr(args, "resume", None)
            if not files and not resume and args.command == "fit":  # `prism config` alone: the defaults
                raise ConfigError("--config: give at least one config file (or --resume RUN_DIR)")
            from prism.config import load_config

            # Loaded and checked here, before prism.run.fit imports Lightning: bad input fails at once.
            config = None if resume else load_config(files, overrides)
            request = None
            if resume:
                from pathlib import Path

                from prism.run.continuation import resume_request

                request = resume_request(Path(resume), files, overrides)
            if args.command == "config" and args.describe:
                from prism.config.describe import describe

                print(describe(config), end="")
                return 0
            if args.command == "config":
                from prism.config import resolved_values, to_yaml

                print(to_yaml(config, resolved_values(config)), end="")
                return 0
            from prism.run.fit import fit_run

            fit_run(
                files,
                overrides,
                resume=resume,
                overwrite=args.overwrite,
                config=config,
                resume_checked=request,
                progress=args.progress,
            )
        elif args.command == "render":
            _render(args)
        elif args.command == "list":
            from prism.plugins.catalogue import catalogue

            print(catalogue(), end="")
        elif args.command == "evaluate":
            from prism.run.evaluate import evaluate_run

            evaluate_run(
                args.run_dir,
                list(args.overrides),
                protocol=args.protocol,
                allow_untrained=args.allow_untrained,
            )
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
    except KeyboardInterrupt as err:
        from prism.core.errors import terminated

        print(_interrupted_line(err), file=sys.stderr)
        return TERMINATED if terminated(err) else INTERRUPTED
    except Exception as err:
        # Ctrl-C inside an import that turns it into another error (mujoco's "initialization failed")
        if debug or not caused_by_interrupt(err):
            raise
        print("prism: interrupted", file=sys.stderr)
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
