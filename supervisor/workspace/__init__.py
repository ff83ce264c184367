"""Task workspaces: a git worktree per task, or the shared ``project_dir``
(:mod:`supervisor.workspace.model`)."""
