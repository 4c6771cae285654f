#!/usr/bin/env bash
# Commit the small files of every finished study run that git does not have yet (a grid runs for hours and
# a session's end keeps only what is committed):
#
#     bash tools/commit_grid_runs.sh [--report] [PRESET ...]   # default: every docs/results/<preset>/runs
#
# A run is finished when its summary.json exists. Only config.yaml, eval.csv, front.csv and summary.json are
# added (tb/, checkpoints/ and logs stay out, as .gitignore says); nothing else in the tree is staged, so
# uncommitted work elsewhere is left alone. One commit names every run it adds.
#
# --report then regenerates the report of each preset that gained runs (`prism reproduce --report-only`,
# written into docs/results/<preset>) and commits the files it writes, table.md, the CSVs and the figures,
# as a second commit: the committed report then recomputes from the committed runs at every commit, which
# tests/test_committed_reports.py checks. The hand-written report.md is not touched. The prism command is
# $PRISM if set, else the repository's .venv/bin/prism, else `prism` on PATH.
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
[ ${#presets[@]} -gt 0 ] || presets=(docs/results/*/runs)
paths=()
names=()
grown=()
for root in "${presets[@]}"; do
  [ -d "$root" ] || root="docs/results/$root/runs"
  [ -d "$root" ] || { echo "commit_grid_runs: no folder $root" >&2; exit 2; }
  before=${#paths[@]}
  while IFS= read -r summary; do
    dir=$(dirname "$summary")
    files=()
    for name in config.yaml eval.csv front.csv summary.json; do
      [ -f "$dir/$name" ] && files+=("$dir/$name")
    done
    if [ -n "$(git status --porcelain -- "${files[@]}")" ]; then
      paths+=("${files[@]}")
      names+=("${dir#docs/results/}")
    fi
  done < <(find "$root" -name summary.json -not -path '*/continued/*' | sort)
  if [ ${#paths[@]} -gt "$before" ]; then
    grown+=("$(basename "$(dirname "$root")")")
  fi
done
if [ ${#paths[@]} -eq 0 ]; then
  echo "commit_grid_runs: nothing new"
  exit 0
fi
git add -- "${paths[@]}"
git commit -q -m "results: finished grid runs ${names[*]} (config.yaml, eval.csv, front.csv, summary.json)" -- "${paths[@]}"
git log --oneline -1
[ "$report" -eq 1 ] || exit 0
if [ -n "${PRISM:-}" ]; then
  prism=$PRISM
elif [ -x .venv/bin/prism ]; then
  prism=.venv/bin/prism
else
  prism=prism
fi
for preset in "${grown[@]}"; do
  results="docs/results/$preset"
  $prism reproduce --preset "$preset" --report-only --out "$results/runs" --results "$results" > /dev/null
  written=()
  for file in "$results"/table.md "$results"/*.csv "$results"/*.png; do
    [ -f "$file" ] && written+=("$file")
  done
  if [ ${#written[@]} -eq 0 ] || [ -z "$(git status --porcelain -- "${written[@]}")" ]; then
    echo "commit_grid_runs: $preset report unchanged"
    continue
  fi
  git add -- "${written[@]}"
  git commit -q -m "$preset report: regenerated from its committed runs" -- "${written[@]}"
  git log --oneline -1
done
