"""Issue 11: damaged checkpoints and non-finite values.

A damaged ``last.pt`` falls back to ``previous.pt`` with one warning line (resume stays byte-identical);
with no loadable checkpoint left the CLI exits 2 naming the file; a finished run is left alone. A NaN/inf
loss, parameter or shaped reward stops the run with one line naming the quantity and the env step, exit 3,
and the checkpoint on disk still loads and holds only finite values.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
from subprocess_runs import kill_when as _kill_when
from subprocess_runs import run_ok as _run
from toy_runs import KILLABLE, RESYMNET_ONLY, toy_run

from prism.cli import NON_FINITE, USAGE_ERROR, main
from prism.run.checkpoint_files import load_checkpoint, read_checkpoint, save_atomic

CONF = Path(__file__).resolve().parents[1] / "conf"

# Same tiny PRISM run as tests/test_reliability.py (3 cycles of 400 steps on the toy env).
TINY = toy_run({**KILLABLE, "eval.final.num_weights": None, "eval.final.episodes": None})
# Smaller still, in process: one cycle of 300 steps, checkpoints every 100 (without ReSymNet's own keys, which
# a baseline run refuses: SMALL_RESYMNET adds them back).
SMALL = [
    *[
        o
        for o in TINY
        if not o.startswith(("loop.cycles", "loop.steps_per_cycle", "loop.checkpoint_every", *RESYMNET_ONLY))
    ],
    "loop.cycles=1",
    "loop.steps_per_cycle=300",
    "loop.checkpoint_every=100",
]
SMALL_RESYMNET = [o for o in TINY if o.startswith(RESYMNET_ONLY)]
NONFINITE_LINE = re.compile(
    r"^prism: error: (?P<quantity>\S+) is (?P<kind>nan|inf|-inf) at env step (?P<step>\d+); "
    r"last good checkpoint: (?P<path>.+)$"
)


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


PROGRESS_LINE = re.compile(r"^\[\d+:\d\d:\d\d\] ")


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _eval_steps(run_dir: Path) -> list[int]:
    return [int(line.split(",")[0]) for line in (run_dir / "eval.csv").read_text().splitlines()[1:]]


def _assert_finite_checkpoint(path: Path) -> dict:
    state = read_checkpoint(path)  # loads, complete, finite agent weights
    tensors = [t for t in state["agent"].values() if t.is_floating_point()]
    for opt_state in state["optimizers"]:
        tensors += [t for s in opt_state["state"].values() for t in s.values() if t.is_floating_point()]
    assert tensors and all(bool(torch.isfinite(t).all()) for t in tensors)
    return state


def _damage(path: Path, how: str, like: Path | None = None) -> None:
    if how == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(b"\x00not a checkpoint\xff" * 50)
    elif how == "missing_keys":
        torch.save({"format": 1, "agent": {}}, path)
    elif how == "wrong_format":
        state = torch.load(like, weights_only=True)
        torch.save({**state, "format": 99}, path)
    elif how in ("nan_weights", "one_inf_weight"):
        state = torch.load(like, weights_only=True)
        name = next(k for k, v in state["agent"].items() if v.is_floating_point() and v.numel() > 1)
        if how == "nan_weights":
            state["agent"][name] = torch.full_like(state["agent"][name], float("nan"))
        else:  # one diverged weight among finite ones is as unusable as a whole NaN tensor
            state["agent"][name].view(-1)[-1] = float("inf")
        torch.save(state, path)
    else:
        raise ValueError(how)


# ---- a small finished run (in process) ------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    from prism.run.fit import fit_run

    run_dir = tmp_path_factory.mktemp("small") / "run"
    fit_run(
        [str(CONF / "quickstart.yaml"), str(CONF / "method" / "baseline.yaml")],
        [*SMALL, f"run_dir={run_dir}"],
    )
    assert (run_dir / "summary.json").is_file()
    assert (run_dir / "checkpoints" / "previous.pt").is_file()
    return run_dir


def _copy(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to)
    return to


def test_save_keeps_the_previous_checkpoint_and_survives_a_kill_between_renames(
    small_run, tmp_path, monkeypatch
):
    ckpt = _copy(small_run, tmp_path / "run") / "checkpoints"
    last, previous = ckpt / "last.pt", ckpt / "previous.pt"
    old_last = last.read_bytes()
    state = torch.load(last, weights_only=True)
    save_atomic({**state, "env_steps": torch.tensor(12345)}, last, previous=previous)
    assert previous.read_bytes() == old_last
    assert int(read_checkpoint(last)["env_steps"]) == 12345

    # A kill at any step of the next save leaves a complete last.pt (the old one, or the new one at the end).
    import prism.run.checkpoint_files as checkpoint_io

    real_replace, real_link = os.replace, os.link
    for kill_at in range(
        3
    ):  # before the link, before renaming the link over previous.pt, before the last rename
        steps = []

        def step(real, *args, kill_at=kill_at, steps=steps):
            steps.append(args)
            if len(steps) == kill_at + 1:
                raise KeyboardInterrupt
            real(*args)

        monkeypatch.setattr(checkpoint_io.os, "link", lambda *a, step=step: step(real_link, *a))
        monkeypatch.setattr(checkpoint_io.os, "replace", lambda *a, step=step: step(real_replace, *a))
        with pytest.raises(KeyboardInterrupt):
            save_atomic({**state, "env_steps": torch.tensor(99999)}, last, previous=previous)
        monkeypatch.undo()
        assert int(read_checkpoint(last)["env_steps"]) == 12345, kill_at
        assert previous.read_bytes() == (old_last if kill_at < 2 else last.read_bytes()), kill_at
    save_atomic({**state, "env_steps": torch.tensor(99999)}, last, previous=previous)  # after the kills
    assert int(read_checkpoint(last)["env_steps"]) == 99999
    assert int(read_checkpoint(previous)["env_steps"]) == 12345
    assert sorted(p.name for p in ckpt.iterdir()) == ["last.pt", "previous.pt"]


def test_without_hard_links_a_save_renames_and_a_kill_between_renames_leaves_previous(
    small_run, tmp_path, monkeypatch
):
    """On a file system without hard links the old last.pt is renamed to previous.pt; a kill before the new
    file's rename leaves no last.pt, and the loader takes previous.pt."""
    ckpt = _copy(small_run, tmp_path / "run") / "checkpoints"
    last, previous = ckpt / "last.pt", ckpt / "previous.pt"
    state = torch.load(last, weights_only=True)
    import prism.run.checkpoint_files as checkpoint_io

    def no_links(src, dst):
        raise OSError(1, "Operation not permitted")

    real_replace = os.replace
    calls = []

    def killed_at_second_rename(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(checkpoint_io.os, "link", no_links)
    save_atomic({**state, "env_steps": torch.tensor(12345)}, last, previous=previous)
    assert int(read_checkpoint(last)["env_steps"]) == 12345
    monkeypatch.setattr(checkpoint_io.os, "replace", killed_at_second_rename)
    with pytest.raises(KeyboardInterrupt):
        save_atomic({**state, "env_steps": torch.tensor(99999)}, last, previous=previous)
    monkeypatch.undo()
    assert not last.exists()
    loaded = load_checkpoint(ckpt.parent, key="--resume")
    assert loaded is not None and loaded.path == previous and int(loaded.state["env_steps"]) == 12345


@pytest.mark.parametrize(
    "how", ["truncated", "empty", "garbage", "missing_keys", "wrong_format", "nan_weights", "one_inf_weight"]
)
def test_damaged_last_falls_back_to_previous_with_one_warning(small_run, tmp_path, capsys, how):
    run_dir = _copy(small_run, tmp_path / "run")
    last, previous = run_dir / "checkpoints" / "last.pt", run_dir / "checkpoints" / "previous.pt"
    _damage(last, how, like=previous)
    capsys.readouterr()
    loaded = load_checkpoint(run_dir, key="--resume")
    assert loaded is not None and loaded.path == previous and loaded.damaged == [last]
    err = _lines(capsys.readouterr().err)
    assert len(err) == 1, err
    assert err[0].startswith(f"prism: warning: checkpoint {last} is damaged (")
    assert err[0].endswith(f"; using {previous} (env step {int(loaded.state['env_steps'])})")


def test_both_checkpoints_damaged_exit_2_naming_the_file(small_run, tmp_path, capsys):
    run_dir = _copy(small_run, tmp_path / "run")
    (run_dir / "summary.json").unlink()  # not finished: resume must look at the checkpoints
    last, previous = run_dir / "checkpoints" / "last.pt", run_dir / "checkpoints" / "previous.pt"
    _damage(last, "truncated")
    _damage(previous, "garbage")
    before = _tree_digest(run_dir)
    assert main(["fit", "--resume", str(run_dir)]) == USAGE_ERROR
    err = _lines(capsys.readouterr().err)
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith(f"prism: error: --resume: checkpoint {last} is damaged"), err[0]
    assert _tree_digest(run_dir) == before  # nothing renamed, nothing deleted

    assert main(["evaluate", str(run_dir)]) == USAGE_ERROR
    err = _lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith(f"prism: error: RUN_DIR: checkpoint {last} is damaged"), err
    assert _tree_digest(run_dir) == before


def test_resume_of_a_finished_run_says_so_and_touches_nothing(small_run, tmp_path, capsys):
    run_dir = _copy(small_run, tmp_path / "run")
    before = _tree_digest(run_dir)
    mtimes = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    assert main(["fit", "--resume", str(run_dir)]) == 0
    out = capsys.readouterr()
    lines = _lines(out.out + out.err)
    assert len(lines) == 1 and "finished" in lines[0] and str(run_dir) in lines[0], lines
    assert _tree_digest(run_dir) == before
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == mtimes


def test_evaluate_with_a_damaged_last_uses_previous(small_run, tmp_path, capsys):
    run_dir = _copy(small_run, tmp_path / "run")
    last, previous = run_dir / "checkpoints" / "last.pt", run_dir / "checkpoints" / "previous.pt"
    # Mark previous.pt so the printed row shows which checkpoint was evaluated.
    state = torch.load(previous, weights_only=True)
    torch.save({**state, "env_steps": torch.tensor(123)}, previous)
    _damage(last, "truncated")
    last_bytes = last.read_bytes()
    capsys.readouterr()
    assert main(["evaluate", str(run_dir)]) == 0
    out = capsys.readouterr()
    err = _lines(out.err)
    assert err == [
        f"prism: warning: checkpoint {last} is damaged (truncated or not a checkpoint: no zip directory); "
        f"using {previous} (env step 123)"
    ]
    assert out.out.startswith("protocol=final, ") and ", env_steps=123," in out.out
    assert last.read_bytes() == last_bytes  # evaluate is read-only: the damaged file stays where it was


# ---- resume after a kill, with the newest checkpoint damaged (subprocesses, byte-identical eval.csv) -------


@pytest.mark.slow
def test_truncated_last_resume_falls_back_and_stays_byte_identical(tmp_path):
    reference = tmp_path / "reference"
    _run(_fit_cmd(reference))
    run_dir = tmp_path / "killed"
    csv_path = run_dir / "eval.csv"
    # Mid-RL of cycle 2, just after the evaluation at 600 (the next save is 150 steps away).
    _kill_when(_fit_cmd(run_dir), lambda: csv_path.is_file() and csv_path.read_text().count("\n") >= 4)
    last, previous = run_dir / "checkpoints" / "last.pt", run_dir / "checkpoints" / "previous.pt"
    fallback = read_checkpoint(previous)
    # The fallback is older than an evaluation already in eval.csv: resume must drop that row and redo it.
    assert max(_eval_steps(run_dir)) > int(fallback["evaluations"][0]["last_eval_step"])
    _damage(last, "truncated")
    damaged_bytes = last.read_bytes()

    result = _run([sys.executable, "-m", "prism.cli", "fit", "--resume", str(run_dir)])
    err = [line for line in _lines(result.stderr) if line.startswith("prism:")]
    assert err == [
        f"prism: warning: checkpoint {last} is damaged (truncated or not a checkpoint: no zip directory); "
        f"using {previous} (env step {int(fallback['env_steps'])})"
    ], result.stderr[-2000:]
    assert (run_dir / "eval.csv").read_text() == (reference / "eval.csv").read_text()
    # The damaged file is set aside, not deleted, and both checkpoints are good again.
    assert (run_dir / "checkpoints" / "last.pt.damaged").read_bytes() == damaged_bytes
    _assert_finite_checkpoint(last)
    _assert_finite_checkpoint(previous)


# ---- non-finite values ---------------------------------------------------------------------------------


def _fit_small(run_dir: Path, *extra_files: str) -> int:
    files = [str(CONF / "quickstart.yaml"), *extra_files]
    resymnet = [] if extra_files else SMALL_RESYMNET  # (the overlays given here have no reward model)
    return main(["fit", "--config", *files, *SMALL, *resymnet, f"run_dir={run_dir}"])


def _nonfinite_error(capsys) -> re.Match:
    # stderr is not a terminal here, so the run wrote its progress lines ("[h:mm:ss] ...") before the error
    err = [line for line in _lines(capsys.readouterr().err) if not PROGRESS_LINE.match(line)]
    assert len(err) == 1 and "Traceback" not in err[0], err
    match = NONFINITE_LINE.match(err[0])
    assert match, err[0]
    return match


def test_nan_critic_loss_stops_with_one_line_and_a_good_checkpoint(tmp_path, capsys, monkeypatch):
    import prism.agents.capql as capql

    real_loss = capql.capql_critic_loss
    poisoned_from_update = 120  # learning starts at env step 100: the 121st update is at env step 220

    def critic_loss(*args, **kwargs):
        out = real_loss(*args, **kwargs)
        critic_loss.calls += 1
        if critic_loss.calls > poisoned_from_update:
            # a real NaN loss shows in the summed loss and in the per-member term that is logged
            out = out._replace(loss=out.loss * float("nan"), member_loss=out.member_loss * float("nan"))
        return out

    critic_loss.calls = 0
    monkeypatch.setattr(capql, "capql_critic_loss", critic_loss)
    run_dir = tmp_path / "run"
    assert _fit_small(run_dir, str(CONF / "method" / "baseline.yaml")) == NON_FINITE
    match = _nonfinite_error(capsys)
    assert match["quantity"] == "train/critic" and match["kind"] == "nan"
    # The NaN update is at env step 220; it is caught at the next policy action, before step 221 is taken.
    assert int(match["step"]) == 220
    assert Path(match["path"]) == run_dir / "checkpoints" / "last.pt"
    state = _assert_finite_checkpoint(Path(match["path"]))
    assert int(state["env_steps"]) == 200
    assert not (run_dir / "summary.json").exists()


def test_non_finite_parameter_is_never_checkpointed(tmp_path, capsys, monkeypatch):
    import prism.agents.capql as capql

    real_update = capql.CAPQLModule.update

    def update(self, batch):
        terms = real_update(self, batch)
        if self.env_step_count == 300:  # a checkpoint step: poison a weight no action depends on
            with torch.no_grad():
                next(self.critic_target.parameters()).view(-1)[0] = float("inf")
        return terms

    monkeypatch.setattr(capql.CAPQLModule, "update", update)
    run_dir = tmp_path / "run"
    assert _fit_small(run_dir, str(CONF / "method" / "baseline.yaml")) == NON_FINITE
    match = _nonfinite_error(capsys)
    assert match["quantity"].startswith("param/critic_target.") and match["kind"] == "inf"
    assert int(match["step"]) == 300
    state = _assert_finite_checkpoint(Path(match["path"]))
    assert int(state["env_steps"]) == 200


def test_nan_shaped_reward_stops_naming_reward_shaped(tmp_path, capsys, monkeypatch):
    from prism.reward.models.resymnet import ReSymNetRewardModel

    real_predict = ReSymNetRewardModel.predict
    bad_step = 150

    def predict(self, features):
        out = real_predict(self, features)
        if features.shape[0] == 1:  # the shaper's per-step call (other callers pass whole episodes)
            predict.calls += 1
            if predict.calls >= bad_step:
                out = torch.full_like(out, float("nan"))
        return out

    predict.calls = 0
    monkeypatch.setattr(ReSymNetRewardModel, "predict", predict)
    run_dir = tmp_path / "run"
    assert _fit_small(run_dir) == NON_FINITE
    match = _nonfinite_error(capsys)
    assert match["quantity"] == "reward/shaped" and match["kind"] == "nan"
    assert int(match["step"]) == bad_step  # one shaped reward per env step, from the first
    state = _assert_finite_checkpoint(Path(match["path"]))
    assert int(state["env_steps"]) == 100
