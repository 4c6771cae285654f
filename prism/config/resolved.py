"""What a run decides at start for the keys its config leaves ``null`` / ``auto`` (config.yaml's ``resolved:``
block)."""

from __future__ import annotations

from typing import Any

from prism.config.schema import RunConfig, member_seeds
from prism.config.validation import resolve_env_spec, resolve_spec_defaults, sparse_channel
from prism.core.devices import torch_device


def resolved_values(config: RunConfig, spec=None) -> dict[str, Any]:
    """What a run decides at start for the keys its config leaves ``null`` / ``auto``: the device, the hidden
    channel, SymReg's λ, the evaluation reset seed (per member seed in a population), the evaluation worker
    processes per protocol, whether a fit on sampled steps (``reward.loss=randomized``, RRD) corrects its bias
    (``reward.bias_correction``) and torch's threads; with the prism version. Only the keys that apply are
    given."""
    import torch

    from prism import __version__
    from prism.evaluation.pool import planned_workers

    spec = spec if spec is not None else resolve_env_spec(config)
    out: dict[str, Any] = {"prism_version": __version__, "device": str(torch_device(config.device))}
    out["env.sparse_channel"] = sparse_channel(config, spec)
    if hasattr(
        config.agent, "symreg_lambda"
    ):  # a float once loaded; a config built in Python may leave it null
        out["agent.symreg_lambda"] = resolve_spec_defaults(config, spec).agent.symreg_lambda
    seeds = member_seeds(config)
    if config.seeds is None:
        out["eval.seed"] = config.eval.reset_seed(config.seed)
    else:
        out["eval.seed"] = {f"seed{s}": config.eval.reset_seed(s) for s in seeds}
    ev = config.eval
    out["eval.num_workers"] = {
        "periodic": planned_workers(spec, ev.num_workers, ev.num_weights * ev.episodes),
        "final": planned_workers(spec, ev.num_workers, ev.final.num_weights * ev.final.episodes),
    }
    reward = config.reward
    if reward.samples_steps:
        # Only a fit on sampled steps has the correction; null takes the model's own (ReSymNet on, RRD off).
        out["reward.bias_correction"] = reward.bias_corrected
    out["threads"] = config.threads if config.threads > 0 else torch.get_num_threads()
    return out
