"""``prism check-determinism`` (prism/experiments/determinism.py) from a source tree without installed metadata
(the device image: tools/gpu_check.sh): its ``prism fit`` runs get the metadata tools/source_metadata.py writes
on their ``PYTHONPATH``. Installed, run ``prism check-determinism`` itself; the arguments are the same:

    python tools/determinism_check.py --out DIR [--modes true false] -- [prism fit arguments]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from source_metadata import subprocess_env  # noqa: E402  (a script beside this one)

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # prism itself, from this source tree
    from prism.experiments.determinism import main

    sys.exit(main(sys.argv[1:], env=subprocess_env()))
