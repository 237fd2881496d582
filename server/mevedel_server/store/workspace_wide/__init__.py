"""Work over every session of a workspace: listing with the action each
lease allows, publication collection and expired-session cleanup."""
