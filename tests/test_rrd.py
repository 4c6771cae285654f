"""RRD (``reward.name: rrd``, randomized return decomposition, Ren et al., ICLR 2022) as a peer reward model:
its network is the released code's ``r̂(s, a, s − s')`` MLP, its loss on a fixed batch is the brute-force
randomized loss, a fit recovers a known per-step reward, and it runs wherever ReSymNet does (registry, method
name, the loop with its shaper and records, ``prism.load_run``, resume inside a fit, populations)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from toy_runs import toy_run

import prism
from prism.config import ConfigError, load_config
from prism.config.describe import describe
from prism.data.datamodule import TrajectorySumDataModule
from prism.data.features import build_features
from prism.data.segments import SegmentStore
from prism.plugins.catalogue import catalogue
from prism.plugins.registry import REWARD_MODELS, REWARDS
from prism.reward.config import ReSymNetConfig, RRDConfig, RRDRewardConfig
from prism.reward.fitting.trajectory_sum_module import TrajectorySumModule
from prism.reward.losses import LossTargets
from prism.reward.models.rrd import RRDNetwork, RRDRewardModel, fit_rrd_model, rrd_recipe
from prism.reward.quality import score_model
from prism.reward.shapers import PredictedRewardShaper, make_relabel_fn

CONF = Path(__file__).resolve().parents[1] / "conf"
OBS, ACT = 3, 2
RRD_TOY = {
    "reward.name": "rrd",
    "reward.rrd.hidden": 32,
    "reward.rrd.batch_size": 2,
    "reward.sampled_steps": 8,
}
"""The toy runs' changes for RRD (a smaller network; 2 of the toy's few segments per batch, 8 steps of each)."""


def _drifting_store(n_episodes: int, seed: int) -> SegmentStore:
    """Episodes of 8–40 steps of a noisy point on a line: ``s = [x, v, c]``, ``v' = 0.8 v + 0.2 a₀ + 0.1 ε``,
    ``x' = x + v'``, ``c`` a per-episode context; hidden reward ``r = 2(x' − x) + tanh(2c) − 0.1 a₁²``. Its
    progress term is visible only through ``s'`` (ε is drawn after the action), as a MuJoCo forward reward is.
    Released at each episode's end."""
    g = torch.Generator().manual_seed(seed)
    store = SegmentStore(OBS, ACT, 0, next_obs=True)
    for _ in range(n_episodes):
        t_len = int(torch.randint(8, 41, (1,), generator=g))
        a = torch.rand(t_len, ACT, generator=g) * 2 - 1
        s = torch.zeros(t_len + 1, OBS)
        s[0, 0] = torch.rand(1, generator=g) * 2 - 1
        s[:, 2] = torch.rand(1, generator=g) * 2 - 1
        for t in range(t_len):
            s[t + 1, 1] = 0.8 * s[t, 1] + 0.2 * a[t, 0] + 0.1 * torch.randn(1, generator=g)
            s[t + 1, 0] = s[t, 0] + s[t + 1, 1]
        r = 2.0 * (s[1:, 0] - s[:-1, 0]) + torch.tanh(2.0 * s[:-1, 2]) - 0.1 * a[:, 1] ** 2
        released = torch.zeros(t_len, dtype=torch.bool)
        released[-1] = True
        emitted = torch.zeros(t_len)
        emitted[-1] = r.sum()
        store.add_episode(torch.cat([s[:-1], a], 1), released, emitted, r, terminated=False, next_obs=s[1:])
    return store


def _mlp(net: RRDNetwork, x: torch.Tensor) -> torch.Tensor:
    """The network's one copy written out layer by layer (weights stored ``[in, out]``)."""
    h = torch.relu(x @ net.fc1.weight[0] + net.fc1.bias[0, 0])
    h = torch.relu(h @ net.fc2.weight[0] + net.fc2.bias[0, 0])
    return (h @ net.out.weight[0] + net.out.bias[0, 0])[..., 0]


# ---- the model -------------------------------------------------------------------------------------------
def test_the_network_is_rrds_mlp_on_s_a_and_s_minus_next_s():
    net = RRDNetwork(OBS, ACT, hidden=256, member_seeds=[7])
    assert [tuple(layer.weight.shape) for layer in (net.fc1, net.fc2, net.out)] == [
        (1, 2 * OBS + ACT, 256), (1, 256, 256), (1, 256, 1),
    ]  # fmt: skip
    for layer in (net.fc1, net.fc2, net.out):
        fan_in, fan_out = layer.weight.shape[1:]
        bound = math.sqrt(6.0 / (fan_in + fan_out))  # Xavier-uniform, gain 1
        assert (
            bool((layer.weight.abs() <= bound).all())
            and float(layer.weight.detach().abs().max()) > 0.9 * bound
        )
        assert not bool(layer.bias.any())  # zero biases
    assert not any("ln" in name or "norm" in name for name, _ in net.named_parameters())  # a plain MLP
    g = torch.Generator().manual_seed(0)
    s, a, s_next = (
        torch.randn(5, OBS, generator=g),
        torch.rand(5, ACT, generator=g) * 2 - 1,
        torch.randn(5, OBS, generator=g),
    )
    expected = _mlp(net, torch.cat([s, a, s - s_next], 1))  # the code's obs − obs_next
    got = net(torch.cat([s, a, s_next], 1))[0]
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(_mlp(net, torch.cat([s, a, s_next - s], 1)), expected)  # the sign matters
    torch.testing.assert_close(net.forward_members([torch.cat([s, a, s_next], 1)], [0])[0], expected)
    model = RRDRewardModel(net)
    assert model.use_next_obs and not model.use_dense_features
    again = RRDRewardModel.from_dict(torch.load(io.BytesIO(_saved(model.to_dict())), weights_only=True))
    torch.testing.assert_close(again.predict(torch.cat([s, a, s_next], 1)), expected)


def _saved(data: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(data, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("bias_correction", [False, True])
def test_the_loss_on_a_fixed_batch_equals_a_brute_force_loop(bias_correction):
    """A training batch of 4 episodes, K = 5 sampled steps each (episodes of 3–12 steps: some shorter than K),
    and the loss the fit minimises on it, against explicit loops over the episodes and their sampled steps:
    mean_i ((T_i/K_i)·Σ_{t∈I_i} r̂(s_t, a_t, s_t − s_{t+1}) − R_i)², minus T_i²(1 − K_i/T_i)·s_i²/K_i with
    bias correction (s_i² the sample variance over I_i)."""
    g = torch.Generator().manual_seed(3)
    store = SegmentStore(OBS, ACT, 1, next_obs=True)
    episodes = []  # (s, a, s', R) of each episode as collected
    for t_len in (3, 12, 7, 5, 9, 11, 4, 10):
        s, a = torch.randn(t_len, OBS, generator=g), torch.rand(t_len, ACT, generator=g) * 2 - 1
        s_next, dense = torch.randn(t_len, OBS, generator=g), torch.randn(t_len, 1, generator=g)
        released = torch.zeros(t_len, dtype=torch.bool)
        released[-1] = True
        ret = float(torch.randn(1, generator=g)) * 10
        emitted = torch.zeros(t_len)
        emitted[-1] = ret
        store.add_episode(torch.cat([s, a, dense], 1), released, emitted, torch.zeros(t_len), next_obs=s_next)
        episodes.append((s, a, s_next, ret))
    k = 5
    config = RRDRewardConfig(
        name="rrd", sampled_steps=k, bias_correction=bias_correction, rrd=RRDConfig(hidden=16)
    )
    dm = TrajectorySumDataModule(
        store, batch_size=4, val_fraction=0.25, seed=1, n_members=1, use_dense_features=False,
        sampler=config.fit_loss().sampler, next_obs=True, standardise=False,
    )  # fmt: skip
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    module = TrajectorySumModule(rrd_recipe(config, OBS, ACT), 2 * OBS + ACT, config, [4])
    pred = module.net(batch.features)
    (loss,) = module.fit_loss(pred, LossTargets.of_batch(batch))

    # Brute force: find every sampled step among the raw steps (its [s, a, s'] row is unique), then loop.
    steps = {}
    for i, (s, a, s_next, _) in enumerate(episodes):
        for t in range(s.shape[0]):
            steps[tuple(torch.cat([s[t], a[t], s_next[t]]).tolist())] = (i, t)
    sampled: dict[int, list[tuple[int, int]]] = {}
    for row, b in zip(batch.features[0], batch.segment_ids[0].tolist()):
        if b < batch.targets.shape[-1]:  # (not padding)
            sampled.setdefault(b, []).append(steps[tuple(row.tolist())])
    assert sorted(sampled) == [0, 1, 2, 3]
    terms = []
    for b, picks in sampled.items():
        (episode,) = {i for i, _ in picks}
        s, a, s_next, ret = episodes[episode]
        t_len = s.shape[0]
        assert len(picks) == len(set(picks)) == min(k, t_len)  # K distinct steps, all of a short episode
        assert float(batch.targets[0, b]) == pytest.approx(ret)
        with torch.no_grad():  # one step at a time, its input written out: [s_t, a_t, s_t − s_{t+1}]
            rewards = [float(_mlp(module.net, torch.cat([s[t], a[t], s[t] - s_next[t]]))) for _, t in picks]
        count = len(rewards)
        term = (t_len / count * sum(rewards) - ret) ** 2
        if bias_correction and count > 1:
            mean = sum(rewards) / count
            sample_var = sum((r - mean) ** 2 for r in rewards) / (count - 1)
            term -= t_len**2 * (1 - count / t_len) * sample_var / count
        terms.append(term)
    assert float(loss.detach()) == pytest.approx(sum(terms) / len(terms), rel=1e-5, abs=1e-5)


def test_an_rrd_fit_recovers_a_known_per_step_reward():
    """From episode sums only, with RRD's plain loss on K = 8 of up to 40 steps, the per-step prediction on
    held-out episodes follows the hidden reward (which needs s': its progress term is 2(x' − x))."""
    config = RRDRewardConfig(
        name="rrd",
        sampled_steps=8,
        bias_correction=None,  # RRD's own form: the plain loss
        max_epochs=20,
        patience=20,
        rrd=RRDConfig(hidden=32, lr=3e-3, batch_size=16),
    )
    model, summary = fit_rrd_model(_drifting_store(300, seed=0), config, seed=0)
    assert type(model) is RRDRewardModel and summary.epochs_run == [20]
    held_out = _drifting_store(100, seed=1)
    quality = score_model(model, held_out)
    assert quality.pearson >= 0.9, quality
    # and the episode sums it was fitted to: > 90 % of their variance explained
    assert quality.segment_sum_mse < 0.1 * float(held_out.targets.var()), quality


def test_an_rrd_fit_repeats_and_resumes_from_a_snapshot_bit_for_bit():
    store = _drifting_store(30, seed=2)
    config = RRDRewardConfig(name="rrd", sampled_steps=8, max_epochs=5, patience=5, rrd=RRDConfig(hidden=16))
    snapshots: list[bytes] = []
    whole = fit_rrd_model(store, config, seed=3, on_snapshot=snapshots.append, snapshot_every_s=0)
    assert len(snapshots) == 4
    for other in (
        fit_rrd_model(store, config, seed=3),
        fit_rrd_model(store, config, seed=3, resume=snapshots[1]),
    ):
        for (name, p), q in zip(whole.model.named_parameters(), other.model.parameters(), strict=True):
            assert torch.equal(p, q), name
        assert other.summary.best_val_loss == whole.summary.best_val_loss
    with pytest.raises(ValueError, match="^reward.name: rrd reads each step's next observation"):
        fit_rrd_model(SegmentStore(OBS, ACT, 0), config)


# ---- registration, method name, config keys --------------------------------------------------------------
def test_rrd_is_registered_named_listed_and_described():
    entry = REWARD_MODELS.entry("reward.name", "rrd")
    assert entry.fitter_fn() is fit_rrd_model and entry.load_fn() == RRDRewardModel.from_dict
    assert entry.next_obs and entry.population_fitter is None
    assert REWARDS.entry("reward.name", "rrd").model == "rrd"
    assert not REWARD_MODELS.entry("reward.name", "resymnet").next_obs
    config = load_config([CONF / "swimmer.yaml"], ["reward.name=rrd"])
    assert config.method == "rrd" and Path(config.run_dir).parts == ("runs", "mo-swimmer-v5", "rrd", "seed0")
    assert config.agent.symreg_lambda == 0.005  # SymReg stays on with the env's λ
    assert config.reward.rrd == RRDConfig() and config.reward.sampled_steps == 64
    overlay = load_config([CONF / "walker.yaml", CONF / "method" / "rrd.yaml"])
    assert overlay.method == "rrd" and overlay.reward.name == "rrd" and overlay.agent.symreg_lambda == 1.0
    assert overlay.spec_defaults == ("agent.symreg_lambda",)  # null in the overlay: the spec's λ
    with pytest.raises(ConfigError, match="^method: rrd means reward.name=rrd"):
        load_config([CONF / "walker.yaml"], ["method=rrd"])
    with pytest.raises(ConfigError, match="^method: prism means"):
        load_config([CONF / "walker.yaml"], ["reward.name=rrd", "method=prism"])
    listed = catalogue()
    assert f"  {'rrd':<14} fits the reward model 'rrd' every cycle" in listed
    assert "\n  rrd " in listed.split("methods (overlays")[1].split("ablations")[0]
    text = describe(config)
    assert "reward.rrd.lr = 0.0003" in text and "reward.rrd.batch_size = 4" in text


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["reward.rrd.lr=0"], "^reward.rrd.lr: must be positive, got 0"),
        (["reward.rrd.batch_size=0"], "^reward.rrd.batch_size: must be positive"),
        (["reward.rrd.hidden=-4"], "^reward.rrd.hidden: must be positive"),
        (["reward.rrd.dropout=0.1"], "^reward.rrd.dropout"),
        (["reward.bias_correction=true", "reward.sampled_steps=1"], "^reward.sampled_steps: must be >= 2"),
        (["reward.stacked_fit=true"], "^reward.stacked_fit: must be false with reward.name=rrd"),
    ],
)
def test_bad_rrd_values_are_refused_in_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config([CONF / "quickstart.yaml"], ["reward.name=rrd", *overrides])
    assert "\n" not in str(err.value)


