"""The agent engine: drives an external agent over the Agent Client Protocol."""

from .sdk_import import install

# Before any module here imports the SDK (agents/sdk_import.py).
install()
