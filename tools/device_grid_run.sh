#!/usr/bin/env bash
# One run of a study grid on the device machine (GPU), from the grid's own commit, its files then filed into
# the grid's folder here. Made for issue 27's N = 1000 sensitivity seeds. On one CPU core such a seed takes
# ~7-8 h, which no session holds. On an H200 a halfcheetah N = 1000 seed's first cycle took 4 min (random
# episodes 68-91 s, a 100-epoch fit 45-60 s, 25 000 RL steps 50-69 s), so a whole seed is ~8 min.
#
#   1. here, from the project root (.device/ from ../shared/device/prepare.sh must exist):
#        bash tools/device_grid_run.sh prepare COMMIT
#      puts COMMIT's source into .device/grid-src (carried with .device; 1.3 MB at f41171b);
#   2. one device call, carry [".device"], timeout_s 600:
#        source .device/env.sh && bash tools/device_grid_run.sh run PRESET ENV ARM SEED [key=value ...]
#      runs the `prism fit` command that COMMIT's `reproduce.py --dry-run` gives for that run, with
#      device=cuda and the overrides given, under `timeout` (DEVICE_RUN_LIMIT_S, default 540).
#      $OUT/ENV-ARM-seedSEED/ gets run.log (the output) and run/ (config.yaml, eval.csv, front.csv,
#      summary.json), so several runs can share one call, each in the background:
#        ( bash tools/device_grid_run.sh run P halfcheetah A 0 & bash tools/device_grid_run.sh run P swimmer A 0 &
#          wait )
#      The run folder lies in .device-runs/ (ignored, not carried), which the device machine keeps while it
#      stays warm: a run the limit cut off is resumed from its last checkpoint by the same command in the
#      next call (reproduce.py --dry-run then gives `prism fit --resume`; the overrides are checked against
#      the run's saved config).
#      A COMMIT before 812b006 (f41171b, the table1-study grid's, included) gets agent.cuda_graph=false
#      added: its graphed update crashes at the first replay after a refit (illegal memory access; seen on
#      an H200, 2026-11-28). The flag changes the speed, not the maths (the eager update is the same one).
#   3. here again:
#        bash tools/device_grid_run.sh collect FILES_AT PRESET ENV ARM SEED
#      copies FILES_AT/ENV-ARM-seedSEED/run/'s files into docs/results/PRESET/runs/ENV/ARM/seed<SEED>/
#      (refused if a summary.json is there already, or if the run did not finish), with the log beside them
#      as seed<SEED>.device.log.
#
# The run's config.yaml keeps device: cuda and its own run_dir, so the report can say where it ran.
set -uo pipefail
main=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: bash tools/device_grid_run.sh prepare COMMIT | run PRESET ENV ARM SEED [key=value ...] | collect FILES_AT PRESET ENV ARM SEED"
die() { echo "device_grid_run: $*" >&2; exit 2; }
command=${1:-}
shift || true

case "$command" in
prepare)
  commit=${1:?$usage}
  [ -d "$main/.device" ] || die ".device/ is missing: run bash ../shared/device/prepare.sh first"
  src="$main/.device/grid-src"
  rm -rf "$src" && mkdir -p "$src"
  git -C "$main" archive "$commit" -- prism conf tools pyproject.toml | tar -x -C "$src" || die "cannot archive $commit"
  # The device image runs prism from source: this writes its entry points (tools/source_metadata.py) and may
  # be newer than COMMIT.
  cp "$main/tools/source_metadata.py" "$src/tools/source_metadata.py"
  echo "$commit" > "$src/COMMIT"
  echo "prepared $src at $(git -C "$main" rev-parse --short "$commit") ($(du -sh "$src" | cut -f1))"
  ;;
run)
  [ $# -ge 4 ] || die "$usage"
  preset=$1 env=$2 arm=$3 seed=$4
  shift 4
  src="$main/.device/grid-src"
  [ -f "$src/COMMIT" ] || die "no .device/grid-src: run 'bash tools/device_grid_run.sh prepare COMMIT' here first"
  out=${OUT:?OUT, the device call output folder, is not set}
  cd "$src" || exit 2
  export MUJOCO_GL=disable PYTHONUNBUFFERED=1
  meta=$(mktemp -d)  # one per run: runs sharing a call do not write each other's metadata
  trap 'rm -rf "$meta"' EXIT  # the metadata is needed only while the run lasts
  python3 tools/source_metadata.py "$meta" > /dev/null || die "cannot write prism's metadata"
  export PYTHONPATH=$meta:$src${PYTHONPATH:+:$PYTHONPATH}  # COMMIT's prism before any other on the path
  grid=${DEVICE_RUN_GRID:-$main/.device-runs}
  mkdir -p "$out/$env-$arm-seed$seed" "$grid" || exit 2
  log="$out/$env-$arm-seed$seed/run.log"
  run_dir=$grid/$env/$arm/seed$seed
  echo "commit $(cat COMMIT); $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" >> "$log"
  if [ -f "$run_dir/summary.json" ]; then  # finished in an earlier call on this (still warm) machine
    echo "$run_dir finished already; its files are copied again" >> "$log"
    rc=0
  else
    # a fresh `prism fit`, or `prism fit --resume RUN_DIR` when an earlier call left the folder
    fit=$(python3 tools/reproduce.py --preset "$preset" --envs "$env" --methods "$arm" --seeds "$seed" \
      --out "$grid" --dry-run | grep -- " -m prism.cli fit " | grep -- "/$arm/seed$seed\$")
    [ -n "$fit" ] || die "reproduce.py --dry-run gives no run $preset/$env/$arm/seed$seed"
    device=${DEVICE_RUN_DEVICE:-cuda}  # cpu only to try the script itself here
    graph_fix=()
    # Before 812b006 the loop kept a graph captured before a refit, whose Trainer frees what it points at.
    grep -q drop_captured_graphs prism/loop/phases.py || graph_fix=(agent.cuda_graph=false)
    echo "\$ $fit device=$device ${graph_fix[*]} $*" >> "$log"
    # shellcheck disable=SC2086  # the command is a word list (paths without spaces)
    timeout -k 10 "${DEVICE_RUN_LIMIT_S:-540}" $fit "device=$device" "${graph_fix[@]}" "$@" >> "$log" 2>&1
    rc=$?
    echo "rc=$rc" >> "$log"
  fi
  mkdir -p "$out/$env-$arm-seed$seed/run"
  for name in config.yaml eval.csv front.csv summary.json; do
    [ -f "$run_dir/$name" ] && cp "$run_dir/$name" "$out/$env-$arm-seed$seed/run/"
  done
  tail -3 "$log" | sed "s|^|$env-$arm-seed$seed: |"
  exit $rc
  ;;
collect)
  [ $# -eq 5 ] || die "$usage"
  preset=$2 env=$3 arm=$4 seed=$5
  files_at=$1/$env-$arm-seed$seed
  [ -f "$files_at/run/summary.json" ] || die "$files_at/run has no summary.json: the run did not finish (see $files_at/run.log)"
  dest="$main/docs/results/$preset/runs/$env/$arm/seed$seed"
  [ -f "$dest/summary.json" ] && die "$dest has a finished run already; nothing copied"
  mkdir -p "$dest"
  for name in config.yaml eval.csv front.csv summary.json; do
    cp "$files_at/run/$name" "$dest/$name" || die "cannot copy $name"
  done
  cp "$files_at/run.log" "$(dirname "$dest")/seed$seed.device.log"
  echo "collected into $dest; commit with: bash tools/commit_grid_runs.sh $preset"
  ;;
*)
  die "$usage"
  ;;
esac
