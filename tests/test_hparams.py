"""TensorBoard's HParams tab (issue 29, item 4): each run's event files hold the hparams plugin's data — the
resolved config's keys and the final HV/EUM/VO metrics — read back through TensorBoard's own readers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata
from toy_runs import toy_run

from prism.cli import main
from prism.config import load_config
from prism.run.hparams import HPARAM_METRICS, hparam_values

CONF = Path(__file__).resolve().parents[1] / "conf"


def _hparams_plugin(tb_dir: Path):
    """(experiment, session start info, the accumulator) of the hparams plugin in one TensorBoard run."""
    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    content = acc.PluginTagToContent(hparams_metadata.PLUGIN_NAME)
    experiment = hparams_metadata.parse_experiment_plugin_data(content[hparams_metadata.EXPERIMENT_TAG])
    session = hparams_metadata.parse_session_start_info_plugin_data(
        content[hparams_metadata.SESSION_START_INFO_TAG]
    )
    return experiment, session, acc


def test_a_finished_run_logs_its_config_and_final_metrics_for_the_hparams_tab(tmp_path):
    lr = "0.001"
    run_dir = tmp_path / "run"
    overrides = [*toy_run({"figures": "false", "agent.lr": lr}), f"run_dir={run_dir}"]
    assert main(["fit", "--config", str(CONF / "quickstart.yaml"), *overrides, "--progress", "none"]) == 0
    experiment, session, acc = _hparams_plugin(run_dir / "tb")
    assert [m.name.tag for m in experiment.metric_infos] == list(HPARAM_METRICS)
    values = session.hparams
    assert values["loop.cycles"].number_value == 2 and values["agent.lr"].number_value == float(lr)
    assert values["env.id"].string_value == "prism/Toy-v0" and values["method"].string_value == "prism"
    assert values["agent.actor_hidden"].string_value == "[32, 32]"
    # the keys the config leaves null/auto carry what the run resolved (the toy's SymReg lambda, its channel)
    assert values["agent.symreg_lambda"].number_value > 0 and "env.sparse_channel" in values
    assert {h.name for h in experiment.hparam_infos} == set(values)
    # the tab reads each metric's latest scalar in the same run: the final evaluation's numbers
    final = json.loads((run_dir / "summary.json").read_text())["final"]
    for tag in HPARAM_METRICS:
        assert acc.Scalars(tag)[-1].value == pytest.approx(final[tag.split("/")[1]], rel=1e-6)


def test_hparam_values_are_flat_scalar_and_leave_unset_keys_out():
    config = load_config([CONF / "quickstart.yaml"], ["env.id=prism/Toy-v0"])
    values = hparam_values(config)
    assert all(isinstance(v, (bool, int, float, str)) for v in values.values())
    assert values["loop.steps_per_cycle"] == config.loop.steps_per_cycle and values["seed"] == 0
    assert "seeds" not in values  # None: a single run
    assert values["eval.final.num_weights"] == config.eval.final.num_weights
    assert config.device == "auto" and values["device"] in ("cpu", "cuda", "mps")  # resolved
