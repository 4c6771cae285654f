"""Building and running a whole ``prism fit`` run from a :class:`~prism.config.RunConfig`.

This module wires the parts together and owns the run folder; the parts themselves (env, shaper, agent,
loop callback, evaluation callback) know nothing of each other beyond the contracts in
``docs/ARCHITECTURE.md``.

A run trains a population of S members (``seeds``), S = 1 for a single ``seed`` — one code path. A single run
writes into ``run_dir``; a population keeps its config and checkpoints in ``run_dir`` and gives each member a
folder ``run_dir/seed<N>/`` holding exactly what a single run writes (config.yaml with that seed, eval.csv,
front.csv, summary.json, TensorBoard events).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger

from prism.config import (
    ConfigError,
    RunConfig,
    accelerator,
    load_config,
    member_seeds,
    resolve_env_spec,
    resolved_values,
    sparse_channel,
    to_yaml,
)
from prism.config.methods import run_label
from prism.core import interrupt
from prism.core._warnings import silence_library_noise
from prism.core.devices import make_deterministic
from prism.core.errors import RunInterrupted, caused_by_interrupt
from prism.core.phase_clock import PhaseClock
from prism.core.seeding import derive_seed
from prism.display.progress import PhaseProgressBar, Progress
from prism.display.progress_lines import make_progress
from prism.envs import make_env
from prism.evaluation.callback import EvaluationCallback
from prism.evaluation.pool import EvalEnvPool
from prism.evaluation.records import truncate_eval_csv
from prism.loop.phases import LoopSettings, PrismLoopCallback
from prism.plugins.registry import AGENTS, REWARDS, RewardEntry
from prism.run.checkpoint import attach_checkpointing
from prism.run.checkpoint_files import load_checkpoint, resume_line, set_aside
from prism.run.continuation import (
    ResumeRequest,
    archive_final_outputs,
    reopen_state,
    resume_request,
    with_cycles,
)
from prism.run.layout import CHECKPOINT_DIR, CONFIG_FILE, SUMMARY_CSV, SUMMARY_JSON
from prism.run.lock import run_dir_lock
from prism.run.members import Member, Run, member_config, member_run_dirs
from prism.run.outputs import closing_summary, write_final_outputs
from prism.run.overwrite import PreviousContents, remove_contents
from prism.run.tensorboard_resume import carry_events_at_step


def reward_entry(config: RunConfig) -> RewardEntry:
    """The registry entry of the run's reward method (``reward.name``: a registered name or a class path)."""
    return REWARDS.entry("reward.name", config.reward.name)


def needs_reward_model(config: RunConfig) -> bool:
    """Whether the method learns a reward model (and so has collection and fit phases)."""
    return reward_entry(config).needs_model


def build_shaper(config: RunConfig, channel: int | None, seed: int | None = None):
    """The reward shaper for ``reward.name`` of the member seeded ``seed`` (default ``config.seed``); its model,
    if any, is installed by the loop after a fit."""
    seed = config.seed if seed is None else seed
    # The shaper's own stream, derived from the member's seed (it used to be seed + 1, which is the release
    # stream of the sparse wrapper of the member seeded seed + 1: two seeds' runs shared draws).
    shaper_seed = derive_seed(seed, "shaper")
    return reward_entry(config).shaper_factory()(sparse_channel=channel, model=None, seed=shaper_seed)


