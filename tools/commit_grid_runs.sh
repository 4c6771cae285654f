#!/usr/bin/env bash
# Commit the small files of every finished study run that git does not have yet (a grid runs for hours and
# a session's end keeps only what is committed):
#
#     bash tools/commit_grid_runs.sh [PRESET ...]      # default: every docs/results/<preset>/runs
#
# A run is finished when its summary.json exists. Only config.yaml, eval.csv, front.csv and summary.json are
# added (tb/, checkpoints/ and logs stay out, as .gitignore says); nothing else in the tree is staged, so
# uncommitted work elsewhere is left alone. One commit names every run it adds.
set -euo pipefail
cd "$(dirname "$0")/.."
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(docs/results/*/runs)
paths=()
names=()
for root in "${presets[@]}"; do
  [ -d "$root" ] || root="docs/results/$root/runs"
  [ -d "$root" ] || { echo "commit_grid_runs: no folder $root" >&2; exit 2; }
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
done
if [ ${#paths[@]} -eq 0 ]; then
  echo "commit_grid_runs: nothing new"
  exit 0
fi
git add -- "${paths[@]}"
git commit -q -m "results: finished grid runs ${names[*]} (config.yaml, eval.csv, front.csv, summary.json)" -- "${paths[@]}"
git log --oneline -1
