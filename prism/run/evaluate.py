"""``prism evaluate``: score a trained run's last checkpoint once, with the run's final protocol or its
periodic one (:func:`evaluate_run`)."""

from __future__ import annotations

from pathlib import Path

from prism.config import RunConfig
from prism.core.errors import ConfigError
from prism.run.layout import run_config_file, trained_run_folder

EVALUATION_PROTOCOLS = ("final", "periodic")
"""``prism evaluate --protocol``: the final protocol (``eval.final``: the paper's 100 weights × 5 episodes,
what ``front.csv``, ``summary.json`` and the ``final`` row of ``eval.csv`` hold) or the periodic one
(``eval.num_weights`` × ``eval.episodes``, the learning curve's rows)."""

_PERIODIC_KEYS = ("eval.num_weights", "eval.episodes")


def evaluation_request(
    run_dir: str | Path, overrides: list[str], protocol: str = "final"
) -> tuple[RunConfig, int | None, Path]:
    """Check a ``prism evaluate`` request without importing torch or Lightning: the protocol, the folder's
    ``config.yaml`` and the overrides (``eval.*`` only, and not the other protocol's counts). Returns the
    config to evaluate with, the population member to evaluate alone (``None``: every member) and the folder
    holding the checkpoints (a member's ``seed<N>/`` folder resolves to its population's)."""
    if protocol not in EVALUATION_PROTOCOLS:
        raise ConfigError(f"--protocol: expected one of {', '.join(EVALUATION_PROTOCOLS)}, got {protocol!r}")
    run_dir = Path(run_dir)
    run_config_file(run_dir, key="RUN_DIR")  # the folder first, then what is asked of it
    bad = [o for o in overrides if not o.startswith("eval.")]
    if bad:
        raise ConfigError(f"{bad[0].split('=')[0]}: prism evaluate only takes eval.* overrides")
    for item in overrides:
        key = item.split("=", 1)[0]
        if key == "eval.every":
            raise ConfigError(
                "eval.every: schedules a training run's periodic evaluations; prism evaluate evaluates once "
                "and does not use it"
            )
        if protocol == "final" and key in _PERIODIC_KEYS:
            raise ConfigError(
                f"{key}: sets the periodic protocol, and prism evaluate uses the final one; set "
                f"eval.final.{key.split('.')[1]} instead, or add --protocol periodic"
            )
        if protocol == "periodic" and key.startswith("eval.final."):
            raise ConfigError(
                f"{key}: sets the final protocol, and --protocol periodic uses eval.num_weights / eval.episodes"
            )
    return trained_run_folder(run_dir, key="RUN_DIR", overrides=overrides)


def evaluate_run(
    run_dir: str | Path, overrides: list[str], protocol: str = "final", *, allow_untrained: bool = False
) -> dict | list[dict]:
    """``prism evaluate``: rebuild the agent from a run folder's config and last checkpoint, evaluate once.

    ``protocol`` is ``final`` (default: ``eval.final.*``, the paper's protocol, the same episodes as the run's
    final evaluation, so a finished run's values equal its ``final`` row of ``eval.csv``) or ``periodic``
    (``eval.num_weights`` × ``eval.episodes``, as the periodic rows). ``eval.*`` overrides apply; one that sets
    the other protocol's counts is refused (it would be ignored). ``run_dir`` is a single run's folder, a
    population's folder (every member is evaluated) or one member's ``seed<N>/`` folder (its weights are read
    from the population's checkpoint one level up). Each evaluated member gets a row appended to its
    ``evaluate.csv`` (``eval.csv`` stays the training curve): ``protocol``, ``num_weights``, ``episodes``,
    then the columns of an ``eval.csv`` row; the same values are printed, one line per member.

    A checkpoint taken before the policy's first update (fewer env steps than ``agent.learning_starts``: a run
    stopped during its first collection or reward fit) holds the untrained policy: refused unless
    ``allow_untrained``, and then flagged ``untrained=1`` in the row and the printed line.
    """
    config, only, run_dir = evaluation_request(run_dir, overrides, protocol)
    # Imported only now: a bad request is refused above in a fraction of a second, before torch and Lightning.
    from prism.evaluation.records import append_csv, eval_row
    from prism.evaluation.rollout import evaluate_agent
    from prism.run.checkpoint_files import is_untrained, load_agent_weights
    from prism.run.fit import _quiet, build_run

    _quiet()
    # The folder may have been moved or copied since training: read the checkpoints that are here.
    config.run_dir = str(run_dir)
    run = build_run(config, progress_bar=False)
    env_steps = load_agent_weights(run)
    untrained = is_untrained(config.agent, env_steps)
    if untrained and not allow_untrained:
        raise ConfigError(
            f"RUN_DIR: the last checkpoint of {str(run_dir)!r} is at {env_steps} env steps, before the policy's "
            f"first update (agent.learning_starts = {config.agent.learning_starts}): it would score the "
            "untrained policy; add --allow-untrained to evaluate it anyway"
        )
    rows: list[dict] = []
    written: list[Path] = []
    for member in run.members if only is None else [run.members[only]]:
        # The member's evaluation config, its reset seed resolved from the member's seed: the same episodes
        # as in training.
        cfg = member.evaluation.config
        cfg = cfg.final_protocol() if protocol == "final" else cfg
        result = evaluate_agent(run.agent, run.spec, cfg, member=member.index)
        row = {
            "protocol": protocol,
            "num_weights": cfg.num_weights,
            "episodes": cfg.episodes,
            "untrained": int(untrained),
            **eval_row(result, run.spec.objective_names, env_steps),
        }
        append_csv(member.run_dir / "evaluate.csv", row, extend_header=True)
        text = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
        text += "  (the untrained policy: no update before this checkpoint)" if untrained else ""
        print(f"seed {member.seed}: {text}" if run.population else text)
        rows.append(row)
        written.append(member.run_dir / "evaluate.csv")
    # Said, not left to be guessed: the numbers above are also in these files (the training curve, eval.csv,
    # is left as it was).
    print(f"prism evaluate: appended a row to {', '.join(map(str, written))}")
    return rows[0] if len(rows) == 1 else rows
