"""Whole-session transactions, each two-phase (``prepare_*`` reads and
returns the impact with a state token, ``commit_*`` rechecks it and acts):
Rewind, Redo, Fork, Worktree Fork, Save As, with the snapshot cut, the
recovery journal and the project-file and git helpers they share."""
