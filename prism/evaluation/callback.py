"""The Lightning callback that evaluates the agent during training and once more at the end of fit.

Thin: it schedules evaluations on the agent's env-step clock, runs the rollout
(:func:`~prism.evaluation.rollout.evaluate_agent`), appends the ``eval.csv`` row
(:mod:`prism.evaluation.records`) and logs the metrics and the front figure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from lightning.pytorch import Callback, Trainer

from prism.agents.contract import PopulationAgent
from prism.core._text import counted
from prism.core.phase_clock import PhaseClock
from prism.core.tb_writer import tensorboard_writer
from prism.envs.spec import EnvSpec
from prism.evaluation.config import EvalConfig
from prism.evaluation.figure import front_figure
from prism.evaluation.pool import EvalEnvPool
from prism.evaluation.records import append_csv, eval_row
from prism.evaluation.result import EvalResult
from prism.evaluation.rollout import evaluate_agent
from prism.metrics.classes import evaluation_metrics

__all__ = ["EvaluationCallback"]


class EvaluationCallback(Callback):
    """Evaluate the agent every ``config.every`` env steps and once more, with the final protocol, at the end
    of fit (docs/method.md §9).

    Reads the agent's env-step clock ``env_step_count`` (the agent contract) after each training batch and
    evaluates member ``member`` with :func:`~prism.evaluation.rollout.evaluate_agent` (the deterministic
    policy, and its pre-tanh mean for the equivariance error). Each evaluation appends a row to
    ``<run_dir>/eval.csv`` (``run_dir`` defaults to the trainer's log dir) and logs its metrics to every
    logger against env steps: periodic ones as ``eval/hv``, ``eval/eum``, ``eval/vo``, ``eval/cardinality``,
    ``eval/equivariance_error``, per objective ``eval/return_<name>`` and ``eval/undiscounted_return_<name>``
    (``eval.csv``'s columns of those names) and ``time/eval_s``, the final one as ``eval_final/…`` and
    ``time/eval_final_s``. With ``figures`` a Pareto-front figure (``eval/front``, ``eval_final/front``) goes
    to loggers that take figures (TensorBoard).

    The final evaluation (``config.final``: ``num_weights × episodes``) always runs at the end of fit and its
    row has ``final = 1``, even when a periodic evaluation ran at the same env step; when the two protocols
    are equal that periodic result is reused instead of rolled out again (the rollout is deterministic, so
    both give the same numbers). ``last_result`` holds the latest :class:`EvalResult`, ``final_result`` the
    final one, ``history`` every CSV row.

    HV, EUM and VO are ``torchmetrics`` metrics (``metrics``, a ``MetricCollection`` of
    :mod:`prism.metrics.classes`): each evaluation's per-episode returns are accumulated in them and the
    values they compute are the ones recorded and logged (equal to the functional ones; in a multi-process
    evaluation they would gather every process's returns first).

    With ``config.final.each_cycle`` and ``cycle_steps`` (the loop's M) the final protocol also runs at the end
    of every cycle but the last (env steps M, 2M, …, (cycles − 1)·M), after any periodic evaluation of that
    step and before the loop moves on; its row has ``cycle_end = 1`` and its metrics go to ``eval_cycle_end/…``.

    ``run_seed`` resolves ``config.seed = None`` (see :meth:`EvalConfig.reset_seed`). The env copies are built
    at the first evaluation and kept until fit ends.

    Populations: one callback per member (``member``), each with the member's seed as ``run_seed``, its own
    ``run_dir`` and ``logger`` (None: every trainer logger), sharing one env ``pool`` (closed by whoever
    created it). The callback asks the agent to end a batch exactly at each due step (``pause_at``).
    """

    def __init__(
        self,
        spec: EnvSpec,
        config: EvalConfig | None = None,
        run_dir: str | Path | None = None,
        env_fn: Callable[[], gym.Env] | None = None,
        *,
        run_seed: int = 0,
        figures: bool = True,
        member: int = 0,
        logger: Any | None = None,
        pool: EvalEnvPool | None = None,
        cycle_steps: int | None = None,
        cycles: int = 1,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.member = member
        self.run_seed = run_seed
        self.logger = logger
        self.config = (config or EvalConfig()).resolved(run_seed)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.env_fn = env_fn
        self.figures = figures
        self.last_result: EvalResult | None = None
        self.final_result: EvalResult | None = None
        self.history: list[dict[str, Any]] = []
        self._next_eval = self.config.every
        self._last_eval_step = -1
        self._final_done = False
        # The cycle ends that get a final-protocol evaluation (empty unless eval.final.each_cycle is on).
        self._cycle_ends = (
            tuple(k * cycle_steps for k in range(1, cycles))
            if self.config.final.each_cycle and cycle_steps is not None
            else ()
        )
        self._cycle_ends_done = 0
        self._pool: EvalEnvPool | None = pool
        self._owns_pool = pool is None
        cfg = self.config
        self.metrics = evaluation_metrics(
            spec.ref_point, spec.n_objectives, cfg.eum_weights, cfg.vo_preferences, cfg.preference_seed
        )
        self.phase_clock = PhaseClock()
        """Times the evaluations (the run shares its own, :mod:`prism.core.phase_clock`)."""
        self.progress: Any | None = None
        """The run's terminal display (``prism.display.progress.Progress``): a bar over each evaluation's
        episodes; None shows nothing."""

    @property
    def state_key(self) -> str:
        # one callback per population member: Lightning needs each stateful callback's key to be unique
        return self._generate_state_key(member=self.member)

    # -- state (so a resumed run neither repeats nor skips an evaluation) --
    def state_dict(self) -> dict[str, Any]:
        state = {
            "next_eval": self._next_eval,
            "last_eval_step": self._last_eval_step,
            "final_done": self._final_done,
        }
        if self._cycle_ends:
            state["cycle_ends_done"] = self._cycle_ends_done
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._next_eval = int(state_dict["next_eval"])
        self._last_eval_step = int(state_dict["last_eval_step"])
        self._final_done = bool(state_dict.get("final_done", False))
        self._cycle_ends_done = int(state_dict.get("cycle_ends_done", 0))

    @property
    def csv_path(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / "eval.csv"

    def on_fit_start(self, trainer: Trainer, pl_module: PopulationAgent) -> None:
        if self.run_dir is None:
            self.run_dir = Path(trainer.log_dir or trainer.default_root_dir)

    def on_train_start(self, trainer: Trainer, pl_module: PopulationAgent) -> None:
        # After every on_fit_start (a resume restores _next_eval there): the agent ends a batch at that step.
        self._schedule(pl_module)

    def _schedule(self, agent: PopulationAgent) -> None:
        agent.pause_at(self._next_eval)
        if self._cycle_ends_done < len(self._cycle_ends):
            agent.pause_at(self._cycle_ends[self._cycle_ends_done])

    def on_train_batch_end(self, trainer: Trainer, pl_module: PopulationAgent, *args: Any) -> None:
        steps = pl_module.env_step_count
        due_periodic = steps >= self._next_eval
        due_cycle_end = (
            self._cycle_ends_done < len(self._cycle_ends) and steps >= self._cycle_ends[self._cycle_ends_done]
        )
        if due_periodic:
            self.evaluate(trainer, pl_module)
        # In the same hook as the periodic evaluation of that step: a checkpoint (saved after this callback)
        # then holds both rows or neither, so a resumed run neither repeats nor skips the cycle-end row.
        if due_cycle_end:
            self.evaluate_cycle_end(trainer, pl_module)
        if due_periodic or due_cycle_end:
            self._schedule(pl_module)

    def on_train_end(self, trainer: Trainer, pl_module: PopulationAgent) -> None:
        self.evaluate_final(trainer, pl_module)

    def teardown(self, trainer: Trainer, pl_module: PopulationAgent, stage: str) -> None:
        if self._pool is not None:
            self._pool.close()  # idempotent: a shared pool is closed by every member's callback alike
            if self._owns_pool:
                self._pool = None

    def _rollout(self, pl_module: PopulationAgent, cfg: EvalConfig, kind: str = "eval") -> EvalResult:
        if self._pool is None:
            self._pool = EvalEnvPool(self.spec, env_fn=self.env_fn, num_workers=cfg.num_workers)
        bar = None
        if self.progress is not None:
            before = self.progress.phase
            steps = pl_module.env_step_count
            self.progress.set_phase(kind, self.progress.cycle, self.progress.cycles, steps=steps)
            who = f" (seed {self.run_seed})" if self.logger is not None else ""  # as the loop's phase bars
            desc = f"{'final evaluation' if kind == 'final_eval' else 'evaluation'}{who}"
            bar = self.progress.bar(desc, total=cfg.num_weights * cfg.episodes, unit="ep")
        extra = {"on_episodes": bar.update} if bar is not None else {}
        result = self._measure(
            evaluate_agent(pl_module, self.spec, cfg, pool=self._pool, member=self.member, **extra)
        )
        if bar is not None:
            protocol = f"{counted(cfg.num_weights, 'weight')} x {counted(cfg.episodes, 'episode')}"
            # The RL bar gets its phase back first: the summary line below redraws it, and it would say
            # phase=eval until the next refresh.
            self.progress.set_phase(before, self.progress.cycle, self.progress.cycles, steps=steps)
            self.progress.close(
                bar,
                f"{desc} at {steps} env steps ({protocol}): HV {result.hv:.6g}  EUM {result.eum:.6g}  "
                f"VO {result.vo:.6g}  {result.wall_time:.1f}s",
            )
        return result

    def _measure(self, result: EvalResult) -> EvalResult:
        """The result with HV, EUM and VO computed by :attr:`metrics` from its returns."""
        self.metrics.reset()
        self.metrics.update(torch.from_numpy(result.returns))
        values = {name: float(value) for name, value in self.metrics.compute().items()}
        return dataclasses.replace(result, **values)

    def evaluate(self, trainer: Trainer, pl_module: PopulationAgent) -> EvalResult:
        """Run one periodic evaluation now, record it and return it."""
        cfg = self.config
        env_steps = pl_module.env_step_count
        with self.phase_clock.measure("eval_periodic"):
            result = self._rollout(pl_module, cfg)
        self.last_result = result
        self._last_eval_step = env_steps
        self._next_eval = (env_steps // cfg.every + 1) * cfg.every
        self._record(trainer, result, env_steps, final=False)
        return result

    def evaluate_cycle_end(self, trainer: Trainer, pl_module: PopulationAgent) -> EvalResult:
        """The final protocol at the end of a cycle but the last (``eval.final.each_cycle``), recorded as a
        ``cycle_end`` row. Its time counts towards the ``eval_final`` phase (it is that protocol)."""
        cfg = self.config
        env_steps = pl_module.env_step_count
        with self.phase_clock.measure("eval_final"):
            result = self._rollout(pl_module, cfg.final_protocol(), "final_eval")
        self._cycle_ends_done += 1
        self._last_eval_step = env_steps
        self._record(trainer, result, env_steps, final=False, cycle_end=True)
        return result

    def evaluate_final(self, trainer: Trainer, pl_module: PopulationAgent) -> EvalResult:
        """The end-of-run evaluation with ``config.final``; recorded once per run (a resumed run whose final
        row is already written recomputes the result, for ``front.csv``, without recording it again)."""
        cfg = self.config
        env_steps = pl_module.env_step_count
        reusable = (
            cfg.final_equals_periodic() and self.last_result is not None and self._last_eval_step == env_steps
        )
        with self.phase_clock.measure("eval_final"):
            result = (
                self.last_result if reusable else self._rollout(pl_module, cfg.final_protocol(), "final_eval")
            )
        assert result is not None
        if reusable and self.progress is not None:
            self.progress.note(
                f"final evaluation at {env_steps} env steps: the periodic evaluation of this step "
                "(same protocol, same episodes)"
            )
        self.final_result = self.last_result = result
        if not self._final_done:
            self._last_eval_step = env_steps
            self._final_done = True
            self._record(trainer, result, env_steps, final=True)
        return result

    def _record(
        self, trainer: Trainer, result: EvalResult, env_steps: int, *, final: bool, cycle_end: bool = False
    ) -> None:
        # The cycle_end column exists only in runs that make such rows, so other runs' files stay as they were.
        flag = cycle_end if self._cycle_ends else None
        record = eval_row(result, self.spec.objective_names, env_steps, final=final, cycle_end=flag)
        self.history.append(record)
        if trainer.is_global_zero:
            if self.csv_path is not None:
                append_csv(self.csv_path, record)
            prefix = "eval_final" if final else "eval_cycle_end" if cycle_end else "eval"
            self._log(trainer, result, record, env_steps, prefix=prefix)

    def _log(
        self,
        trainer: Trainer,
        result: EvalResult,
        record: dict[str, Any],
        env_steps: int,
        prefix: str = "eval",
    ) -> None:
        metrics = {
            f"{prefix}/hv": result.hv,
            f"{prefix}/eum": result.eum,
            f"{prefix}/vo": result.vo,
            f"{prefix}/cardinality": float(result.cardinality),
            "time/eval_s" if prefix == "eval" else f"time/{prefix}_s": result.wall_time,
        }
        if result.equivariance_error is not None:
            metrics[f"{prefix}/equivariance_error"] = result.equivariance_error
        # eval.csv's per-objective columns: each objective's mean return over the evaluated policies
        for key, value in record.items():
            if key.startswith(("return_", "undiscounted_return_")):
                metrics[f"{prefix}/{key}"] = float(value)
        metrics = {k: v for k, v in metrics.items() if not math.isnan(v)}
        for logger in [self.logger] if self.logger is not None else trainer.loggers:
            logger.log_metrics(metrics, step=env_steps)
            experiment = tensorboard_writer(logger)
            if self.figures and experiment is not None:
                fig = front_figure(result, self.spec.objective_names, title=f"{env_steps} env steps")
                experiment.add_figure(f"{prefix}/front", fig, global_step=env_steps, close=True)
