"""Bad input that used to end in a traceback: one line on stderr naming the key and the value, exit 2, and
nothing already written lost (no run folder clobbered, no half-made folder left to block the rerun).

In-process ``prism.cli.main`` calls on the toy env; each ends before training (or at its first allocation)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch
from toy_runs import toy_run

from prism.cli import main
from prism.config import load_config, to_yaml

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "conf" / "quickstart.yaml")


def _fit(*args: str) -> list[str]:
    return ["fit", "--config", QUICKSTART, *toy_run(), "--progress", "none", *args]


def _one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("prism: error: "), lines
    return lines[0]


# ---- run_dir that cannot be made or written ---------------------------------------------------------
def test_an_uncreatable_run_dir_is_one_line_and_leaves_no_folder(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    run_dir = blocker / "run"
    assert main(_fit(f"run_dir={run_dir}")) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"prism: error: run_dir: cannot create '{run_dir}' (Not a directory"), line
    assert blocker.read_text() == "not a folder\n"


def test_a_run_dir_whose_parent_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys):
    """As a read-only parent refuses it (root, who runs these tests, passes any chmod): the mkdir raises
    PermissionError once the folders above it are made; those go again."""
    run_dir = tmp_path / "made" / "locked" / "run"
    real_mkdir = os.mkdir

    def refused_below_locked(path, *args, **kwargs):
        if Path(path).parent.name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", refused_below_locked)
    assert main(_fit(f"run_dir={run_dir}")) == 2
    assert _one_error_line(capsys) == (
        f"prism: error: run_dir: cannot create '{run_dir}' (Permission denied: '{run_dir}'); choose a run_dir "
        "you can write to"
    )
    assert sorted(tmp_path.iterdir()) == []  # made/ and made/locked/ removed again


def test_a_read_only_run_dir_is_one_line_and_stays_as_it_was(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    real_write_text = Path.write_text

    def read_only(path, *args, **kwargs):
        if path.parent == run_dir:
            raise PermissionError(13, "Permission denied", str(path))
        return real_write_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", read_only)
    assert main(_fit(f"run_dir={run_dir}")) == 2
    assert _one_error_line(capsys) == (
        f"prism: error: run_dir: cannot write in '{run_dir}' (Permission denied: '{run_dir / 'config.yaml'}'); "
        "choose a run_dir you can write to"
    )
    assert run_dir.is_dir() and list(run_dir.iterdir()) == []  # it was there before: kept, empty


# ---- a replay buffer larger than the machine allows --------------------------------------------------
def _refuse_large_allocations(monkeypatch, limit_bytes: int = 2**30) -> None:
    """torch.zeros as under a memory limit (`ulimit -v`): a tensor over ``limit_bytes`` raises torch's
    own CPU allocator error."""
    real_zeros = torch.zeros

    def limited_zeros(*size, **kwargs):
        shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        dtype = kwargs.get("dtype") or torch.get_default_dtype()
        needed = int(torch.tensor(shape).prod()) * torch.empty((), dtype=dtype).element_size()
        if needed > limit_bytes:
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                f"tried to allocate {needed} bytes. Error code 12 (Cannot allocate memory)"
            )
        return real_zeros(*size, **kwargs)

    monkeypatch.setattr(torch, "zeros", limited_zeros)


def test_a_replay_buffer_too_large_to_allocate_names_the_key_and_the_bytes(tmp_path, monkeypatch, capsys):
    _refuse_large_allocations(monkeypatch)
    run_dir = tmp_path / "new" / "run"
    assert main(_fit("agent.buffer_size=100000000", f"run_dir={run_dir}")) == 2
    line = _one_error_line(capsys)
    # the toy env: obs 6, action 2, 2 objectives -> a row of 6+2+2+6+1+2 = 19 floats, 76 bytes
    assert line == (
        "prism: error: agent.buffer_size: a replay buffer of 100000000 transitions needs 7600000000 bytes "
        "(7.1 GiB, 76 per transition) on cpu, more than could be allocated; lower agent.buffer_size"
    ), line
    # nothing of the failed start is left: the corrected command (a smaller buffer) starts in the same place
    assert sorted(tmp_path.iterdir()) == []


def test_gpi_pd_replay_priorities_too_large_to_allocate_name_the_key_and_the_bytes(monkeypatch):
    # GPI-PD allocates its priorities at the first env step, after the replay buffer: a machine that just held
    # the buffer may refuse them, and that is the same bad input, said the same way
    from prism.agents.gpi_pd.per import PrioritySampler
    from prism.core.errors import ConfigError

    _refuse_large_allocations(monkeypatch)
    assert PrioritySampler(1000).priorities.shape == (1, 1000)
    with pytest.raises(ConfigError) as err:
        PrioritySampler(200_000_000)
    assert str(err.value) == (
        "agent.buffer_size: replay priorities of 200000000 transitions need 1600000000 bytes (1.5 GiB, 8 per "
        "transition) on cpu, more than could be allocated; lower agent.buffer_size"
    )


def test_a_failed_start_in_an_existing_empty_run_dir_empties_it_again(tmp_path, monkeypatch, capsys):
    _refuse_large_allocations(monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert main(_fit("agent.buffer_size=100000000", f"run_dir={run_dir}")) == 2
    assert "agent.buffer_size: a replay buffer" in _one_error_line(capsys)
    assert run_dir.is_dir() and list(run_dir.iterdir()) == []


def test_a_run_folder_a_previous_run_filled_is_not_touched_by_a_failed_start(tmp_path, monkeypatch, capsys):
    _refuse_large_allocations(monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    earlier = {"config.yaml": "seed: 0\n", "eval.csv": "env_steps\n200\n"}
    for name, text in earlier.items():
        (run_dir / name).write_text(text)
    assert main(_fit("agent.buffer_size=100000000", f"run_dir={run_dir}")) == 2
    assert "is not empty; use --resume" in _one_error_line(capsys)
    assert {p.name: p.read_text() for p in run_dir.iterdir()} == earlier


def _previous_run(run_dir: Path) -> dict[str, bytes]:
    """A folder an earlier run filled (a nested file included); its files and their bytes."""
    (run_dir / "checkpoints").mkdir(parents=True)
    earlier = {
        "config.yaml": b"seed: 0\n",
        "eval.csv": b"env_steps\n200\n",
        "checkpoints/last.pt": b"weights",
    }
    for name, data in earlier.items():
        (run_dir / name).write_bytes(data)
    return earlier


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_overwrite_keeps_the_previous_run_when_the_new_one_fails_to_start(tmp_path, monkeypatch, capsys):
    # --overwrite used to empty the folder first: a start refused once built lost the run it was to replace
    _refuse_large_allocations(monkeypatch)
    run_dir = tmp_path / "run"
    earlier = _previous_run(run_dir)
    assert main([*_fit("agent.buffer_size=100000000", f"run_dir={run_dir}"), "--overwrite"]) == 2
    assert "agent.buffer_size: a replay buffer" in _one_error_line(capsys)
    assert _files(run_dir) == earlier and sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoints",
        "config.yaml",
        "eval.csv",
    ]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError], ids=["ctrl-c", "crash"])
def test_overwrite_stopped_during_start_up_leaves_the_folder_as_it_was(stop, tmp_path, monkeypatch, capsys):
    import prism.run.fit as fit

    def build_then_stop(*args, **kwargs):
        raise stop("during start-up")

    monkeypatch.setattr(fit, "build_run", build_then_stop)
    run_dir = tmp_path / "run"
    earlier = _previous_run(run_dir)
    argv = [*_fit(f"run_dir={run_dir}"), "--overwrite"]
    if stop is KeyboardInterrupt:
        assert main(argv) == 130
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert (
            err
            == f"prism: interrupted before the run started; {run_dir} is as it was; run the same command to start it"
        )
    else:
        with pytest.raises(RuntimeError, match="during start-up"):
            main(argv)
    assert _files(run_dir) == earlier


# ---- reward.name naming a class that is not a shaper ---------------------------------------------------
@pytest.mark.parametrize(
    "class_path, problem",
    [
        (
            "prism.reward.models.resymnet:ReSymNetRewardModel",
            "is a reward model, not a reward shaper; give the name the model is registered under (prism list)",
        ),
        ("prism.reward.shapers:Transition", "is not a reward shaper (it has no push() or reset())"),
        (
            "prism.reward.shapers:UniformShaper",
            "cannot be built as a reward shaper (got an unexpected keyword argument 'model')",
        ),
        ("prism.plugins.registry:DEFAULT_REWARD_MODEL", "is a str, not a reward shaper"),
    ],
)
def test_a_reward_class_path_that_is_no_shaper_is_refused_before_any_folder(
    tmp_path, capsys, class_path, problem
):
    run_dir = tmp_path / "run"
    args = ["fit", "--config", QUICKSTART, *toy_run(resymnet=False), f"reward.name={class_path}"]
    assert main([*args, f"run_dir={run_dir}"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"prism: error: reward.name: {class_path!r} {problem}"), line
    assert not run_dir.exists()


# ---- --config given a folder -------------------------------------------------------------------------
def test_a_folder_given_as_config_is_named_a_folder_with_its_files(tmp_path, capsys):
    folder = tmp_path / "budget"
    folder.mkdir()
    for name in ("tiny.yaml", "small.yaml", "notes.txt"):
        (folder / name).write_text("seed: 1\n")
    assert main(["fit", "--config", str(folder)]) == 2
    assert _one_error_line(capsys) == (
        f"prism: error: --config: '{folder}' is a folder, not a config file; give one of its files: "
        f"{folder / 'small.yaml'}, {folder / 'tiny.yaml'}"
    )


# ---- --resume refused: no config warning before the error --------------------------------------------
NO_SYMMETRY_TABLE = [f"env.spec.{key}=null" for key in ("symmetric_obs", "asymmetric_obs", "symmetric_act")]
"""The toy env with its reflection table taken away (and its λ with it): loading such a config warns that
SymReg is off."""


def test_a_refused_resume_prints_no_config_warning_before_its_error(tmp_path, monkeypatch, capsys, caplog):
    """The warning is about the given config, which the run will not use (resume takes the run's own), and it
    came before the line that refuses the request."""
    monkeypatch.setattr("prism.config.agent_keys._WARNED", set())  # as in a fresh process
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(to_yaml(load_config([QUICKSTART], toy_run())))
    given = [*toy_run(), *NO_SYMMETRY_TABLE, "env.spec.symreg_lambda=0"]
    with caplog.at_level(logging.WARNING, logger="prism.config"):
        assert main(["fit", "--resume", str(run_dir), "--config", QUICKSTART, *given]) == 2
    assert [r.getMessage() for r in caplog.records] == []
    line = _one_error_line(capsys)
    assert (
        line.startswith("prism: error: --resume: ") and "env.spec.symreg_lambda (None in the run" in line
    ), line
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml"]
    # the same config, loaded for a run, still says it
    load_config([QUICKSTART], given)
    assert [r.getMessage()[:60] for r in caplog.records] == [
        "agent.symreg_lambda: warning: prism/Toy-v0 has no reflection"
    ]
