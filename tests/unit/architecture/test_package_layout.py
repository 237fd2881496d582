"""The layout rules the architecture states, checked on the source: the
resolver package has no import cycles (none through a deferred import
either) and imports nothing of the editor side; the LSP package has no
import cycle at run time and its server imports no feature; the LSP feature modules
import no private (underscore) name from one another; the store imports
nothing above it and keeps its modules in subsystem folders; and the local/SSH
twins the resolver once had are gone."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import mevedel_server

PACKAGE = Path(mevedel_server.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, typing: bool = True) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every ``from X import names`` in the module (deferred ones too), with
    X made absolute; without ``typing``, not those under ``if TYPE_CHECKING:``
    (they never run)."""
    return _imports_of(path, typing)


# Parsed once per worker: each of this file's tests walks the whole package,
# and parsing it again for every one of them was most of their time.
@functools.cache
def _imports_of(path: Path, typing: bool) -> tuple[tuple[str, tuple[str, ...]], ...]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    for_typing: set[int] = set()
    if not typing:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                for_typing |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    found = []
    for node in ast.walk(tree):
        if id(node) in for_typing:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
    return tuple(found)


def _graph(root: Path, *, typing: bool = True) -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target, names in _imports(path, typing=typing):
            # ``from PACKAGE import module`` names the module; any other name
            # comes from the module (or package) imported from.
            submodules = {f"{target}.{item}" for item in names} & modules.keys()
            edges = submodules if submodules and len(submodules) == len(names) else {target} | submodules
            graph[name] |= {edge for edge in edges if edge in modules and edge != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for child in sorted(graph[node]):
            if state.get(child) == "open":
                cycles.append(stack[stack.index(child) :] + [child])
            elif child not in state:
                visit(child)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_resources_has_no_import_cycles():
    assert _cycles(_graph(PACKAGE / "resources")) == []


def test_resources_imports_nothing_of_the_editor_side():
    for path in (PACKAGE / "resources").rglob("*.py"):
        for target, _names in _imports(path):
            top = target.split(".")[0]
            assert top not in ("lsprotocol", "pygls", "mevedel_protocol"), (path.name, target)
            assert not target.startswith("mevedel_server.lsp"), (path.name, target)


def test_lsp_has_no_import_cycle_and_the_server_imports_no_feature():
    """Features plug in: the entry point names them (``main.FEATURES``) and
    the server builder imports each by name, so a feature may import the
    server's helpers without the import running back. Type-only imports of
    the server class do not run and do not count."""
    assert _cycles(_graph(PACKAGE / "lsp", typing=False)) == []
    from mevedel_server.lsp.main import FEATURES

    features = {f"mevedel_server.lsp.{name}" for name in FEATURES}
    imported = {target for target, _names in _imports(PACKAGE / "lsp" / "server.py")}
    imported |= {f"{target}.{name}" for target, names in _imports(PACKAGE / "lsp" / "server.py") for name in names}
    assert not imported & features


def test_lsp_modules_import_no_private_name_from_one_another():
    offenders = []
    for path in (PACKAGE / "lsp").glob("*.py"):
        for target, names in _imports(path):
            if target.startswith("mevedel_server.lsp"):
                offenders += [f"{path.name}: {target}.{name}" for name in names if name.startswith("_")]
    assert offenders == []


def test_no_local_or_remote_twin_is_left_in_the_resolver():
    names = {path.name for path in (PACKAGE / "resources").rglob("*.py")}
    assert not {name for name in names if name.startswith("remote_")}


def test_the_artifact_store_knows_nothing_of_the_front_ends_or_the_resolver():
    """artifacts/ is core beside store/: it speaks to a Target and to the
    session service, never to LSP, the CLI, the resolver or the engine."""
    above = ("mevedel_server.lsp", "mevedel_server.cli", "mevedel_server.resources", "mevedel_server.agents",
             "mevedel_server.tool_server", "lsprotocol", "pygls", "mevedel_protocol")
    offenders = [
        f"{path.name}: {target}"
        for path in (PACKAGE / "artifacts").rglob("*.py")
        for target, _names in _imports(path)
        if target.startswith(above)
    ]
    assert offenders == []


def test_the_store_imports_nothing_above_it_and_its_content_opens_nothing():
    """store/ speaks only to a Target: nothing of the resolver, the agent
    engine or the front ends; its content/ modules are pure (not even the
    targets)."""
    above = ("mevedel_server.lsp", "mevedel_server.cli", "mevedel_server.resources", "mevedel_server.agents")
    from mevedel_server import targets

    exported_from = {name: module for module, names in targets._EXPORTS.items() for name in names}
    offenders = []
    for path in (PACKAGE / "store").rglob("*.py"):
        for target, names in _imports(path):
            if target.startswith(above) or target.split(".")[0] in ("lsprotocol", "pygls"):
                offenders.append(f"{path.relative_to(PACKAGE)}: {target}")
            # The one exception: a path's whole state, a value that imports
            # and opens nothing (targets/entry.py), through the front door.
            if path.parent.name == "content" and target.startswith("mevedel_server.targets"):
                offenders += [
                    f"{path.relative_to(PACKAGE)}: {target}.{name}"
                    for name in names
                    if target != "mevedel_server.targets" or exported_from.get(name) != ".entry"
                ]
    assert offenders == []
    top_level = {path.name for path in (PACKAGE / "store").glob("*.py")}
    assert top_level == {"__init__.py", "errors.py", "layout.py"}


def test_the_entry_value_and_the_remote_executor_spell_the_kinds_alike():
    """The executor runs remotely and cannot import the value type: the
    two spellings of a path's kinds must stay one."""
    from mevedel_server.targets import entry, executor

    assert (entry.ENTRY_FILE, entry.ENTRY_DIRECTORY, entry.ENTRY_SYMLINK) == (
        executor.ENTRY_FILE,
        executor.ENTRY_DIRECTORY,
        executor.ENTRY_SYMLINK,
    )


#: The core packages; each one's front door is the package itself.
CORE_PACKAGES = ("addresses", "targets", "store", "resources", "artifacts", "agents", "tool_server", "mcp_client")


@pytest.mark.parametrize("package", CORE_PACKAGES)
def test_nothing_outside_a_core_package_reaches_inside_it(package):
    """A core package's front door is the package (its ``__init__.py``
    names every public name and its module): the rest of the server imports
    ``mevedel_server.<package>``, never ``mevedel_server.<package>.<sub>``,
    so the package's rooms can move without its callers noticing."""
    offenders = [
        f"{path.relative_to(PACKAGE)}: {target}"
        for path in PACKAGE.rglob("*.py")
        if package not in path.relative_to(PACKAGE).parts[:1]
        for target, _names in _imports(path)
        if target.startswith(f"mevedel_server.{package}.")
    ]
    assert offenders == []


def test_every_front_door_name_is_found_where_it_says():
    """Each name a front door lists is defined by (or imported into) the
    module it names, and each name the server takes from a front door is
    listed there: a moved function is a test failure here, not an
    ``ImportError`` in the first command that needs it (most imports are
    deferred to first use)."""
    import importlib

    missing = []
    fronts = {package: importlib.import_module(f"mevedel_server.{package}") for package in CORE_PACKAGES}
    for package, front in fronts.items():
        for name in front.__all__:
            try:
                getattr(front, name)
            except AttributeError as error:
                missing.append(f"{package}.{name}: {error}")
    for path in PACKAGE.rglob("*.py"):
        for target, names in _imports(path):
            package = target.removeprefix("mevedel_server.")
            if package in fronts and package not in path.relative_to(PACKAGE).parts[:1]:
                missing += [
                    f"{path.relative_to(PACKAGE)}: {name} from {target}"
                    for name in names
                    if name not in fronts[package].__all__ and not (PACKAGE / package / f"{name}.py").exists()
                ]
    assert missing == []


def test_the_agent_engine_has_no_import_cycle_and_its_modules_share_no_private_name():
    """The ACP callbacks (``acp_callbacks``), the engine, its tool context
    and delegation talk through public names; none imports another's
    private name, and no import runs back at run time."""
    assert _cycles(_graph(PACKAGE / "agents", typing=False)) == []
    offenders = [
        f"{path.relative_to(PACKAGE)}: {target}.{name}"
        for path in (PACKAGE / "agents").rglob("*.py")
        for target, names in _imports(path)
        if target.startswith("mevedel_server.agents")
        for name in names
        if name.startswith("_") and name != "__future__"
    ]
    assert offenders == []


def test_workspace_wide_readings_import_the_transactions_never_the_reverse():
    """Data flows one way between the store's two rooms: a transaction
    writes one session (its journal, its publications), and the
    workspace-wide readings (listing, cleanup, collection, fork variants)
    read what the transactions leave. ``workspace_wide/`` may import
    ``transactions/``; nothing in ``transactions/`` imports
    ``workspace_wide/``, not even for typing."""
    offenders = [
        f"{path.relative_to(PACKAGE)}: {target}"
        for path in (PACKAGE / "store" / "transactions").rglob("*.py")
        for target, _names in _imports(path)
        if target.startswith("mevedel_server.store.workspace_wide")
    ]
    assert offenders == []