def build_run(
    config: RunConfig, *, progress_bar: bool | Progress = True, purge_step: int | None = None
) -> Run:
    """Build the env factory, shapers, agent, callbacks and trainer of a run (nothing runs, nothing is written)."""
    spec = resolve_env_spec(config)
    channel = sparse_channel(config, spec)
    run_dir = Path(config.run_dir)
    seeds = member_seeds(config)
    dirs = member_run_dirs(config)
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    if config.deterministic:
        make_deterministic()  # before the agent and the Trainer touch the device
    L.seed_everything(seeds[0], verbose=False)

    def env_factory(member: int):
        # Each member's training env has its release draws on a stream of the member's seed (docs/method.md §3:
        # not the env's own RNG). A named stream, not the raw seed: default_rng(seed) is also what
        # env.reset(seed=seed) gives the env, and what any other raw-seeded consumer would draw. The agent's
        # first reset is seeded (derive_seed(seed, "env")), and a seeded reset reseeds the draws from a
        # named stream of its seed (SparseRewardWrapper.reset); unseeded resets then continue that stream.
        release_seed = derive_seed(seeds[member], "train/release")
        return make_env(spec, sparse_channel=channel, p_rel=config.env.p_rel, seed=release_seed)

    # The run's seeds and device are set once, at the top of the config: the agent gets the seeds here and
    # its device from the Trainer's accelerator below.
    agent_cls = AGENTS.entry("agent.name", config.agent.name).agent_class()
    rewards = reward_entry(config)
    agent = agent_cls(
        config.agent,
        spec,
        env_factory,
        [build_shaper(config, channel, seed) for seed in seeds],
        seeds=seeds,
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
        needs_model=rewards.needs_model,
        reward_model=rewards.model,
        seed=seeds[0],
        run_dir=dirs[0],
        figures=config.figures,
        seeds=tuple(seeds),
        run_dirs=tuple(dirs),
        fit_checkpoint_every_s=config.loop.fit_checkpoint_every_s,
    )
    loop = PrismLoopCallback(spec, settings)
    # One TensorBoard run per member; purge_step (on resume) drops events the killed process logged after
    # the checkpoint.
    loggers = [
        TensorBoardLogger(str(d), name="tb", version="", default_hp_metric=False, purge_step=purge_step)
        for d in dirs
    ]
    pool = EvalEnvPool(spec, num_workers=config.eval.num_workers)  # env copies shared by the members
    members = []
    for index, (seed, member_dir, logger) in enumerate(zip(seeds, dirs, loggers)):
        evaluation = EvaluationCallback(
            spec,
            config.eval,
            run_dir=member_dir,
            run_seed=seed,
            figures=config.figures,
            member=index,
            logger=logger if config.seeds is not None else None,
            pool=pool,
            cycle_steps=config.loop.steps_per_cycle,
            cycles=config.loop.cycles,
        )
        members.append(
            Member(index, seed, member_dir, member_config(config, seed, member_dir), evaluation, logger)
        )
    if config.seeds is not None:
        agent.member_loggers = loggers
        loop.member_loggers = loggers
    # Order matters: an evaluation due at a cycle's last step sees the policy before the loop moves on, and
    # the checkpointer (appended by attach_checkpointing) saves after both.
    callbacks: list[Callback] = [*(m.evaluation for m in members), loop]
    if progress_bar:
        # Every phase in the terminal (docs: prism/display/progress.py); a Progress instance may be passed in.
        progress = progress_bar if isinstance(progress_bar, Progress) else Progress()
        progress.clock = lambda: agent.env_step_count
        progress.total_steps = loop.total_env_steps
        if progress.active:  # the phase bars hook into collection, fits and evaluations only when shown
            loop.progress = progress
            for member in members:
                member.evaluation.progress = progress
        callbacks.append(PhaseProgressBar(loop, progress=progress))
    phases = PhaseClock()  # where the run's time goes (summary.json's phase_times)
    for timed in (loop, *(m.evaluation for m in members)):  # what times its phases
        timed.phase_clock = phases
    trainer = L.Trainer(
        accelerator=accelerator(config.device),
        devices=1,
        max_epochs=-1,
        max_steps=-1,  # the RL clock is the agent's env-step counter, never Lightning's global_step
        logger=loggers,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
    )
    return Run(config, spec, run_dir, agent, loop, members, trainer, phases=phases)


def write_member_configs(run: Run) -> None:
    """A population member's folder gets the config.yaml a single run with its seed would have."""
    if run.population:
        for member in run.members:
            member.run_dir.mkdir(parents=True, exist_ok=True)
            resolved = resolved_values(member.config, run.spec)
            (member.run_dir / CONFIG_FILE).write_text(to_yaml(member.config, resolved))


