"""prism's distribution metadata for a source tree that is not installed (the device image runs prism from its
source on ``PYTHONPATH``). Without it, prism's built-in plug-ins (the ``prism.plugins`` entry point) do not
register and every config is refused ("reinstall prism"). This writes the metadata a ``pip install`` would,
from pyproject.toml, into a folder to put on ``PYTHONPATH``; nothing is installed:

    python tools/source_metadata.py DIR        # writes DIR/prism_morl-0.0.0.dist-info, prints DIR

tools/gpu_check.sh runs it; tools/determinism_check.py calls :func:`subprocess_env` for its runs.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTION = "prism-morl"


def installed() -> bool:
    """Whether this interpreter finds prism's distribution metadata (an install, editable or not)."""
    try:
        importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def write_metadata(directory: Path, pyproject: Path = ROOT / "pyproject.toml") -> Path:
    """Write ``<directory>/prism_morl-0.0.0.dist-info`` (METADATA, entry_points.txt with the console scripts and
    every entry-point group of ``pyproject``); returns ``directory``."""
    import tomllib  # (Python 3.11+: only a tree without metadata needs it)

    project = tomllib.loads(pyproject.read_text())["project"]
    info = Path(directory) / "prism_morl-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: 0.0.0\n")
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for g, eps in groups.items()
        )
    )
    return Path(directory)


def subprocess_env(directory: Path | None = None) -> dict[str, str]:
    """The environment for a ``python -m prism.cli`` child: this one's, with the written metadata first on
    ``PYTHONPATH`` when prism is not installed (default folder: ``$TMPDIR/prism-metadata``)."""
    env = dict(os.environ)
    if installed():
        return env
    folder = write_metadata(directory or Path(tempfile.gettempdir()) / "prism-metadata")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH", "")) if p)
    return env


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/source_metadata.py DIR")
    print(write_metadata(Path(sys.argv[1])))
