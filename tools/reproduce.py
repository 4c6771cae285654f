"""The grid driver moved into the package: ``prism reproduce`` (prism/experiments/). This shim keeps the old
command line working (same arguments) for scripts that call ``python tools/reproduce.py``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing it
from prism.experiments.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="reproduce.py"))
