"""A session's content, pure: bytes per logical path in, bytes out. The
sidecar schema, transcript parts, the turn state machine, checkpoints, the
``history://`` projection and the inspection of what does not load. Nothing
here opens a file."""
