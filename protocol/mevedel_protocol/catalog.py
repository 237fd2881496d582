"""Every custom message: method -> its params and result classes.

The schema generator, the documentation test and the server all read this
table, so a method exists in one place.

A class is named here (``module.Class``, a module of this package) and
imported when it is first asked for: the language server registers a
handler for every method at its start, and creating the 140 attrs
classes (attrs compiles each one's methods) was about 60 ms of its
500 ms CPU; each module now loads with the first message that needs it.
"""

import importlib

import attrs

from . import methods
from .errors import ErrorData
from .settings import Settings


@attrs.frozen
class Message:
    #: ``module.Class`` of the params.
    params_name: str
    #: ``module.Class`` of the result; ``None`` for a notification.
    result_name: str | None

    @property
    def params(self) -> type:
        return wire_class(self.params_name)

    @property
    def result(self) -> type | None:
        return None if self.result_name is None else wire_class(self.result_name)


def wire_class(name: str) -> type:
    """The class ``module.Class`` of this package, its module imported if
    it is not yet."""
    module, _, cls = name.rpartition(".")
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)


REQUESTS: dict[str, Message] = {
    methods.RESOURCE_READ: Message("resource.ReadParams", "resource.ReadResult"),
    methods.RESOURCE_GLOB: Message("resource.GlobParams", "resource.GlobResult"),
    methods.RESOURCE_GREP: Message("resource.GrepParams", "resource.GrepResult"),
    methods.RESOURCE_APPLY_PATCH: Message("resource.ApplyPatchParams", "resource.ApplyPatchResult"),
    methods.ADDRESS_DESCRIBE: Message("address.DescribeParams", "address.DescribeResult"),
    methods.SESSION_LIST: Message("session.SessionListParams", "session.SessionListResult"),
    methods.SESSION_CREATE: Message("session.SessionCreateParams", "session.SessionState"),
    methods.SESSION_OPEN: Message("session.SessionOpenParams", "session.SessionOpenResult"),
    methods.SESSION_CLOSE: Message("session.SessionParams", "session.SessionCloseResult"),
    methods.SESSION_RENAME: Message("session.SessionRenameParams", "session.SessionState"),
    methods.SESSION_SAVE: Message("session.SessionParams", "session.SaveResult"),
    methods.SESSION_RETRY_PUBLICATION: Message("session.SessionParams", "session.SaveResult"),
    methods.SESSION_ABANDON_PUBLICATION: Message("session.SessionParams", "session.AbandonResult"),
    methods.SESSION_ACKNOWLEDGE_MUTATION: Message("session.SessionParams", "session.AcknowledgeMutationResult"),
    methods.SESSION_COMPACT: Message("session.SessionCompactParams", "session.SegmentRotationResult"),
    methods.SESSION_CLEAR: Message("session.SessionParams", "session.SegmentRotationResult"),
    methods.TURN_BEGIN: Message("session.TurnBeginParams", "session.TurnBeginResult"),
    methods.TURN_CAPTURE: Message("session.TurnCaptureParams", "session.TurnCaptureResult"),
    methods.TURN_APPEND: Message("session.TurnAppendParams", "session.TurnAppendResult"),
    methods.TURN_SETTLE: Message("session.TurnSettleParams", "session.SaveResult"),
    methods.TURN_ABORT: Message("session.TurnAbortParams", "session.SaveResult"),
    methods.TURN_LIST: Message("session.SessionParams", "session.TurnListResult"),
    methods.TURN_SHOW: Message("session.TurnShowParams", "session.TurnShowResult"),
    methods.TURN_DIFF: Message("session.TurnDiffParams", "session.TurnDiffResult"),
    methods.TURN_RESTORE_FILE: Message("session.RestoreFileParams", "session.RestoreFileResult"),
    methods.REWIND_PREPARE: Message("lifecycle.RewindPrepareParams", "lifecycle.RewindImpact"),
    methods.REWIND_COMMIT: Message("lifecycle.CommitParams", "lifecycle.InPlaceResult"),
    methods.REDO_LIST: Message("session.SessionParams", "lifecycle.RedoListResult"),
    methods.REDO_PREPARE: Message("lifecycle.RedoPrepareParams", "lifecycle.RedoImpact"),
    methods.REDO_COMMIT: Message("lifecycle.CommitParams", "lifecycle.InPlaceResult"),
    methods.FORK_PREPARE: Message("lifecycle.ForkPrepareParams", "lifecycle.ForkImpact"),
    methods.FORK_COMMIT: Message("lifecycle.CommitParams", "lifecycle.ChildResult"),
    methods.FORK_VARIANTS: Message("lifecycle.ForkPrepareParams", "lifecycle.ForkVariantsResult"),
    methods.WORKTREE_FORK_PREPARE: Message("lifecycle.WorktreeForkPrepareParams", "lifecycle.WorktreeForkImpact"),
    methods.WORKTREE_FORK_COMMIT: Message("lifecycle.CommitParams", "lifecycle.WorktreeForkResult"),
    methods.SAVE_AS_PREPARE: Message("lifecycle.SaveAsPrepareParams", "lifecycle.SaveAsImpact"),
    methods.SAVE_AS_COMMIT: Message("lifecycle.CommitParams", "lifecycle.ChildResult"),
    methods.SESSION_RETRY_RECOVERY: Message("session.SessionParams", "lifecycle.RecoveryResult"),
    methods.SESSION_ABANDON_RECOVERY: Message("session.SessionParams", "lifecycle.RecoveryResult"),
    methods.CONTROL_TAKE: Message("control.ControlTakeParams", "control.ControlTakeResult"),
    methods.CONTROL_RELEASE: Message("session.SessionParams", "control.ControlReleaseResult"),
    methods.CONTROL_GRANT: Message("session.SessionParams", "control.ControlStatus"),
    methods.CONTROL_KEEP: Message("session.SessionParams", "control.ControlStatus"),
    methods.CONTROL_STATUS: Message("session.SessionParams", "control.ControlStatus"),
    methods.SESSION_SET_FOLLOW: Message("follow.SetFollowParams", "follow.FollowState"),
    methods.SESSION_REFRESH: Message("session.SessionParams", "follow.SessionRefreshResult"),
    methods.TURN_PROMPT: Message("agent.TurnPromptParams", "agent.TurnPromptResult"),
    methods.TURN_CANCEL: Message("agent.TurnCancelParams", "agent.TurnCancelResult"),
    methods.AGENT_LIST: Message("agent.AgentListParams", "agent.AgentListResult"),
    methods.AGENT_OPTIONS: Message("agent_options.AgentOptionsParams", "agent_options.AgentOptions"),
    methods.AGENT_SET_OPTION: Message("agent_options.AgentSetOptionParams", "agent_options.AgentOptions"),
    methods.QUEUE_LIST: Message("queue.QueueParams", "queue.QueueState"),
    methods.QUEUE_ADD: Message("queue.QueueAddParams", "queue.QueueEntry"),
    methods.QUEUE_EDIT: Message("queue.QueueEditParams", "queue.QueueEntry"),
    methods.QUEUE_CANCEL: Message("queue.QueueEntryParams", "queue.QueueState"),
    methods.QUEUE_STEER: Message("queue.QueueSteerParams", "queue.QueueEntry"),
    methods.INPUT_HISTORY: Message("input_history.InputHistoryParams", "input_history.InputHistoryResult"),
    methods.ARTIFACT_LIST: Message("artifact.ArtifactListParams", "artifact.ArtifactListResult"),
    methods.ARTIFACT_CREATE: Message("artifact.ArtifactCreateParams", "artifact.ArtifactEntry"),
    methods.ARTIFACT_READ: Message("artifact.ArtifactParams", "artifact.ArtifactReadResult"),
    methods.ARTIFACT_WRITE: Message("artifact.ArtifactWriteParams", "artifact.ArtifactWriteResult"),
    methods.ARTIFACT_ATTACH: Message("artifact.ArtifactParams", "artifact.ArtifactAttachResult"),
    methods.ARTIFACT_DETACH: Message("artifact.ArtifactParams", "artifact.ArtifactAttachResult"),
    methods.ARTIFACT_DUPLICATE: Message("artifact.ArtifactDuplicateParams", "artifact.ArtifactEntry"),
    methods.ARTIFACT_DELETE: Message("artifact.ArtifactParams", "artifact.ArtifactDeleteResult"),
    methods.ARTIFACT_VERSIONS: Message("artifact.ArtifactParams", "artifact.ArtifactVersionsResult"),
    methods.ARTIFACT_SAVE_VERSION: Message("artifact.ArtifactParams", "artifact.ArtifactVersion"),
    methods.ARTIFACT_RESTORE: Message("artifact.ArtifactRestoreParams", "artifact.ArtifactWriteResult"),
    methods.ARTIFACT_COMMENT: Message("artifact.ArtifactCommentParams", "artifact.ArtifactComment"),
    methods.ARTIFACT_REQUEST_HANDOVER: Message("artifact.ArtifactParams", "artifact.ArtifactEntry"),
    methods.ARTIFACT_CONVERSATION: Message("artifact.ArtifactParams", "artifact.ArtifactConversationResult"),
}

