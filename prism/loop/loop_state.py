"""Where the PRISM loop is (:class:`LoopState`: the phase machine's state, saved in every checkpoint) and what
it runs by (:class:`LoopSettings`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prism.plugins.registry import DEFAULT_REWARD_MODEL
from prism.reward.config import RewardConfig

PHASES = ("init", "collect_random", "fit", "rl", "collect_expert", "done")


@dataclass
class LoopState:
    """Where the loop is; saved in every checkpoint."""

    cycle: int = 0
    """0-based index of the current RL cycle."""
    phase: str = "init"
    """One of :data:`PHASES`."""
    episodes_collected: list[int] = field(default_factory=list)
    """Episodes added to the segment store by each collection, in order (random first)."""
    fits: int = 0
    """Reward-model fits done so far."""
    history: list[tuple[str, int, int]] = field(default_factory=list)
    """(phase, cycle, env_steps) at the start of every phase: the audit trail tests and reports read."""
    reward_fits: list[list[dict[str, Any]]] = field(default_factory=list)
    """Per member, one record per reward fit (:func:`fit_record`): what each member's ``summary.json`` lists
    under ``reward_fits``. Kept here, in the checkpoint, so a resumed run reports every fit it made."""
    new_episodes: list[dict[str, Any] | None] = field(default_factory=list)
    """Per member, the score of the episodes the last expert collection brought in (by the model that
    shaped the policy collecting them), kept for the record of the fit that follows; None once used."""

    def member_fits(self, member: int) -> list[dict[str, Any]]:
        """Member ``member``'s fit records (the list is created on first use)."""
        while len(self.reward_fits) <= member:
            self.reward_fits.append([])
        return self.reward_fits[member]

    def pending_new_episodes(self, member: int) -> dict[str, Any] | None:
        """Take member ``member``'s kept collection score (None when there is none: the first fit)."""
        if member >= len(self.new_episodes):
            return None
        score, self.new_episodes[member] = self.new_episodes[member], None
        return score

    def keep_new_episodes(self, member: int, score: dict[str, Any]) -> None:
        """Keep member ``member``'s collection score for its next fit's record."""
        while len(self.new_episodes) <= member:
            self.new_episodes.append(None)
        self.new_episodes[member] = score

    def to_dict(self) -> dict[str, Any]:
        return {
            "cycle": self.cycle,
            "phase": self.phase,
            "episodes_collected": list(self.episodes_collected),
            "fits": self.fits,
            "history": [list(h) for h in self.history],
            "reward_fits": copy.deepcopy(self.reward_fits),
            "new_episodes": copy.deepcopy(self.new_episodes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopState:
        reward_fits = copy.deepcopy(data.get("reward_fits", []))
        new_episodes = copy.deepcopy(data.get("new_episodes", []))
        if "new_episodes" not in data:
            # A checkpoint from before the records were built whole: a collection started its fit's record
            # ({cycle, new_episodes}, no validation yet); that score now waits for the fit instead.
            new_episodes = [None] * len(reward_fits)
            for m, records in enumerate(reward_fits):
                if records and "validation" not in records[-1]:
                    new_episodes[m] = records.pop()["new_episodes"]
        return cls(
            cycle=int(data["cycle"]),
            phase=str(data["phase"]),
            episodes_collected=[int(e) for e in data["episodes_collected"]],
            fits=int(data["fits"]),
            history=[(str(p), int(c), int(s)) for p, c, s in data["history"]],
            # checkpoints from before the fit records have none (their fits were not recorded)
            reward_fits=reward_fits,
            new_episodes=new_episodes,
        )


@dataclass
class LoopSettings:
    """What the loop needs from the run config (kept small so tests can build one by hand)."""

    cycles: int
    steps_per_cycle: int
    initial_episodes: int
    expert_episodes: int
    sparse_channel: int | None
    p_rel: float
    reward: RewardConfig
    needs_model: bool
    seed: int
    reward_model: str | None = DEFAULT_REWARD_MODEL
    """The :data:`prism.plugins.registry.REWARD_MODELS` entry fitted (when ``needs_model``) and loaded on resume."""
    run_dir: Path | None = None
    figures: bool = True
    """Draw the shaped-vs-true TensorBoard figure after each fit (its episode has its own seed stream, so
    drawing it or not never changes training)."""
    seeds: tuple[int, ...] | None = None
    """The population's member seeds (default ``(seed,)``: a single run)."""
    run_dirs: tuple[Path, ...] | None = None
    """Each member's output folder (default ``(run_dir,)``)."""
    fit_checkpoint_every_s: float | None = None
    """Seconds between checkpoints during a reward fit (``loop.fit_checkpoint_every_s``; None: none)."""

    @property
    def member_seeds(self) -> tuple[int, ...]:
        return tuple(self.seeds) if self.seeds is not None else (self.seed,)

    def member_dir(self, member: int) -> Path | None:
        return self.run_dirs[member] if self.run_dirs is not None else self.run_dir

    def member_tag(self, member: int) -> str:
        """`` (seed N)`` in a population's progress lines, nothing for a single run."""
        seeds = self.member_seeds
        return f" (seed {seeds[member]})" if len(seeds) > 1 else ""