# ---- where the model is used: shaper, relabelling, a run ---------------------------------------------------
def test_the_shaper_and_relabelling_give_the_model_the_next_observation():
    model = RRDRewardModel(RRDNetwork(OBS, ACT, hidden=8, member_seeds=[1])).eval()
    rng = np.random.default_rng(0)
    obs, action, next_obs = (rng.normal(size=n).astype(np.float32) for n in (OBS, ACT, OBS))
    reward = np.array([0.0, -0.5], dtype=np.float32)
    expected = float(model.predict(torch.from_numpy(np.concatenate([obs, action, next_obs]))[None])[0])
    shaper = PredictedRewardShaper(model, sparse_channel=0)
    (stored,) = shaper.push(obs, action, reward, next_obs, False, False, np.ones(2) / 2, False)
    assert stored.reward[0] == pytest.approx(expected, rel=1e-6) and stored.reward[1] == -0.5
    with pytest.raises(ValueError, match="reads the next observation"):
        shaper.predict_step(obs, action, reward)
    from prism.data.replay import ReplayBatch

    batch = ReplayBatch(*(torch.from_numpy(np.stack([x, x])) for x in (obs, action, reward, next_obs)),
                        torch.zeros(2), torch.ones(2, 2) / 2)  # fmt: skip
    relabelled = make_relabel_fn(model, 0)(batch)
    torch.testing.assert_close(relabelled.reward[:, 0], torch.full((2,), expected))


