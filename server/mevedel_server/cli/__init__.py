"""The ``mevedel`` command line. Its public surface is the command itself:
the entry point ``mevedel_server.cli.main:main`` (also ``python -m
mevedel_server.cli``), which dispatches to one module per subcommand (see
``main.COMMANDS``).

Nothing is imported here, so ``python -m mevedel_server.cli.main`` runs
without importing its own module twice.
"""
