"""Seeing another process's commits: session watchers (inotify or polling)
and the pure computation of what a newer publication changes for a
follower."""
