"""The early-stopping rules every reward fit shares (prism/reward/fitting/network_fit.py, NetworkFitModule): patience
counts epochs without a strict improvement, and a network whose patience ran out sits out the training epochs
that follow, held at its best weights, which are the ones validated."""

from __future__ import annotations

import lightning as L
import torch
from segment_stores import synthetic_store

from prism.data.datamodule import TrajectorySumDataModule, member_shuffle_seeds
from prism.reward.config import ReSymNetConfig
from prism.reward.fitting.fit import ensemble_seeds
from prism.reward.fitting.trajectory_sum_module import TrajectorySumModule
from prism.reward.models.resymnet_fit import fit_resymnet_model, resymnet_recipe


def test_a_tie_with_the_best_validation_loss_is_not_an_improvement():
    """Networks whose weights cannot move (a learning rate far below float32's resolution, no dropout) validate
    to the same loss every epoch: the best epoch stays the first, and patience runs out ``patience`` epochs
    later instead of the fit running to ``max_epochs``."""
    store = synthetic_store(40, seed=3, max_length=8)
    cfg = ReSymNetConfig(
        ensemble_size=2, hidden=8, batch_size=8, dropout=0.0, lr=1e-30, max_epochs=10, patience=2
    )
    _, summary = fit_resymnet_model(store, cfg, seed=0)
    assert summary.best_epoch == [0, 0]
    assert summary.epochs_run == [cfg.patience + 1] * 2


def test_a_stopped_network_sits_out_training_and_is_validated_at_its_best_weights():
    """Network 0 starts stopped at its best weights (its current ones): the ragged fit never runs it in training,
    and although AdamW's weight decay still reaches its slice of the stacked tensors, every epoch validates it
    at those weights, which it ends with."""
    store = synthetic_store(60, seed=1, max_length=11)
    cfg = ReSymNetConfig(ensemble_size=3, hidden=16, batch_size=8, dropout=0.3, max_epochs=3, patience=5)
    dm = TrajectorySumDataModule(
        store, batch_size=8, seed=0, n_members=3, shuffle_seeds=member_shuffle_seeds(0, 3), ragged=True
    )
    module = TrajectorySumModule(resymnet_recipe(cfg), store.feature_dim, cfg, ensemble_seeds(0, 3))
    module.stopped[0], module.best_epoch[0] = True, 0
    best = {name: p.detach()[0].clone() for name, p in module.net.named_parameters()}
    trained: list[int] = []
    forward_members = module.net.forward_members

    def spy(features, members, noise=None):
        if module.net.training:
            trained.extend(members)
        return forward_members(features, members, noise=noise)

    module.net.forward_members = spy
    L.Trainer(
        max_epochs=cfg.max_epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    ).fit(module, datamodule=dm)  # fmt: skip
    assert 0 not in trained and set(trained) == {1, 2}
    stopped_val = torch.stack(module.val_history)[:, 0]
    assert len(stopped_val) == cfg.max_epochs and torch.equal(
        stopped_val, stopped_val[:1].expand(cfg.max_epochs)
    )
    trained_val = torch.stack(module.val_history)[:, 1]
    assert not torch.equal(trained_val, trained_val[:1].expand(cfg.max_epochs))  # (the others do move)
    for name, p in module.net.named_parameters():
        assert torch.equal(p.detach()[0], best[name]), name
