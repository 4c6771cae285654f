"""The names of a run folder's files, in a module that imports nothing: the commands check a run folder
(``prism fit --resume``, ``prism evaluate``) before they import torch or Lightning."""

CONFIG_FILE = "config.yaml"
"""The run folder's config (written by ``prism fit``, read by ``--resume`` and ``prism evaluate``)."""
CHECKPOINT_DIR = "checkpoints"
"""The folder of a run's whole-run checkpoints (:mod:`prism.loop.checkpoint_io`)."""
SUMMARY_JSON = "summary.json"
"""A finished single run's (or population member's) summary."""
SUMMARY_CSV = "summary.csv"
"""A finished population's summary, written after every member's ``summary.json``."""
