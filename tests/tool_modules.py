"""The scripts of ``tools/`` (not a package) imported as modules, for the tests that reuse their code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load_tool(name: str) -> ModuleType:
    """``tools/<name>.py`` as a fresh module, registered as ``sys.modules["prism_tools_<name>"]`` before it runs
    (dataclasses look their module up there while the class is built)."""
    spec = importlib.util.spec_from_file_location(f"prism_tools_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
