"""``prism check-determinism`` (prism/experiments/determinism.py): a config run twice in fresh processes, every
member's eval.csv and front.csv compared byte for byte, exit status 1 when they differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from toy_runs import toy_run

from prism.cli import main
from prism.experiments import determinism

CONF = Path(__file__).resolve().parents[1] / "conf"


def _fake_runs(monkeypatch, differ: set[str]) -> list[list[str]]:
    """Stand-in ``prism fit`` processes writing two members' files; those named in ``differ`` change between
    the pair's two runs. Returns the argument lists the runs were given."""
    calls: list[list[str]] = []

    def run_once(run_dir, fit_args, deterministic, env=None):
        calls.append([*fit_args, f"deterministic={str(deterministic).lower()}"])
        attempt = run_dir.name[-1]
        for member in ("seed0", "seed1"):
            folder = run_dir / member
            folder.mkdir(parents=True, exist_ok=True)
            for name in ("eval.csv", "front.csv"):
                tail = attempt if f"{member}/{name}" in differ else ""
                (folder / name).write_text(f"step,hv\n1,2.5{tail}\n")
            (folder / "summary.json").write_text(json.dumps({"final": {"hv": 2.5}}))
        return 0, 0.1

    monkeypatch.setattr(determinism, "run_once", run_once)
    return calls


def test_identical_files_pass_and_one_differing_file_fails(tmp_path, monkeypatch, capsys):
    calls = _fake_runs(monkeypatch, differ=set())
    assert main(["check-determinism", "--out", str(tmp_path / "same"), "--", "--config", "x.yaml"]) == 0
    out = capsys.readouterr().out
    assert "deterministic_files_identical: 4/4" in out
    assert calls == [["--config", "x.yaml", "deterministic=true"]] * 2
    _fake_runs(monkeypatch, differ={"seed1/front.csv"})
    assert main(["check-determinism", "--out", str(tmp_path / "differ"), "--", "--config", "x.yaml"]) == 1
    out = capsys.readouterr().out
    assert "seed1/front.csv: DIFFERENT" in out and "deterministic_files_identical: 3/4" in out


def test_the_nondeterministic_pair_is_reported_but_does_not_fail(tmp_path, monkeypatch, capsys):
    _fake_runs(monkeypatch, differ={"seed0/eval.csv"})
    assert main(["check-determinism", "--out", str(tmp_path), "--modes", "false"]) == 0
    assert "nondeterministic_files_identical: 3/4" in capsys.readouterr().out


@pytest.mark.slow
def test_a_toy_run_repeats_bit_for_bit_on_the_cpu(tmp_path, capsys):
    """Two real `prism fit` processes of a toy PRISM run: every compared file equal (CPU runs repeat)."""
    fit_args = ["--config", str(CONF / "quickstart.yaml"), *toy_run({})]
    assert main(["check-determinism", "--out", str(tmp_path), "--", *fit_args]) == 0
    out = capsys.readouterr().out
    assert "deterministic_files_identical: 2/2" in out
