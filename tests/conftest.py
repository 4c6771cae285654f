"""Shared test settings: small thread counts so the suite behaves on 2 cores."""

import os

os.environ.setdefault("MUJOCO_GL", "disable")
# Only prism's own plug-ins, here and in every child process: an installed third-party plug-in (say one named
# `linear`, as the docs' example) must not change what the tests see (issue 29 item 10).
os.environ["PRISM_PLUGINS"] = "prism-morl"

import torch  # noqa: E402

torch.set_num_threads(1)
