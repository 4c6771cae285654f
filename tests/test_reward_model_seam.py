"""The reward-model seam, from outside prism: a toy learned model (linear in the model's features, fitted in
closed form on segment sums) added through the public registry and contract only, with its own config keys,
fitted in a tiny run, shaping rewards, checkpointed and reloaded. No file of prism/ knows it
(docs/add_a_reward_model.md shows the same code)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from toy_runs import toy_run

import prism
from prism.cli import main
from prism.config import ConfigError, load_config
from prism.core import checks
from prism.data.features import FeatureLayout
from prism.data.segments import SegmentStore
from prism.plugins.registry import REWARD_MODELS, REWARDS, register_reward_model
from prism.reward.config import RewardConfig
from prism.reward.model import RewardModelBase
from prism.reward.shapers import Transition, make_shaper
from prism.run.fit import fit_run

CONF = Path(__file__).resolve().parents[1] / "conf"


@dataclass
class LinearConfig(RewardConfig):
    """``reward.name: toy_linear``: the shared fit keys and the model's own ridge weight."""

    name: str = "toy_linear"
    ridge: float = 1e-3

    def check_own_keys(self) -> None:  # the documented hook for a model's own keys
        checks.non_negative("reward.ridge", self.ridge)


class LinearRewardModel(RewardModelBase):
    """``r_t = w·h_t + b`` on ``h_t = [s_t, a_t, r_dense_t]``."""

    inputs = FeatureLayout(dense=True)

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.register_buffer("weight", weight.float())  # [F + 1], the last entry the bias

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        return features @ self.weight[:-1] + self.weight[-1]

    def to_dict(self) -> dict:
        return {"weight": self.weight.clone()}

    @classmethod
    def from_dict(cls, data: dict) -> LinearRewardModel:
        return cls(data["weight"])


def fit_linear(store: SegmentStore, config: LinearConfig, *, logger=None, seed=0, device="cpu"):
    """argmin_w Σ_segments (w·Σ_t [h_t, 1] − R)² + ridge·‖w‖²."""
    x = LinearRewardModel.inputs.of_store(store).double()
    x = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)
    sums = torch.zeros(store.num_segments, x.shape[1], dtype=x.dtype).index_add_(0, store.segment_index, x)
    gram = sums.T @ sums + config.ridge * torch.eye(x.shape[1], dtype=x.dtype)
    return LinearRewardModel(torch.linalg.solve(gram, sums.T @ store.targets.double()))


@pytest.fixture
def toy_linear():
    register_reward_model("toy_linear", fit=fit_linear, load=LinearRewardModel.from_dict, config=LinearConfig)
    try:
        yield
    finally:
        REWARD_MODELS.unregister("toy_linear")
        REWARDS.unregister("toy_linear")


def test_a_reward_model_added_from_outside_fits_shapes_and_reloads(toy_linear, tmp_path):
    run_dir = tmp_path / "run"
    overrides = toy_run({"reward.name": "toy_linear", "reward.ridge": 0.01})
    run = fit_run([str(CONF / "quickstart.yaml")], [*overrides, f"run_dir={run_dir}"])
    # its own config class, with its own key; the method is its name
    assert type(run.config.reward) is LinearConfig and run.config.reward.ridge == 0.01
    assert run.config.method == "toy_linear"
    fits = json.loads((run_dir / "summary.json").read_text())["reward_fits"]
    assert [f["cycle"] for f in fits] == [1, 2]  # fitted every cycle
    loaded = prism.load_run(run_dir)
    model = loaded.reward_model
    assert type(model) is LinearRewardModel
    # it shapes: the sparse channel of a step is the model's prediction from the features it builds
    rng = np.random.default_rng(0)
    obs, act = rng.normal(size=loaded.spec.obs_dim), rng.uniform(-1, 1, loaded.spec.act_dim)
    reward = rng.normal(size=loaded.spec.n_objectives).astype(np.float32)
    channel = loaded.sparse_channel
    shaper = make_shaper("toy_linear", sparse_channel=channel, model=model)
    (shaped,) = shaper.push(obs, act, reward, obs, False, False, np.ones(2), False)
    assert isinstance(shaped, Transition)
    h = torch.cat([torch.tensor(obs), torch.tensor(act), torch.tensor(np.delete(reward, channel))]).float()
    expected = float(h @ model.weight[:-1] + model.weight[-1])
    assert shaped.reward[channel] == pytest.approx(expected, rel=1e-5)
    assert loaded.shaped_reward(shaped) == pytest.approx(expected, rel=1e-5)


