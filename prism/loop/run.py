"""Building and running a whole ``prism fit`` run from a :class:`~prism.config.RunConfig`.

This module wires the parts together and owns the run folder; the parts themselves (env, shaper, agent,
loop callback, evaluation callback) know nothing of each other beyond the contracts in
``docs/ARCHITECTURE.md``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger

from prism.config import ConfigError, RunConfig, load_config, resolve_env_spec, sparse_channel, to_yaml
from prism.envs import EnvSpec, make_env
from prism.loop.evaluation import EvaluationCallback, agent_env_steps
from prism.loop.phases import LoopSettings, PrismLoopCallback
from prism.registry import AGENTS, REWARDS

CONFIG_FILE = "config.yaml"


@dataclass
class Run:
    """Everything ``trainer.fit`` needs, built from a config (and nothing run yet)."""

    config: RunConfig
    spec: EnvSpec
    run_dir: Path
    agent: L.LightningModule
    loop: PrismLoopCallback
    evaluation: EvaluationCallback
    trainer: L.Trainer


def _register_builtin_agents() -> None:
    if "capql" not in AGENTS.names():
        from prism.agents.capql import CAPQLModule

        AGENTS.register("capql", CAPQLModule)


def needs_reward_model(config: RunConfig) -> bool:
    """Whether the method learns a reward model (and so has collection and fit phases)."""
    return config.reward.name == "resymnet" or bool(
        getattr(REWARDS.get("reward.name", config.reward.name), "needs_model", False)
    )


def build_shaper(config: RunConfig, channel: int | None):
    """The reward shaper for ``reward.name`` (its model, if any, is installed by the loop after a fit)."""
    if config.reward.name == "resymnet":
        from prism.reward.shaping import ResymnetShaper

        if channel is None:
            raise ConfigError("reward.name: resymnet needs a sparse channel, but env.dense is true")
        return ResymnetShaper(None, channel)
    factory = REWARDS.get("reward.name", config.reward.name)
    if config.reward.name != "none" and channel is None:
        raise ConfigError(f"reward.name: {config.reward.name} needs a sparse channel, but env.dense is true")
    return factory(sparse_channel=channel, model=None, seed=config.seed + 1)


def build_run(config: RunConfig, *, progress_bar: bool = True, purge_step: int | None = None) -> Run:
    """Build the env factory, shaper, agent, callbacks and trainer of a run (nothing runs, nothing is written)."""
    _register_builtin_agents()
    spec = resolve_env_spec(config)
    channel = sparse_channel(config, spec)
    run_dir = Path(config.run_dir)
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    L.seed_everything(config.seed, verbose=False)

    def env_factory():
        # The training env's release draws have their own seed stream (SPEC §3: not the env's RNG).
        return make_env(spec, sparse_channel=channel, p_rel=config.env.p_rel, seed=config.seed)

    # The run's seed and device are set once, at the top of the config; the agent takes them from there.
    agent_config = dataclasses.replace(config.agent, seed=config.seed, device=config.device)
    agent_cls = AGENTS.get("agent.name", config.agent.name)
    agent = agent_cls(
        agent_config,
        spec,
        env_factory,
        build_shaper(config, channel),
        sparse_channel=channel if channel is not None else spec.sparse_channel,
        target_env_steps=config.loop.steps_per_cycle,
    )
    settings = LoopSettings(
        cycles=config.loop.cycles,
        steps_per_cycle=config.loop.steps_per_cycle,
        initial_episodes=config.loop.initial_episodes,
        expert_episodes=config.loop.expert_episodes,
        sparse_channel=channel,
        p_rel=config.env.p_rel,
        reward=config.reward,
        needs_model=needs_reward_model(config),
        seed=config.seed,
        run_dir=run_dir,
        figures=config.figures,
    )
    loop = PrismLoopCallback(spec, settings)
    evaluation = EvaluationCallback(
        spec, config.eval, run_dir=run_dir, run_seed=config.seed, figures=config.figures
    )
    # Order matters: an evaluation due at a cycle's last step sees the policy before the loop moves on, and
    # the checkpointer (appended by attach_checkpointing) saves after both.
    callbacks: list[Callback] = [evaluation, loop]
    if progress_bar:
        from prism.loop.progress import PhaseProgressBar

        callbacks.append(PhaseProgressBar(loop))
    # purge_step (on resume): TensorBoard drops events logged after the checkpoint by the killed process.
    logger = TensorBoardLogger(
        str(run_dir), name="tb", version="", default_hp_metric=False, purge_step=purge_step
    )
    trainer = L.Trainer(
        accelerator=agent_config.accelerator(),
        devices=1,
        max_epochs=-1,
        max_steps=-1,  # the RL clock is the agent's env-step counter, never Lightning's global_step
        logger=logger,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
    )
    return Run(config, spec, run_dir, agent, loop, evaluation, trainer)


def prepare_run_dir(run_dir: Path, *, overwrite: bool) -> None:
    """Create ``run_dir``; refuse a non-empty one unless ``overwrite`` (never delete anything silently)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"run_dir: {str(run_dir)!r} exists and is not a folder")
    if run_dir.is_dir() and any(run_dir.iterdir()):
        if not overwrite:
            raise ConfigError(
                f"run_dir: {str(run_dir)!r} is not empty; use --resume {run_dir} to continue it, "
                "--overwrite to replace it, or another run_dir"
            )
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)


