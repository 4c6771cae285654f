"""TensorBoard's HParams tab for prism runs: each finished run records its config next to its final HV, EUM and
VO, so the tab lines runs up by any key (``tensorboard --logdir runs``, HPARAMS).

The hyperparameters are the run's config flattened to dotted keys (``loop.cycles``, ``agent.lr``,
``env.id``, …) with the values the run resolved for keys left ``null`` / ``auto`` (``agent.symreg_lambda``,
``env.sparse_channel``, ``device``, ``eval.seed``, …; what ``config.yaml``'s ``resolved:`` block lists).
Numbers, booleans and strings are kept as they are, a list is shown as its text, and an unset key (``None``)
is left out. The metrics are the ``eval_final/*`` scalars the final evaluation logs in the same run.

Written once at the end, when the final evaluation exists (a continued run writes it again with its new
budget; TensorBoard shows the newest). The summaries go straight to the run's own event file (as Lightning's
``log_hyperparams`` does), not to a sub-run as ``SummaryWriter.add_hparams`` would.
"""

from __future__ import annotations

import dataclasses
from typing import Any

HPARAM_METRICS = ("eval_final/hv", "eval_final/eum", "eval_final/vo")
"""The metrics the HParams tab shows per run: the final evaluation's, logged under these tags."""


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def hparam_values(config: Any, spec: Any = None) -> dict[str, int | float | str | bool]:
    """The run's hyperparameters for the HParams tab (see the module docstring)."""
    from prism.config import resolved_values

    values = dataclasses.asdict(config)
    values.pop("spec_defaults", None)  # not a key: which keys the loader filled from the env spec
    flat = _flatten(values)
    flat.update({k: v for k, v in resolved_values(config, spec).items() if not isinstance(v, dict)})
    out: dict[str, int | float | str | bool] = {}
    for key, value in sorted(flat.items()):
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            value = str(list(value))
        if isinstance(value, (bool, int, float, str)):
            out[key] = value
    return out


def log_hparams(logger: Any, config: Any, spec: Any = None) -> None:
    """Write the HParams summaries of ``config`` with :data:`HPARAM_METRICS` into ``logger``'s run (a Lightning
    ``TensorBoardLogger``); a logger without a TensorBoard writer is skipped."""
    from torch.utils.tensorboard.summary import hparams

    from prism.core.tb_writer import tensorboard_writer

    experiment = tensorboard_writer(logger)
    if experiment is None:
        return
    # metric values are not part of these summaries: the tab reads each metric's latest scalar in the run
    summaries = hparams(hparam_values(config, spec), {name: 0.0 for name in HPARAM_METRICS})
    writer = experiment._get_file_writer()
    for summary in summaries:
        writer.add_summary(summary)
    experiment.flush()
