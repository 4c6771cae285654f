"""Where a reward fit's scalars go: a fit's closing summary, and a stacked fit's curves split per store.

A lone fit (:func:`~prism.reward.models.resymnet_fit.fit_resymnet_model`) logs its per-epoch curves to its own logger and,
when it ends, its summary (:func:`log_fit_summary`). A population's stacked fit
(:func:`~prism.reward.fitting.stacked.fit_reward_models_stacked`) trains S stores × K networks in one Trainer, whose
one logger is a :class:`StoreRoutedLogger`: it hands each store's logger the scalars a lone fit of that store
would have logged, under the same names, so a member's ``tb/reward_fit/cycle<c>`` reads the same whichever
way its model was fitted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

from prism.reward.fitting.fitter import FitSummary

_NETWORK_KEY = re.compile(r"^(?P<name>.+)/m(?P<index>\d+)$")  # a network's scalar: reward_fit/val_loss/m5
_STORE_KEY = re.compile(r"^(?P<name>.+)/s(?P<index>\d+)$")  # a store's own: reward_fit/val_corr/s1


def log_fit_summary(logger: Logger, summary: FitSummary, log_prefix: str = "reward_fit") -> None:
    """A finished fit's summary scalars (epochs run and best validation loss per network, the ensemble's final
    validation correlation, wall time), at the fit's last epoch; ``summary``: its
    :class:`~prism.reward.fitting.fit.FitSummary`."""
    step = max(0, max(summary.epochs_run) - 1)  # the last epoch: the fit's scalars are per epoch
    final = {f"{log_prefix}/epochs_run/m{i}": float(e) for i, e in enumerate(summary.epochs_run)}
    final.update({f"{log_prefix}/best_val_loss/m{i}": float(v) for i, v in enumerate(summary.best_val_loss)})
    final[f"{log_prefix}/final_val_corr"] = summary.val_correlation
    final[f"{log_prefix}/fit_time_s"] = summary.wall_time_s
    final[f"{log_prefix}/seconds_per_epoch"] = summary.seconds_per_epoch
    logger.log_metrics(final, step=step)
    logger.save()


class StoreRoutedLogger(Logger):
    """The one logger of a stacked fit's Trainer, writing to one logger per store.

    The stacked module numbers its networks store-major (network ``s·K + k`` is store s's network k). A scalar
    named ``…/m<j>`` goes to store ``j // K`` as ``…/m<j % K>``; one named ``…/s<s>`` (a store's own
    ensemble correlation, its networks still training) goes to store s without the suffix, in place of the
    population-wide scalar of that name; any other scalar (the epoch, the population-wide ones) goes to every
    store with scalars of its own in the call, unless the store has its own of that name. A store without any
    (its networks have all stopped: its lone fit would have ended) gets nothing.

    Args:
        loggers: store s's logger at index s.
        networks_per_store: K, the ensemble size.
    """

    def __init__(self, loggers: Sequence[Logger], networks_per_store: int):
        super().__init__()
        self.loggers = list(loggers)
        self.k = int(networks_per_store)

    @property
    def name(self) -> str:
        return "stores"

    @property
    def version(self) -> str:
        return ",".join(str(logger.version) for logger in self.loggers)

    def split(self, metrics: dict[str, float]) -> list[dict[str, float]]:
        """``metrics`` as each store's logger gets them (see the class docstring)."""
        shared: dict[str, float] = {}
        own: list[dict[str, float]] = [{} for _ in self.loggers]
        for key, value in metrics.items():
            if (match := _NETWORK_KEY.match(key)) is not None:
                store, network = divmod(int(match["index"]), self.k)
                own[store][f"{match['name']}/m{network}"] = value
            elif (match := _STORE_KEY.match(key)) is not None:
                own[int(match["index"])][match["name"]] = value
            else:
                shared[key] = value
        return [{**shared, **mine} if mine else {} for mine in own]

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        for logger, mine in zip(self.loggers, self.split(metrics), strict=True):
            if mine:
                logger.log_metrics(mine, step=step)

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        for logger in self.loggers:
            logger.log_hyperparams(params, *args, **kwargs)

    @rank_zero_only
    def save(self) -> None:
        for logger in self.loggers:
            logger.save()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        for logger in self.loggers:
            logger.finalize(status)


__all__ = ["StoreRoutedLogger", "log_fit_summary"]
