"""The stacked S × K reward fit of a population (prism/reward/fitting/stacked.py) equals the members' own fits."""

from __future__ import annotations

import dataclasses

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import Logger
from segment_stores import set_dtype, synthetic_store

from prism.data.datamodule import TrajectorySumDataModule, member_shuffle_seeds
from prism.data.segments import SegmentStore
from prism.reward.config import ReSymNetConfig
from prism.reward.fitting.fit import ensemble_seeds as member_seeds
from prism.reward.fitting.fit_loggers import StoreRoutedLogger
from prism.reward.fitting.stacked import (
    MemberAdamW,
    StackedRewardModule,
    stacked_data,
)
from prism.reward.fitting.trajectory_sum_module import TrajectorySumModule
from prism.reward.models.resymnet_fit import fit_resymnet_model, resymnet_recipe
from prism.reward.models.resymnet_fit import fit_resymnet_population as fit_reward_models_stacked

# On the CPU even on a GPU machine: the equality needs the lone fit's CPU dropout draws.
TRAINER = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
               num_sanity_val_steps=0)  # fmt: skip


def lone_fit(store: SegmentStore, cfg: ReSymNetConfig, seed: int, **trainer) -> TrajectorySumModule:
    """A member's own fit, as fit_resymnet_model runs it with the padded layout, in float64."""
    k = cfg.ensemble_size
    dm = TrajectorySumDataModule(store, batch_size=cfg.batch_size, val_fraction=cfg.val_fraction, seed=seed,
                                 n_members=k, shuffle_seeds=member_shuffle_seeds(seed, k))  # fmt: skip
    dm.setup()
    set_dtype(dm, torch.float64)
    torch.manual_seed(seed)
    module = TrajectorySumModule(resymnet_recipe(cfg), dm.in_features, cfg, member_seeds(seed, k)).double()
    L.Trainer(max_epochs=cfg.max_epochs, **{**TRAINER, **trainer}).fit(module, datamodule=dm)
    return module


def stacked_fit(stores, cfg: ReSymNetConfig, seeds, **trainer):
    """The stacked fit of ``stores`` in float64 (data modules as fit_reward_models_stacked builds them)."""
    data = stacked_data(stores, cfg, seeds)
    for dm in data.dms:
        set_dtype(dm, torch.float64)
    stacked = StackedRewardModule(data.dms[0].in_features, cfg, seeds, resymnet_recipe(cfg)).double()
    L.Trainer(max_epochs=cfg.max_epochs, **{**TRAINER, **trainer}).fit(stacked, datamodule=data)
    return stacked, data


def test_stacked_fit_equals_the_members_own_fits_in_float64():
    """Weights, early stopping, the ensembles handed back and the curves logged: each store's as its lone
    fit's (padded layout, float64, CPU)."""
    # Stores of different sizes: their epochs have 5, 6 and 8 batches, so stores sit out the ends of epochs;
    # a short patience stops networks at different epochs.
    stores = [synthetic_store(45, 1), synthetic_store(60, 2), synthetic_store(75, 3)]
    seeds = [11, 2_007, 40_003]
    cfg = ReSymNetConfig(hidden=16, dropout=0.3, ensemble_size=2, batch_size=8, max_epochs=14, patience=2)
    per_store = [_Scalars() for _ in stores]
    stacked, data = stacked_fit(stores, cfg, seeds, logger=StoreRoutedLogger(per_store, cfg.ensemble_size))
    assert [len(dm.train_dataloader()) for dm in data.dms] == [5, 6, 8]

    lone_curves = [_Scalars() for _ in stores]
    alone = [lone_fit(store, cfg, seed, logger=lg) for store, seed, lg in zip(stores, seeds, lone_curves)]
    k = cfg.ensemble_size
    epochs_run = torch.cat([m.epochs_run for m in alone])
    assert stacked.epochs_run.tolist() == epochs_run.tolist()
    assert len(set(epochs_run.tolist())) > 1  # the networks really stopped at different epochs
    assert stacked.best_epoch.tolist() == torch.cat([m.best_epoch for m in alone]).tolist()
    torch.testing.assert_close(stacked.best_val_loss, torch.cat([m.best_val_loss for m in alone]),
                               rtol=1e-10, atol=1e-12)  # fmt: skip
    for s, module in enumerate(alone):
        for (name, p), (_, q) in zip(stacked.net.named_parameters(), module.net.named_parameters()):
            torch.testing.assert_close(p[s * k : (s + 1) * k], q, rtol=1e-9, atol=1e-11, msg=name)
    # The ensembles handed back are the lone fits' (weights and each store's own scaler).
    for s, (model, dm) in enumerate(zip(stacked.ensembles(data.dms), data.dms)):
        torch.testing.assert_close(model.feature_mean, dm.feature_mean.to(model.feature_mean))
        torch.testing.assert_close(model.net.out.weight, alone[s].net.out.weight, rtol=1e-9, atol=1e-11)
    # Each store's curves are its lone fit's, under the same names and epochs: each network's training and
    # validation loss, the store's own ensemble correlation and networks still training, ending where its lone
    # fit ended (the stacked fit goes on for the other stores).
    for logged, theirs in zip(per_store, lone_curves, strict=True):
        assert {"reward_fit/train_loss/m1", "reward_fit/val_corr", "reward_fit/members_active"} <= set(
            theirs.curves
        )
        _assert_same_curves(logged.curves, theirs.curves, rtol=1e-9, atol=1e-11)