def test_a_key_of_another_model_is_refused_naming_its_owner(toy_linear):
    with pytest.raises(
        ConfigError, match=r"^reward.hidden: .*not in 'LinearConfig'; it is a key of resymnet"
    ):
        load_config([CONF / "quickstart.yaml"], ["reward.name=toy_linear", "reward.hidden=32"])
    with pytest.raises(
        ConfigError, match=r"^reward.ridge: .*not in 'ReSymNetConfig'; it is a key of toy_linear"
    ):
        load_config([CONF / "quickstart.yaml"], ["reward.ridge=0.1"])


def test_a_models_own_bad_key_stops_prism_fit_in_one_line_naming_it(toy_linear, tmp_path, capsys):
    """RewardConfig.check_own_keys is the hook a plug-in checks its keys in: `reward.ridge=-1` is one line
    naming the key, exit 2, and no run folder is made."""
    run_dir = tmp_path / "run"
    args = ["fit", "--config", str(CONF / "quickstart.yaml"), "reward.name=toy_linear", "reward.ridge=-1"]
    assert main([*args, f"run_dir={run_dir}"]) == 2
    assert capsys.readouterr().err.splitlines() == ["prism: error: reward.ridge: must be >= 0, got -1.0"]
    assert not run_dir.exists()
    assert load_config([CONF / "quickstart.yaml"], ["reward.name=toy_linear"]).reward.ridge == 1e-3


def test_a_hook_message_without_its_key_still_names_the_model(toy_linear, monkeypatch):
    def terse(self) -> None:
        raise ValueError("ridge must be small\nsecond line")

    monkeypatch.setattr(LinearConfig, "check_own_keys", terse)
    with pytest.raises(ConfigError, match=r"^reward \(toy_linear\): ridge must be small$"):
        load_config([CONF / "quickstart.yaml"], ["reward.name=toy_linear"])


def test_a_plain_fit_refuses_warm_start_and_the_stacked_fit_before_the_run(toy_linear):
    """A plain fit is handed no previous model and has no population fit: both keys are refused at load."""
    for key, line in (
        (
            "reward.warm_start=true",
            r"^reward.warm_start: must be false with reward.name=toy_linear .*plain fit",
        ),
        ("reward.stacked_fit=true", r"^reward.stacked_fit: must be false with reward.name=toy_linear"),
    ):
        with pytest.raises(ConfigError, match=line):
            load_config([CONF / "quickstart.yaml"], ["reward.name=toy_linear", key])


def _page_block(language: str, first_line: str) -> str:
    page = (CONF.parent / "docs" / "add_a_reward_model.md").read_text()
    (block,) = [
        b for b in re.findall(rf"```{language}\n(.*?)```", page, flags=re.S) if b.startswith(first_line)
    ]
    return block


def test_the_pages_blocks_are_the_code_tested_here(toy_linear):
    """docs/add_a_reward_model.md shows this file's model, config hook, fit and registration."""
    import tomllib

    namespace: dict = {}
    exec(compile(_page_block("python", "# mypkg/linear.py\n"), "add_a_reward_model.md", "exec"), namespace)
    with pytest.raises(ValueError, match=r"^reward.ridge: must be >= 0, got -1"):
        namespace["LinearConfig"](ridge=-1.0)
    assert namespace["LinearConfig"]().ridge == LinearConfig().ridge
    plugins = _page_block("python", "# mypkg/plugins.py\n")
    for target in (
        "mypkg.linear:fit_linear",
        "mypkg.linear:LinearRewardModel.from_dict",
        "mypkg.linear:LinearConfig",
    ):
        assert f'"{target}"' in plugins
    toml = tomllib.loads(_page_block("toml", '[project.entry-points."prism.plugins"]'))
    assert toml["project"]["entry-points"]["prism.plugins"] == {"mypkg": "mypkg.plugins:register"}