#: Server -> client notifications (``mevedel/<area>/did<Event>``).
NOTIFICATIONS: dict[str, Message] = {
    methods.SESSION_DID_CHANGE: Message("session.SessionDidChangeParams", None),
    methods.CONTROL_DID_CHANGE: Message("control.ControlDidChangeParams", None),
    methods.SESSION_DID_PUBLISH: Message("follow.SessionDidPublishParams", None),
    methods.TURN_DID_UPDATE: Message("agent.TurnDidUpdateParams", None),
    methods.AGENT_DID_CHANGE_OPTIONS: Message("agent_options.AgentOptions", None),
    methods.QUEUE_DID_CHANGE: Message("queue.QueueDidChangeParams", None),
    methods.ARTIFACT_DID_CHANGE: Message("artifact.ArtifactDidChangeParams", None),
}

#: ``workspace/executeCommand`` command -> the request it runs.
COMMANDS: dict[str, str] = {
    methods.COMMAND_APPLY_PATCH: methods.RESOURCE_APPLY_PATCH,
    methods.COMMAND_AGENT_SET_OPTION: methods.AGENT_SET_OPTION,
    methods.COMMAND_SESSION_CREATE: methods.SESSION_CREATE,
    methods.COMMAND_SESSION_OPEN: methods.SESSION_OPEN,
    methods.COMMAND_SESSION_CLOSE: methods.SESSION_CLOSE,
    methods.COMMAND_SESSION_RENAME: methods.SESSION_RENAME,
    methods.COMMAND_SESSION_SAVE: methods.SESSION_SAVE,
    methods.COMMAND_SESSION_RETRY_PUBLICATION: methods.SESSION_RETRY_PUBLICATION,
    methods.COMMAND_SESSION_ABANDON_PUBLICATION: methods.SESSION_ABANDON_PUBLICATION,
    methods.COMMAND_SESSION_ACKNOWLEDGE_MUTATION: methods.SESSION_ACKNOWLEDGE_MUTATION,
    methods.COMMAND_SESSION_COMPACT: methods.SESSION_COMPACT,
    methods.COMMAND_SESSION_CLEAR: methods.SESSION_CLEAR,
    methods.COMMAND_TURN_BEGIN: methods.TURN_BEGIN,
    methods.COMMAND_TURN_CAPTURE: methods.TURN_CAPTURE,
    methods.COMMAND_TURN_APPEND: methods.TURN_APPEND,
    methods.COMMAND_TURN_SETTLE: methods.TURN_SETTLE,
    methods.COMMAND_TURN_ABORT: methods.TURN_ABORT,
    methods.COMMAND_REWIND_COMMIT: methods.REWIND_COMMIT,
    methods.COMMAND_REDO_COMMIT: methods.REDO_COMMIT,
    methods.COMMAND_FORK_COMMIT: methods.FORK_COMMIT,
    methods.COMMAND_WORKTREE_FORK_COMMIT: methods.WORKTREE_FORK_COMMIT,
    methods.COMMAND_SAVE_AS_COMMIT: methods.SAVE_AS_COMMIT,
    methods.COMMAND_SESSION_RETRY_RECOVERY: methods.SESSION_RETRY_RECOVERY,
    methods.COMMAND_SESSION_ABANDON_RECOVERY: methods.SESSION_ABANDON_RECOVERY,
    methods.COMMAND_CONTROL_TAKE: methods.CONTROL_TAKE,
    methods.COMMAND_CONTROL_RELEASE: methods.CONTROL_RELEASE,
    methods.COMMAND_CONTROL_GRANT: methods.CONTROL_GRANT,
    methods.COMMAND_CONTROL_KEEP: methods.CONTROL_KEEP,
    methods.COMMAND_SESSION_SET_FOLLOW: methods.SESSION_SET_FOLLOW,
    methods.COMMAND_SESSION_REFRESH: methods.SESSION_REFRESH,
    methods.COMMAND_TURN_PROMPT: methods.TURN_PROMPT,
    methods.COMMAND_TURN_CANCEL: methods.TURN_CANCEL,
    methods.COMMAND_ARTIFACT_CREATE: methods.ARTIFACT_CREATE,
    methods.COMMAND_ARTIFACT_WRITE: methods.ARTIFACT_WRITE,
    methods.COMMAND_ARTIFACT_ATTACH: methods.ARTIFACT_ATTACH,
    methods.COMMAND_ARTIFACT_DETACH: methods.ARTIFACT_DETACH,
    methods.COMMAND_ARTIFACT_DUPLICATE: methods.ARTIFACT_DUPLICATE,
    methods.COMMAND_ARTIFACT_DELETE: methods.ARTIFACT_DELETE,
    methods.COMMAND_ARTIFACT_SAVE_VERSION: methods.ARTIFACT_SAVE_VERSION,
    methods.COMMAND_ARTIFACT_RESTORE: methods.ARTIFACT_RESTORE,
    methods.COMMAND_ARTIFACT_COMMENT: methods.ARTIFACT_COMMENT,
    methods.COMMAND_ARTIFACT_REQUEST_HANDOVER: methods.ARTIFACT_REQUEST_HANDOVER,
    methods.COMMAND_ARTIFACT_CONVERSATION: methods.ARTIFACT_CONVERSATION,
}

#: Types that are not a message body but that clients exchange too.
SHARED_TYPES: dict[str, type] = {"settings": Settings, "errorData": ErrorData}