def prepare_run_dir(run_dir: Path, *, overwrite: bool) -> PreviousContents | None:
    """Refuse a non-empty ``run_dir`` unless ``overwrite`` (never delete anything silently); with ``overwrite``
    set its contents aside (:mod:`prism.run.overwrite`): they go once the new run has saved its first
    checkpoint, and come back if it stops before. The folder itself stays: the caller holds its lock (:mod:`prism.run.lock`)."""
    if not any(run_dir.iterdir()):
        return None
    if not overwrite:
        raise ConfigError(
            f"run_dir: {str(run_dir)!r} is not empty; use --resume {run_dir} to continue it, "
            "--overwrite to replace it, or another run_dir"
        )
    return PreviousContents.set_aside(run_dir)


def make_run_dir(run_dir: Path, created: Path | None = None) -> None:
    """Create ``run_dir`` (and its parents) unless it exists; refuse a path that is not a folder, or one that
    cannot be made (a read-only or missing parent), in one line. ``created``: the topmost folder this call
    makes (:func:`_first_missing`); the ones made before a failure go again."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"run_dir: {str(run_dir)!r} exists and is not a folder")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        _remove_empty(run_dir, created)
        raise ConfigError(
            f"run_dir: cannot create {str(run_dir)!r} ({_reason(err)}); choose a run_dir you can write to"
        ) from None


def _reason(err: OSError) -> str:
    """An OS error in a few words: what failed, on which path (``Permission denied: '/data'``)."""
    where = f": {str(err.filename)!r}" if err.filename is not None else ""
    return f"{err.strerror or type(err).__name__}{where}"


def _write_run_config(run_dir: Path, text: str) -> None:
    """The run's first file; a folder it cannot be written in (read-only) is a one-line error."""
    try:
        (run_dir / CONFIG_FILE).write_text(text)
    except OSError as err:
        raise ConfigError(
            f"run_dir: cannot write in {str(run_dir)!r} ({_reason(err)}); choose a run_dir you can write to"
        ) from None


def _has_checkpoint(run_dir: Path) -> bool:
    """Whether the run saved a checkpoint (``--resume`` would continue from it rather than start over)."""
    folder = run_dir / CHECKPOINT_DIR
    return folder.is_dir() and any(folder.iterdir())


def _discard_failed_start(run_dir: Path, created: Path | None) -> None:
    """Remove what a run that stopped on bad input before its first checkpoint wrote (``run_dir`` was empty
    when it began, so all of it is the run's), and the folders it made. Its config.yaml would make the
    corrected command refuse the folder ("not empty") while ``--resume`` could only repeat the failure."""
    remove_contents(run_dir)
    _remove_empty(run_dir, created)


def _quiet() -> None:
    silence_library_noise()


def fit_run(
    files: list[str],
    overrides: list[str],
    *,
    resume: str | None = None,
    overwrite: bool = False,
    config: RunConfig | None = None,
    resume_checked: ResumeRequest | None = None,
    progress: str = "auto",
) -> Run | None:
    """``prism fit``: load and validate the config (or take ``config``, already loaded from ``files`` and
    ``overrides``), prepare the run folder, train, evaluate. With ``resume``, continue that run instead
    (:func:`resume_run`; ``resume_checked``: its :func:`~prism.run.continuation.resume_request`, if the
    caller already made it).

    ``config.yaml`` gets every key and a ``resolved:`` block (:func:`prism.config.resolved_values`).
    ``None`` when ``resume`` names a finished run (nothing is done). ``progress``: what stderr shows
    (:data:`prism.display.progress_lines.PROGRESS_MODES`; ``auto``: bars in a terminal, plain lines elsewhere).
    A run stopped by bad input (:class:`ConfigError`) before its first checkpoint leaves no trace: what it wrote
    and the folders it made are removed; a folder that was there before stays, empty as it was."""
    _quiet()
    if resume is not None:
        return resume_run(Path(resume), files, overrides, checked=resume_checked, progress=progress)
    config = config if config is not None else load_config(files, overrides)
    run_dir = Path(config.run_dir)
    created = _first_missing(run_dir)
    make_run_dir(run_dir, created)
    try:
        # Locked before anything in it is deleted or written: --overwrite must not empty a live run's folder.
        with run_dir_lock(run_dir, key="run_dir"):
            previous = prepare_run_dir(run_dir, overwrite=overwrite)
            started = previous.drop if previous is not None else None
            try:
                return _train_new(config, run_dir, progress, started)
            except BaseException as err:
                if previous is not None and previous.aside.is_dir():
                    # The run never started (bad input once built, a crash, a Ctrl-C): the folder as it was.
                    previous.restore()
                    if caused_by_interrupt(err):
                        raise RunInterrupted(run_dir, resumable=False, restored=True) from None
                elif isinstance(err, ConfigError) and not _has_checkpoint(run_dir):
                    # Bad input met once the run had begun (a replay buffer the machine cannot hold).
                    _discard_failed_start(run_dir, created)
                raise
    except BaseException as err:
        # A Ctrl-C, or an error raised because of one (during `import mujoco` it becomes "MuJoCo is not
        # installed"): said as an interrupt, the folder left resumable or removed, never an empty one.
        if not caused_by_interrupt(err) or isinstance(err, RunInterrupted):
            raise
        if (run_dir / CONFIG_FILE).is_file():
            raise RunInterrupted(run_dir, resumable=True) from None
        # Stopped before the run wrote its config.yaml: nothing of it is there, and an empty folder would only
        # be refused by --resume ("no config.yaml"). The folders this call made go again; the command reruns.
        raise RunInterrupted(run_dir, resumable=False, removed=_remove_empty(run_dir, created)) from None


