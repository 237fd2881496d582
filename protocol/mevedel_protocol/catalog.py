"""Every custom message: method -> its params and result classes.

The schema generator, the documentation test and the server all read this
table, so a method exists in one place.
"""

import attrs

from . import methods
from .address import DescribeParams, DescribeResult
from .errors import ErrorData
from .resource import (
    ApplyPatchParams,
    ApplyPatchResult,
    GlobParams,
    GlobResult,
    GrepParams,
    GrepResult,
    ReadParams,
    ReadResult,
)
from .settings import Settings


@attrs.frozen
class Message:
    params: type
    #: ``None`` for a notification.
    result: type | None


REQUESTS: dict[str, Message] = {
    methods.RESOURCE_READ: Message(ReadParams, ReadResult),
    methods.RESOURCE_GLOB: Message(GlobParams, GlobResult),
    methods.RESOURCE_GREP: Message(GrepParams, GrepResult),
    methods.RESOURCE_APPLY_PATCH: Message(ApplyPatchParams, ApplyPatchResult),
    methods.ADDRESS_DESCRIBE: Message(DescribeParams, DescribeResult),
}

#: Server -> client notifications (``mevedel/<area>/did<Event>``).
NOTIFICATIONS: dict[str, Message] = {}

#: ``workspace/executeCommand`` command -> the request it runs.
COMMANDS: dict[str, str] = {methods.COMMAND_APPLY_PATCH: methods.RESOURCE_APPLY_PATCH}

#: Types that are not a message body but that clients exchange too.
SHARED_TYPES: dict[str, type] = {"settings": Settings, "errorData": ErrorData}
