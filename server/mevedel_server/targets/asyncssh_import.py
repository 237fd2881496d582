"""asyncssh, imported without the warnings cryptography 51 raises while
asyncssh's modules name its DSA types at import ("DSA is deprecated"): they
went to every SSH command's stderr, where a user can do nothing about them
(DSA keys still load, as before). Every module of ours imports asyncssh from
here."""

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="DSA is deprecated")
    import asyncssh

__all__ = ["asyncssh"]