def _quiet() -> None:
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*IterableDataset.*__len__.*")
    warnings.filterwarnings("ignore", message=".*Trying to infer the `batch_size`.*")


def fit_run(
    files: list[str], overrides: list[str], *, resume: str | None = None, overwrite: bool = False
) -> Run | None:
    """``prism fit``: load and validate the config, prepare the run folder, train, evaluate.

    ``None`` when ``resume`` names a finished run (nothing is done)."""
    _quiet()
    if resume is not None:
        from prism.loop.checkpoint import resume_run

        return resume_run(Path(resume), files, overrides)
    config = load_config(files, overrides)
    run_dir = Path(config.run_dir)
    prepare_run_dir(run_dir, overwrite=overwrite)
    (run_dir / CONFIG_FILE).write_text(to_yaml(config))
    run = build_run(config)
    from prism.loop.checkpoint import attach_checkpointing

    attach_checkpointing(run)
    start = time.perf_counter()
    run.trainer.fit(run.agent)
    wall_time_s = time.perf_counter() - start
    write_final_outputs(run, wall_time_s)
    print(closing_summary(run, wall_time_s))
    return run


def final_protocol(run: Run) -> dict[str, int]:
    """The protocol of the run's final evaluation (what ``summary.json`` records)."""
    final = run.evaluation.config.final_protocol()
    return {"num_weights": final.num_weights, "episodes": final.episodes, "seed": final.reset_seed()}


