"""The ACP SDK's schema is loaded without a pass nothing here uses.

``acp.schema`` (about 280 pydantic models) sets ``use_attribute_docstrings``:
while each model class is built, pydantic finds the class's source
(``inspect``, the tokenizer, an AST parse per class) to copy the docstring
under each field into that field's JSON-schema ``description``. Nothing in
this package asks the SDK's models for a JSON schema, and validation and
serialization never read a description; yet that pass was 40% of loading
the SDK -- about 150 ms of CPU that every ``mevedel prompt`` (and every
server that starts an agent) paid before the agent's first word.

:func:`install` (run by the ``agents`` package, whose modules are the only
ones here that import the SDK) puts a finder first on ``sys.meta_path``
that loads ``acp.schema``, whenever and by whomever it is first imported,
with pydantic's docstring step (``_fields._update_fields_from_docstrings``)
skipped, and then removes itself. Where pydantic's internals are not as
this expects, the schema loads as it always did (slower, the same models).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import importlib.abc
    import importlib.machinery

SCHEMA = "acp.schema"
#: pydantic's step that reads the attribute docstrings (pydantic 2.7+).
_DOCSTRING_STEP = "_update_fields_from_docstrings"


def _skip_docstrings(*_args: Any, **_kwargs: Any) -> None:
    return None


# Neither class derives from importlib.abc's: importing that module loads
# importlib.resources, tempfile and shutil, and the import system asks only
# for these methods.
class _Loader:
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)  # get_source, get_filename...

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        fields = sys.modules.get("pydantic._internal._fields")
        if fields is None:
            try:
                import pydantic._internal._fields as fields
            except ImportError:
                fields = None
        original = getattr(fields, _DOCSTRING_STEP, None)
        if original is None:
            self._loader.exec_module(module)
            return
        setattr(fields, _DOCSTRING_STEP, _skip_docstrings)
        try:
            self._loader.exec_module(module)
        finally:
            setattr(fields, _DOCSTRING_STEP, original)


class _Finder:
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != SCHEMA:
            return None
        _remove()
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


_finder = _Finder()


def _remove() -> None:
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


def install() -> None:
    """Load ``acp.schema`` without the docstring pass when it is first
    imported (nothing to do once it is loaded)."""
    if SCHEMA not in sys.modules and _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
