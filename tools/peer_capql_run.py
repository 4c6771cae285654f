"""morl-baselines' CAPQL as a peer arm of a study (issue 60): trained by the library itself (PyPI
``morl-baselines``, never vendored) with a preset's e-oracle settings wherever it exposes them, and evaluated by
prism's own protocol, so that HV, EUM, VO and take-off are measured exactly as for prism's runs:

    taskset -c 0 python tools/peer_capql_run.py --preset halfcheetah-paper --env halfcheetah --seed 0

The run folder, ``docs/results/<preset>/runs/<env>/morlb-capql/seed<k>`` by default, gets the four files of a
prism run: ``eval.csv`` (prism's periodic protocol every ``eval.every`` env steps, then the final protocol's
row), ``front.csv``, ``summary.json`` (``method: morlb-capql``; ``peer`` names the library, its version, the
settings it was given and those it does not expose) and ``config.yaml`` (the prism config of the e-oracle run
whose settings it was given, labelled ``morlb-capql``: a record, not something prism trains).

The periodic evaluations hook the library's ``update`` (called once per env step after ``learning_starts``), so
training is one uninterrupted ``train`` call: calling ``train`` in chunks would reset the env mid-episode at
every chunk. A finished run (its ``summary.json``) is skipped; an unfinished one starts again from scratch (the
library's save/load would not restore its random streams).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARM = "morlb-capql"

NOT_EXPOSED = {
    "agent.actor_hidden / agent.critic_hidden": "one net_arch for both (ours are equal here, [256, 256])",
    "init": "its own layer_init, not prism's orthogonal init with zero biases",
    "log-prob": "ε = 1e-6 inside the tanh correction's log and a clamp to ±1e3 (prism: the exact, unbounded form)",
    "agent.steps_per_batch": "no Lightning batches (the same maths: one update per env step)",
    "training env": "mo_gymnasium.make(env id), reset once with the seed (prism: its own env stack, seeded resets)",
    "seeds": "its seed_everything stream, not prism's per-purpose streams: seed k is not prism's seed k",
}
"""What the peer cannot be given as prism runs it (the report lists these)."""


def oracle_config(preset_name: str, env: str, seed: int):
    """The prism config of ``preset``'s e-oracle run of (env, seed): the settings the peer is given."""
    from prism.config import load_config
    from prism.experiments.runner import Job, fit_command
    from prism.experiments.studies import load_preset

    command = fit_command(Job(env, "e-oracle", (seed,), False), load_preset(preset_name), Path("/nowhere"))
    at = command.index("--config") + 1
    files = [c for c in command[at:] if c.endswith(".yaml")]
    keys = [c for c in command[at:] if "=" in c and not c.startswith(("run_dir=", "method_label="))]
    return load_config(files, keys)