class _Scalars(Logger):
    """An in-memory logger: every scalar as ``(step, value)`` pairs, in the order logged."""

    def __init__(self):
        super().__init__()
        self.curves: dict[str, list[tuple[int, float]]] = {}

    @property
    def name(self) -> str:
        return "memory"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics, step=None) -> None:
        for key, value in metrics.items():
            self.curves.setdefault(key, []).append((step, float(value)))

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass


def _assert_same_curves(mine: dict, theirs: dict, **tolerance) -> None:
    assert sorted(mine) == sorted(theirs)
    for key, curve in theirs.items():
        assert [step for step, _ in mine[key]] == [step for step, _ in curve], key
        torch.testing.assert_close(
            torch.tensor([v for _, v in mine[key]]), torch.tensor([v for _, v in curve]), **tolerance, msg=key
        )


def test_store_routed_logger_splits_networks_and_stores_and_shares_the_rest():
    router = StoreRoutedLogger([_Scalars(), _Scalars()], networks_per_store=3)
    metrics = {"fit/val_loss/m4": 1.0, "fit/val_corr": 0.5, "fit/val_corr/s1": 0.9, "epoch": 2.0}
    assert router.split(metrics) == [{}, {"fit/val_corr": 0.9, "epoch": 2.0, "fit/val_loss/m1": 1.0}]
    metrics["fit/train_loss/m0"] = 3.0
    assert router.split(metrics)[0] == {"fit/val_corr": 0.5, "epoch": 2.0, "fit/train_loss/m0": 3.0}


def test_the_stacked_fits_loggers_get_each_stores_summary():
    stores = [synthetic_store(30, 4), synthetic_store(52, 5)]
    cfg = ReSymNetConfig(hidden=8, dropout=0.2, ensemble_size=2, batch_size=8, max_epochs=6, patience=2)
    loggers = [_Scalars(), _Scalars()]
    models = fit_reward_models_stacked(stores, cfg, [1, 2], loggers=loggers)
    for (_, summary), logged in zip(models, loggers, strict=True):
        last = max(summary.epochs_run) - 1
        assert logged.curves["reward_fit/final_val_corr"] == [(last, summary.val_correlation)]
        assert [logged.curves[f"reward_fit/best_val_loss/m{k}"][0][1] for k in range(2)] == pytest.approx(
            summary.best_val_loss
        )
        assert len(logged.curves["reward_fit/val_loss/m0"]) == last + 1  # while any of its networks trains
    with pytest.raises(ValueError, match="^loggers: one per store"):
        fit_reward_models_stacked(stores, cfg, [1, 2], loggers=loggers[:1])


