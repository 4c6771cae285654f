"""The PRISM loop (paper Algorithm 1, docs/method.md §5) as a callback on the agent's Trainer.

The agent module only knows how to step its env, shape rewards through its ``shaper`` and update; it
trains until ``env_steps`` reaches ``target_env_steps``. This callback owns the phase machine:

    collect N random episodes → fit → RL for M steps → collect E expert episodes → refit → RL for M … (IR cycles)

and moves the agent's target on by M at each refit. There is no collection after the last cycle (the
reference code collects and never uses it). Methods without a learned reward model (oracle, baseline,
uniform, random) have no collection or fit phase: they train for the same IR·M env steps in one go.

Populations: every member (seed) has its own segment store, collections (from its own seed streams), reward
model and TensorBoard logger; the phases run in lock-step for all members. Member m's fit uses exactly the data
and seed of the solo run with that seed, so a population's reward models equal the solo runs' models.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from prism.agents.contract import PopulationAgent
from prism.core._text import counted
from prism.core.memory import release_freed_memory
from prism.core.phase_clock import PhaseClock
from prism.core.seeding import derive_seed
from prism.core.tb_writer import tensorboard_writer
from prism.data.collect import collect_episodes, uniform_random_policy
from prism.data.segments import SegmentStore
from prism.display.progress import Progress
from prism.envs import EnvSpec, make_env
from prism.loop.diagnostics import shaped_vs_true_figure
from prism.loop.fit_phase import FitProgress, MemberFitProgress, fit_members, score_new_episodes
from prism.loop.loop_state import PHASES, LoopSettings, LoopState
from prism.plugins.registry import REWARD_MODELS
from prism.reward.fitting.fitter import RewardModel


class PrismLoopCallback(Callback):
    """Drives the phases of the PRISM loop around the agent's RL training (see the module docstring).

    ``on_phase`` (optional) is called as ``on_phase(state)`` at every phase change, after the state is
    updated — the run uses it to checkpoint at phase ends.
    """

    def __init__(
        self,
        spec: EnvSpec,
        settings: LoopSettings,
        on_phase: Callable[[LoopState], None] | None = None,
    ):
        self.spec = spec
        self.settings = settings
        self.state = LoopState()
        members = len(settings.member_seeds)
        self.stores: list[SegmentStore | None] = [None] * members
        self.models: list[RewardModel | None] = [None] * members
        self.member_loggers: list[Any] | None = None
        """Per member, the logger its ``reward/``, ``loop/`` and ``time/`` scalars go to (None: the trainer's
        logger, for a single run)."""
        self.on_phase = on_phase
        self.on_fit_progress: Callable[[], None] | None = None
        """Called when a reward fit has new progress to keep (the run saves its checkpoint)."""
        self.fit_progress: FitProgress = [None] * members
        """Per member, the fit phase so far (cleared at its end; a run resumed inside it goes on from here): see
        :mod:`prism.loop.fit_phase`."""
        self.progress: Progress | None = None
        """The run's terminal display (:mod:`prism.display.progress`), None: nothing shown."""
        self.phase_clock = PhaseClock()
        """Times the collections and fits (the run shares its own, :mod:`prism.core.phase_clock`)."""

    @property
    def store(self) -> SegmentStore | None:
        """The segment store of a single run (member 0)."""
        return self.stores[0]

    @property
    def model(self) -> RewardModel | None:
        """The reward model of a single run (member 0)."""
        return self.models[0]

    def _loggers(self, trainer: L.Trainer | None) -> list[Any]:
        if self.member_loggers is not None:
            return list(self.member_loggers)
        logger = trainer.logger if trainer is not None else None
        return [logger] * len(self.stores)

    # ---- helpers ------------------------------------------------------------------------------------
    @property
    def total_env_steps(self) -> int:
        return self.settings.cycles * self.settings.steps_per_cycle

    def _set_phase(self, phase: str, agent: PopulationAgent, trainer: L.Trainer | None) -> None:
        self.state.phase = phase
        steps = agent.env_step_count
        self.state.history.append((phase, self.state.cycle, steps))
        for logger in self._loggers(trainer):
            if logger is not None:
                logger.log_metrics(
                    {"loop/phase": float(PHASES.index(phase)), "loop/cycle": float(self.state.cycle + 1)},
                    step=steps,
                )
        if self.progress is not None:
            self.progress.set_phase(phase, self.state.cycle, self.settings.cycles, steps=steps)
        if self.on_phase is not None:
            self.on_phase(self.state)

    def _new_store(self) -> SegmentStore:
        s = self.settings
        n_dense = self.spec.n_objectives - 1 if s.reward.stores_dense_features else 0
        # A model that reads s_{t+1} (RRD) needs each step's next observation kept; the others' stores (and
        # so their checkpoints) stay as they were.
        next_obs = s.reward_model is not None and REWARD_MODELS.entry("reward.name", s.reward_model).next_obs
        return SegmentStore(self.spec.obs_dim, self.spec.act_dim, n_dense, next_obs=next_obs)

    def _env(self, member_seed: int, index: int):
        # A fresh env per collection, its release draws seeded from the member's seed and the collection
        # index: collecting never perturbs the training env, and a resumed run collects the same episodes.
        return make_env(
            self.spec,
            sparse_channel=self.settings.sparse_channel,
            p_rel=self.settings.p_rel,
            seed=derive_seed(member_seed, "collect/release", index),
        )

    def _collect(self, agent: PopulationAgent, trainer, random_policy: bool) -> None:
        s = self.settings
        n = s.initial_episodes if random_policy else s.expert_episodes
        index = len(self.state.episodes_collected)
        episodes = 0
        for m, (seed, logger) in enumerate(zip(s.member_seeds, self._loggers(trainer))):
            env = self._env(seed, index)
            # Every random draw of a collection comes from streams of its own (never the agent's training
            # generators): the RL trajectory does not depend on how many episodes are collected.
            if random_policy:
                policy = uniform_random_policy(
                    env.action_space, seed=derive_seed(seed, "collect/actions", index)
                )
            else:
                policy = agent.expert_policy(seed=derive_seed(seed, "collect/preferences", index), member=m)
            if self.stores[m] is None:
                self.stores[m] = self._new_store()
            store = self.stores[m]
            first_new_segment = store.num_segments
            store.begin_collection()
            start = time.perf_counter()
            kind = "random" if random_policy else "expert"
            desc = f"collect {kind} episodes{s.member_tag(m)} (cycle {self.state.cycle + 1}/{s.cycles})"
            bar = self.progress.bar(desc, total=n, unit="ep") if self.progress is not None else None
            stats = collect_episodes(
                env,
                policy,
                n,
                self.stores[m],
                s.sparse_channel,
                use_dense_features=s.reward.stores_dense_features,
                seed=derive_seed(seed, "collect/reset", index),
                on_episode=bar.update if bar is not None else None,
            )
            if bar is not None:
                took = time.perf_counter() - start
                summary = f"{desc}: {counted(stats.episodes, 'episode')}, mean length {stats.mean_episode_length:.1f}"
                self.progress.close(bar, f"{summary}  {took:.1f}s")
            episodes = stats.episodes
            if logger is not None:
                metrics = {
                    "reward/collect_episodes": float(stats.episodes),
                    "reward/collect_mean_length": float(stats.mean_episode_length),
                    "reward/segments_total": float(self.stores[m].num_segments),
                    "time/collect_s": time.perf_counter() - start,
                }
                for i, name in enumerate(self.spec.objective_names):
                    metrics[f"reward/collect_return_{name}"] = float(stats.mean_true_return[i])
                logger.log_metrics(metrics, step=agent.env_step_count)
            if not random_policy and self.models[m] is not None:
                # The episodes just collected, scored by the model that shaped the RL phase which produced
                # them, before the refit sees them: how well that model priced its own policy's behaviour.
                new = torch.arange(first_new_segment, store.num_segments)
                score = score_new_episodes(self.models[m], store, new, logger, agent.env_step_count)
                self.state.keep_new_episodes(m, score)  # for the record of the fit that follows
        self.state.episodes_collected.append(episodes)

    def _fit(self, agent: PopulationAgent, trainer) -> None:
        # (prism.loop.fit_phase: every member's fit, resumable from a snapshot inside it)
        models = fit_members(
            self.settings, self.state, self.stores, self.fit_progress, agent=agent,
            loggers=self._loggers(trainer), fit_curves=trainer is not None, progress=self.progress,
            on_fit_progress=self.on_fit_progress, previous=self.models,
        )  # fmt: skip
        self.fit_progress = [None] * len(self.settings.member_seeds)
        # The fit ran Lightning Trainers on the device, which free cuBLAS's workspaces and the allocator's
        # cache: an update graph the agent captured before may replay into freed memory (it crashed on an
        # H200; the cause is inferred). Drop it; the next update captures again.
        agent.drop_captured_graphs()
        self.state.fits += 1
        self.set_model(agent, models)
        release_freed_memory()  # the fit's tensors are gone: give their pages back for the RL phase
        if self.settings.figures and trainer is not None:
            for m, logger in enumerate(self._loggers(trainer)):
                self._log_shaped_vs_true(agent, logger, m)

    def set_model(self, agent: PopulationAgent, models: Sequence[RewardModel | None] | RewardModel) -> None:
        """Install (re)fitted reward models, one per member, in the agent's shapers (and relabel hook)."""
        self.models = list(models) if isinstance(models, (list, tuple)) else [models]
        for shaper, model in zip(agent.shapers, self.models):
            shaper.model = model
        if self.settings.reward.relabel:
            # Resampled batches get the sparse channel re-predicted by the newest models (reward.relabel).
            from prism.reward.shapers import make_relabel_fn

            agent.relabel_fn = make_relabel_fn(self.models, self.settings.sparse_channel)

    def _log_shaped_vs_true(self, agent: PopulationAgent, logger, member: int) -> None:
        """The paper's Figure 5: shaped vs true per-step sparse reward over one episode of the current policy
        (uniform random actions before any RL), titled with the fit, the cycle it shapes and the policy.

        The episode is one of the figure's own, not one of a collection: its env, actions and preferences come
        from the ``diagnostics`` seed streams, so drawing the figure (or not, ``figures: false``) leaves every
        training RNG untouched.
        """
        experiment = tensorboard_writer(logger)
        if experiment is None:
            return
        seed, index = self.settings.member_seeds[member], self.state.fits
        untrained = self.state.cycle == 0 and agent.env_step_count == 0
        policy = (
            None
            if untrained
            else agent.expert_policy(seed=derive_seed(seed, "diagnostics/preferences", index), member=member)
        )
        steps = agent.env_step_count
        who = f"seed {seed}, " if len(self.settings.member_seeds) > 1 else ""
        caption = (
            f"{who}reward model of fit {index} (shapes cycle {self.state.cycle + 1}/{self.settings.cycles}); "
            + (
                "policy: uniform random actions (no RL yet)"
                if policy is None
                else f"policy: the agent at {steps} env steps, deterministic, a random preference per step"
            )
        )
        figure = shaped_vs_true_figure(
            self.models[member],
            self.spec,
            self.settings.sparse_channel,
            policy=policy,
            seed=derive_seed(seed, "diagnostics/episode", index),
            caption=caption,
        )
        experiment.add_figure("reward/shaped_vs_true", figure, global_step=steps)

    # ---- the loop's state, for the run's checkpoint (Lightning's Callback.state_dict / load_state_dict) ----
    def state_dict(self) -> dict[str, Any]:
        """Where the loop is, its segment stores, its reward models (``to_dict``) and the fit phase's progress,
        as tensors and plain containers (a snapshot's bytes as a uint8 tensor: what the checkpoint loader's
        safe unpickler reads)."""
        return {
            "state": self.state.to_dict(),
            "stores": [store.state_dict() if store is not None else None for store in self.stores],
            "models": [model.to_dict() if model is not None else None for model in self.models],
            # A reward fit stopped at an epoch's end (loop.fit_checkpoint_every_s): a resumed run goes on from it.
            "fit_progress": [p.to_state() if p is not None else None for p in self.fit_progress],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the reward models are rebuilt by the run's registered ``load`` and
        installed in the agent by :meth:`install_models`."""
        self.state = LoopState.from_dict(state_dict["state"])
        self.stores = [
            SegmentStore.from_state_dict(store) if store is not None else None
            for store in state_dict["stores"]
        ]
        saved_progress = state_dict.get("fit_progress")  # absent in checkpoints from before fit snapshots
        if saved_progress is not None:
            self.fit_progress = [MemberFitProgress.from_state(p) for p in saved_progress]
        self.models = [None] * len(self.stores)
        if any(model is not None for model in state_dict["models"]):
            # The run's reward model (from its config) rebuilds itself from its to_dict().
            load = REWARD_MODELS.entry("reward.name", self.settings.reward_model).load_fn()
            self.models = [load(model) for model in state_dict["models"]]

    def install_models(self, agent: PopulationAgent) -> None:
        """Put the loop's reward models (restored by :meth:`load_state_dict`) back into the agent's shapers."""
        if any(model is not None for model in self.models):
            self.set_model(agent, self.models)

    # ---- the phase machine --------------------------------------------------------------------------
    def _advance(self, agent: PopulationAgent, trainer) -> None:
        """Run the non-RL phases from the current one until RL (or the end) is reached.

        Written as a resumable state machine: a run resumed from a checkpoint taken at the start of a
        phase re-enters that phase here and redoes exactly its work (the checkpoint holds the state from
        before it began).
        """
        s = self.settings
        while True:
            phase = self.state.phase
            if phase == "init":
                self._set_phase("collect_random" if s.needs_model else "rl", agent, trainer)
            elif phase == "collect_random":
                with self.phase_clock.measure("collect_random"):
                    self._collect(agent, trainer, random_policy=True)
                self._set_phase("fit", agent, trainer)
            elif phase == "collect_expert":
                with self.phase_clock.measure("collect_expert"):
                    self._collect(agent, trainer, random_policy=False)
                self.state.cycle += 1
                self._set_phase("fit", agent, trainer)
            elif phase == "fit":
                with self.phase_clock.measure("fit"):
                    self._fit(agent, trainer)
                self._set_phase("rl", agent, trainer)
            else:  # rl or done
                break
        # Without a reward model there is nothing to do between cycles: run all IR·M steps in one go.
        cycles_done = self.state.cycle + 1 if s.needs_model else s.cycles
        agent.target_env_steps = cycles_done * s.steps_per_cycle
        # Cycle markers land on exact steps however many env steps a batch runs.
        for cycle in range(1, s.cycles + 1):
            agent.pause_at(cycle * s.steps_per_cycle)

    # ---- Lightning hooks ----------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: PopulationAgent) -> None:
        self._advance(pl_module, trainer)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: PopulationAgent, outputs, batch, batch_idx
    ) -> None:
        s = self.settings
        steps = pl_module.env_step_count
        if not s.needs_model:
            # Cycle markers only (no phases): keeps TensorBoard comparable across methods.
            cycle = min(steps // s.steps_per_cycle, s.cycles - 1)
            if cycle != self.state.cycle:
                self.state.cycle = cycle
                self._set_phase("rl", pl_module, trainer)
            if steps >= self.total_env_steps and self.state.phase != "done":
                self._set_phase("done", pl_module, trainer)
            return
        if steps < (self.state.cycle + 1) * s.steps_per_cycle:
            return
        if self.state.cycle + 1 >= s.cycles:
            if self.state.phase != "done":
                self._set_phase("done", pl_module, trainer)
            return
        # Cycle boundary: refine the reward model with the current policy's data, then continue RL.
        self._set_phase("collect_expert", pl_module, trainer)
        self._advance(pl_module, trainer)
        # The agent asked to stop when it reached the old target in this very batch; the new cycle's target
        # lies ahead, so training goes on.
        trainer.should_stop = False
