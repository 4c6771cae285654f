"""tools/peer_capql_run.py (issue 60): morl-baselines' CAPQL gets halfcheetah-paper's e-oracle settings wherever its
constructor takes them. (A short run, `--steps 1200 --out /tmp/peer`, writes the four run files; its final
evaluation alone is 500 halfcheetah episodes, too long for the suite.)"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from tool_modules import load_tool

ROOT = Path(__file__).resolve().parents[1]
peer = load_tool("peer_capql_run")


def test_the_peer_gets_the_oracles_settings_under_its_own_names():
    capql = pytest.importorskip("morl_baselines.multi_policy.capql.capql")
    config = peer.oracle_config("halfcheetah-paper", "halfcheetah", 3)
    settings = peer.peer_settings(config)
    assert settings == {
        "learning_rate": 3e-4, "gamma": 0.99, "tau": 0.005, "buffer_size": 200_000, "net_arch": [256, 256],
        "batch_size": 128, "num_q_nets": 2, "alpha": 0.2, "learning_starts": 1000, "gradient_updates": 1,
    }  # fmt: skip
    assert set(settings) <= set(inspect.signature(capql.CAPQL.__init__).parameters)
    assert config.env.dense and config.agent.symreg_lambda == 0.0 and config.seed == 3
