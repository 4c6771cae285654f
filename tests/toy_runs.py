"""Tiny ``prism fit`` runs on the toy env (seconds on one core), shared by the end-to-end tests.

``toy_run(changes)`` returns ``key=value`` overrides for ``conf/quickstart.yaml``: :data:`TOY_RUN` with
``changes`` applied (a value of ``None`` drops the key, so the config's default applies)."""

from __future__ import annotations

from typing import Any

TOY_RUN: dict[str, Any] = {
    "env.id": "prism/Toy-v0",
    "loop.initial_episodes": 5,
    "loop.expert_episodes": 3,
    "loop.cycles": 2,
    "loop.steps_per_cycle": 200,
    "loop.checkpoint_every": 200,
    "reward.hidden": 32,
    "reward.max_epochs": 3,
    "agent.learning_starts": 100,
    "agent.batch_size": 32,
    "agent.buffer_size": 5000,
    "agent.actor_hidden": "[32,32]",
    "agent.critic_hidden": "[32,32]",
    "agent.log_every": 100,
    "eval.every": 200,
    "eval.num_weights": 3,
    "eval.episodes": 1,
    "eval.final.num_weights": 3,
    "eval.final.episodes": 1,
}

KILLABLE: dict[str, Any] = {
    "loop.initial_episodes": 6,
    "loop.expert_episodes": 4,
    "loop.cycles": 3,
    "loop.steps_per_cycle": 400,
    "loop.checkpoint_every": 150,
    "reward.max_epochs": 40,
    "reward.patience": 40,
}
"""Changes for the kill-and-resume tests: three cycles, checkpoints mid-cycle, reward fits long enough to be
killed during."""


RESYMNET_ONLY = ("reward.hidden",)
"""Keys of :data:`TOY_RUN` that only ReSymNet's config has: another ``reward.name`` refuses them."""


def toy_run(changes: dict[str, Any] | None = None, *, resymnet: bool | None = None) -> list[str]:
    """The toy run's overrides with ``changes`` (new keys appended, ``None`` removes a key). ReSymNet's own keys
    (:data:`RESYMNET_ONLY`) are left out when ``changes`` names another ``reward.name``, or ``resymnet=False``
    (a method overlay file sets it)."""
    settings = {**TOY_RUN, **(changes or {})}
    if resymnet is None:
        resymnet = settings.get("reward.name", "resymnet") == "resymnet"
    if not resymnet:
        for key in RESYMNET_ONLY:
            if key not in (changes or {}):
                settings.pop(key, None)
    return [f"{key}={value}" for key, value in settings.items() if value is not None]
