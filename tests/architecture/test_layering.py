"""The tree's layering is checked, and the check catches what it promises: an import the wrong way, a cycle.

``lint-imports`` (import-linter, configured in pyproject.toml) runs in scripts/test.sh; here it runs on
the real tree (every contract kept) and on copies of it with one violating import added, each of which
must break a named contract. grimp reads imports inside functions too, so hiding one there does not help.
"""

from __future__ import annotations

import ast
import functools
import gc
import importlib
import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("whestboard", "components", "server", "pages")


_LINTER = r"""
import os, sys
from importlinter.cli import lint_imports_command
for request in sys.stdin:
    root, out, err = request.rstrip("\n").split("\t")
    pid = os.fork()
    if pid == 0:
        os.chdir(root)
        sys.path.insert(0, root)
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.argv = ["lint-imports", "--no-cache"]
        code = 1
        try:
            lint_imports_command()
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


@pytest.fixture(scope="module")
def lint(tmp_path_factory):
    """``lint(root)``: ``lint-imports --no-cache`` on ``root`` as its console script runs it, with ``root`` first
    on the import path, in a process of its own forked from one that imported import-linter once (that import
    is two thirds of a run's CPU). The forking process starts fresh (``python -P``: no working folder on the
    path), its output a pipe as a captured run's is, so what is printed is the same."""
    folder = tmp_path_factory.mktemp("lint")
    server = subprocess.Popen([sys.executable, "-P", "-c", _LINTER], cwd=folder, text=True, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env={"PATH": str(Path(sys.executable).parent)})
    runs = iter(range(1, 1000))

    def run(root: Path) -> subprocess.CompletedProcess:
        number = next(runs)
        out, err = folder / f"{number}.out", folder / f"{number}.err"
        server.stdin.write(f"{root}\t{out}\t{err}\n")
        server.stdin.flush()
        code = int(server.stdout.readline())
        return subprocess.CompletedProcess(["lint-imports", "--no-cache"], code, out.read_text(), err.read_text())

    yield run
    server.stdin.close()
    server.wait(timeout=60)


@pytest.fixture()
def copy_of_the_tree(tmp_path) -> Path:
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_every_contract(lint):
    done = lint(REPO)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    # the core importing a use case above it, hidden inside a function
    ("whestboard/rules/_rounds.py", "def _probe():\n    from whestboard.scoring import runs  # noqa\n",
     "The domain core imports from use cases down to rules, store and configuration"),
    # two sibling modules importing each other
    ("whestboard/band/_measure.py", "from whestboard.band import _view  # noqa\n",
     "No import cycle between sibling modules or packages"),
    # the core reaching for Dash
    ("whestboard/data/_registry.py", "import dash  # noqa\n", "The domain core never imports Dash, Flask or plotly"),
    # UI reaching into the server plumbing
    ("components/selectors.py", "from server import health  # noqa\n",
     "Pages and the server plumbing sit above the UI, the UI above the domain core"),
])
def test_a_violating_import_breaks_its_contract(lint, copy_of_the_tree, module, line, contract):
    path = copy_of_the_tree / module
    path.write_text(path.read_text() + "\n\n" + line)
    done = lint(copy_of_the_tree)
    assert done.returncode != 0
    assert f"{contract} BROKEN" in done.stdout, done.stdout[-3000:]


def _python_files(root: Path) -> list[Path]:
    return [*root.glob("*.py"), *(p for name in (*PACKAGES, "tests", "benchmarks") for p in (root / name).rglob("*.py"))]


def _private_modules(root: Path) -> set[str]:
    """Every ``package._module`` of the core: the rooms behind a package's face."""
    return {f"whestboard.{p.parent.name}.{p.stem}" for p in (root / "whestboard").glob("*/_*.py")
            if p.stem not in ("__init__", "__main__")}


def _home(root: Path, path: Path) -> str | None:
    """The core package a file belongs to; a test under ``tests/<package>/`` belongs to the package it tests."""
    parts = path.relative_to(root).parts
    if len(parts) >= 3 and parts[0] in ("whestboard", "tests") and (root / "whestboard" / parts[1]).is_dir():
        return f"whestboard.{parts[1]}"
    return None


def _statements(body: list[ast.stmt]):
    """Every statement of a block and of the blocks nested in it (functions, classes, branches, loops,
    ``with``, ``try`` and ``match``), in source order. An import is a statement, never part of an
    expression, so this finds each one ``ast.walk`` does without visiting the expressions (most nodes)."""
    for node in body:
        yield node
        blocks = [getattr(node, name, []) for name in ("body", "orelse", "finalbody")]
        blocks += [nested.body for nested in (*getattr(node, "handlers", ()), *getattr(node, "cases", ()))]
        for block in blocks:
            yield from _statements(block)


