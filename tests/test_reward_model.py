"""ReSymNet ensemble, trajectory-sum loss and the Lightning fit (per-member early stopping, restore, logging)."""

from __future__ import annotations

import math

import lightning as L
import numpy as np
import pytest
import torch
from segment_stores import synthetic_store

from prism.data.datamodule import TrajectorySumDataModule, member_shuffle_seeds
from prism.data.segments import SegmentStore
from prism.reward.config import ReSymNetConfig
from prism.reward.fitting.fit import ensemble_seeds as member_seeds
from prism.reward.fitting.network_fit import clip_per_member_
from prism.reward.fitting.trajectory_sum_module import TrajectorySumModule
from prism.reward.losses import pearson_correlation, segment_sums, trajectory_sum_loss
from prism.reward.models.resymnet import ReSymNetEnsemble, ReSymNetRewardModel
from prism.reward.models.resymnet_fit import fit_resymnet_model, resymnet_recipe


def _store(n_seg: int = 80, seed: int = 0, dense: bool = True) -> SegmentStore:
    """Segments of 2–11 steps with a known per-step reward r = x0 + 0.5·x1² (features: obs 3, act 1, dense 1)."""
    return synthetic_store(n_seg, seed, max_length=11, dense=dense)


def _small(**kw) -> ReSymNetConfig:
    base = dict(ensemble_size=2, hidden=16, max_epochs=8, patience=3, batch_size=8)
    base.update(kw)
    return ReSymNetConfig(**base)


# ---- pure functions ------------------------------------------------------------------------------------
def test_segment_sums_equal_naive_loop():
    torch.manual_seed(0)
    k, n, b = 3, 50, 7
    values = torch.randn(k, n)
    ids = torch.randint(0, b + 1, (k, n))  # id b = padding
    out = segment_sums(values, ids, b)
    naive = torch.zeros(k, b)
    for kk in range(k):
        for t in range(n):
            if ids[kk, t] < b:
                naive[kk, ids[kk, t]] += values[kk, t]
    torch.testing.assert_close(out, naive)


def test_trajectory_sum_loss_matches_definition_and_ignores_padding():
    torch.manual_seed(1)
    pred = torch.randn(2, 20, requires_grad=True)
    ids = torch.randint(0, 5, (2, 20))
    targets = torch.randn(2, 4)
    loss = trajectory_sum_loss(pred, ids, targets)
    for k in range(2):
        sums = torch.stack([pred[k][ids[k] == i].sum() for i in range(4)])
        assert float(loss[k].detach()) == pytest.approx(
            float(((sums - targets[k]) ** 2).mean().detach()), rel=1e-5
        )
    loss.sum().backward()
    assert torch.all(pred.grad[ids == 4] == 0)  # padded steps get no gradient


def test_pearson_matches_numpy():
    x, y = torch.randn(100), torch.randn(100)
    y = y + x
    assert float(pearson_correlation(x, y)) == pytest.approx(
        np.corrcoef(x.numpy(), y.numpy())[0, 1], abs=1e-5
    )
    assert float(pearson_correlation(x, torch.ones(100))) == 0.0


# ---- network -------------------------------------------------------------------------------------------
def test_architecture_and_init():
    net = ReSymNetEnsemble(3, 10, hidden=32, dropout=0.3, residual=True, member_seeds=[1, 2, 3])
    assert len(net.blocks) == 2
    bound = math.sqrt(6.0 / 10)  # Kaiming-uniform, ReLU gain, fan_in 10
    w = net.inp.weight
    assert w.shape == (3, 10, 32) and w.abs().max() <= bound and w.abs().max() > 0.8 * bound
    assert torch.all(net.inp.bias == 0) and torch.all(net.blocks[0]["fc2"].bias == 0)
    out_bound = 0.01 * math.sqrt(6.0 / (32 + 1))
    assert net.out.weight.abs().max() <= out_bound
    x = torch.randn(40, 10)
    assert net(x, dropout=False).abs().max() < 0.2  # initial predictions ≈ 0
    # Members differ; a member equals a lone model with the same seed (outputs on shared inputs).
    assert not torch.equal(net.inp.weight[0], net.inp.weight[1])
    alone = ReSymNetEnsemble(1, 10, hidden=32, member_seeds=[2])
    torch.testing.assert_close(alone(x, dropout=False)[0], net(x, dropout=False)[1])
    # Shared-input path == per-member input path.
    torch.testing.assert_close(net(x, dropout=False), net(x.expand(3, -1, -1), dropout=False))
    # Dropout only when asked.
    net.train()
    assert not torch.equal(net(x), net(x))
    net.eval()
    assert torch.equal(net(x), net(x))


