# Sourced by the grid drivers (grid_round4.sh, grid_session.sh): make sure the git worktree at $commit exists,
# with a venv of its own, so that main can change while the grid runs. Expects $main, $commit and $worktree;
# returns non-zero (after one line on stderr) when the worktree cannot be made or sits at another commit.
grid_worktree() {
  if [ ! -d "$worktree" ]; then
    git -C "$main" worktree prune
    git -C "$main" worktree add --detach "$worktree" "$commit" || return 2
  fi
  if [ "$(git -C "$worktree" rev-parse HEAD)" != "$(git -C "$main" rev-parse "$commit^{commit}")" ]; then
    echo "grid: $worktree is not at $commit; remove it (git worktree remove) or pass its commit" >&2
    return 2
  fi
  if [ ! -x "$worktree/.venv/bin/prism" ]; then
    python3 -m venv "$worktree/.venv" \
      && "$worktree/.venv/bin/pip" install -q torch==2.13.0 \
      && "$worktree/.venv/bin/pip" install -q -e "$worktree[report]" || return 2  # report: the rliable aggregate
  fi
}
