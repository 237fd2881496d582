"""The chat input's history of a workspace (``mevedel/input/history``)."""

from typing import Optional

import attrs


@attrs.define
class InputHistoryParams:
    workspace_folder: Optional[str] = None


@attrs.define
class InputHistoryResult:
    """``entries``: the prompts sent in this workspace, oldest first (at
    most 500, no text twice). ``warning``: the history file could not be
    read and was renamed aside (said once, to the reader that found it)."""

    entries: list[str]
    warning: Optional[str] = None
