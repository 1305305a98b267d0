"""The package's shape, checked: the layer table in docs/design.md is the law.

* the table under "## Layers" in docs/design.md is the tree: it lists every module exactly once,
  in the folder where it is;
* no import cycle among journaled's modules (imports inside functions count; imports under
  ``if TYPE_CHECKING:`` do not: they never run), and none among its folders;
* every runtime import goes to a module on the same floor or below;
* every subpackage's ``__init__.py`` states its contract in a docstring;
* no module uses another module's private names (``x._name`` where ``_name`` is defined in a
  different module of the package and not in this one; ``from m import _name``);
* no module but ``core/readercore.py`` changes a reader core's state, and none but
  ``log/state.py`` the journal's shared state (assignments, augmented assignments, ``del`` and
  mutating calls on their attributes);
* no module over 600 lines;
* nothing in the runtime imports test machinery, and the package imports without ``tests/``.

The code is read as text (``ast``), never imported, so a broken module still gets a clear
message here.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "journaled")
DESIGN = os.path.join(ROOT, "docs", "design.md")
MAX_LINES = 600


def _modules() -> dict[str, str]:
    """Dotted module name -> path, for every .py file of the package."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(PKG):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__pycache__"))]
        for fn in filenames:
            if fn.endswith(".py"):
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = path
    return out


