"""The resolver engine every family shares: ``resolver`` (``prepare`` ->
``Attempt`` -> ``execute``), the context and options an operation runs
with, where a family's files are (``places``) and how a path stays inside
its root (``containment``), the walk, Glob and Grep over a target
(``tree``), the Read projection and the results."""
