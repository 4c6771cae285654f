#!/bin/bash
# The GPU check of the fast path (issue 20) in one command: every step under `timeout` and a global deadline
# (7 min 40 s of steps: the whole check stays under 8 minutes), logs under $OUT, one verdict line per goal.
#
# Prepare on the development machine, from the project root (pytest is not in the device image):
#     PRISM_DEVICE_EXTRA="pytest pluggy iniconfig packaging" bash ../shared/device/prepare.sh
# then one device call with carry [".device"] and timeout_s 560:
#     source .device/env.sh && bash tools/gpu_check.sh
# Locally, without a GPU, every step runs tiny on the CPU to check the script and the verdict parsing:
#     bash tools/gpu_check.sh --dry-run            (OUT defaults to ./gpu_check_out)
#
# Steps (log name: what):
#   graph_check                graph replay vs eager static path, 100 updates, S = 1 and 8 (tools/graph_check.py)
#   cuda_tests                 pytest -m cuda (tests/test_cuda.py)
#   bench_train_graph          bench_train.py --device cuda --quick --cuda-graph (prism graphed, bare graph side)
#   bench_population_s8 / _s32 bench_population.py --device cuda --cuda-graph at S = 8 (with solos) and 32
#   bench_reward_fit           bench_reward_fit.py --device cuda --quick (batched K vs K fits)
#   bench_reward_fit_stacked   bench_reward_fit.py --device cuda --stacked 10 (S = 10 stores of ~122 000 steps)
#   bench_train_eager          bench_train.py --device cuda --quick (graph off: the default)
#   quickstart_population      prism fit, conf/quickstart.yaml shortened, seeds [0,1,2,3], device=cuda, graph on
#   quickstart_deterministic   the same twice with deterministic=true, files compared (tools/determinism_check.py)
# and last `verdicts` (tools/gpu_check_verdicts.py), also printed. The population benches time one block per
# side (each Trainer.fit builds new optimisers, so the graph is captured again: one capture per side). Steps are ordered by the goals they decide;
# one that would start with under 15 s of the deadline left is skipped (its verdict reads MISSING).
# GPU_CHECK_STEPS="cuda_tests quickstart_deterministic" runs only the steps named (the others read MISSING).
set -u
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
SUMMARY=$OUT/gpu_check.log
# Run folders outside $OUT: the device tool returns a limited number of files, and the logs must come back.
RUNS=${GPU_CHECK_RUNS:-${TMPDIR:-/tmp}/gpu_check_runs}
mkdir -p "$RUNS"
: > "$SUMMARY"
BUDGET=${GPU_CHECK_BUDGET_S:-460}
START=$(date +%s)
PY=${PYTHON:-python3}
export MUJOCO_GL=${MUJOCO_GL:-disable} PYTHONUNBUFFERED=1

# step NAME LIMIT_S CMD...: run CMD under timeout (the smaller of LIMIT_S and what is left), log to $OUT/NAME.log
step() {
  local name=$1 limit=$2
  shift 2
  if [ -n "${GPU_CHECK_STEPS:-}" ] && [[ " $GPU_CHECK_STEPS " != *" $name "* ]]; then
    echo "step $name skipped: not in GPU_CHECK_STEPS" | tee -a "$SUMMARY"
    return
  fi
  local left=$((BUDGET - ($(date +%s) - START)))
  if [ "$left" -lt 15 ]; then
    echo "step $name skipped: ${left}s of the deadline left" | tee -a "$SUMMARY"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "step $name rc=$rc $(($(date +%s) - t0))s (limit ${limit}s)" | tee -a "$SUMMARY"
}

# Run from a source tree on PYTHONPATH (the device image: .device/env.sh), prism has no installed metadata, so
# its built-in plug-ins (the `prism.plugins` entry point) would not register and every config would be refused.
# Write the distribution's metadata from pyproject.toml into a directory on PYTHONPATH (nothing is installed;
# tools/source_metadata.py).
if ! $PY -c "import importlib.metadata as m; m.distribution('prism-morl')" 2>/dev/null; then
  META=${TMPDIR:-/tmp}/prism-metadata
  $PY tools/source_metadata.py "$META" > /dev/null || exit 2
  export PYTHONPATH=$META${PYTHONPATH:+:$PYTHONPATH}
