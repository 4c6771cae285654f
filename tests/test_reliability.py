"""Reliability tier: kill -9 and resume, determinism, and one-line errors for bad input (issue 7)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from subprocess_runs import kill_when as _kill_when
from subprocess_runs import run_ok as _run
from subprocess_runs import subprocess_env as _env
from tb_events import FIT_TIMING, scalar_curves
from toy_runs import KILLABLE, toy_run

from prism.cli import main

CONF = Path(__file__).resolve().parents[1] / "conf"
TINY = toy_run(KILLABLE)


def _fit_cmd(run_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "prism.cli",
        "fit",
        "--config",
        str(CONF / "quickstart.yaml"),
        *TINY,
        f"run_dir={run_dir}",
        *extra,
    ]


def _eval_table(run_dir: Path) -> str:
    text = (run_dir / "eval.csv").read_text()
    assert text.count("\n") >= 2
    return text


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    _run(_fit_cmd(run_dir))
    return run_dir


@pytest.mark.slow  # several full runs in subprocesses
def test_same_seed_same_eval_csv_and_other_seed_differs(reference_run, tmp_path):
    again = tmp_path / "again"
    _run(_fit_cmd(again))
    assert _eval_table(again) == _eval_table(reference_run)
    other = tmp_path / "other"
    _run(_fit_cmd(other, "seed=1"))
    assert _eval_table(other) != _eval_table(reference_run)


@pytest.mark.slow  # several full runs in subprocesses
def test_resume_after_sigkill_mid_rl(reference_run, tmp_path):
    run_dir = tmp_path / "killed_rl"
    csv_path = run_dir / "eval.csv"

    def mid_rl() -> bool:  # past the first evaluation and the second refit: deep in RL of cycle 2
        return (
            (run_dir / "tb" / "reward_fit" / "cycle2").is_dir()
            and csv_path.is_file()
            and csv_path.read_text().count("\n") >= 3
        )

    _kill_when(_fit_cmd(run_dir), mid_rl)
    _run([sys.executable, "-m", "prism.cli", "fit", "--resume", str(run_dir)])
    assert _eval_table(run_dir) == _eval_table(reference_run)


@pytest.mark.slow  # several full runs in subprocesses
def test_resume_after_sigkill_mid_reward_fit(reference_run, tmp_path):
    run_dir = tmp_path / "killed_fit"
    fit_logs = run_dir / "tb" / "reward_fit" / "cycle2"
    _kill_when(_fit_cmd(run_dir), lambda: fit_logs.is_dir() and any(fit_logs.iterdir()))
    _run([sys.executable, "-m", "prism.cli", "fit", "--resume", str(run_dir)])
    assert _eval_table(run_dir) == _eval_table(reference_run)
    # TensorBoard: the redone fit is a fresh run beside the killed one, not appended to it
    assert sorted(p.name for p in fit_logs.iterdir()) == ["version_0", "version_1"]


def _fit_snapshot_epoch(checkpoint: Path) -> int | None:
    """The epoch of the reward-fit snapshot a run's checkpoint holds (None: none)."""
    from prism.run.checkpoint_files import read_checkpoint

    return _snapshot_epoch_of(read_checkpoint(checkpoint))


def _resumed_snapshot_epoch(run_dir: Path) -> int | None:
    """The fit snapshot's epoch in the checkpoint ``--resume`` takes: ``last.pt``, or ``previous.pt`` when the
    kill fell between a save's two renames (then ``last.pt`` is absent)."""
    from prism.run.checkpoint_files import load_checkpoint

    loaded = load_checkpoint(run_dir, key="RUN_DIR")
    assert loaded is not None, f"no checkpoint left in {run_dir}"
    return _snapshot_epoch_of(loaded.state)


def _snapshot_epoch_of(state: dict) -> int | None:
    from prism.run.checkpoint_files import torch_load_bytes

    progress = state["loop"].get("fit_progress") or [None]
    if progress[0] is None or "snapshot" not in progress[0]:
        return None
    return int(torch_load_bytes(progress[0]["snapshot"].numpy().tobytes())["epoch"])


@pytest.mark.slow  # several full runs in subprocesses
def test_a_run_killed_mid_fit_resumes_the_fit_from_its_snapshot_and_ends_as_if_never_stopped(
    reference_run, tmp_path
):
    """loop.fit_checkpoint_every_s=0 checkpoints at every fit epoch; the resumed run's fit goes on from the
    snapshot (its curves start after it) and the run's eval.csv is the uninterrupted run's (the reference
    run takes no snapshots: taking them changes nothing either)."""
    run_dir = tmp_path / "killed_mid_fit"
    checkpoint = run_dir / "checkpoints" / "last.pt"
    fit_logs = run_dir / "tb" / "reward_fit" / "cycle2"
    seen = {"mtime": 0}

    def snapshot_of_cycle2_fit_saved() -> bool:
        try:  # last.pt is briefly absent while a save rotates it to previous.pt
            mtime = checkpoint.stat().st_mtime_ns
            if not fit_logs.is_dir() or mtime == seen["mtime"]:
                return False
            seen["mtime"] = mtime
            epoch = _fit_snapshot_epoch(checkpoint)
        except FileNotFoundError:
            return False
        return epoch is not None and epoch >= 2

    _kill_when(_fit_cmd(run_dir, "loop.fit_checkpoint_every_s=0"), snapshot_of_cycle2_fit_saved)
    # The kill may land after a later save began: read the snapshot the resume will take, not last.pt.
    epoch = _resumed_snapshot_epoch(run_dir)
    _run([sys.executable, "-m", "prism.cli", "fit", "--resume", str(run_dir)])
    assert _eval_table(run_dir) == _eval_table(reference_run)
    # The fit's curves went on in its own TensorBoard run: what the killed process logged after the snapshot
    # is purged, and they read as the uninterrupted run's curves, scalar for scalar.
    assert epoch >= 2 and sorted(p.name for p in fit_logs.iterdir()) == ["version_0"]
    reference_logs = reference_run / "tb" / "reward_fit" / "cycle2" / "version_0"
    resumed = scalar_curves(fit_logs / "version_0", skip=FIT_TIMING)
    assert resumed == scalar_curves(reference_logs, skip=FIT_TIMING)
    assert [step for step, _ in resumed["reward_fit/val_corr"]] == list(
        range(len(resumed["reward_fit/val_corr"]))
    )