MODULES = _modules()
TREES = {m: ast.parse(open(p, encoding="utf-8").read(), p) for m, p in MODULES.items()}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _owner(target: str) -> str | None:
    """The package module an import of ``target`` loads (None: outside the package)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _imports() -> dict[str, set[tuple[str, int]]]:
    """Module -> {(imported package module, line)} for every import that runs."""
    edges: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for mod, tree in TREES.items():
        is_pkg = MODULES[mod].endswith("__init__.py")
        for node in _runtime_nodes(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                owner = _owner(t)
                if owner is None or owner == mod:
                    continue
                if MODULES[owner].endswith("__init__.py") and mod.startswith(owner + "."):
                    continue  # a submodule importing through its own package
                edges[mod].add((owner, node.lineno))
    return edges


def _cycles(edges: dict[str, set[tuple[str, int]]]) -> list[list[str]]:
    graph = {m: {t for t, _ in edges.get(m, ())} for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            strong(v)
    return out


def _layer_table() -> dict[str, int]:
    """Module -> floor, from the table under "## Layers" in docs/design.md (floor | folder | modules)."""
    text = open(DESIGN, encoding="utf-8").read()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    floors: dict[str, int] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].isdigit():
            continue
        folder = cells[1].strip("`").rstrip("/")
        assert folder.split("/")[0] == "journaled", (
            f"design.md's layer table: {folder!r} is not under journaled/"
        )
        for name in re.findall(r"`([^`]+)`", cells[2]):
            mod = (folder + "/" + name.removesuffix(".py")).replace("/", ".").removesuffix(".__init__")
            assert mod in MODULES, f"design.md's layer table lists {folder}/{name}, which does not exist"
            assert mod not in floors, f"design.md's layer table lists {folder}/{name} twice"
            floors[mod] = int(cells[0])
    return floors


def test_no_import_cycles():
    cycles = _cycles(_imports())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_layer_table_lists_every_module():
    floors = _layer_table()
    missing = sorted(m for m in MODULES if m not in floors)
    assert not missing, f"modules missing from the layer table in docs/design.md: {missing}"


def test_imports_follow_the_layer_table():
    floors = _layer_table()
    upward = [
        f"{mod}:{line} imports {target} (floor {floors.get(mod)} -> {floors.get(target)})"
        for mod, targets in _imports().items()
        for target, line in sorted(targets)
        if mod in floors and target in floors and floors[target] > floors[mod]
    ]
    assert not upward, "imports going up the layers:\n" + "\n".join(upward)


def _private_uses() -> list[str]:
    defined: dict[str, set[str]] = defaultdict(set)
    for mod, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined[node.name].add(mod)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, ast.Name):
                            defined[sub.id].add(mod)
                        elif (
                            isinstance(sub, ast.Attribute)
                            and isinstance(sub.value, ast.Name)
                            and sub.value.id
                            in (
                                "self",
                                "cls",
                            )
                        ):
                            defined[sub.attr].add(mod)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
                and isinstance(node.ctx, ast.Store)
            ):
                defined[node.attr].add(mod)
    found = []
    for mod, tree in TREES.items():
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            ):
                name = node.attr
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        owners = defined.get(alias.name, set())
                        if owners and mod not in owners:
                            found.append(f"{mod}:{node.lineno} from {node.module} import {alias.name}")
                continue
            if name and name.startswith("_") and not name.startswith("__"):
                owners = defined.get(name, set())
                if owners and mod not in owners:
                    found.append(f"{mod}:{node.lineno} .{name} (defined in {', '.join(sorted(owners))})")
    return found


def test_no_module_uses_another_modules_private_names():
    found = _private_uses()
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_no_module_is_over_600_lines():
    big = {m: n for m, p in MODULES.items() if (n := sum(1 for _ in open(p, encoding="utf-8"))) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def _folder(mod: str) -> str:
    """The room of a module: its subpackage, or the module itself at the package root."""
    parts = mod.split(".")
    if len(parts) == 2 and not MODULES[mod].endswith("__init__.py"):
        return mod
    return ".".join(parts[:2])


def test_folders_import_one_way():
    edges: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for mod, targets in _imports().items():
        for target, line in targets:
            a, b = _folder(mod), _folder(target)
            if a != b and "journaled" not in (a, b):
                edges[a].add((b, line))
    rooms = {_folder(m) for m in MODULES} - {"journaled"}
    saved = dict(MODULES)
    try:  # reuse the module cycle finder on the graph of rooms
        MODULES.clear()
        MODULES.update({r: r for r in rooms})
        cycles = _cycles(edges)
    finally:
        MODULES.clear()
        MODULES.update(saved)
    assert not cycles, "folders importing each other: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_every_subpackage_states_its_contract():
    silent = []
    for mod, path in MODULES.items():
        if mod != "journaled" and path.endswith("__init__.py"):
            doc = ast.get_docstring(TREES[mod]) or ""
            if "May import" not in doc and mod != "journaled.spark":
                silent.append(mod)
    assert not silent, f"subpackages whose __init__.py does not say what they offer and may import: {silent}"


MUTATORS = {
    "clear",
    "add",
    "discard",
    "append",
    "appendleft",
    "extend",
    "pop",
    "popleft",
    "popitem",
    "update",
    "remove",
    "insert",
    "setdefault",
    "sort",
    "reverse",
    "difference_update",
}


def _self_attrs(mods: list[str]) -> set[str]:
    """Instance attributes the classes of ``mods`` set on ``self``."""
    out: set[str] = set()
    for mod in mods:
        for node in ast.walk(TREES[mod]):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                out.add(node.attr)
    return out


def _writes_into(owner_prefix: str, receivers: tuple[str, ...]) -> list[str]:
    """Writes, outside the folder ``owner_prefix``, into the state of that folder's objects.

    An attribute that only the folder's classes set on ``self`` is theirs whoever it is written
    through; one that other classes set too counts when the object written into is named like
    the folder's (``core``, ``self.core``, ``existing.core``; ``state``, ``st``)."""
    inside = [m for m in MODULES if m.startswith(owner_prefix)]
    outside = [m for m in MODULES if not m.startswith(owner_prefix)]
    theirs = _self_attrs(inside)
    shared = theirs & _self_attrs(outside)

    def hit(mod: str, target: ast.expr) -> str | None:
        if isinstance(target, ast.Subscript):
            target = target.value
        if not isinstance(target, ast.Attribute) or target.attr not in theirs:
            return None
        receiver = target.value
        if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            return None
        if target.attr in shared or target.attr in _self_attrs([mod]):
            name = ast.unparse(receiver).rpartition(".")[2]
            if name not in receivers:
                return None
        return ast.unparse(target)

    found = []
    for mod in outside:
        for node in ast.walk(TREES[mod]):
            targets: list[ast.expr] = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in MUTATORS
            ):
                targets = [node.func.value]
            for t in targets:
                for sub in ast.walk(t) if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                    what = hit(mod, sub)
                    if what:
                        found.append(f"{mod}:{node.lineno} {what}")
    return found


def test_only_the_core_changes_a_reader_cores_state():
    found = _writes_into("journaled.core.readercore", ("core", "c", "cores"))
    assert not found, "writes into a reader core's state from outside core/readercore.py:\n" + "\n".join(
        found
    )


def test_only_the_log_state_changes_the_journals_shared_state():
    found = _writes_into("journaled.log.state", ("state", "st", "_state"))
    assert not found, "writes into the journal's state from outside log/state.py:\n" + "\n".join(found)


def test_the_runtime_never_imports_test_machinery():
    offenders = []
    for mod, tree in TREES.items():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in ("tests", "support", "pytest", "hypothesis") or n.endswith(
                    (".faults", ".powerloss")
                ):
                    offenders.append(f"{mod}:{node.lineno} imports {n}")
    assert not offenders, offenders


def test_the_package_imports_without_the_tests_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = ROOT
    code = (
        "import sys; import journaled, journaled.cli.main; "
        "assert not any(p.rstrip('/').endswith('/tests') for p in sys.path)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