def test_member_adamw_is_torch_adamw_per_member_and_skips_inactive_members():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    grads = [torch.randn(3, 4, 5, generator=g, dtype=torch.float64) for _ in range(6)]
    active = [[True, True, True], [True, False, True], [False, False, True]] * 2
    mine = torch.nn.Parameter(w.clone())
    opt = MemberAdamW([mine], 3, lr=1e-2, weight_decay=0.1)
    lone = [torch.nn.Parameter(w[m].clone()) for m in range(3)]
    lone_opts = [torch.optim.AdamW([p], lr=1e-2, weight_decay=0.1) for p in lone]
    for grad, on in zip(grads, active):
        mine.grad = grad.clone()
        opt.active = on
        opt.step()
        for m in range(3):
            if on[m]:
                lone[m].grad = grad[m].clone()
                lone_opts[m].step()
    for m in range(3):
        torch.testing.assert_close(mine[m], lone[m], rtol=1e-12, atol=1e-14)
    assert opt.steps == [4, 2, 6]


def test_fit_reward_models_stacked_returns_one_ensemble_per_store(monkeypatch):
    stores = [synthetic_store(30, 4), synthetic_store(40, 5)]
    cfg = ReSymNetConfig(hidden=8, ensemble_size=2, batch_size=8, max_epochs=2, patience=5)
    seen: list[int] = []
    original = StackedRewardModule.on_train_epoch_start

    def record(self):
        seen.append(torch.get_num_threads())
        original(self)

    monkeypatch.setattr(StackedRewardModule, "on_train_epoch_start", record)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:  # reward.threads reaches the stacked fit as it reaches a lone one; the caller's count is restored
        fit_reward_models_stacked(stores, dataclasses.replace(cfg, threads=2), [1, 2])
        assert seen == [2, 2] and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    models = fit_reward_models_stacked(stores, cfg, [1, 2])
    lone, _ = fit_resymnet_model(stores[1], cfg, seed=2, layout="padded")
    assert [m.model.n_members for m in models] == [2, 2]
    feats = stores[1].features[:50]
    # float32 now: the same fit up to rounding (the stacked batch pads to another length).
    torch.testing.assert_close(models[1].model.predict(feats), lone.predict(feats), rtol=1e-4, atol=1e-5)


def test_population_loop_fits_its_members_in_one_stacked_fit(tmp_path):
    """``reward.stacked_fit: true``: the loop fits the population's models in one go, each its member's own
    fit (the per-member CPU fit takes the ragged layout: equal up to float32 rounding over 3 epochs)."""
    from pathlib import Path

    from toy_runs import toy_run

    from prism.config import load_config
    from prism.run.fit import build_run

    conf = Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml"

    def first_models(*overrides: str):
        # device=cpu: the equality needs the CPU dropout draws (also on a machine with a GPU).
        config = load_config([conf], [*toy_run({}), *overrides, "device=cpu", f"run_dir={tmp_path / 'x'}"])
        run = build_run(config, progress_bar=False)
        run.loop._advance(run.agent, None)  # collect, fit, stop at RL
        return run.loop.models, [fits[-1] for fits in run.loop.state.reward_fits]

    stacked, stacked_records = first_models("seeds=[3,5]", "reward.stacked_fit=true")
    per_member, member_records = first_models("seeds=[3,5]")
    # One fit for both: they share its wall time (per-member fits each time their own).
    assert stacked_records[0]["wall_time_s"] == stacked_records[1]["wall_time_s"]
    assert member_records[0]["wall_time_s"] != member_records[1]["wall_time_s"]
    assert [r["epochs_run"] for r in stacked_records] == [r["epochs_run"] for r in member_records]
    for mine, theirs in zip(stacked, per_member):
        for key, value in theirs.state_dict().items():
            torch.testing.assert_close(mine.state_dict()[key], value, rtol=1e-3, atol=1e-4, msg=key)


