"""Plug-in registries: pluggable parts are chosen in the config by registry name or by class path.

A class path is ``package.module:Name`` (or ``package.module.Name``); it lets a user swap in their own
reward shaper or agent without touching prism.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


class Registry:
    """Names → factories, with class-path fallback and one-line errors naming the config key."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Callable[..., Any] | str] = {}

    def register(self, name: str, factory: Callable[..., Any] | str | None = None):
        """Register ``factory`` (or its class path) under ``name`` (usable as a decorator)."""

        def add(obj):
            self._entries[name] = obj
            return obj

        return add(factory) if factory is not None else add

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, key: str, name: str) -> Callable[..., Any]:
        """The factory for ``name``; ``key`` is the config key used in error messages."""
        if name in self._entries:
            entry = self._entries[name]
            # Built-ins are registered by class path so importing the config does not import torch models.
            return self._import(key, entry) if isinstance(entry, str) else entry
        if "." in name or ":" in name:
            return self._import(key, name)
        from prism.config import ConfigError

        raise ConfigError(f"{key}: unknown {self.kind} {name!r} (known: {', '.join(self.names())})")

    def _import(self, key: str, name: str) -> Callable[..., Any]:
        module_name, _, attr = name.replace(":", ".").rpartition(".")
        try:
            return getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError) as err:
            from prism.config import ConfigError

            raise ConfigError(f"{key}: cannot import {self.kind} class path {name!r} ({err})") from None

    def check(self, key: str, name: str) -> None:
        """Raise if ``name`` cannot be resolved (registered names are not imported, class paths are)."""
        if name not in self._entries:
            self.get(key, name)


REWARDS = Registry("reward redistribution")
AGENTS = Registry("agent")
AGENTS.register("capql", "prism.agents.capql:CAPQLModule")