def _tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


BAD_INPUT = [
    (["--config", "{conf}/hopper.yaml", "env.id=mo-ant-v9"], "env.id"),
    (["--config", "{conf}/hopper.yaml", "reward.name=magic"], "reward.name"),
    (["--config", "{conf}/hopper.yaml", "agent.name=ppo"], "agent.name"),
    (["--config", "{conf}/hopper.yaml", "env.sparse_channel=7"], "env.sparse_channel"),
    (["--config", "{conf}/hopper.yaml", "env.p_rel=2"], "env.p_rel"),
    (["--config", "{conf}/hopper.yaml", "env.p_rel=-0.5"], "env.p_rel"),
    (["--config", "{conf}/hopper.yaml", "loop.steps_per_cycle=0"], "loop.steps_per_cycle"),
    (["--config", "{conf}/hopper.yaml", "loop.cycles=-2"], "loop.cycles"),
    (["--config", "{conf}/hopper.yaml", "loop.expert_episodes=-1"], "loop.expert_episodes"),
    (["--config", "{conf}/hopper.yaml", "eval.episodes=0"], "eval.episodes"),
    (["--config", "{conf}/hopper.yaml", "reward.max_epochs=0"], "reward.max_epochs"),
    (["--config", "{conf}/hopper.yaml", "agent.batch_size=many"], "agent.batch_size"),
    (["--config", "{conf}/hopper.yaml", "loop.cycles=1.5"], "loop.cycles"),
    (["--config", "{conf}/hopper.yaml", "loop.colour=red"], "loop.colour"),
    (["--config", "{conf}/hopper.yaml", "learning_rate=3"], "learning_rate"),
    (["--config", "{conf}/does_not_exist.yaml"], "--config"),
    (["--config", "{bad_yaml}"], "--config"),
    (["--config", "{conf}/hopper.yaml", "env.spec={{symmetric_obs: [0, 99], asymmetric_obs: [1]}}"], "env."),
    (["--config", "{overlap_spec}"], "env.symmetric_obs"),
    (["--config", "{range_spec}"], "env.symmetric_obs"),
    (["--config", "{conf}/hopper.yaml", "run_dir={existing}"], "run_dir"),
]


@pytest.fixture()
def bad_files(tmp_path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("env: {id: [\n")
    spec = {
        "objective_names": ["forward", "energy"],
        "obs_dim": 8,
        "act_dim": 2,
        "sparse_channel": 0,
        "symmetric_obs": [1, 2, 4, 6, 7],
        "asymmetric_obs": [0, 3, 5],
        "symmetric_act": [0, 1],
        "ref_point": [-100, -100],
        "symreg_lambda": 0.1,
    }
    import yaml

    overlap = tmp_path / "overlap.yaml"
    overlap.write_text(
        yaml.safe_dump(
            {"env": {"id": "mo-swimmer-v5", "spec": {**spec, "symmetric_obs": [1, 2, 3, 4, 6, 7]}}}
        )
    )
    out_of_range = tmp_path / "range.yaml"
    out_of_range.write_text(
        yaml.safe_dump({"env": {"id": "mo-swimmer-v5", "spec": {**spec, "symmetric_obs": [1, 2, 4, 6, 9]}}})
    )
    existing = tmp_path / "existing_run"
    (existing / "checkpoints").mkdir(parents=True)
    (existing / "eval.csv").write_text("env_steps,hv\n10,1.0\n")
    (existing / "checkpoints" / "last.pt").write_bytes(b"precious")
    return {
        "conf": CONF,
        "bad_yaml": bad_yaml,
        "overlap_spec": overlap,
        "range_spec": out_of_range,
        "existing": existing,
    }


@pytest.mark.parametrize(("args", "key"), BAD_INPUT, ids=[k + ":" + a[-1][-30:] for a, k in BAD_INPUT])
def test_bad_input_is_one_line_exit_2(args, key, bad_files, capsys):
    before = _tree_digest(bad_files["existing"])
    code = main(["fit", *[a.format(**bad_files) for a in args]])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith(f"prism: error: {key}"), err
    assert _tree_digest(bad_files["existing"]) == before


def test_bad_input_from_a_real_process(bad_files):
    before = _tree_digest(bad_files["existing"])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "prism.cli",
            "fit",
            "--config",
            str(CONF / "hopper.yaml"),
            "env.p_rel=7",
            f"run_dir={bad_files['existing']}",
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert (
        lines == [lines[0]]
        and lines[0].startswith("prism: error: env.p_rel")
        and "Traceback" not in result.stderr
    )
    assert _tree_digest(bad_files["existing"]) == before
