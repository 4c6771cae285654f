"""The ``deterministic`` key: what it sets, that it changes no number on the CPU, and its error.

On CUDA the point of the key is that a run repeats bit for bit; that is checked on a GPU by
``tests/test_cuda.py::test_a_deterministic_cuda_run_repeats_bit_for_bit`` (``tools/gpu_check.sh``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from toy_runs import toy_run

from prism.config import ConfigError, load_config
from prism.core.devices import CUBLAS_DETERMINISTIC_WORKSPACE
from prism.run.fit import build_run, fit_run

QUICKSTART = str(Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml")


@pytest.fixture
def torch_flags_restored(monkeypatch):
    """The key sets process-wide flags: put them back so later tests run as before."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.benchmark = before[1]


@pytest.mark.parametrize("deterministic", [True, False])
def test_building_a_run_sets_the_deterministic_flags_only_when_asked(
    tmp_path, torch_flags_restored, deterministic
):
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.benchmark = True
    config = load_config([QUICKSTART], [*toy_run(), f"run_dir={tmp_path}", f"deterministic={deterministic}"])
    build_run(config, progress_bar=False)
    assert torch.are_deterministic_algorithms_enabled() is deterministic
    assert torch.backends.cudnn.benchmark is not deterministic
    assert os.environ.get("CUBLAS_WORKSPACE_CONFIG") == (
        CUBLAS_DETERMINISTIC_WORKSPACE if deterministic else None
    )


def test_a_cublas_workspace_the_user_set_is_kept(tmp_path, torch_flags_restored, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    build_run(
        load_config([QUICKSTART], [*toy_run(), f"run_dir={tmp_path}", "deterministic=true"]),
        progress_bar=False,
    )
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_on_the_cpu_the_key_changes_no_number(tmp_path, torch_flags_restored):
    """A PRISM run (reward fits, RL updates, evaluations) with the flags on gives the same files: on
    the CPU every op torch runs here is already deterministic, and none lacks a deterministic kernel."""
    outputs = {}
    for deterministic in (False, True):
        run_dir = tmp_path / str(deterministic)
        fit_run(
            [QUICKSTART],
            [*toy_run({"eval.num_workers": 0}), "figures=false", f"deterministic={deterministic}",
             f"run_dir={run_dir}"],
            progress="none",
        )  # fmt: skip
        summary = json.loads((run_dir / "summary.json").read_text())
        outputs[deterministic] = {
            "eval.csv": (run_dir / "eval.csv").read_bytes(),
            "front.csv": (run_dir / "front.csv").read_bytes(),
            "summary.json": _without_timings(summary),
        }
        assert torch.are_deterministic_algorithms_enabled() is deterministic
    assert len(outputs[True]["summary.json"]["reward_fits"]) == 2  # both cycles' fits are compared
    assert outputs[True] == outputs[False]


def test_a_value_that_is_not_a_boolean_is_a_one_line_error_naming_the_key(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config([QUICKSTART], [f"run_dir={tmp_path}", "deterministic=sometimes"])
    message = str(err.value)
    assert "deterministic" in message and "sometimes" in message and "\n" not in message


def _without_timings(node):
    """``summary.json`` without its clock readings (``*_time_s*``, the fits' ``*_cpu_s`` and the run's
    ``phase_times``), which differ from run to run."""
    if isinstance(node, dict):
        return {
            k: _without_timings(v)
            for k, v in node.items()
            if "time_s" not in k and not k.endswith("_cpu_s") and k != "phase_times"
        }
    if isinstance(node, list):
        return [_without_timings(v) for v in node]
    return node