def test_without_residual_variant():
    net = ReSymNetEnsemble(2, 6, hidden=8, residual=False)
    assert len(net.blocks) == 0
    names = {n for n, _ in net.named_parameters()}
    assert names == {"inp.weight", "inp.bias", "ln_in.weight", "ln_in.bias", "out.weight", "out.bias"}
    x = torch.randn(5, 6)
    h = torch.relu(torch.nn.functional.layer_norm(x @ net.inp.weight[0] + net.inp.bias[0], (8,)))
    torch.testing.assert_close(
        net(x, dropout=False)[0], (h @ net.out.weight[0] + net.out.bias[0]).squeeze(-1)
    )


def test_loss_reaches_every_member_parameter_and_only_its_own():
    torch.manual_seed(0)
    net = ReSymNetEnsemble(3, 5, hidden=8, dropout=0.0)
    x = torch.randn(3, 30, 5)
    ids = torch.randint(0, 4, (3, 30))
    targets = torch.randn(3, 4) * 5
    trajectory_sum_loss(net(x), ids, targets).sum().backward()
    for name, p in net.named_parameters():
        for k in range(3):
            assert p.grad[k].abs().sum() > 0, f"{name} member {k} got no gradient"
    # The loss of member 1 alone moves only member 1's slices.
    net.zero_grad()
    trajectory_sum_loss(net(x), ids, targets)[1].backward()
    for name, p in net.named_parameters():
        assert torch.all(p.grad[0] == 0) and torch.all(p.grad[2] == 0), name
        assert p.grad[1].abs().sum() > 0, name


def test_per_member_clip_equals_clip_of_each_member_alone():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(3, 4, 5)), torch.nn.Parameter(torch.zeros(3, 1, 5))]
    grads = [torch.randn(3, 4, 5) * torch.tensor([0.01, 3.0, 10.0]).view(3, 1, 1), torch.randn(3, 1, 5)]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    clip_per_member_(params, 1.0)
    for k in range(3):
        alone = [torch.nn.Parameter(torch.zeros(4, 5)), torch.nn.Parameter(torch.zeros(1, 5))]
        for p, g in zip(alone, grads):
            p.grad = g[k].clone()
        torch.nn.utils.clip_grad_norm_(alone, 1.0)
        for p, q in zip(params, alone):
            torch.testing.assert_close(p.grad[k], q.grad)


# ---- fitting ---------------------------------------------------------------------------------------------
def _naive_member_val_loss(
    model: ReSymNetRewardModel, store: SegmentStore, val_segments: torch.Tensor
) -> torch.Tensor:
    """Per-member MSE of segment sums on the validation segments, one segment at a time."""
    off = store.segment_offsets
    width = model.in_features
    errs = []
    for s in val_segments.tolist():
        preds = model.member_predictions(store.features[off[s] : off[s + 1], :width])  # [K, T]
        errs.append((preds.sum(1) - store.targets[s]) ** 2)
    return torch.stack(errs).mean(0)


