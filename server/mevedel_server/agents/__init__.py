"""The agent engine: drives an external agent over the Agent Client Protocol."""
