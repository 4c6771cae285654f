#!/usr/bin/env bash
# The round-4 experiment queue (issues R and U) in one driver, resumable by rerunning the same command:
#
#     bash tools/grid_round4.sh COMMIT            # e.g. in the background: nohup bash tools/grid_round4.sh <sha> &
#
# It runs from a git worktree of this repository at COMMIT (/work/grid-r4 unless GRID_WORKTREE says otherwise),
# with a venv of its own, created on first use, so that main can change while the grid runs. Each run writes
# into main's results folders (docs/results/<preset>/runs/<env>/<arm>/seed<k>); a finished run (summary.json
# present) is skipped when the command is rerun, an interrupted one resumes from its checkpoint if that
# survived. Commit each finished run's config.yaml, eval.csv, front.csv and summary.json as they land (tb/,
# logs and checkpoints are ignored).
#
# Queue, in order: table1-study on walker2d; reward-budget (issue 28's hopper arm); table1-study on halfcheetah,
# then swimmer. One run at a time, pinned to CPU 0 (GRID_CPUS), leaving the other core to the developer.
set -uo pipefail
commit=${1:?usage: bash tools/grid_round4.sh COMMIT}
main=$(cd "$(dirname "$0")/.." && pwd)
worktree=${GRID_WORKTREE:-/work/grid-r4}
cpus=${GRID_CPUS:-0}
reports=${GRID_REPORTS:-/work/grid-results}

# shellcheck source=tools/grid_worktree.sh
. "$main/tools/grid_worktree.sh"
grid_worktree || exit 2
cd "$worktree" || exit 2
export MUJOCO_GL=disable PYTHONUNBUFFERED=1
py="$worktree/.venv/bin/python"
step() {  # preset, env, then extra arguments
  local preset=$1 env=$2
  shift 2
  echo "=== $(date -u +%FT%TZ) $preset $env (worktree $(git rev-parse --short HEAD))"
  taskset -c "$cpus" "$py" tools/reproduce.py --preset "$preset" --envs "$env" --parallel 1 \
    --out "$main/docs/results/$preset/runs" --results "$reports/$preset" "$@"
}
status=0
step table1-study walker || status=1
step reward-budget hopper || status=1
step table1-study halfcheetah || status=1
step table1-study swimmer || status=1
echo "=== $(date -u +%FT%TZ) queue done, status $status"
exit $status