def peer_settings(config) -> dict:
    """The library's constructor arguments from prism's config (what it exposes)."""
    agent = config.agent
    if list(agent.actor_hidden) != list(agent.critic_hidden):
        raise SystemExit(
            "peer_capql_run: morl-baselines' CAPQL takes one net_arch; actor and critic sizes differ"
        )
    return {
        "learning_rate": agent.lr,
        "gamma": agent.gamma,
        "tau": agent.tau,
        "buffer_size": agent.buffer_size,
        "net_arch": list(agent.actor_hidden),
        "batch_size": agent.batch_size,
        "num_q_nets": agent.n_critics,
        "alpha": agent.alpha,
        "learning_starts": agent.learning_starts,
        "gradient_updates": 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="halfcheetah-paper")
    parser.add_argument("--env", default="halfcheetah")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument(
        "--steps", type=int, default=None, help="env steps (default: the preset's cycles × M)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="runs folder (default docs/results/<preset>/runs)"
    )
    args = parser.parse_args()

    import dataclasses

    import mo_gymnasium
    import numpy as np
    import torch
    from morl_baselines.multi_policy.capql.capql import CAPQL

    from prism.config import resolve_env_spec, to_yaml
    from prism.evaluation.pool import EvalEnvPool
    from prism.evaluation.records import append_csv, eval_row
    from prism.evaluation.rollout import evaluate_policy
    from prism.metrics.classes import evaluation_metrics
    from prism.run.outputs import write_front_csv

    out = args.out or ROOT / "docs" / "results" / args.preset / "runs"
    run_dir = out / args.env / ARM / f"seed{args.seed}"
    if (run_dir / "summary.json").is_file():
        print(f"peer_capql_run: {run_dir} is finished")
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "eval.csv").unlink(missing_ok=True)  # an unfinished run starts again from scratch
    config = oracle_config(args.preset, args.env, args.seed)
    config = dataclasses.replace(config, method_label=ARM, run_dir=str(run_dir), seed=args.seed)
    spec = resolve_env_spec(config)
    steps = args.steps or config.loop.cycles * config.loop.steps_per_cycle
    eval_cfg = config.eval.resolved(args.seed)
    settings = peer_settings(config)
    torch.set_num_threads(max(config.threads, 1))
    (run_dir / "config.yaml").write_text(
        "# morl-baselines' CAPQL (tools/peer_capql_run.py) was given this e-oracle run's settings where it\n"
        "# exposes them (summary.json's peer block); prism does not train this config.\n" + to_yaml(config)
    )

    env = mo_gymnasium.make(spec.id)
    env.reset(seed=args.seed)
    env.action_space.seed(args.seed)
    agent = CAPQL(env, **settings, log=False, seed=args.seed, device="cpu")
    pool = EvalEnvPool(spec, num_workers=0)
    metrics = evaluation_metrics(
        spec.ref_point,
        spec.n_objectives,
        eval_cfg.eum_weights,
        eval_cfg.vo_preferences,
        eval_cfg.preference_seed,
    )

    def act(obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return agent.policy.get_action(obs, weight)

    def mean(obs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return agent.policy(obs, weight)[0]

    def evaluate(protocol, final: bool):
        result = evaluate_policy(
            act, spec, weights=protocol.num_weights, episodes=protocol.episodes, gamma=protocol.gamma,
            seed=protocol.reset_seed(), mean_fn=mean, eum_weights=protocol.eum_weights,
            vo_preferences=protocol.vo_preferences, preference_seed=protocol.preference_seed, pool=pool,
        )  # fmt: skip
        metrics.reset()
        metrics.update(torch.from_numpy(result.returns))
        result = dataclasses.replace(result, **{k: float(v) for k, v in metrics.compute().items()})
        append_csv(
            run_dir / "eval.csv", eval_row(result, spec.objective_names, agent.global_step, final=final)
        )
        print(
            f"[{agent.global_step}] {'final' if final else 'periodic'}: HV {result.hv:.6g} EUM {result.eum:.6g}",
            flush=True,
        )
        return result

    update = agent.update

    def update_and_evaluate() -> None:
        update()
        if agent.global_step % eval_cfg.every == 0:
            evaluate(eval_cfg, final=False)

    agent.update = update_and_evaluate
    wall0, cpu0 = time.perf_counter(), time.process_time()
    agent.train(total_timesteps=steps, eval_env=None, ref_point=np.asarray(spec.ref_point))
    final = evaluate(eval_cfg.final_protocol(), final=True)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    pool.close()
    write_front_csv(run_dir / "front.csv", final, spec.objective_names)
    row = eval_row(final, spec.objective_names, agent.global_step)
    protocol = eval_cfg.final_protocol()
    summary = {
        "method": ARM,
        "env": spec.id,
        "seed": args.seed,
        "env_steps": agent.global_step,
        "wall_time_s": wall,
        "cpu_time_s": cpu,
        "wall_time_s_last_process": wall,
        "final_protocol": {
            "num_weights": protocol.num_weights,
            "episodes": protocol.episodes,
            "seed": protocol.reset_seed(),
        },  # fmt: skip
        "final": {k: v for k, v in row.items() if isinstance(v, (int, float))},
        # No critic_divergence_step: prism's watch reads its own log windows, which the library's loop has not.
        "reward_fits": [],
        "peer": {
            "library": "morl-baselines",
            "version": version("morl-baselines"),
            "class": "morl_baselines.multi_policy.capql.capql.CAPQL",
            "settings": settings,
            "not_exposed": NOT_EXPOSED,
        },
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"peer_capql_run: done, {run_dir}: final HV {final.hv:.6g}, EUM {final.eum:.6g}, {wall / 60:.1f} min"
    )


if __name__ == "__main__":
    main()
