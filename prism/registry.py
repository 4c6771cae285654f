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
        self._entries: dict[str, Callable[..., Any]] = {}

    def register(self, name: str, factory: Callable[..., Any] | None = None):
        """Register ``factory`` under ``name`` (usable as a decorator)."""

        def add(obj: Callable[..., Any]) -> Callable[..., Any]:
            self._entries[name] = obj
            return obj

        return add(factory) if factory is not None else add

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, key: str, name: str) -> Callable[..., Any]:
        """The factory for ``name``; ``key`` is the config key used in error messages."""
        if name in self._entries:
            return self._entries[name]
        if "." in name or ":" in name:
            module_name, _, attr = name.replace(":", ".").rpartition(".")
            try:
                return getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as err:
                from prism.config import ConfigError

                raise ConfigError(f"{key}: cannot import {self.kind} class path {name!r} ({err})") from None
        from prism.config import ConfigError

        raise ConfigError(f"{key}: unknown {self.kind} {name!r} (known: {', '.join(self.names())})")

    def check(self, key: str, name: str) -> None:
        self.get(key, name)


REWARDS = Registry("reward redistribution")
AGENTS = Registry("agent")
