"""Population throughput: S CAPQL members in one process vs S solo runs one after another.

Both sides train the same agent class with the same config (docs/method.md §6 settings, mo-hopper-v5 by default) and the
same torch thread count, in this one process. Each side first takes its ``learning_starts`` random steps untimed;
then they alternate in blocks of env steps (population block, then each solo agent's block, …) so that load
changes on a shared machine hit both alike. Only the training loop is timed (from Lightning's
``on_train_start`` to ``on_train_end``: env stepping, updates and Lightning's per-batch cost), not building a
Trainer.

    python tools/bench_population.py [--quick] [--device cpu|cuda] [--seeds 5] [--threads N] [--cuda-graph]
        [--no-solo]

``--cuda-graph`` runs both sides with ``agent.cuda_graph: true``; ``--no-solo`` times the population alone
(``tools/gpu_check.sh`` compares it with morl-baselines' single run instead: S solo runs of S = 32 would take
most of a device session).

The last line is ``aggregate_speedup_vs_solo: <x>x`` = (population env-steps/s summed over members) ÷
(env-steps/s of the solo runs one after another).
"""

from __future__ import annotations

import argparse
import time
import warnings

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from prism.agents.capql import CAPQLModule
from prism.agents.config import CAPQLConfig
from prism.envs import get_env_spec, make_env


class _LoopTimer(Callback):
    """Seconds spent in the training loop of the last fit."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def on_train_start(self, trainer, module) -> None:
        self._start = time.perf_counter()

    def on_train_end(self, trainer, module) -> None:
        self.seconds = time.perf_counter() - self._start


def _fit(agent: CAPQLModule, until: int, accelerator: str) -> float:
    """Train ``agent`` until its clock reads ``until``; seconds in the training loop."""
    timer = _LoopTimer()
    agent.target_env_steps = until
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        max_epochs=-1,
        logger=False,
        callbacks=[timer],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(agent)
    return timer.seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run (under 3 minutes on 2 CPU cores)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--seeds", type=int, default=5, help="S: members of the population (and solo runs)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, the same for both sides")
    parser.add_argument("--env", default="mo-hopper-v5")
    parser.add_argument("--steps", type=int, default=None, help="timed env steps per member")
    parser.add_argument("--block", type=int, default=None, help="env steps per alternation block")
    parser.add_argument("--cuda-graph", action="store_true", help="agent.cuda_graph: true on both sides")
    parser.add_argument("--no-solo", action="store_true", help="time the population only")
    parser.add_argument(
        "--steps-per-batch",
        type=int,
        default=None,
        help="agent.steps_per_batch for both sides (default: config's)",
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_population: --device cuda but CUDA is not available")
    accelerator = "gpu" if args.device == "cuda" else "cpu"
    steps = args.steps or (300 if args.quick else 2000)
    block = args.block or (100 if args.quick else 500)
    learning_starts = 200 if args.quick else 1000

    spec = get_env_spec(args.env)
    config = CAPQLConfig(
        learning_starts=learning_starts,
        buffer_size=100_000,
        log_every=10**9,
        cuda_graph=args.cuda_graph,
        **({} if args.steps_per_batch is None else {"steps_per_batch": args.steps_per_batch}),
    )  # the device is the Trainer's accelerator (_fit)
    seeds = list(range(args.seeds))

    def agent(member_seeds: list[int]) -> CAPQLModule:
        return CAPQLModule(config, spec, lambda member: make_env(spec), seeds=member_seeds)

    population = agent(seeds)
    solos = [] if args.no_solo else [agent([s]) for s in seeds]
    # untimed warm-up: the random-action steps before learning starts, and one first update each
    for a in [population, *solos]:
        _fit(a, learning_starts + 1, accelerator)

    timed = {"population": 0.0, "solo": 0.0}
    done = 0
    while done < steps:
        n = min(block, steps - done)
        target = learning_starts + 1 + done + n
        timed["population"] += _fit(population, target, accelerator)
        timed["solo"] += sum(_fit(a, target, accelerator) for a in solos)
        done += n
        solo = f"solo {args.seeds * done / timed['solo']:.1f}" if solos else "solo not run"
        print(
            f"{done:>6d} steps/member: population {args.seeds * done / timed['population']:.1f}, "
            f"{solo} aggregate env-steps/s",
            flush=True,
        )
    pop_rate = args.seeds * steps / timed["population"]
    print(
        f"device={args.device} threads={args.threads} S={args.seeds} env={args.env} steps/member={steps} "
        f"steps_per_batch={config.steps_per_batch} cuda_graph={args.cuda_graph} torch={torch.__version__}"
    )
    print(f"population_env_steps_per_s: {pop_rate:.1f}")
    if solos:
        solo_rate = args.seeds * steps / timed["solo"]
        print(f"solo_env_steps_per_s: {solo_rate:.1f}")
        print(f"aggregate_speedup_vs_solo: {pop_rate / solo_rate:.2f}x")


if __name__ == "__main__":
    main()