def _parse(text: str) -> ast.Module:
    """``ast.parse`` with the garbage collector paused: a tree holds no reference cycles (refcounting frees
    it), yet its tens of thousands of fresh nodes set off collections that cost twice the parse itself."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(text)
    finally:
        if was_enabled:
            gc.enable()


@functools.lru_cache(maxsize=4096)
def _import_statements(text: str) -> tuple[tuple, ...]:
    """Every import statement of a source text, module-level or in a function: ``("import", line, ((name,
    alias), ...))`` or ``("from", line, module, level, ((name, alias), ...))``. Keyed by the text itself, so
    the tree's copies (each with one line added) parse only the file that differs, and an edit is never missed."""
    found = []
    for node in _statements(_parse(text).body):
        if isinstance(node, ast.Import):
            found.append(("import", node.lineno, tuple((a.name, a.asname) for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            found.append(("from", node.lineno, node.module, node.level, tuple((a.name, a.asname) for a in node.names)))
    return tuple(found)


def _imports(path: Path):
    """``(line, module, alias)`` for each module-level or in-function import, ``from`` names resolved."""
    for statement in _import_statements(path.read_text()):
        if statement[0] == "import":
            _, line, names = statement
            yield from ((line, name, alias) for name, alias in names)
        else:
            _, line, module, level, names = statement
            if module and level == 0:
                yield line, module, None
                yield from ((line, f"{module}.{name}", alias) for name, alias in names)


def faces_problems(root: Path) -> list[str]:
    """Imports that go around a package's face: another package's ``_module``, or a module renamed on import."""
    private = _private_modules(root)
    modules = private | {f"whestboard.{p.parent.name}" for p in (root / "whestboard").glob("*/__init__.py")}
    modules |= {f"whestboard.{p.stem}" for p in (root / "whestboard").glob("*.py")}
    found = []
    for path in _python_files(root):
        home = _home(root, path)
        for line, module, alias in _imports(path):
            where = f"{path.relative_to(root)}:{line} {module}"
            if module in private and module.rsplit(".", 1)[0] != home:
                found.append(f"{where} (another package's private module: import from its face)")
            if alias and module in modules and alias != module.rsplit(".", 1)[-1]:
                found.append(f"{where} as {alias} (a module renamed on import)")
    return found


def test_nothing_imports_another_modules_private_name():
    """Public names live in a package's ``__init__`` or a module's plain names; ``_private`` stays home."""
    private_modules = _private_modules(REPO)
    found = []
    for path in _python_files(REPO):
        for kind, line, module, *rest in _import_statements(path.read_text()):
            if kind == "from" and module and rest[0] == 0 and module.split(".")[0] in (*PACKAGES, "app", "tests"):
                found += [f"{path.relative_to(REPO)}:{line} {module}.{name}" for name, _alias in rest[1]
                          if name.startswith("_") and f"{module}.{name}" not in private_modules]
    assert not found, found


def test_each_package_is_entered_through_its_face_only():
    """Outside a package (and its tests) only its ``__init__`` is imported; a face exports no modules."""
    assert not faces_problems(REPO)
    for init in (REPO / "whestboard").glob("*/__init__.py"):
        package = importlib.import_module(f"whestboard.{init.parent.name}")
        exported = [name for name in getattr(package, "__all__", ()) if inspect.ismodule(getattr(package, name))]
        assert not exported, (init, exported)


@pytest.mark.parametrize(("module", "line"), [
    ("pages/leaderboard.py", "from whestboard.leaderboard import _store  # noqa\n"),
    ("whestboard/scoring/_runs.py", "def _probe():\n    from whestboard.data._registry import get_dataset  # noqa\n"),
    ("tests/pages/test_explorer_pages.py", "import whestboard.data._registry  # noqa\n"),
    ("server/health.py", "from whestboard import config as settings  # noqa\n"),
])
def test_an_import_around_a_face_is_caught(copy_of_the_tree, module, line):
    shutil.copytree(REPO / "tests", copy_of_the_tree / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    path = copy_of_the_tree / module
    assert path.exists(), module
    path.write_text(path.read_text() + "\n\n" + line)
    assert len(faces_problems(copy_of_the_tree)) == 1


NESTED_IMPORTS = """
import a
if x:
    import b
elif y:
    import c
else:
    from d import e
for _ in z:
    import f
else:
    import g
while w:
    import h
else:
    import i
async def j():
    async with k:
        import l
    async for _ in m:
        import n
class O:
    import p
    def q(self):
        with r:
            from . import s
try:
    import t
except ImportError:
    import u
else:
    import v
finally:
    import w2
try:
    pass
except* ValueError:
    import x2
match y2:
    case 1:
        import z2
lambda: __import__("not_a_statement")
"""


def test_every_nested_import_statement_is_found_as_a_full_walk_finds_it():
    """The statement-only walk behind the checks above misses no block an import can sit in."""
    walked = [node for node in ast.walk(ast.parse(NESTED_IMPORTS)) if isinstance(node, ast.Import | ast.ImportFrom)]
    assert len(walked) == 18  # one per module imported above
    assert sorted(statement[1] for statement in _import_statements(NESTED_IMPORTS)) == sorted(n.lineno for n in walked)


def test_only_the_config_module_reads_the_environment():
    found = []
    for name in PACKAGES:
        for path in (REPO / name).rglob("*.py"):
            if path == REPO / "whestboard" / "config.py":
                continue
            text = path.read_text()
            found += [f"{path.relative_to(REPO)}" for needle in ("os.environ", "os.getenv") if needle in text]
    assert not found, found