def _finish_interrupted_overwrite(run_dir: Path) -> Callable[[], None] | None:
    """What a resume does about contents that an ``--overwrite`` start set aside and, killed before its first
    checkpoint (SIGKILL, a power cut), never dropped nor restored: the resumed run is the new one (its
    config.yaml is the folder's), so it finishes that overwrite, dropping them at its own first checkpoint,
    and says so first, while they can still be moved out. None when nothing was left aside."""
    previous = PreviousContents(run_dir)
    if not previous.aside.is_dir():
        return None
    print(
        f"prism: {previous.aside} holds what {run_dir} held before an --overwrite whose start was stopped; "
        "resuming finishes that overwrite: it is deleted once this run saves its first checkpoint (move it "
        "out now to keep it)",
        file=sys.stderr,
        flush=True,
    )
    return previous.drop


def _first_missing(path: Path) -> Path | None:
    """The topmost folder of ``path`` (``path`` itself included) that does not exist yet, or ``None``."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def _remove_empty(run_dir: Path, created: Path | None) -> bool:
    """Remove ``run_dir`` and its parents up to ``created`` (the topmost folder this run made), each only while
    empty; whether ``run_dir`` is gone. Never anything that existed before the run."""
    if created is None:
        return False
    folder = run_dir
    try:
        while True:
            if folder.exists():  # a failed mkdir may have made only the upper ones
                folder.rmdir()  # only an empty folder: never a file of anyone's
            if folder == created:
                return True
            folder = folder.parent
    except OSError:
        return not run_dir.exists()


def _train_new(
    config: RunConfig, run_dir: Path, progress: str, started: Callable[[], None] | None = None
) -> Run:
    """Write the config, build the run, train (``started`` is called once its first checkpoint is on disk:
    from then on the run can be resumed), evaluate, write the final outputs."""
    spec = resolve_env_spec(config)
    # First thing in the folder: with config.yaml there, `--resume` continues the run whenever it stops.
    _write_run_config(run_dir, to_yaml(config, resolved_values(config, spec)))
    seeds = ", ".join(map(str, member_seeds(config)))
    plural = "s" if config.seeds is not None else ""
    # The backbone is named on every run: a method's name (prism, baseline, …) says nothing about it.
    print(
        f"prism fit: run folder {run_dir} ({run_label(config)} on {spec.id}, backbone {config.agent.name}, "
        f"seed{plural} {seeds})",
        flush=True,
    )
    run = build_run(config, progress_bar=make_progress(progress))
    write_member_configs(run)
    attach_checkpointing(run, on_first_save=started)
    run.clock.start()
    interrupt.fit(run.trainer, run.agent)
    times = run.clock.read()
    write_final_outputs(run, times)
    print(closing_summary(run, times))
    return run


def resume_run(
    run_dir: Path,
    files: list[str],
    overrides: list[str],
    *,
    checked: ResumeRequest | None = None,
    progress: str = "auto",
) -> Run | None:
    """``prism fit --resume RUN_DIR``: continue a run from its last good checkpoint (or from scratch if none).

    The run folder's ``config.yaml`` is used, rows of ``eval.csv`` newer than the checkpoint are dropped (they
    are recomputed identically) and TensorBoard events after the checkpoint are purged. The final-evaluation
    row (``final = 1``) is kept only if the checkpoint was taken after it was recorded: a run killed during
    (or just after) its final evaluation redoes it and writes the row once. A damaged newest checkpoint is
    set aside (:mod:`prism.run.checkpoint_files`). Returns ``None`` (and does nothing) when the run is already
    finished (``summary.json``, or a population's ``summary.csv``, present) and no budget grows.

    ``overrides`` may raise ``loop.cycles``, and nothing else: the run, finished or not, then continues to the
    new budget (:mod:`prism.run.continuation`; a finished run's end-of-run outputs move to
    ``continued/from_<env steps>/``). Any other change is a one-line error before anything is written.
    """
    request = checked if checked is not None else resume_request(run_dir, files, overrides)
    config, cycles, given = request.saved, request.cycles, request.given
    # A population is finished once its summary.csv is written (after every member's summary.json).
    marker = SUMMARY_CSV if config.seeds is not None else SUMMARY_JSON
    finished = (run_dir / marker).is_file()
    if finished and cycles is None:
        # Finished: say so and touch nothing (a resumed finished run would only redo its final outputs).
        print(f"prism: run {run_dir} is finished ({marker} present); nothing to resume{given}")
        return None
    if Path(config.run_dir).resolve() != run_dir.resolve():
        # The folder was moved or renamed: keep writing where the run now lives.
        config.run_dir = str(run_dir)
    try:
        with run_dir_lock(run_dir, key="--resume"):
            return _resume_locked(config, run_dir, cycles, given, finished, progress)
    except KeyboardInterrupt:
        raise RunInterrupted(run_dir, resumable=True) from None


def _resume_locked(
    config: RunConfig, run_dir: Path, cycles: int | None, given: str, finished: bool, progress: str
) -> Run:
    loaded = load_checkpoint(run_dir, key="--resume")
    state = loaded.state if loaded is not None else None
    if loaded is not None:
        # Before anything is saved: the next save would otherwise rotate a damaged last.pt over previous.pt.
        for damaged in loaded.damaged:
            set_aside(damaged)
    if cycles is not None:
        steps = int(state["env_steps"]) if state is not None else 0
        if finished:
            archive_final_outputs(run_dir, member_run_dirs(config), steps)
        if state is not None:
            reopen_state(state, needs_reward_model(config))
        config = with_cycles(config, cycles)
        (run_dir / CONFIG_FILE).write_text(to_yaml(config, resolved_values(config)))
        print(f"prism: continuing {run_dir} at env step {steps} to {cycles} cycles", file=sys.stderr)
    else:
        print(resume_line(run_dir, config.loop, loaded) + given, flush=True)
    for index, member_dir in enumerate(member_run_dirs(config)):
        evaluation = state["evaluations"][index] if state is not None else None
        last_eval = int(evaluation["last_eval_step"]) if evaluation is not None else -1
        final_done = bool(evaluation.get("final_done", False)) if evaluation is not None else False
        truncate_eval_csv(member_dir / "eval.csv", last_eval, keep_final=final_done)
    # A continued run keeps the events of its old last step (its final evaluation): purge only later ones.
    # A resumed one purges from its checkpoint's step and logs again the points the checkpoint had seen at
    # that step (prism.run.tensorboard_resume).
    purge_step = int(state["env_steps"]) + (cycles is not None) if state is not None else 0
    run = build_run(config, progress_bar=make_progress(progress), purge_step=purge_step)
    if state is not None and cycles is None:
        positions = state.get("tensorboard") or [None] * len(run.members)  # absent in older checkpoints
        for member, position in zip(run.members, positions):
            carry_events_at_step(member.logger, position, purge_step)
    if cycles is not None:
        write_member_configs(run)
    attach_checkpointing(
        run,
        resume_state=state,
        resumed_from=loaded.path if loaded is not None else None,
        on_first_save=_finish_interrupted_overwrite(run_dir),
    )
    run.clock.start()
    interrupt.fit(run.trainer, run.agent)
    times = run.clock.read()
    write_final_outputs(run, times)
    print(closing_summary(run, times, resumed=True))
    return run