def test_fit_restores_best_validation_weights_and_is_deterministic():
    store = _store(80)
    cfg = _small(max_epochs=12, patience=3)
    model, summary = fit_resymnet_model(store, cfg, seed=3)
    assert isinstance(model, ReSymNetRewardModel) and model.n_members == 2 and not model.training
    val = _naive_member_val_loss(model, store, summary.val_segments)
    torch.testing.assert_close(val, torch.tensor(summary.best_val_loss), rtol=1e-4, atol=1e-5)
    for k in range(2):
        # Early stopping per member: either the patience ran out after its best or max_epochs was reached.
        assert summary.epochs_run[k] in (summary.best_epoch[k] + cfg.patience + 1, cfg.max_epochs)
    # The scaler is stored with the model and predict() applies it.
    assert torch.all(model.feature_scale > 0) and model.feature_mean.abs().sum() > 0
    again, _ = fit_resymnet_model(store, cfg, seed=3)
    x = store.features[:50]
    torch.testing.assert_close(again.predict(x), model.predict(x))
    other, _ = fit_resymnet_model(store, cfg, seed=4)
    assert not torch.allclose(other.predict(x), model.predict(x))


def test_module_tracks_history_and_restores_best():
    store = _store(60)
    cfg = _small(ensemble_size=3, max_epochs=10, patience=2, dropout=0.3)
    dm = TrajectorySumDataModule(store, batch_size=8, seed=0, n_members=3)
    dm.setup()
    module = TrajectorySumModule(resymnet_recipe(cfg), dm.in_features, cfg, member_seeds(0, 3))
    trainer = L.Trainer(
        max_epochs=10, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(module, datamodule=dm)
    history = torch.stack(module.val_history)  # [epochs, K]
    for k in range(3):
        run = int(module.epochs_run[k])
        best = history[:run, k].min()
        assert float(module.best_val_loss[k]) == pytest.approx(float(best))
        assert int(module.best_epoch[k]) == int(history[:run, k].argmin())
    model = ReSymNetRewardModel(module.net, dm.use_dense_features)
    model.set_scaler(dm.feature_mean, dm.feature_scale)
    torch.testing.assert_close(
        _naive_member_val_loss(model, store, dm.val_segments), module.best_val_loss, rtol=1e-4, atol=1e-5
    )


def test_batched_member_equals_member_trained_alone():
    """With dropout off, member k of a K=2 fit ends with the weights of a K=1 fit with member k's seeds."""
    store = _store(60, seed=2)
    cfg2 = _small(ensemble_size=2, dropout=0.0, max_epochs=10, patience=2)
    cfg1 = _small(ensemble_size=1, dropout=0.0, max_epochs=10, patience=2)

    def run(cfg, init_seeds, shuffles):
        dm = TrajectorySumDataModule(
            store, batch_size=8, seed=0, n_members=len(init_seeds), shuffle_seeds=shuffles
        )
        module = TrajectorySumModule(resymnet_recipe(cfg), dm.store.feature_dim, cfg, init_seeds)
        L.Trainer(
            max_epochs=cfg.max_epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, num_sanity_val_steps=0,
        ).fit(module, datamodule=dm)  # fmt: skip
        return module

    seeds, shuffles = member_seeds(0, 2), member_shuffle_seeds(0, 2)
    both = run(cfg2, seeds, shuffles)
    for k in range(2):
        alone = run(cfg1, [seeds[k]], [shuffles[k]])
        assert int(alone.best_epoch[0]) == int(both.best_epoch[k])
        assert int(alone.epochs_run[0]) == int(both.epochs_run[k])
        for (name, p), (_, q) in zip(both.net.named_parameters(), alone.net.named_parameters()):
            torch.testing.assert_close(p[k], q[0], rtol=1e-4, atol=1e-5, msg=name)


def test_without_dense_features_input_width_and_caller_rng_untouched():
    store = _store(30)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    model, _ = fit_resymnet_model(
        store, _small(max_epochs=2, use_dense_features=False, ensemble_size=1), seed=0
    )
    torch.testing.assert_close(torch.rand(3), expected_next)  # the fit forks the global RNG
    assert model.in_features == store.obs_dim + store.act_dim == 4
    assert not model.use_dense_features
    assert model.net.inp.weight.shape[1] == 4
    with pytest.raises(ValueError, match="dense"):
        fit_resymnet_model(_store(30, dense=False), _small(max_epochs=1), seed=0)


def test_save_and_load_ensemble(tmp_path):
    model, _ = fit_resymnet_model(_store(30), _small(max_epochs=2, residual=False), seed=0)
    torch.save(model.to_dict(), tmp_path / "reward.pt")
    loaded = ReSymNetRewardModel.from_dict(torch.load(tmp_path / "reward.pt", weights_only=True))
    x = torch.randn(7, 5)
    torch.testing.assert_close(loaded.predict(x), model.predict(x))


def test_tensorboard_logging(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorBoardLogger(tmp_path, name="tb", version=0)
    fit_resymnet_model(_store(40), _small(max_epochs=3, patience=5), logger=logger, seed=0)
    acc = EventAccumulator(str(tmp_path / "tb" / "version_0"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in (
        "reward_fit/train_loss/m0",
        "reward_fit/train_loss/m1",
        "reward_fit/val_loss/m0",
        "reward_fit/val_loss/m1",
        "reward_fit/val_corr",
        "reward_fit/epochs_run/m0",
        "reward_fit/epochs_run/m1",
    ):
        assert tag in tags, f"{tag} missing from {sorted(tags)}"
    assert len(acc.Scalars("reward_fit/val_loss/m0")) == 3
    assert acc.Scalars("reward_fit/epochs_run/m1")[-1].value == 3
    # against epochs (Lightning's `step` key), with no bare `epoch` tag beside them
    assert [e.step for e in acc.Scalars("reward_fit/val_loss/m0")] == [0, 1, 2] and "epoch" not in tags


def test_the_ragged_fit_backpropagates_one_member_at_a_time():
    """Member by member, forward then backward: the peak of the tensors autograd keeps for backward in a K = 3
    fit is a lone member's (K = 1), where one backward of the summed loss would keep all three graphs. Every
    segment has 2 steps, so every member's batch is the same size."""
    import weakref

    def peak_saved_bytes(members: int) -> int:
        live = {"now": 0, "peak": 0}

        class Saved:
            def __init__(self, tensor: torch.Tensor):
                self.tensor = tensor

        def release(n: int) -> None:
            live["now"] -= n

        def pack(tensor: torch.Tensor) -> Saved:
            saved, n = Saved(tensor), tensor.numel() * tensor.element_size()
            live["now"] += n
            live["peak"] = max(live["peak"], live["now"])
            weakref.finalize(saved, release, n)  # freed with the graph, after its backward
            return saved

        config = ReSymNetConfig(ensemble_size=members, hidden=32, max_epochs=1, batch_size=8, dropout=0.1)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved.tensor):
            fit_resymnet_model(synthetic_store(64, seed=1, max_length=2), config, seed=5, layout="ragged")
        return live["peak"]

    one, three = peak_saved_bytes(1), peak_saved_bytes(3)
    assert one > 0 and three < 1.5 * one, (one, three)


def test_fit_options_are_exactly_the_shared_drivers_keyword_options():
    """FitOptions types the ``**options`` that fit_resymnet_model and fit_rrd_model pass on to
    fit_trajectory_sums unchanged: a keyword option added to (or retyped in) the driver must appear in it too,
    and the two fits keep the driver's positional arguments and defaults."""
    import inspect
    import typing

    from prism.reward.fitting.fit import FitOptions, fit_trajectory_sums
    from prism.reward.models.resymnet_fit import fit_resymnet_model
    from prism.reward.models.rrd import fit_rrd_model

    driver = inspect.signature(fit_trajectory_sums).parameters
    keyword_only = [name for name, p in driver.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    option_types = typing.get_type_hints(FitOptions)
    driver_types = typing.get_type_hints(fit_trajectory_sums)
    assert sorted(option_types) == sorted(keyword_only)
    assert {name: driver_types[name] for name in keyword_only} == option_types
    shared = [name for name, p in driver.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    shared.remove("recipe")  # each fit supplies its own recipe
    for fit in (fit_resymnet_model, fit_rrd_model):
        params = inspect.signature(fit).parameters
        assert [n for n, p in params.items() if p.kind is inspect.Parameter.VAR_KEYWORD] == ["options"]
        assert [n for n, p in params.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD] == shared
        assert all(params[name].default == driver[name].default for name in shared)
