"""Shared test settings: small thread counts so the suite behaves on 2 cores."""

import os

os.environ.setdefault("MUJOCO_GL", "disable")

import torch  # noqa: E402

torch.set_num_threads(1)
