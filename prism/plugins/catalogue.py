"""``prism list``: what a config can name — envs, methods, ablations and budgets (the overlays in ``conf/``),
reward methods, models and fit losses, backbones — each with one line saying what it is."""

from __future__ import annotations

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
"""The shipped config files (present in a source checkout or an editable install)."""


def _first_sentence(path: Path) -> str:
    """The first sentence of a config file's leading comment."""
    comment = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        comment.append(line[1:].strip())
    text = " ".join(comment)
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _overlay_lines(folder: Path) -> list[str]:
    """One line per overlay file of ``folder``: its name and the first sentence of its comment."""
    lines = [f"  {path.stem:<14} {_first_sentence(path)}" for path in sorted(folder.glob("*.yaml"))]
    return lines or [f"  (no files in {folder})"]


def catalogue(conf_dir: Path = CONF_DIR) -> str:
    """The text ``prism list`` prints."""
    from prism.envs import get_env_spec, registered_env_ids
    from prism.plugins.registry import AGENTS, REWARD_MODELS, REWARDS
    from prism.reward.config import FIT_LOSS_SUMMARIES, FIT_LOSSES

    out = ["envs (env.id; any gymnasium multi-objective env id works too, docs/custom_env.md):"]
    for env_id in registered_env_ids():
        spec = get_env_spec(env_id)
        sparse = spec.objective_names[spec.sparse_channel] if spec.sparse_channel is not None else "none"
        objectives = ", ".join(spec.objective_names)
        out.append(f"  {env_id:<22} objectives: {objectives}; sparse by default: {sparse}")
    for title, sub in (("methods", "method"), ("ablations and options", "ablation"), ("budgets", "budget")):
        out.append(f"{title} (overlays: --config ENV.yaml {conf_dir.name}/{sub}/NAME.yaml):")
        out += _overlay_lines(conf_dir / sub) if conf_dir.is_dir() else [f"  ({conf_dir} not found)"]
    out.append("reward methods (reward.name; or a class path package.module:Shaper):")
    for entry in REWARDS:
        needs = (
            f"fits the reward model {entry.model!r} every cycle" if entry.needs_model else "no reward model"
        )
        out.append(f"  {entry.name:<14} {needs}")
    out.append("reward models (fitted by the reward method of the same name):")
    out += [f"  {entry.name}" for entry in REWARD_MODELS]
    out.append("reward fit losses (reward.loss; ReSymNet's fit, RRD's is always randomized):")
    out += [f"  {name:<14} {FIT_LOSS_SUMMARIES[name]}" for name in FIT_LOSSES]
    out.append("backbones (agent.name; or a class path package.module:Agent):")
    for entry in AGENTS:
        config = entry.config_class()
        out.append(f"  {entry.name:<14} keys: {config.__module__}.{config.__name__}")
    return "\n".join(out) + "\n"
