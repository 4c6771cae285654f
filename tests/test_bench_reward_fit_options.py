"""tools/bench_reward_fit.py --quality: an option string becomes the ReSymNetConfig the fit gets."""

from __future__ import annotations

import pytest
from tool_modules import load_tool

from prism.reward.config import ReSymNetConfig, RRDRewardConfig

BASE = dict(ensemble_size=3, hidden=256, dropout=0.3, lr=0.005, batch_size=32, max_epochs=100, patience=20)


def test_an_rrd_option_is_rrds_model_with_only_the_fits_shared_keys_carried_over():
    bench = load_tool("bench_reward_fit")
    keys, cap = bench.parse_option("rrd+bc+lr0.001+patience320:32@1600", BASE)
    config = bench.reward_config(keys)
    assert isinstance(config, RRDRewardConfig)  # RRD's config: ReSymNet's keys are not even there
    assert cap == 1600 and config.name == "rrd" and config.max_epochs == 1600 and config.patience == 320
    assert config.sampled_steps == 32 and config.bias_corrected
    assert config.rrd.lr == 0.001 and "lr" not in vars(config)  # +lr is RRD's Adam
    assert config.rrd.batch_size == 4 and "batch_size" not in vars(config)  # ReSymNet's batch not there
    plain = bench.reward_config(bench.parse_option("rrd", BASE)[0])
    assert not plain.bias_corrected and plain.max_epochs == 100 and plain.patience == 20  # RRD's plain loss


def test_a_resymnet_option_keeps_its_keys_and_an_unknown_flag_is_refused():
    bench = load_tool("bench_reward_fit")
    keys, cap = bench.parse_option("randomized+bc+lr0.002", BASE)
    config = ReSymNetConfig(**keys)
    assert cap is None and config.name == ReSymNetConfig().name and config.loss == "randomized"
    assert config.lr == 0.002 and config.bias_corrected and config.batch_size == 32
    with pytest.raises(SystemExit, match=r"unknown flag '\+nope'"):
        bench.parse_option("rrd+nope", BASE)