def test_a_stacked_fit_resumed_from_any_snapshot_is_the_uninterrupted_fit():
    """One snapshot holds every store's fit: weights, per-network AdamW step counts (a store sits out the end of
    each epoch here), early stopping, shuffle and dropout streams. Resumed from it, the stacked fit returns the
    uninterrupted fit's models bit for bit."""
    import io

    stores = [synthetic_store(30, 4), synthetic_store(52, 5)]  # 3 and 5 training batches an epoch
    cfg = ReSymNetConfig(hidden=8, dropout=0.2, ensemble_size=2, batch_size=8, max_epochs=9, patience=2)
    snapshots: list[bytes] = []
    whole = fit_reward_models_stacked(stores, cfg, [1, 2], on_snapshot=snapshots.append, snapshot_every_s=0)
    epochs_run = [e for fitted in whole for e in fitted.summary.epochs_run]
    assert len(set(epochs_run)) > 1  # networks stopped at different epochs
    # one snapshot per epoch but the last, numbered as Lightning counts epochs
    assert [torch.load(io.BytesIO(b), weights_only=False)["epoch"] for b in snapshots] == list(
        range(max(epochs_run) - 1)
    )
    for snapshot in (snapshots[0], snapshots[len(snapshots) // 2], snapshots[-1]):
        resumed = fit_reward_models_stacked(stores, cfg, [1, 2], resume=snapshot)
        for mine, theirs in zip(resumed, whole, strict=True):
            for key, value in theirs.model.state_dict().items():
                assert torch.equal(mine.model.state_dict()[key], value), key
            a, b = mine.summary, theirs.summary
            assert (a.epochs_run, a.best_epoch, a.best_val_loss) == (
                b.epochs_run,
                b.best_epoch,
                b.best_val_loss,
            )
            assert a.wall_time_s > torch.load(io.BytesIO(snapshot), weights_only=False)["prism_fit_wall_s"]


def test_member_adamw_state_dict_keeps_each_members_step_count():
    """Adam's bias correction reads each member's own count: a reloaded optimiser must step as the original."""
    import copy

    g = torch.Generator().manual_seed(1)
    w, grads = torch.randn(3, 4, generator=g), [torch.randn(3, 4, generator=g) for _ in range(4)]
    first, second = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())
    opt = MemberAdamW([first], 3, lr=1e-2, weight_decay=0.1)
    for grad, on in zip(grads[:2], [[True, False, True], [True, False, False]]):
        first.grad, opt.active = grad.clone(), on
        opt.step()
    reloaded = MemberAdamW([second], 3, lr=1e-2, weight_decay=0.1)
    with torch.no_grad():
        second.copy_(first)
    reloaded.load_state_dict(copy.deepcopy(opt.state_dict()))  # as a checkpoint holds it (no shared moments)
    assert reloaded.steps == opt.steps == [2, 0, 1]
    for grad in grads[2:]:
        for param, optimiser in ((first, opt), (second, reloaded)):
            param.grad, optimiser.active = grad.clone(), None
            optimiser.step()
    assert torch.equal(first, second)


def test_a_populations_stacked_fit_shows_its_epochs(tmp_path):
    """The stacked fit runs for as long as every member's fit together: a run's display gets its epochs (one line
    per epoch with ``fit_every_s=0``) and a closing line, named for the seeds it fits."""
    import io
    from pathlib import Path

    from toy_runs import toy_run

    from prism.config import load_config
    from prism.display.progress_lines import LineProgress
    from prism.run.fit import build_run

    conf = Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml"
    overrides = [*toy_run({"reward.max_epochs": 4, "reward.patience": 10}), "seeds=[3,5]"]
    overrides += ["reward.stacked_fit=true", "device=cpu", f"run_dir={tmp_path / 'x'}"]
    run = build_run(load_config([conf], overrides), progress_bar=False)
    log = io.StringIO()
    run.loop.progress = LineProgress(log, fit_every_s=0.0)
    run.loop._advance(run.agent, None)  # collect, fit, stop at RL
    desc = "reward fit (seeds 3, 5, stacked) (cycle 1/2, eq. 1 loss)"
    epochs = [line for line in log.getvalue().splitlines() if f"] {desc}: epoch " in line]  # [h:mm:ss] desc
    assert [int(line.split("epoch ")[1].split("/")[0]) for line in epochs] == [1, 2, 3, 4]
    assert f"{desc}: 4 epochs" in log.getvalue()
    epochs_run = run.loop.state.reward_fits[0][-1]["epochs_run"]
    assert epochs_run == [4] * len(epochs_run)