def test_an_rrd_run_fits_shapes_records_and_loads(tmp_path):
    """The toy run with reward.name=rrd: its stores keep s', the shaped channel in replay is the model's
    r̂(s, a, s'), summary.json records each fit's diagnostics, a checkpoint restores the model through the
    registry, and prism.load_run(...).shaped_reward gives the same values."""
    from prism.run.checkpoint import collect_state, restore_state
    from prism.run.fit import fit_run

    run_dir = tmp_path / "run"
    run = fit_run([str(CONF / "quickstart.yaml")], [*toy_run(RRD_TOY), f"run_dir={run_dir}"])
    model = run.loop.model
    assert type(model) is RRDRewardModel and run.agent.shaper.model is model and run.loop.state.fits == 2
    assert run.loop.store.has_next_obs and run.config.method == "rrd"
    rows = run.agent.buffer.all()
    last = slice(200, 400)  # the second cycle's RL steps, shaped by the second fit's model
    features = build_features(
        rows.obs[last], rows.action[last], rows.reward[last], 0, False, rows.next_obs[last]
    )
    torch.testing.assert_close(rows.reward[last, 0], model.predict(features), rtol=1e-5, atol=1e-6)
    summary = json.loads((run_dir / "summary.json").read_text())
    fits = summary["reward_fits"]
    assert [f["cycle"] for f in fits] == [1, 2] and fits[1]["new_episodes"]["pearson"] is not None
    assert all(f["validation"]["segments"] > 0 and len(f["epochs_run"]) == 1 for f in fits)
    restore_state(run, collect_state(run))
    assert run.loop.model is not model and torch.equal(run.loop.model.net.fc1.weight, model.net.fc1.weight)
    assert run.loop.store.has_next_obs and run.agent.shaper.model is run.loop.model

    loaded = prism.load_run(run_dir)
    arrays = {"obs": rows.obs[last], "action": rows.action[last], "reward": rows.reward[last],
              "next_obs": rows.next_obs[last]}  # fmt: skip
    np.testing.assert_allclose(
        loaded.shaped_reward(arrays), rows.reward[last, 0].numpy(), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(ValueError, match="reward model reads next_obs"):
        loaded.shaped_reward({k: v for k, v in arrays.items() if k != "next_obs"})


def test_an_rrd_population_stopped_inside_a_members_fit_resumes_to_the_uninterrupted_run(
    tmp_path, monkeypatch, capsys
):
    """Per-member RRD fits in a two-seed population; killed inside member 1's first fit (member 0's finished
    fit kept), the resumed run ends as the uninterrupted one."""
    from test_reward_fit_snapshots import _kill_and_resume

    inside_member_1 = []

    def decide(state) -> str:
        progress = state["loop"]["fit_progress"]
        if state["loop"]["state"]["phase"] == "fit" and progress[1] is not None:
            assert "model" in progress[0]
            inside_member_1.append(True)
            return "kill" if len(inside_member_1) == 3 else "save"
        return "save"

    overrides = [f"{key}={value}" for key, value in RRD_TOY.items()]
    whole_run, stopped, out = _kill_and_resume(tmp_path, monkeypatch, capsys, decide, *overrides)
    assert "the reward fit of member 1 goes on after epoch" in out
    for seed in (0, 1):
        whole, resumed = (d / f"seed{seed}" for d in (whole_run, stopped))
        assert (resumed / "eval.csv").read_text() == (whole / "eval.csv").read_text()
        fits = [json.loads((d / "summary.json").read_text())["reward_fits"] for d in (whole, resumed)]
        assert [f["validation"] for f in fits[0]] == [f["validation"] for f in fits[1]]
    members = [prism.load_run(whole_run, member=m).reward_model for m in (0, 1)]
    assert all(type(m) is RRDRewardModel for m in members)
    assert not torch.equal(members[0].net.fc1.weight, members[1].net.fc1.weight)


def test_an_rrd_fit_batches_reward_rrd_batch_size_segments_not_resymnets_batch_size():
    """RRD's batch is ``reward.rrd.batch_size`` segments (the released code's 4 episodes), whatever ReSymNet's
    ``reward.batch_size`` says: an epoch over the training split takes ⌈segments / rrd.batch_size⌉ steps."""
    from lightning.pytorch.callbacks import Callback

    class Batches(Callback):
        def __init__(self):
            self.count = 0

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.count += 1

    store = _drifting_store(30, seed=2)
    rrd = RRDConfig(hidden=16, batch_size=3)
    config = RRDRewardConfig(name="rrd", sampled_steps=8, max_epochs=1, patience=1, rrd=rrd)
    batches = Batches()
    _, summary = fit_rrd_model(store, config, seed=0, callbacks=[batches])
    assert summary.n_train_segments > 3 * 2
    assert batches.count == math.ceil(summary.n_train_segments / 3)


def test_an_rrd_fits_optimiser_takes_reward_rrd_lr_and_resymnets_lr_is_refused():
    """RRD's Adam runs at ``reward.rrd.lr`` (not ReSymNet's ``reward.lr`` nor RRD's default), without weight
    decay; ReSymNet's ``reward.lr`` cannot reach an RRD fit: it is refused, naming its owner."""
    from lightning.pytorch.callbacks import Callback

    class Groups(Callback):
        def on_train_start(self, trainer, pl_module):
            self.groups = [dict(group) for group in trainer.optimizers[0].param_groups]

    groups = Groups()
    rrd = RRDConfig(hidden=8, lr=1.25e-3)
    config = RRDRewardConfig(name="rrd", sampled_steps=8, max_epochs=1, patience=1, rrd=rrd)
    fit_rrd_model(_drifting_store(12, seed=1), config, seed=0, callbacks=[groups])
    assert [(g["lr"], g["weight_decay"]) for g in groups.groups] == [(1.25e-3, 0)]
    with pytest.raises(ConfigError, match=r"^reward.lr: .*it is a key of resymnet") as err:
        load_config([CONF / "quickstart.yaml"], ["reward.name=rrd", "reward.lr=0.1"])
    assert "\n" not in str(err.value)
    assert "lr" not in {f for f in RRDRewardConfig.__dataclass_fields__}


def test_an_rrd_fit_clips_no_gradient_and_resymnets_clips_each_member(monkeypatch):
    """RRD's recipe brings no gradient clip (the released code clips none); ReSymNet's clips every step of its
    fit, per member, at ``reward.grad_clip``."""
    import prism.reward.fitting.network_fit as module

    clips: list[float] = []
    original = module.clip_per_member_

    def spy(params, max_norm, *args, **kwargs):
        clips.append(max_norm)
        return original(params, max_norm, *args, **kwargs)

    monkeypatch.setattr(module, "clip_per_member_", spy)
    store = _drifting_store(12, seed=1)
    config = RRDRewardConfig(name="rrd", sampled_steps=8, max_epochs=2, patience=2, rrd=RRDConfig(hidden=8))
    fit_rrd_model(store, config, seed=0)
    assert clips == []
    from prism.reward.models.resymnet_fit import fit_resymnet_model

    resymnet = ReSymNetConfig(
        hidden=8, ensemble_size=2, max_epochs=2, patience=2, grad_clip=0.5, use_dense_features=False
    )
    fit_resymnet_model(store, resymnet, seed=0)
    assert clips and set(clips) == {0.5}