def write_final_outputs(run: Run, wall_time_s: float) -> None:
    """``front.csv`` (per-weight returns of the final evaluation) and ``summary.json`` (marks the run done;
    its ``final`` metrics and ``final_protocol`` are those of the end-of-run evaluation)."""
    result = run.evaluation.final_result
    if result is None:
        return
    on_front = {tuple(np.round(p, 12)) for p in np.asarray(result.front)}
    n_obj = run.spec.n_objectives
    with (run.run_dir / "front.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                *(f"weight_{i}" for i in range(n_obj)),
                *(f"mean_{i}" for i in range(n_obj)),
                *(f"std_{i}" for i in range(n_obj)),
                "on_front",
            ]
        )
        for w, m, sd in zip(result.weights, result.mean, result.std):
            flag = int(tuple(np.round(m, 12)) in on_front)
            writer.writerow([*map(float, w), *map(float, m), *map(float, sd), flag])
    final = result.row(run.spec.objective_names, agent_env_steps(run.agent))
    summary = {
        "method": run.config.method,
        "env": run.spec.id,
        "seed": run.config.seed,
        "env_steps": agent_env_steps(run.agent),
        "wall_time_s_last_process": wall_time_s,
        "final_protocol": final_protocol(run),
        "final": {k: v for k, v in final.items() if isinstance(v, (int, float))},
    }
    (run.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def closing_summary(run: Run, wall_time_s: float, *, resumed: bool = False) -> str:
    """The block ``prism fit`` prints when training is over: where the run is, how it ended, how to look.

    Final metrics are the end-of-run evaluation's; best ones are over every row of ``eval.csv`` (so a
    resumed run counts the evaluations of its earlier processes too).
    """
    rows: list[dict[str, str]] = []
    eval_csv = run.run_dir / "eval.csv"
    if eval_csv.is_file():
        with eval_csv.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    finals = [r for r in rows if r.get("final") == "1"]
    process = "this process, resumed" if resumed else "this process"
    lines = [
        f"prism fit: done: {run.config.method} on {run.spec.id}, seed {run.config.seed}, "
        f"{agent_env_steps(run.agent)} env steps, wall time {_duration(wall_time_s)} ({process})",
        f"  run folder   {run.run_dir}",
    ]
    if finals:
        protocol = final_protocol(run)
        final = finals[-1]
        lines.append(
            f"  final        HV {float(final['hv']):.6g}   EUM {float(final['eum']):.6g}   "
            f"VO {float(final['vo']):.6g}   ({protocol['num_weights']} weights x {protocol['episodes']} episodes)"
        )
    if rows:

        def best(key: str) -> str:
            valid = [r for r in rows if r[key] not in ("", "nan")]
            if not valid:
                return "n/a"
            top = max(valid, key=lambda r: float(r[key]))
            return f"{float(top[key]):.6g} @ {top['env_steps']}"

        lines.append(
            f"  best         HV {best('hv')}   EUM {best('eum')}   VO {best('vo')}   (value @ env steps)"
        )
    else:
        lines.append("  no evaluation was recorded")
    lines.append(f"  TensorBoard  tensorboard --logdir {run.run_dir / 'tb'}")
    return "\n".join(lines)


def evaluate_run(run_dir: str | Path, overrides: list[str]) -> dict:
    """``prism evaluate``: rebuild the agent from ``run_dir``'s config and last checkpoint, evaluate once.

    Writes ``evaluate.csv`` in the run folder (``eval.csv`` stays the training curve) and prints the row.
    """
    _quiet()
    from prism.loop.checkpoint import load_agent_weights
    from prism.loop.evaluation import append_csv, evaluate_agent

    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG_FILE
    if not config_path.is_file():
        raise ConfigError(f"RUN_DIR: {str(run_dir)!r} has no {CONFIG_FILE} (is it a prism run folder?)")
    bad = [o for o in overrides if not o.startswith("eval.")]
    if bad:
        raise ConfigError(f"{bad[0].split('=')[0]}: prism evaluate only takes eval.* overrides")
    config = load_config([config_path], overrides)
    # The folder may have been moved or copied since training: read the checkpoints that are here.
    config.run_dir = str(run_dir)
    run = build_run(config, progress_bar=False)
    env_steps = load_agent_weights(run)
    # The run's evaluation config, its reset seed resolved from the run seed: the same episodes as in training.
    result = evaluate_agent(run.agent, run.spec, run.evaluation.config)
    row = result.row(run.spec.objective_names, env_steps)
    append_csv(run_dir / "evaluate.csv", row)
    print(", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    return row


def torch_load(path: Path) -> dict:
    """Checkpoints hold tensors and plain containers only: load them without unpickling arbitrary objects."""
    return torch.load(path, map_location="cpu", weights_only=True)
