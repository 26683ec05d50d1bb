"""The layers of docs/architecture.md hold: the core imports no Celery, no
module of the package, the example or the benchmarks is part of an import
cycle, the Celery layer sits in packages by phase that import along the
layers, and no class relies on attributes another class sets.

Read from the source (``ast``), so a cycle hidden in a function-level import
counts too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["celery_redislock", "example_worker", "benchmarks"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (each ``from x import y`` as x and x.y)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return {m: {i for i in imports_of(p) if i in modules and i != m} for m, p in modules.items()}


def test_the_core_imports_no_celery() -> None:
    offenders = {
        module: sorted(i for i in imports_of(path) if i.split(".")[0] in ("celery", "kombu"))
        for path in (ROOT / "celery_redislock" / "core").rglob("*.py")
        if (module := module_name(path))
    }
    assert {m: i for m, i in offenders.items() if i} == {}
    core = {m for m in graph() if m.startswith("celery_redislock.core")}
    upward = {
        m: sorted(i for i in graph()[m] if not i.startswith("celery_redislock.core")) for m in core
    }
    assert {m: i for m, i in upward.items() if i and i != ["celery_redislock"]} == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package: str) -> None:
    edges = graph()
    # A package's __init__ importing its own submodules is how Python packages
    # work, not a cycle between concepts: leave those edges out.
    edges = {m: {i for i in d if not m.startswith(i + ".")} for m, d in edges.items()}
    cycles = []
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(edges.get(module, ())):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt] if nxt in path else [module, nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[module] = 2

    for module in sorted(m for m in edges if m.split(".")[0] == package):
        if module not in state:
            visit(module, [module])
    assert cycles == []


LUA = ROOT / "celery_redislock" / "core" / "lua"


#: include files that declare keys, the time or per-call state, not a helper function
DECLARATIONS = {"lease_set_keys", "park_keys", "now", "inflight_first"}
_TOP_LOCALS = re.compile(r"^local ([\w, ]+?)(?: =|$)", re.MULTILINE)


def _code(text: str) -> str:
    """Lua without comments and string literals (names in them are not uses)."""
    strings = re.compile(r"'[^']*'|\"[^\"]*\"")
    return "\n".join(re.sub(r"--.*$", "", strings.sub("''", line)) for line in text.splitlines())


def _top_level_names(code: str) -> set[str]:
    return {name.strip() for line in _TOP_LOCALS.findall(code) for name in line.split(",")}


def test_every_lua_file_declares_the_helpers_it_names() -> None:
    """BullMQ's layout: one helper per include file, named like its function
    (``includes/<helper>.lua``), and every file (script or include) declares
    with ``--- @include "includes/<helper>"`` each include whose function or
    top-level names it uses itself, and none it does not use.  The loader
    builds a script from exactly what it declares, includes first, without
    comments."""
    from celery_redislock.core import scripts

    defines: dict[str, str] = {}  # a top-level name -> the include that defines it
    for path in sorted((LUA / "includes").glob("*.lua")):
        code = _code(path.read_text())
        functions = re.findall(r"^local function (\w+)\(", code, re.MULTILINE)
        if path.stem in DECLARATIONS:
            assert not functions, f"{path.name} declares names, it defines no helper"
        else:
            assert functions == [path.stem], f"{path.name}: one helper, named like its file"
        defines.update(dict.fromkeys([*_top_level_names(code), *functions], path.stem))
    checked = 0
    for path in sorted([*LUA.glob("*.lua"), *(LUA / "includes").glob("*.lua")]):
        text = path.read_text()
        declared = set(re.findall(r'^--- @include "includes/(\w+)"$', text, re.MULTILINE))
        code = _code(text)
        own = path.stem if path.parent.name == "includes" else None
        its_own = _top_level_names(code) if own is None else set()  # a standalone script's
        used = {
            include
            for name, include in defines.items()
            if include != own
            and name not in its_own
            and re.search(rf"(?<![\w.]){re.escape(name)}\b", code)
        }
        assert declared == used, f"{path.name}: declares {sorted(declared)}, uses {sorted(used)}"
        checked += bool(used)
    assert checked >= 40
    order = scripts.includes("park_release.lua")
    assert order[-1] == "park_release.lua"
    assert order.index("includes/lease_set_keys.lua") < order.index("includes/park_keys.lua")
    assert order.index("includes/hand_off.lua") < order.index("includes/release_owner.lua")
    assert scripts.PARK_RELEASE.source == scripts.assembled("park_release.lua")
    assert not [
        line
        for line in scripts.PARK_RELEASE.source.splitlines()
        if not line.strip() or line.strip().startswith("--")
    ]


#: the Celery layer's packages by phase, and the modules every phase shares
PHASES = ("enqueue", "run", "policies", "parking", "worker", "admin", "testing")
SHARED = ("settings", "signals", "events", "diagnose")
#: where a task runs: none of these imports the worker's main-process wiring,
#: the operator's tools or the test plugin
TASK_PATH = ("task", "enqueue", "run", "policies", "parking")


def _package_of(module: str) -> str:
    """``celery_redislock.run.admission`` -> ``run``; ``celery_redislock`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_phases_import_along_the_layers() -> None:
    """No import against the layers: the shared modules import no phase; the
    task's path (enqueue, run, policies, parking, task.py) imports neither
    the worker's main-process wiring, nor the operator's tools, nor the test
    plugin; the enqueue phase imports nothing of the run phase (a caller
    needs no worker code); the operator's tools and the test plugin are
    imported by nothing of the library but themselves."""
    edges = graph()
    against: list[str] = []
    for module, imported in sorted(edges.items()):
        if not module.startswith("celery_redislock") or module.startswith("celery_redislock.core"):
            continue
        source = _package_of(module)
        for target in sorted(imported):
            dest = _package_of(target)
            if dest in ("", "core") or dest == source:
                continue
            if source in SHARED and dest in PHASES:
                against.append(f"{module} -> {target} (a shared module imports a phase)")
            if source in TASK_PATH and dest in ("worker", "admin", "testing"):
                against.append(f"{module} -> {target} (the task's path imports {dest}/)")
            if source == "enqueue" and dest == "run":
                against.append(f"{module} -> {target} (the caller imports the run phase)")
            if dest in ("admin", "testing") and source not in ("admin", "testing"):
                against.append(f"{module} -> {target} (a leaf package imported)")
    assert against == []
    assert {_package_of(m) for m in edges if m.startswith("celery_redislock.")} >= set(PHASES)


def test_no_module_outside_a_phase_but_the_shared_ones() -> None:
    """Packages by phase: the only modules at the top of the package are the
    public entry (``__init__``, ``task.py``) and the shared ones."""
    package = ROOT / "celery_redislock"
    top = sorted(p.stem for p in package.glob("*.py"))
    assert top == sorted(["__init__", "task", *SHARED])
    dirs = sorted(p.name for p in package.iterdir() if (p / "__init__.py").exists())
    assert dirs == sorted(["core", *PHASES])


def test_no_class_relies_on_attributes_another_class_sets() -> None:
    """One concept, one class: an attribute a class declares without a value
    (``client: Any``) is assigned by that class itself (in a method, as
    ``self.client = ...``), unless the class is a record whose fields are
    its constructor (a dataclass, NamedTuple, TypedDict or Protocol), or a
    ``ClassVar`` every subclass defines.  A
    mixin whose state "is set by" another class fails this."""
    records = ("dataclass", "NamedTuple", "TypedDict", "Protocol", "Enum")
    # narrowing the type of an attribute the standard library's base class sets
    narrowing = {"Handler.server"}
    offenders: list[str] = []
    for path in sorted((ROOT / "celery_redislock").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            marks = [ast.unparse(d) for d in node.decorator_list] + [
                ast.unparse(b) for b in node.bases
            ]
            if any(r in m for m in marks for r in records):
                continue
            declared = {
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign)
                and s.value is None
                and isinstance(s.target, ast.Name)
                # a ClassVar without a value is one each subclass defines (Policy.name)
                and not ast.unparse(s.annotation).startswith("ClassVar")
            }
            assigned = {
                t.attr
                for f in ast.walk(node)
                if isinstance(f, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                for t in (f.targets if isinstance(f, ast.Assign) else [f.target])
                for t in ast.walk(t)
                if isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id in ("self", "cls")
            }
            for name in sorted(
                declared
                - assigned
                - {n.split(".")[1] for n in narrowing if n.startswith(node.name + ".")}
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.name}.{name}")
    assert offenders == []


def test_the_architecture_page_names_every_module_and_only_real_ones() -> None:
    """docs/architecture.md keeps its module lists in step with the tree: each
    module of the package by its path (``parking/enqueue.py``), and every
    ``*.py`` it names exists."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    package = ROOT / "celery_redislock"
    modules = [p.relative_to(package).as_posix() for p in package.rglob("*.py")]
    unnamed = sorted(m for m in modules if not m.endswith("__init__.py") and m not in doc)
    assert unnamed == [], "modules docs/architecture.md does not name"
    named = set(re.findall(r"`?\b((?:[\w]+/)*[a-z_]+\.py)\b", doc))
    everywhere = {p.name for p in ROOT.rglob("*.py") if ".venv" not in p.parts}
    ghosts = sorted(
        n
        for n in named
        if not ((package / n).exists() or (ROOT / n).exists() or ("/" not in n and n in everywhere))
    )
    assert ghosts == [], "modules docs/architecture.md names that do not exist"


def test_the_drawing_lists_each_package_s_modules_exactly() -> None:
    """The drawing at the top of docs/architecture.md names, on each
    package's row, every module of that package and nothing else (words in
    parentheses say who runs the phase; ``web/`` is a sub-package)."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    drawing = doc.split("```")[1]
    rows: dict[str, set[str]] = {}
    current = ""
    for line in drawing.splitlines():
        text = re.sub(r"\([^)]*\)", " ", line.strip(" │"))
        head = re.match(r"(\w+)/\s", text)
        if head:
            current = head.group(1)
            text = text[head.end() :]
        elif not text.strip() or not line.startswith(" │   "):
            current = ""
        if current:
            rows.setdefault(current, set()).update(text.split())
    package = ROOT / "celery_redislock"
    for name, words in rows.items():
        if name in ("core", "testing"):
            continue
        tree = {
            p.stem if p.is_file() else p.name + "/"
            for p in (package / name).iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
        }
        drawn = sorted(words)
        assert words == tree, f"{name}/: the drawing names {drawn}, the tree holds {sorted(tree)}"
    assert set(rows) >= {"enqueue", "run", "policies", "parking", "worker", "admin"}, rows
