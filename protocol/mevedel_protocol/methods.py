"""Method, notification and command names of the mevedel LSP extension.

Requests are ``mevedel/<area>/<verb>``; server-to-client notifications are
``mevedel/<area>/did<Event>``. Every mutating request is also reachable as a
``workspace/executeCommand`` command named ``mevedel.<area>.<verb>``, so a
generic LSP client can call it.
"""

RESOURCE_READ = "mevedel/resource/read"
RESOURCE_GLOB = "mevedel/resource/glob"
RESOURCE_GREP = "mevedel/resource/grep"
RESOURCE_APPLY_PATCH = "mevedel/resource/applyPatch"
ADDRESS_DESCRIBE = "mevedel/address/describe"

SESSION_LIST = "mevedel/session/list"
SESSION_CREATE = "mevedel/session/create"
SESSION_OPEN = "mevedel/session/open"
SESSION_CLOSE = "mevedel/session/close"
SESSION_RENAME = "mevedel/session/rename"
SESSION_SAVE = "mevedel/session/save"
SESSION_RETRY_PUBLICATION = "mevedel/session/retryPublication"
SESSION_ABANDON_PUBLICATION = "mevedel/session/abandonPublication"
SESSION_COMPACT = "mevedel/session/compact"
SESSION_CLEAR = "mevedel/session/clear"
TURN_BEGIN = "mevedel/turn/begin"
TURN_CAPTURE = "mevedel/turn/capture"
TURN_APPEND = "mevedel/turn/append"
TURN_SETTLE = "mevedel/turn/settle"
TURN_ABORT = "mevedel/turn/abort"
TURN_LIST = "mevedel/turn/list"
TURN_SHOW = "mevedel/turn/show"
REWIND_PREPARE = "mevedel/rewind/prepare"
REWIND_COMMIT = "mevedel/rewind/commit"
REDO_LIST = "mevedel/redo/list"
REDO_PREPARE = "mevedel/redo/prepare"
REDO_COMMIT = "mevedel/redo/commit"
FORK_PREPARE = "mevedel/fork/prepare"
FORK_COMMIT = "mevedel/fork/commit"
FORK_VARIANTS = "mevedel/fork/variants"
WORKTREE_FORK_PREPARE = "mevedel/worktreeFork/prepare"
WORKTREE_FORK_COMMIT = "mevedel/worktreeFork/commit"
SAVE_AS_PREPARE = "mevedel/saveAs/prepare"
SAVE_AS_COMMIT = "mevedel/saveAs/commit"
SESSION_RETRY_RECOVERY = "mevedel/session/retryRecovery"
SESSION_ABANDON_RECOVERY = "mevedel/session/abandonRecovery"
CONTROL_TAKE = "mevedel/control/take"
CONTROL_RELEASE = "mevedel/control/release"
CONTROL_GRANT = "mevedel/control/grant"
CONTROL_KEEP = "mevedel/control/keep"
CONTROL_STATUS = "mevedel/control/status"
SESSION_SET_FOLLOW = "mevedel/session/setFollow"
SESSION_REFRESH = "mevedel/session/refresh"

#: Server -> client notifications.
SESSION_DID_CHANGE = "mevedel/session/didChange"
CONTROL_DID_CHANGE = "mevedel/control/didChange"
SESSION_DID_PUBLISH = "mevedel/session/didPublish"

#: ``workspace/executeCommand`` names; each takes exactly one argument, the
#: params object of the request it runs (see ``catalog.COMMANDS``).
COMMAND_APPLY_PATCH = "mevedel.resource.applyPatch"
COMMAND_SESSION_CREATE = "mevedel.session.create"
COMMAND_SESSION_OPEN = "mevedel.session.open"
COMMAND_SESSION_CLOSE = "mevedel.session.close"
COMMAND_SESSION_RENAME = "mevedel.session.rename"
COMMAND_SESSION_SAVE = "mevedel.session.save"
COMMAND_SESSION_RETRY_PUBLICATION = "mevedel.session.retryPublication"
COMMAND_SESSION_ABANDON_PUBLICATION = "mevedel.session.abandonPublication"
COMMAND_SESSION_COMPACT = "mevedel.session.compact"
COMMAND_SESSION_CLEAR = "mevedel.session.clear"
COMMAND_TURN_BEGIN = "mevedel.turn.begin"
COMMAND_TURN_CAPTURE = "mevedel.turn.capture"
COMMAND_TURN_APPEND = "mevedel.turn.append"
COMMAND_TURN_SETTLE = "mevedel.turn.settle"
COMMAND_TURN_ABORT = "mevedel.turn.abort"
COMMAND_REWIND_COMMIT = "mevedel.rewind.commit"
COMMAND_REDO_COMMIT = "mevedel.redo.commit"
COMMAND_FORK_COMMIT = "mevedel.fork.commit"
COMMAND_WORKTREE_FORK_COMMIT = "mevedel.worktreeFork.commit"
COMMAND_SAVE_AS_COMMIT = "mevedel.saveAs.commit"
COMMAND_SESSION_RETRY_RECOVERY = "mevedel.session.retryRecovery"
COMMAND_SESSION_ABANDON_RECOVERY = "mevedel.session.abandonRecovery"
COMMAND_CONTROL_TAKE = "mevedel.control.take"
COMMAND_CONTROL_RELEASE = "mevedel.control.release"
COMMAND_CONTROL_GRANT = "mevedel.control.grant"
COMMAND_CONTROL_KEEP = "mevedel.control.keep"
COMMAND_SESSION_SET_FOLLOW = "mevedel.session.setFollow"
COMMAND_SESSION_REFRESH = "mevedel.session.refresh"

#: The scheme of read-only virtual documents (see docs/protocol.md).
VIRTUAL_SCHEME = "mevedel-resource"

#: The configuration section clients use for mevedel settings.
CONFIGURATION_SECTION = "mevedel"

#: ``Diagnostic.source`` of every diagnostic this server publishes.
DIAGNOSTIC_SOURCE = "mevedel"
