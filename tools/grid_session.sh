#!/usr/bin/env bash
# One working session of the table1-study grid (issue 27), sized to end before the session does:
#
#     nohup bash tools/grid_session.sh COMMIT DEADLINE > grid-session.log 2>&1 &
#     bash tools/grid_session.sh f41171b "+165 min" --dry-run        # the plan, nothing run
#
# Why: a session lasts at most 180 minutes and ends what is running, and the next one may start on a fresh
# machine where ignored files, checkpoints among them, are gone; a run the session's end interrupts cannot
# count on resuming. Only runs that finish inside one session count, and starting one that cannot finish
# wastes its core.
#
# GRID_PRESET (default table1-study) names the `prism reproduce` preset, e.g. halfcheetah-paper:
#
#     GRID_PRESET=halfcheetah-paper GRID_LANES="0:halfcheetah" GRID_ARMS="e-oracle e-baseline e-uniform" \
#         GRID_MINUTES="e-oracle=60 e-baseline=70 e-uniform=90" GRID_WORKTREE=/work/grid-z \
#         nohup bash tools/grid_session.sh COMMIT "+170 min" > /work/grid-logs/z.log 2>&1 &
#
# Each lane (GRID_LANES, "CPU:env" pairs, default "0:halfcheetah 1:swimmer") runs one job at a time, pinned
# to its CPU, from the worktree at COMMIT (GRID_WORKTREE, default /work/grid-r4b; made with its own venv if
# missing, as grid_round4.sh does). A lane picks, in GRID_ARMS order (default "e-prism e-uniform
# e-prism-N1000"), the first unfinished seed whose expected minutes end before DEADLINE (any `date -d` time:
# "02:40", "+165 min"); when nothing fits, the lane stops. A lane may name several envs, "1:walker,swimmer":
# it takes the first env's jobs, then, when none of those is left that fits, the next env's (a lane whose own
# env runs out helps the slower one). GRID_MINUTES (default "e-prism=145 e-uniform=22
# e-prism-N1000=540"; "env/arm=MIN" entries, e.g. "walker/a-wo-dense=18", override an arm's "arm=MIN" on that
# env) holds one core's measured times with some margin: an N = 250 PRISM seed took 110-142 min
# with its core to itself (seeds 1 and 2 on halfcheetah and swimmer; 135 and 163 min when tests shared it), a
# uniform seed 14-21 min there, and an N = 1000 seed is ~7-8 h, which no session holds.
# The lane runs the `prism fit` command `reproduce.py --dry-run` gives for that seed (a folder left by an
# interrupted run is resumed, from scratch when its checkpoints are gone), with no report in between;
# finished runs and runs that another process holds are never picked. Lanes on one env ("0:walker 1:walker")
# share its jobs: each claims a job before it runs it, so no job runs twice. GRID_STAGGER (minutes, default 0)
# starts the k-th lane k × GRID_STAGGER minutes after the first, so that two learned seeds' reward fits (the
# memory-heavy phase) do not run side by side from the start.
# Commit finished runs with tools/commit_grid_runs.sh.
set -uo pipefail
# The whole script is one { … } block, so bash parses all of it before running any: a session runs for hours,
# and an edit of this file in place meanwhile (an editor, a script) would otherwise be read from the middle of a line.
{
commit=${1:?usage: bash tools/grid_session.sh COMMIT DEADLINE [--dry-run]}
deadline_text=${2:?usage: bash tools/grid_session.sh COMMIT DEADLINE [--dry-run]}
dry=0
[ "${3:-}" = "--dry-run" ] && dry=1
main=$(cd "$(dirname "$0")/.." && pwd)
worktree=${GRID_WORKTREE:-/work/grid-r4b}
lanes=${GRID_LANES:-"0:halfcheetah 1:swimmer"}
arms=${GRID_ARMS:-"e-prism e-uniform e-prism-N1000"}
minutes=${GRID_MINUTES:-"e-prism=145 e-uniform=22 e-prism-N1000=540"}
reports=${GRID_REPORTS:-/work/grid-results}
stagger=${GRID_STAGGER:-0}
preset=${GRID_PRESET:-table1-study}
[[ "$stagger" =~ ^[0-9]+$ ]] || { echo "grid_session: GRID_STAGGER: '$stagger' is not a whole number of minutes" >&2; exit 2; }
deadline=$(date -d "$deadline_text" +%s) || { echo "grid_session: DEADLINE: cannot read '$deadline_text'" >&2; exit 2; }
[ "$deadline" -gt "$(date +%s)" ] || { echo "grid_session: DEADLINE '$deadline_text' is already past" >&2; exit 2; }

expected_s() {  # env arm -> expected seconds: "env/arm=MIN" over "arm=MIN" (one line on stderr and 2 if neither)
  local pair key fallback=""
  for pair in $minutes; do
    key=${pair%%=*}
    [[ "${pair#*=}" =~ ^[0-9]+$ ]] || { echo "grid_session: GRID_MINUTES: '$pair' is not KEY=whole minutes" >&2; return 2; }
    [ "$key" = "$1/$2" ] && { echo $((${pair#*=} * 60)); return 0; }
    [ "$key" = "$2" ] && fallback=$((${pair#*=} * 60))
  done
  [ -n "$fallback" ] && { echo "$fallback"; return 0; }
  echo "grid_session: GRID_MINUTES has no entry for arm '$2'" >&2
  return 2
}
for pair in $lanes; do
  [[ "$pair" =~ ^[0-9]+:[A-Za-z0-9_-]+(,[A-Za-z0-9_-]+)*$ ]] || {
    echo "grid_session: GRID_LANES: '$pair' is not CPU:env or CPU:env,env,..." >&2; exit 2; }
  IFS=, read -ra lane_envs <<< "${pair#*:}"
  for env in "${lane_envs[@]}"; do
    for arm in $arms; do expected_s "$env" "$arm" > /dev/null || exit 2; done
  done
done

# shellcheck source=tools/grid_worktree.sh
. "$main/tools/grid_worktree.sh"
grid_worktree || exit 2
cd "$worktree" || exit 2
export MUJOCO_GL=disable PYTHONUNBUFFERED=1
py="$worktree/.venv/bin/python"
out="$main/docs/results/$preset/runs"
pending() {  # env arm -> the `prism fit` commands still to run, one per line (fresh, or --resume of a folder)
  local command dir
  # A grid commit before 5c8cc74 prints every job's command in --dry-run, finished and held ones too (later
  # ones print those as '#' lines); each command ends with its run folder.
  "$py" tools/reproduce.py --preset "$preset" --envs "$1" --methods "$2" --parallel 1 --out "$out" \
    --results "$reports/$preset" --dry-run 2>/dev/null | grep -- " -m prism.cli fit " |
    while IFS= read -r command; do
      dir=${command##* }
      dir=${dir#run_dir=}
      [ -f "$dir/summary.json" ] && continue  # finished
      # held by another prism process (the run lock is flock on the folder): left to it
      [ -d "$dir" ] && ! flock -n "$dir" true && continue
      # claimed by another lane that has not started its prism yet
      [ -f "$claims/${dir//\//_}.lock" ] && ! flock -n "$claims/${dir//\//_}.lock" true && continue
      echo "$command"
    done
}
seed_of() { sed -n 's|.*/seed\([0-9]*\)$|\1|p' <<< "$1"; }

# A lane claims a job before running it: flock on a lock file of its own (not the run folder, which the prism it
# starts locks), held on a descriptor the lane keeps until the job ends and released if the lane dies. Lanes that
# pick the same job at the same moment (two lanes on one env, started together) then run it once.
claims=${TMPDIR:-/tmp}/prism-grid-claims
claim() {  # command -> 0 when this lane now holds the job, 1 when another lane does
  local dir=${1##* }
  dir=${dir#run_dir=}
  mkdir -p "$claims"
  [ -n "${claim_fd:-}" ] && exec {claim_fd}>&-
  exec {claim_fd}> "$claims/${dir//\//_}.lock"
  flock -n "$claim_fd"
}

lane() {  # cpu envs(comma-separated) index
  local cpu=$1 envs=$2 env now arm need command picked seed log rc
  local -A planned=()  # dry runs: the jobs this lane's plan has already taken
  local -a lane_envs
  IFS=, read -ra lane_envs <<< "$envs"
  now=$(date +%s)
  if [ $(($3 * stagger)) -gt 0 ]; then
    echo "lane $cpu:$envs: starts $(($3 * stagger)) min after the first lane (GRID_STAGGER)"
    if [ "$dry" = 1 ]; then now=$((now + $3 * stagger * 60)); else sleep $(($3 * stagger * 60)); now=$(date +%s); fi
  fi
  while :; do
    picked=""
    # The lane's envs in order, each env's arms in GRID_ARMS order: a later env only when the earlier ones
    # have nothing left that fits before the deadline.
    for env in "${lane_envs[@]}"; do
      for arm in $arms; do
        need=$(expected_s "$env" "$arm")
        [ $((now + need)) -le "$deadline" ] || continue
        while IFS= read -r command; do
          [ -n "$command" ] && [ -z "${planned[$command]:-}" ] && { picked=$command; break; }
        done < <(pending "$env" "$arm")
        [ -n "$picked" ] && break
      done
      [ -n "$picked" ] && break
    done
    if [ -z "$picked" ]; then
      echo "lane $cpu:$envs: nothing left that ends before $(date -u -d "@$deadline" +%TZ); stopping"
      return 0
    fi
    seed=$(seed_of "$picked")
    if [ "$dry" = 0 ] && ! claim "$picked"; then
      # Another lane (this session's or another grid_session's) picked the same job in the same second,
      # before either's prism had locked the folder: leave it to that lane and pick again.
      planned[$picked]=1
      continue
    fi
    echo "lane $cpu:$env: $(date -u -d "@$now" +%TZ) start $arm seed $seed (expected $((need / 60)) min)"
    if [ "$dry" = 1 ]; then
      planned[$picked]=1
      now=$((now + need))
      continue
    fi
    # As reproduce.py's own runner does: the command, then its output, appended to the run's log.
    log="$out/$env/$arm/seed$seed.log"
    mkdir -p "$(dirname "$log")"
    printf '\n$ %s\n' "$picked" >> "$log"
    # shellcheck disable=SC2086  # the command is a word list (paths without spaces)
    taskset -c "$cpu" $picked >> "$log" 2>&1
    rc=$?
    echo "lane $cpu:$env: $(date -u +%TZ) $arm seed $seed ended, rc=$rc"
    [ -f "$out/$env/$arm/seed$seed/summary.json" ] || { echo "lane $cpu:$env: no summary.json; stopping"; return 1; }
    now=$(date +%s)
  done
}

echo "grid_session: worktree $worktree at $(git rev-parse --short HEAD); deadline $(date -u -d "@$deadline" +%FT%TZ)"
status=0
pids=()
index=0
for pair in $lanes; do
  lane "${pair%%:*}" "${pair#*:}" "$index" &
  pids+=($!)
  index=$((index + 1))
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
echo "grid_session: $(date -u +%FT%TZ) done, status $status"
exit $status
}
