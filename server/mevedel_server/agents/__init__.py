"""The agent engine: drives an external agent over the Agent Client Protocol."""

from ..lazy_exports import lazy_exports
from .sdk_import import install

# Before any module here imports the SDK (agents/sdk_import.py).
install()

#: Each public name's module, imported on first use: the settings' checks
#: (``.config``) do not load the engine or the ACP SDK.
_EXPORTS = {
    '.config': ('AgentConfig', 'EXECUTION_LOG_BOUNDS', 'TERMINAL_OUTPUT_BOUNDS', 'agents_problem', 'cli_config_path', 'load_cli_config', 'log_dir', 'specs_from'),
    '.delegation.names': ('CONCURRENT_BOUNDS', 'DEPTH_BOUNDS'),
    '.engine': ('AgentEngine', 'PermissionQuestion', 'PromptOutcome', 'TurnUpdate'),
    '.errors': ('PROMPT_ABORTED', 'AgentError'),
    '.file_state': ('kept_reads',),
    '.prompt_queue': ('PromptQueue', 'QueueEntry', 'QueueState'),
    '.session_options': ('OptionsView', 'parse_assignment'),
    '.turn_recovery': ('stopped_turn_changes',),
}

__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
