"""Rough edges a new user met (issue 29, part B): each test fails without its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

import prism.loop.run
from prism.cli import main
from prism.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "RUN", "--protocol", "periodic", "eval.episodes=2"],  # item 6, as reported
        ["evaluate", "--protocol", "periodic", "RUN", "eval.episodes=2"],
        ["evaluate", "RUN", "eval.episodes=2", "--protocol", "periodic"],
    ],
)
def test_evaluate_takes_options_and_overrides_in_any_order(argv, monkeypatch):
    seen = {}

    def fake_evaluate(run_dir, overrides, protocol="final", **kwargs):
        seen.update(run_dir=run_dir, overrides=overrides, protocol=protocol)

    monkeypatch.setattr(prism.loop.run, "evaluate_run", fake_evaluate)
    assert main(argv) == 0
    assert seen == {"run_dir": "RUN", "overrides": ["eval.episodes=2"], "protocol": "periodic"}


def test_fit_takes_overrides_after_an_option(monkeypatch):
    seen = {}
    monkeypatch.setattr(prism.loop.run, "fit_run", lambda files, overrides, **kw: seen.update(o=overrides))
    argv = ["fit", "seed=1", "--overwrite", "loop.cycles=2", "--config", str(CONF / "quickstart.yaml")]
    assert main(argv) == 0
    assert sorted(seen["o"]) == ["loop.cycles=2", "seed=1"]


def test_a_stray_argument_is_still_unrecognised(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "RUN", "--protocol", "periodic", "ANOTHER_RUN"])
    assert stop.value.code == 2
    assert "unrecognized arguments: ANOTHER_RUN" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_before_or_after_the_command_shows_the_traceback(where):
    """Item 12: `prism --debug fit …` raised nothing (the subcommand's default False overwrote it)."""
    args = ["fit", "--config", "no_such_file.yaml"]
    argv = ["--debug", *args] if where == "before" else [*args, "--debug"]
    with pytest.raises(ConfigError, match="no_such_file.yaml"):
        main(argv)
    assert main(args) == 2  # without --debug: the one-line error
