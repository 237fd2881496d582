"""The server's settings: ``initializationOptions`` at ``initialize`` and
``workspace/didChangeConfiguration`` later, either bare or under the
``mevedel`` key. Each setting is validated on its own: an invalid one is
reported and keeps its previous value; the others still apply.
"""

from typing import Literal

import attrs

from .converter import SessionChoice

UnknownSchemes = Literal["near-miss", "all", "off"]


@attrs.define
class MemoryRootSetting:
    """A persistent-memory directory. ``location``/``kind`` give its readable
    key (``local-mevedel``...) when it is the only root of that kind. A
    relative ``path`` is relative to the workspace folder; ``~`` expands."""

    path: str
    location: Literal["local", "global"]
    kind: Literal["mevedel", "agents"]


@attrs.define
class SkillRootSetting:
    """A directory whose subdirectories holding ``SKILL.md`` are skills.
    ``origin`` is ``local-mevedel``, ``local-agents``, ``global-mevedel``,
    ``global-agents``, ``bundled``, ``managed`` or ``plugin/NAME``."""

    path: str
    origin: str


@attrs.define
class DiagnosticsSettings:
    """``unknown_schemes``: which unknown ``scheme://`` prefixes get a
    diagnostic: ``near-miss`` (close to one of ours, like ``wrok://``),
    ``all``, or ``off``."""

    unknown_schemes: UnknownSchemes = "near-miss"


@attrs.define
class Settings:
    """``current_session`` is a session id for every workspace folder, or an
    object mapping workspace folder URIs to session ids; a session's
    directory is ``<workspace>/.mevedel/sessions/<ID>/``."""

    memory_roots: list[MemoryRootSetting] = attrs.Factory(list)
    skill_roots: list[SkillRootSetting] = attrs.Factory(list)
    completion_limit: int = 200
    current_session: SessionChoice = None
    diagnostics: DiagnosticsSettings = attrs.Factory(DiagnosticsSettings)
