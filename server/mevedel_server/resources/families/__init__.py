"""One module per address family (``work://``, ``project://``,
``shared://``, ``history://``, ``artifact://``, ``mcp://``, ``memory://``,
``skill://``, ``mevedel://``; ``unavailable`` answers the families not
served here). Each says what its addresses name and how an operation on
one is prepared; the engine (``..engine``) runs it."""
