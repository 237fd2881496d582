"""Who may write a session, and the one commit point: workspace identity and
session ids, lease generations, immutable publications, their closed
records, and control-transfer requests."""