fi

{
  echo "gpu_check $(date -u +%FT%TZ) dry_run=$DRY commit=$(git rev-parse --short HEAD 2>/dev/null || echo ?)"
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
} 2>&1 | tee -a "$SUMMARY"

if [ "$DRY" = 1 ]; then
  DEV=cpu
  QS=(env.id=prism/Toy-v0 loop.cycles=1 loop.steps_per_cycle=200 loop.initial_episodes=5 reward.max_epochs=2
      reward.hidden=32 agent.learning_starts=100 agent.batch_size=32 "agent.actor_hidden=[32,32]"
      "agent.critic_hidden=[32,32]" eval.every=200 eval.num_weights=2 eval.episodes=1 eval.final.num_weights=2
      eval.final.episodes=1)
  step graph_check 60 $PY tools/graph_check.py --device cpu --updates 5 --seeds 1 2
  step cuda_tests 60 $PY -m pytest -q -m cuda -rs tests/test_cuda.py
  step bench_train_graph 240 $PY tools/bench_train.py --device cpu --cuda-graph --steps 20 --block 10
  step bench_population_s8 120 $PY tools/bench_population.py --device cpu --quick --seeds 2 --steps 10 --block 10
  step bench_population_s32 120 $PY tools/bench_population.py --device cpu --quick --seeds 3 --steps 10 --block 10 --no-solo
  step bench_reward_fit 120 $PY tools/bench_reward_fit.py --device cpu --quick --episodes 10 --epochs 1 --members 2
  step bench_reward_fit_stacked 120 $PY tools/bench_reward_fit.py --device cpu --stacked 2 --long-segments 2 --short-segments 30 --epochs 1
  step bench_train_eager 240 $PY tools/bench_train.py --device cpu --steps 20 --block 10
else
  DEV=cuda
  QS=(loop.cycles=2 loop.steps_per_cycle=1000 loop.initial_episodes=30 loop.expert_episodes=10
      loop.checkpoint_every=1000 eval.every=1000 eval.final.num_weights=10 eval.final.episodes=1)
  step graph_check 60 $PY tools/graph_check.py --device cuda --updates 100 --seeds 1 8
  step cuda_tests 120 $PY -m pytest -q -m cuda -rs tests/test_cuda.py
  step bench_train_graph 110 $PY tools/bench_train.py --device cuda --quick --cuda-graph
  step bench_population_s8 80 $PY tools/bench_population.py --device cuda --quick --seeds 8 --block 300 --cuda-graph
  step bench_population_s32 60 $PY tools/bench_population.py --device cuda --quick --seeds 32 --steps 200 --block 200 --cuda-graph --no-solo
  step bench_reward_fit 60 $PY tools/bench_reward_fit.py --device cuda --quick
  step bench_reward_fit_stacked 100 $PY tools/bench_reward_fit.py --device cuda --stacked 10 --epochs 3
  step bench_train_eager 90 $PY tools/bench_train.py --device cuda --quick
fi
step quickstart_population 120 $PY -m prism.cli fit --config conf/quickstart.yaml "device=$DEV" "seeds=[0,1,2,3]" \
  agent.cuda_graph=true "${QS[@]}" "run_dir=$RUNS/quickstart_population"
step quickstart_deterministic 150 $PY tools/determinism_check.py --out "$RUNS/quickstart_deterministic" -- \
  --config conf/quickstart.yaml "device=$DEV" "seeds=[0,1,2,3]" agent.cuda_graph=true "${QS[@]}" figures=false
echo "total $(($(date +%s) - START))s" | tee -a "$SUMMARY"
$PY tools/gpu_check_verdicts.py "$OUT" | tee "$OUT/verdicts.log"
