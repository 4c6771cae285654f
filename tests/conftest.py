"""Shared test settings: small thread counts so the suite behaves on 2 cores."""

import os
import tempfile

os.environ.setdefault("MUJOCO_GL", "disable")
# Only prism's own plug-ins, here and in every child process: an installed third-party plug-in (say one named
# `linear`, as the docs' example) must not change what the tests see (issue 29 item 10).
os.environ["PRISM_PLUGINS"] = "prism-morl"
# One cache of evaluation weight sets for this test run, shared by its xdist workers and their child processes
# (each would otherwise compute pymoo's energy directions anew), and never the user's own ~/.cache/prism.
_run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
os.environ.setdefault("PRISM_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"prism-test-cache-{_run}"))

import torch  # noqa: E402

torch.set_num_threads(1)
