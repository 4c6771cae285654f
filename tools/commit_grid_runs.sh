#!/usr/bin/env bash
# Commit the small files of every finished study run that git does not have yet (a grid runs for hours and
# a session's end keeps only what is committed):
#
#     bash tools/commit_grid_runs.sh [--report] [PRESET ...]   # default: every docs/results/<preset>/runs
#
# A run is finished when its summary.json exists. Only config.yaml (its run_dir made relative to the results
# folder: runs/<env>/<arm>/seed<k>), eval.csv, front.csv and summary.json are added (tb/, checkpoints/ and logs
# stay out, as .gitignore says); nothing else in the tree is staged, so uncommitted work elsewhere is left alone. One commit names every run it adds.
#
# --report then regenerates the report of each preset that gained runs, and of each preset named on the
# command line (so a rerun redoes a report step that failed after its runs were committed), with `prism
# reproduce --report-only` written into docs/results/<preset>, and commits the files it writes, table.md, the
# CSVs and the figures, as a second commit: the committed report then recomputes from the committed runs at
# every commit, which tests/test_committed_reports.py checks. A run that finishes while the report is made
# (the report reads every finished run in the folder) joins the report's commit, and the report is made
# again if one finished during it. The hand-written report.md is not touched. The prism command is $PRISM if
# set, else the repository's .venv/bin/prism, else `prism` on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
report=0
presets=()
for arg in "$@"; do
  case $arg in
    --report) report=1 ;;
    -*) echo "commit_grid_runs: unknown option $arg (known: --report)" >&2; exit 2 ;;
    *) presets+=("$arg") ;;
  esac
done
named=${#presets[@]}
[ "$named" -gt 0 ] || presets=(docs/results/*/runs)
unsaved_runs() {  # runs folder -> "dir<TAB>file" for each of the four files of finished runs git lacks
  local summary dir name files
  while IFS= read -r summary; do
    dir=$(dirname "$summary")
    files=()
    for name in config.yaml eval.csv front.csv summary.json; do
      [ -f "$dir/$name" ] && files+=("$dir/$name")
    done
    if [ -n "$(git status --porcelain -- "${files[@]}")" ]; then
      for name in "${files[@]}"; do printf '%s\t%s\n' "$dir" "$name"; done
    fi
  done < <(find "$1" -name summary.json -not -path '*/continued/*' | sort)
}
relative_run_dir() {  # file run-folder results-folder: a config.yaml's run_dir made relative to the results folder
  [ "${1##*/}" = config.yaml ] || return 0
  sed -i -E "s|^run_dir: .*$|run_dir: ${2#"$3/"}|" "$1"
}
paths=()
names=()
grown=()
roots=()
for root in "${presets[@]}"; do
  [ -d "$root" ] || root="docs/results/$root/runs"
  [ -d "$root" ] || { echo "commit_grid_runs: no folder $root" >&2; exit 2; }
  roots+=("$root")
  before=${#paths[@]}
  last=""
  while IFS=$'\t' read -r dir file; do
    paths+=("$file")
    [ "$dir" = "$last" ] || names+=("${dir#docs/results/}")
    last=$dir
    # A committed config names its run folder relative to the results folder (runs/<env>/<arm>/seed<k>), not
    # this machine's absolute path; prism reads the folder it is given, so the run still resumes and loads.
    relative_run_dir "$file" "$dir" "$(dirname "$root")"
  done < <(unsaved_runs "$root")
  if [ ${#paths[@]} -gt "$before" ]; then
    grown+=("$(basename "$(dirname "$root")")")
  fi
done
if [ ${#paths[@]} -eq 0 ]; then
  echo "commit_grid_runs: nothing new"
else
  git add -- "${paths[@]}"
  git commit -q -m "results: finished grid runs ${names[*]} (config.yaml, eval.csv, front.csv, summary.json)" -- "${paths[@]}"
  git log --oneline -1
fi
[ "$report" -eq 1 ] || exit 0
if [ -n "${PRISM:-}" ]; then
  prism=$PRISM
elif [ -x .venv/bin/prism ]; then
  prism=.venv/bin/prism
else
  prism=prism
fi
# the presets named on the command line, then those that grew (once each)
to_report=()
if [ "$named" -gt 0 ]; then
  for root in "${roots[@]}"; do to_report+=("$(basename "$(dirname "$root")")"); done
fi
for preset in "${grown[@]}"; do
  [[ " ${to_report[*]} " == *" $preset "* ]] || to_report+=("$preset")
done
for preset in "${to_report[@]}"; do
  results="docs/results/$preset"
  # A run that finishes between the runs commit and the report's read is in the report, so it joins the
  # report's commit; one that finishes during the read may or may not be in it, so the report is made again.
  late=$(unsaved_runs "$results/runs")
  for attempt in 1 2 3 4 5; do
    $prism reproduce --preset "$preset" --report-only --out "$results/runs" --results "$results" > /dev/null
    after=$(unsaved_runs "$results/runs")
    [ "$after" = "$late" ] && break
    late=$after
    [ "$attempt" -lt 5 ] || { echo "commit_grid_runs: $preset: runs kept finishing while the report was made; rerun" >&2; exit 1; }
  done
  written=()
  for file in "$results"/table.md "$results"/*.csv "$results"/*.png; do
    [ -f "$file" ] && written+=("$file")
  done
  late_names=()
  last=""
  while IFS=$'\t' read -r dir file; do
    [ -n "$file" ] || continue
    relative_run_dir "$file" "$dir" "$results"
    written+=("$file")
    [ "$dir" = "$last" ] || late_names+=("${dir#docs/results/}")
    last=$dir
  done <<< "$late"
  if [ ${#written[@]} -eq 0 ] || [ -z "$(git status --porcelain -- "${written[@]}")" ]; then
    echo "commit_grid_runs: $preset report unchanged"
    continue
  fi
  message="$preset report: regenerated from its committed runs"
  [ ${#late_names[@]} -eq 0 ] || message+=", with the runs that finished meanwhile: ${late_names[*]}"
  git add -- "${written[@]}"
  git commit -q -m "$message" -- "${written[@]}"
  git log --oneline -1
done
