"""What the fourth round's new user met (issue 64, part 4): each test fails without its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from prism.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def _described(capsys, *extra: str) -> dict[str, str]:
    assert main(["config", "--describe", "--config", str(CONF / "hopper.yaml"), *extra]) == 0
    return dict(
        line.split(" = ", 1) for line in capsys.readouterr().out.splitlines() if " = " in line and line[0] != " "
    )


def test_config_describe_prints_yaml_values_not_python_reprs(capsys):
    described = _described(capsys)
    assert described["seeds"] == "null" and described["method_label"] == "null"
    assert described["device"] == "auto" and described["env.dense"] == "false"
    assert described["reward.residual"] == "true" and "[256, 256]" in described.values()
    assert not any(value in {"None", "True", "False"} or value.startswith("'") for value in described.values())
